//! What one graph of a recording holds, counted as the stream issued it,
//! and the edges an order asks of it.

use std::borrow::Cow;

use capture_core::Order;
use capture_core::edges::{self, Edge};

/// The operations one graph of a recording holds, in the order the stream
/// issued them: the recording's own graph, or one body of a conditional.
///
/// A launch or copy is one node of the captured chain; a conditional spans
/// its setter kernel and its node (or, for an if/else on a driver before
/// 12.8, its two `if` nodes); a loop's body ends in one more node, the
/// setter that decides on the next iteration.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Level {
    pub(crate) launches: usize,
    pub(crate) copies: usize,
    /// Each conditional's operation number and the chain nodes it spans,
    /// in issue order.
    pub(crate) conditionals: Vec<(usize, usize)>,
    /// Whether a node follows every operation: a loop body's setter.
    pub(crate) tail: bool,
}

impl Level {
    /// Operations recorded: launches, copies and conditionals.
    pub(crate) fn operations(&self) -> usize {
        self.launches + self.copies + self.conditionals.len()
    }

    /// What an edge can name: the operations, and the tail after them.
    pub(super) fn places(&self) -> usize {
        self.operations() + usize::from(self.tail)
    }

    /// Nodes of the captured chain.
    pub(crate) fn nodes(&self) -> usize {
        self.places()
            + self
                .conditionals
                .iter()
                .map(|&(_, nodes)| nodes.saturating_sub(1))
                .sum::<usize>()
    }

    /// Chain nodes place `at` spans.
    pub(super) fn span(&self, at: usize) -> usize {
        self.conditionals
            .binary_search_by_key(&at, |&(op, _)| op)
            .map_or(1, |i| self.conditionals[i].1.max(1))
    }

    /// A conditional closed here, spanning `nodes` chain nodes.
    pub(crate) fn add_conditional(&mut self, nodes: usize) {
        let at = self.operations();
        self.conditionals.push((at, nodes));
    }

    /// The edges between places that keep `order` among the operations
    /// and put the tail after every operation nothing follows, sorted.
    pub(super) fn target<'a>(&self, order: Order<'a>) -> Cow<'a, [Edge]> {
        let places = self.places();
        match order {
            Order::Chain => Cow::Owned(edges::chain(places)),
            Order::Dependencies(deps) if !self.tail => Cow::Borrowed(&deps.edges),
            Order::Dependencies(deps) => {
                let last = self.operations();
                let mut followed = vec![false; last];
                for &(from, _) in &deps.edges {
                    if let Some(f) = followed.get_mut(from) {
                        *f = true;
                    }
                }
                let mut target = deps.edges.clone();
                target.extend((0..last).filter(|&op| !followed[op]).map(|op| (op, last)));
                target.sort_unstable();
                Cow::Owned(target)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capture_core::Dependencies;

    fn deps(nodes: usize, edges: &[Edge]) -> Dependencies {
        Dependencies {
            nodes,
            edges: edges.to_vec(),
            ..Dependencies::default()
        }
    }

    #[test]
    fn a_level_counts_a_conditionals_nodes_and_a_loops_tail() {
        let mut level = Level {
            launches: 2,
            ..Level::default()
        };
        level.add_conditional(2);
        level.copies += 1;
        level.add_conditional(3);
        assert_eq!(level.operations(), 5);
        assert_eq!(level.nodes(), 5 + 1 + 2);
        assert_eq!(level.conditionals, [(2, 2), (4, 3)]);
        assert_eq!(
            (0..5).map(|at| level.span(at)).collect::<Vec<_>>(),
            [1, 1, 2, 1, 3]
        );
        level.tail = true;
        assert_eq!((level.places(), level.nodes(), level.span(5)), (6, 9, 1));
    }

    #[test]
    fn a_tail_follows_every_operation_nothing_else_follows() {
        let level = Level {
            launches: 4,
            tail: true,
            ..Level::default()
        };
        let order = deps(4, &[(0, 2), (1, 2)]);
        assert_eq!(
            level.target(Order::Dependencies(&order)).as_ref(),
            [(0, 2), (1, 2), (2, 4), (3, 4)]
        );
        assert_eq!(
            level.target(Order::Chain).as_ref(),
            [(0, 1), (1, 2), (2, 3), (3, 4)]
        );
        let untailed = Level {
            launches: 4,
            ..Level::default()
        };
        assert_eq!(
            untailed.target(Order::Dependencies(&order)).as_ref(),
            [(0, 2), (1, 2)]
        );
        let empty = Level {
            tail: true,
            ..Level::default()
        };
        assert_eq!(
            empty.target(Order::Dependencies(&deps(0, &[]))).as_ref(),
            []
        );
    }
}
