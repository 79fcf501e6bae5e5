//! The edges a backend's native graph keeps, as pairs of operation numbers
//! in issue order, and what turns one set of them into another: the
//! bookkeeping a backend whose stream capture records a chain (CUDA, HIP)
//! needs to make its graph keep [`Order::Dependencies`] instead. Pure: the
//! driver calls that carry it out are the backend's.
//!
//! [`Order::Dependencies`]: crate::Order::Dependencies

use std::cmp::Ordering;

/// An edge `(from, to)`: operation `to` runs after operation `from`.
pub type Edge = (usize, usize);

/// Whether `edges` (sorted) are exactly the chain a stream capture of
/// `nodes` operations records: each operation after the one before it.
pub fn is_chain(edges: &[Edge], nodes: usize) -> bool {
    edges.len() == nodes.saturating_sub(1)
        && edges
            .iter()
            .enumerate()
            .all(|(i, &edge)| edge == (i, i + 1))
}

/// The chain of `nodes` operations, sorted.
pub fn chain(nodes: usize) -> Vec<Edge> {
    (1..nodes).map(|to| (to - 1, to)).collect()
}

/// The edges to remove from a graph holding `current` and those to add, so
/// that it holds `target` instead; both lists sorted and distinct, as are
/// the answers. An edge in both is left alone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Edges to remove.
    pub remove: Vec<Edge>,
    /// Edges to add.
    pub add: Vec<Edge>,
}

impl Plan {
    /// What turns `current` into `target`.
    pub fn between(current: &[Edge], target: &[Edge]) -> Self {
        let mut plan = Self::default();
        let (mut c, mut t) = (current.iter().peekable(), target.iter().peekable());
        loop {
            match (c.peek(), t.peek()) {
                (Some(&&have), Some(&&want)) => match have.cmp(&want) {
                    Ordering::Equal => {
                        c.next();
                        t.next();
                    }
                    Ordering::Less => {
                        plan.remove.push(have);
                        c.next();
                    }
                    Ordering::Greater => {
                        plan.add.push(want);
                        t.next();
                    }
                },
                (Some(&&have), None) => {
                    plan.remove.push(have);
                    c.next();
                }
                (None, Some(&&want)) => {
                    plan.add.push(want);
                    t.next();
                }
                (None, None) => return plan,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_is_recognised_whatever_its_length() {
        assert!(is_chain(&[], 0));
        assert!(is_chain(&[], 1));
        assert!(!is_chain(&[], 2));
        assert!(is_chain(&[(0, 1), (1, 2)], 3));
        assert!(!is_chain(&[(0, 1), (1, 2)], 4));
        assert!(!is_chain(&[(0, 2), (1, 2)], 3));
        assert_eq!(chain(4), [(0, 1), (1, 2), (2, 3)]);
        assert_eq!(chain(1), []);
        assert_eq!(chain(0), []);
        assert!(is_chain(&chain(17), 17));
    }

    #[test]
    fn a_chain_becomes_two_independent_pairs() {
        let plan = Plan::between(&chain(4), &[(0, 2), (1, 3)]);
        assert_eq!(plan.remove, [(0, 1), (1, 2), (2, 3)]);
        assert_eq!(plan.add, [(0, 2), (1, 3)]);
    }

    #[test]
    fn shared_edges_stay() {
        let plan = Plan::between(&chain(4), &[(0, 1), (0, 2), (2, 3)]);
        assert_eq!(plan.remove, [(1, 2)]);
        assert_eq!(plan.add, [(0, 2)]);
        let plan = Plan::between(&[(0, 2), (1, 3)], &chain(4));
        assert_eq!(plan.remove, [(0, 2), (1, 3)]);
        assert_eq!(plan.add, [(0, 1), (1, 2), (2, 3)]);
    }

    #[test]
    fn the_same_edges_need_nothing() {
        assert_eq!(Plan::between(&chain(5), &chain(5)), Plan::default());
        assert_eq!(Plan::between(&[(0, 3)], &[(0, 3)]), Plan::default());
        assert_eq!(Plan::between(&[], &[]), Plan::default());
    }

    #[test]
    fn no_edges_at_all_removes_the_chain() {
        let plan = Plan::between(&chain(3), &[]);
        assert_eq!(plan.remove, [(0, 1), (1, 2)]);
        assert!(plan.add.is_empty());
        let plan = Plan::between(&[], &[(1, 2)]);
        assert!(plan.remove.is_empty());
        assert_eq!(plan.add, [(1, 2)]);
    }

    /// Applying a plan to its current edges gives the target, for every
    /// pair of edge sets over four operations.
    #[test]
    fn applying_a_plan_reaches_the_target() {
        let all: Vec<Edge> = (0..4)
            .flat_map(|from| (from + 1..4).map(move |to| (from, to)))
            .collect();
        let subset = |mask: u32| -> Vec<Edge> {
            all.iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, &edge)| edge)
                .collect()
        };
        for a in 0..(1u32 << all.len()) {
            for b in 0..(1u32 << all.len()) {
                let (current, target) = (subset(a), subset(b));
                let plan = Plan::between(&current, &target);
                let mut result: Vec<Edge> = current
                    .iter()
                    .filter(|edge| !plan.remove.contains(edge))
                    .copied()
                    .collect();
                assert!(plan.remove.iter().all(|edge| current.contains(edge)));
                assert!(plan.add.iter().all(|edge| !result.contains(edge)));
                result.extend(&plan.add);
                result.sort_unstable();
                assert_eq!(result, target);
            }
        }
    }
}
