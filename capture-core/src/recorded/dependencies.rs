//! A graph's operations as a dependency graph rather than a chain: an edge
//! from one operation to a later one only where a hazard between them
//! (read after write, write after read, write after write, on the buffers
//! their declared accesses name) orders them, and only where no path of
//! other edges already does.
//!
//! Operations are numbered in issue order, which is a topological order:
//! every hazard points from an earlier operation to a later one. That makes
//! the reduction one pass from the last operation back, keeping for each
//! the set of operations it reaches.

use fixedbitset::FixedBitSet;

use crate::recorded::entries::{Entry, edges};

/// Most operations whose edges are reduced: the pass holds a bit per pair
/// of operations (32 MiB at this size). A larger graph keeps every hazard
/// edge, each implied one included; its order is the same.
pub const MAX_REDUCED: usize = 16_384;

/// The dependency graph of a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dependencies {
    /// Operations (launches and copies).
    pub nodes: usize,
    /// Edges `(from, to)`, sorted: operation `to` runs after `from`.
    pub edges: Vec<(usize, usize)>,
    /// Operations on the longest path: how many must run one after another.
    pub depth: usize,
    /// Operations on the widest level (operations that share their longest
    /// distance from an operation with no predecessor): how many could run
    /// side by side there.
    pub width: usize,
}

impl Dependencies {
    /// The dependency graph of the operations `log` recorded.
    pub fn of(log: &[Entry]) -> Self {
        let nodes = log.len();
        let mut successors: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        for edge in edges(log) {
            successors[edge.from].push(edge.to);
        }
        for list in &mut successors {
            list.sort_unstable();
            list.dedup();
        }
        if nodes <= MAX_REDUCED {
            reduce(&mut successors);
        }
        let edges = successors
            .iter()
            .enumerate()
            .flat_map(|(from, list)| list.iter().map(move |&to| (from, to)))
            .collect();
        let mut graph = Self {
            nodes,
            edges,
            ..Self::default()
        };
        let levels = graph.levels();
        graph.depth = levels.len();
        graph.width = levels.iter().map(Vec::len).max().unwrap_or(0);
        graph
    }
}

impl Dependencies {
    /// The operations level by level, each level in issue order: an
    /// operation's level is the number of operations on the longest chain
    /// of its predecessors. No edge joins two operations of one level and
    /// every edge goes from a lower level to a higher one, so a backend may
    /// run a level's operations together, with one barrier between levels.
    pub fn levels(&self) -> Vec<Vec<usize>> {
        let level = self.level_of();
        let depth = level.iter().max().map_or(0, |deepest| deepest + 1);
        let mut levels = vec![Vec::new(); depth];
        for (operation, &l) in level.iter().enumerate() {
            levels[l].push(operation);
        }
        levels
    }

    /// Each operation's level. The edges are sorted by their first
    /// operation, which comes before the second, so one pass settles each
    /// level before an edge leaves it.
    fn level_of(&self) -> Vec<usize> {
        let mut level = vec![0usize; self.nodes];
        for &(from, to) in &self.edges {
            level[to] = level[to].max(level[from] + 1);
        }
        level
    }
}

/// Drop every edge `from -> to` that a path through other edges implies.
/// `successors` lists each node's successors in increasing order, all of
/// them later than the node.
fn reduce(successors: &mut [Vec<usize>]) {
    let nodes = successors.len();
    let mut reach: Vec<FixedBitSet> = vec![FixedBitSet::new(); nodes];
    for from in (0..nodes).rev() {
        let mut reached = FixedBitSet::with_capacity(nodes);
        // Nearest first: a later successor that a nearer one reaches is
        // implied by it.
        successors[from].retain(|&to| {
            if reached.contains(to) {
                return false;
            }
            reached.insert(to);
            reached.union_with(&reach[to]);
            true
        });
        reach[from] = reached;
    }
}

#[cfg(test)]
mod tests {

    use proptest::prelude::*;

    use super::*;
    use crate::kernels::signature::Access;

    fn launch(bindings: &[(u64, Access)]) -> Entry {
        crate::recorded::entries::test_launch("k", bindings)
    }

    #[test]
    fn a_chain_keeps_one_edge_per_step() {
        use Access::{Read, ReadWrite, Write};
        // 0 writes x; 1 and 2 update it; 3 reads it: a chain, with the
        // hazards 0 -> 2 and 0 -> 3 and 1 -> 3 implied.
        let log = vec![
            launch(&[(1, Write)]),
            launch(&[(1, ReadWrite)]),
            launch(&[(1, ReadWrite)]),
            launch(&[(1, Read), (2, Write)]),
        ];
        let deps = Dependencies::of(&log);
        assert_eq!(deps.edges, [(0, 1), (1, 2), (2, 3)]);
        assert_eq!((deps.nodes, deps.depth, deps.width), (4, 4, 1));
    }

    #[test]
    fn independent_chains_are_as_deep_as_one_and_as_wide_as_all() {
        use Access::{ReadWrite, Write};
        let mut log = Vec::new();
        for chain in 0..8 {
            log.push(launch(&[(chain, Write)]));
        }
        for _ in 0..5 {
            for chain in 0..8 {
                log.push(launch(&[(chain, ReadWrite)]));
            }
        }
        let deps = Dependencies::of(&log);
        assert_eq!((deps.nodes, deps.depth, deps.width), (48, 6, 8));
        assert_eq!(deps.edges.len(), 40, "one per step of each chain");
    }

    #[test]
    fn levels_hold_what_no_edge_joins_in_issue_order() {
        use Access::{Read, ReadWrite, Write};
        // 0 -> 1 -> 3 and 2 -> 3, 4 alone: 3's level is its longer chain's.
        let log = vec![
            launch(&[(1, Write)]),
            launch(&[(1, ReadWrite)]),
            launch(&[(2, Write)]),
            launch(&[(1, Read), (2, Read), (3, Write)]),
            launch(&[(4, Write)]),
        ];
        let deps = Dependencies::of(&log);
        assert_eq!(deps.levels(), [vec![0, 2, 4], vec![1], vec![3]]);
        assert_eq!((deps.depth, deps.width), (3, 3));
        assert!(Dependencies::default().levels().is_empty());
    }

    #[test]
    fn readers_of_one_write_run_side_by_side_before_the_next_write() {
        use Access::{Read, Write};
        let log = vec![
            launch(&[(1, Write)]),
            launch(&[(1, Read), (2, Write)]),
            launch(&[(1, Read), (3, Write)]),
            launch(&[(1, Write)]),
        ];
        let deps = Dependencies::of(&log);
        // The second write follows both reads (WAR); its WAW edge on the
        // first write is implied through them.
        assert_eq!(deps.edges, [(0, 1), (0, 2), (1, 3), (2, 3)]);
        assert_eq!((deps.depth, deps.width), (3, 2));
    }

    fn access() -> impl Strategy<Value = Access> {
        prop_oneof![
            Just(Access::Read),
            Just(Access::Write),
            Just(Access::ReadWrite)
        ]
    }

    /// Which nodes each node reaches through `edges`.
    fn closure(nodes: usize, edges: &[(usize, usize)]) -> Vec<Vec<bool>> {
        let mut reach = vec![vec![false; nodes]; nodes];
        for from in (0..nodes).rev() {
            for &(f, to) in edges.iter().filter(|(f, _)| *f == from) {
                let below = reach[to].clone();
                let row = &mut reach[f];
                row[to] = true;
                for (cell, reached) in row.iter_mut().zip(below) {
                    *cell |= reached;
                }
            }
        }
        reach
    }

    proptest! {
        /// The reduced edges order exactly what every hazard orders, and
        /// none of them is implied by the others.
        #[test]
        fn the_reduction_keeps_every_order_and_no_implied_edge(
            log in proptest::collection::vec(
                proptest::collection::vec((0u64..4, access()), 1..3),
                1..40,
            )
        ) {
            let log: Vec<Entry> = log
                .iter()
                .map(|bindings| {
                    let mut seen = std::collections::BTreeSet::new();
                    let unique: Vec<_> =
                        bindings.iter().copied().filter(|(b, _)| seen.insert(*b)).collect();
                    launch(&unique)
                })
                .collect();
            let nodes = log.len();
            let deps = Dependencies::of(&log);
            let hazards: Vec<(usize, usize)> =
                edges(&log).iter().map(|e| (e.from, e.to)).collect();
            let want = closure(nodes, &hazards);
            let got = closure(nodes, &deps.edges);
            prop_assert_eq!(&want, &got);
            for (i, &(from, to)) in deps.edges.iter().enumerate() {
                let mut others = deps.edges.clone();
                others.remove(i);
                prop_assert!(!closure(nodes, &others)[from][to], "{from} -> {to} is implied");
            }
        }
    }
}
