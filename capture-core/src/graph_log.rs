//! What a capture window recorded, kept with its graph: a compact log of
//! every launch and copy, and the hazards between them that its declared
//! accesses imply.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::ids::BufferId;
use crate::signature::Access;

/// One recorded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A kernel launch.
    Launch {
        /// The kernel's name.
        kernel: Arc<str>,
        /// Its grid.
        groups: [u32; 3],
        /// Each binding's buffer and access, in binding order.
        bindings: SmallVec<[(BufferId, Access); 4]>,
        /// The slice holding its info bytes, which it reads: staged inside
        /// the window (a copy logged before it) or found in the info cache.
        info: Option<BufferId>,
        /// Info bytes passed.
        info_bytes: u32,
        /// Parameter bytes passed.
        param_bytes: u32,
    },
    /// A copy of host bytes into a buffer.
    Write {
        /// The buffer written.
        buffer: BufferId,
        /// Bytes copied.
        bytes: u64,
    },
}

impl Entry {
    /// Each buffer the operation touches, with how.
    fn accesses(&self) -> SmallVec<[(BufferId, Access); 4]> {
        match self {
            Entry::Launch { bindings, info, .. } => {
                let mut accesses = bindings.clone();
                accesses.extend(info.map(|info| (info, Access::Read)));
                accesses
            }
            Entry::Write { buffer, .. } => [(*buffer, Access::Write)].into_iter().collect(),
        }
    }
}

/// Why one operation must follow another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hazard {
    /// It reads what the earlier one wrote.
    ReadAfterWrite,
    /// It overwrites what the earlier one read.
    WriteAfterRead,
    /// It overwrites what the earlier one wrote.
    WriteAfterWrite,
}

impl Hazard {
    /// The hazard's usual three letters.
    pub fn short(self) -> &'static str {
        match self {
            Hazard::ReadAfterWrite => "RAW",
            Hazard::WriteAfterRead => "WAR",
            Hazard::WriteAfterWrite => "WAW",
        }
    }
}

/// A dependency: `to` must run after `from` because of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    /// The earlier operation's position in the log.
    pub from: usize,
    /// The later one's.
    pub to: usize,
    /// The buffer they share.
    pub buffer: BufferId,
    /// How they share it.
    pub hazard: Hazard,
}

/// The dependencies between the operations of `log`, from their declared
/// accesses: each reader depends on the last writer before it (RAW), each
/// writer on the readers since the last write (WAR) and on the last writer
/// (WAW). Operations with no path between them could run side by side.
pub fn edges(log: &[Entry]) -> Vec<Edge> {
    use std::collections::HashMap;
    let mut last_writer: HashMap<BufferId, usize> = HashMap::new();
    let mut readers: HashMap<BufferId, Vec<usize>> = HashMap::new();
    let mut edges = Vec::new();
    for (to, entry) in log.iter().enumerate() {
        let accesses = entry.accesses();
        for &(buffer, access) in &accesses {
            if access.reads()
                && let Some(&from) = last_writer.get(&buffer)
                && from != to
            {
                edges.push(Edge {
                    from,
                    to,
                    buffer,
                    hazard: Hazard::ReadAfterWrite,
                });
            }
        }
        for &(buffer, access) in &accesses {
            if !access.writes() {
                continue;
            }
            for &from in readers.get(&buffer).map_or(&[][..], Vec::as_slice) {
                if from != to {
                    edges.push(Edge {
                        from,
                        to,
                        buffer,
                        hazard: Hazard::WriteAfterRead,
                    });
                }
            }
            if let Some(&from) = last_writer.get(&buffer)
                && from != to
                && !access.reads()
            {
                edges.push(Edge {
                    from,
                    to,
                    buffer,
                    hazard: Hazard::WriteAfterWrite,
                });
            }
        }
        for &(buffer, access) in &accesses {
            if access.writes() {
                last_writer.insert(buffer, to);
                readers.remove(&buffer);
            }
            if access.reads() && !access.writes() {
                readers.entry(buffer).or_default().push(to);
            }
        }
    }
    edges
}

/// What a graph is and has done, for a person or a dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphInfo {
    /// Kernel launches recorded.
    pub launches: usize,
    /// Copies recorded.
    pub copies: usize,
    /// Device bytes the graph pins (slices its recording touched).
    pub device_bytes: u64,
    /// Pinned host bytes it pins (what its recorded copies read).
    pub host_bytes: u64,
    /// Bytes of the buffers its recording touched, as requested (the pins
    /// round each up to the pool's alignment).
    pub touched_bytes: u64,
    /// How long instantiating (or the last update) took.
    pub instantiate_time: Duration,
    /// Whether the last upload succeeded.
    pub uploaded: bool,
    /// Replays enqueued so far.
    pub replays: u64,
    /// Updates so far: in place, and by a new executable.
    pub updates_in_place: u64,
    /// Updates that needed a new executable.
    pub reinstantiations: u64,
    /// Edges of its dependency graph: the hazards between its operations
    /// that no path of others implies (see `graph_dot`).
    pub edges: usize,
    /// Operations on its longest path of dependencies.
    pub depth: usize,
    /// Operations on its widest level of dependencies: how many could run
    /// side by side there.
    pub width: usize,
}

/// A launch of `kernel` over `bindings` (buffer ids and accesses), a
/// 2x1x1 grid with 16 info bytes: the log entry the tests build on.
#[cfg(test)]
pub(crate) fn test_launch(kernel: &str, bindings: &[(u64, Access)]) -> Entry {
    Entry::Launch {
        kernel: Arc::from(kernel),
        groups: [2, 1, 1],
        bindings: bindings.iter().map(|&(b, a)| (BufferId(b), a)).collect(),
        info: None,
        info_bytes: 16,
        param_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_launch as launch;

    #[test]
    fn edges_follow_the_declared_accesses() {
        use Access::{Read, ReadWrite, Write};
        let log = vec![
            Entry::Write {
                buffer: BufferId(1),
                bytes: 64,
            },
            launch("a", &[(1, Read), (2, Write)]),
            launch("b", &[(1, Read), (3, Write)]),
            launch("c", &[(2, Read), (3, Read), (4, Write)]),
            launch("d", &[(1, ReadWrite)]),
            launch("e", &[(4, Write)]),
        ];
        let edges: Vec<(usize, usize, u64, Hazard)> = edges(&log)
            .into_iter()
            .map(|e| (e.from, e.to, e.buffer.0, e.hazard))
            .collect();
        use Hazard::*;
        assert_eq!(
            edges,
            [
                (0, 1, 1, ReadAfterWrite),
                (0, 2, 1, ReadAfterWrite),
                (1, 3, 2, ReadAfterWrite),
                (2, 3, 3, ReadAfterWrite),
                (0, 4, 1, ReadAfterWrite),
                (1, 4, 1, WriteAfterRead),
                (2, 4, 1, WriteAfterRead),
                (3, 5, 4, WriteAfterWrite),
            ]
        );
        // a and b share only a read: no edge, they could run side by side.
        assert!(!edges.iter().any(|&(f, t, _, _)| (f, t) == (1, 2)));
    }
}
