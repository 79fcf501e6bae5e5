//! What a capture window recorded, kept with its graph: a compact log of
//! every launch and copy, and the hazards between them that its declared
//! accesses imply.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::ids::BufferId;
use crate::kernels::signature::Access;
use crate::kernels::span::Span;
use crate::recorded::conditional::Conditional;

/// One recorded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A kernel launch.
    Launch {
        /// The kernel's name.
        kernel: Arc<str>,
        /// Its grid.
        groups: [u32; 3],
        /// Each binding's bytes and access, in binding order.
        bindings: SmallVec<[(Span, Access); 4]>,
        /// The slice holding its info bytes, which it reads: staged inside
        /// the window (a copy logged before it) or found in the info cache.
        info: Option<Span>,
        /// Info bytes passed.
        info_bytes: u32,
        /// Parameter bytes passed.
        param_bytes: u32,
    },
    /// A copy of host bytes into a buffer.
    Write {
        /// The bytes written.
        span: Span,
    },
    /// A conditional node: its bodies, each a log of its own.
    Conditional {
        /// What it does with its flag and bodies.
        kind: Conditional,
        /// The four bytes of its flag.
        flag: Span,
        /// Its bodies' logs, in order.
        bodies: Vec<Vec<Entry>>,
    },
}

impl Entry {
    /// Each buffer the operation touches, with how.
    pub(crate) fn accesses(&self) -> SmallVec<[(Span, Access); 4]> {
        match self {
            Entry::Launch { bindings, info, .. } => {
                let mut accesses = bindings.clone();
                accesses.extend(info.map(|info| (info, Access::Read)));
                accesses
            }
            Entry::Write { span } => [(*span, Access::Write)].into_iter().collect(),
            // Whatever any body may touch, and the flag it reads first.
            Entry::Conditional { flag, bodies, .. } => {
                let mut accesses: SmallVec<[(Span, Access); 4]> =
                    [(*flag, Access::Read)].into_iter().collect();
                for entry in bodies.iter().flatten() {
                    accesses.extend(entry.accesses());
                }
                accesses
            }
        }
    }

    /// The launches, copies and conditionals of `log`, bodies included.
    pub(crate) fn count(log: &[Entry]) -> (usize, usize, usize) {
        log.iter().fold((0, 0, 0), |(l, c, n), entry| match entry {
            Entry::Launch { .. } => (l + 1, c, n),
            Entry::Write { .. } => (l, c + 1, n),
            Entry::Conditional { bodies, .. } => {
                let (bl, bc, bn) = bodies
                    .iter()
                    .map(|body| Entry::count(body))
                    .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
                (l + bl, c + bc, n + bn + 1)
            }
        })
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

/// Who touched one buffer's bytes so far while walking a log: for each
/// byte, the operation that last wrote it and those that read it since.
#[derive(Default)]
struct Touched {
    /// `(start, end, operation)`, disjoint.
    writers: Vec<(u64, u64, usize)>,
    /// `(start, end, operation)`, in the order they read.
    readers: Vec<(u64, u64, usize)>,
}

/// The operations of `ranges` that touch a byte of `span`.
fn touching(ranges: &[(u64, u64, usize)], span: &Span) -> impl Iterator<Item = usize> {
    let (start, end) = (span.offset, span.end());
    ranges
        .iter()
        .filter(move |&&(s, e, _)| s < end && start < e)
        .map(|&(_, _, operation)| operation)
}

/// Take the bytes of `span` out of every range of `ranges`, keeping what
/// lies on either side.
fn cut(ranges: &mut Vec<(u64, u64, usize)>, span: &Span) {
    let (start, end) = (span.offset, span.end());
    let mut sides = SmallVec::<[(u64, u64, usize); 4]>::new();
    ranges.retain(|&(s, e, operation)| {
        if e <= start || end <= s {
            return true;
        }
        if s < start {
            sides.push((s, start, operation));
        }
        if end < e {
            sides.push((end, e, operation));
        }
        false
    });
    ranges.extend(sides);
}

/// The dependencies between the operations of `log`, from their declared
/// accesses, byte by byte: each reader depends on the last writer of a byte
/// it reads (RAW), each writer on the readers of a byte it writes since
/// that byte's last write (WAR) and on its last writer (WAW). Disjoint
/// parts of one buffer are independent. Operations with no path between
/// them could run side by side.
pub fn edges(log: &[Entry]) -> Vec<Edge> {
    use std::collections::HashMap;
    let mut touched: HashMap<BufferId, Touched> = HashMap::new();
    let mut edges = Vec::new();
    for (to, entry) in log.iter().enumerate() {
        let accesses = entry.accesses();
        let mut found = SmallVec::<[Edge; 8]>::new();
        let mut add = |from: usize, buffer: BufferId, hazard: Hazard| {
            let edge = Edge {
                from,
                to,
                buffer,
                hazard,
            };
            if from != to && !found.contains(&edge) {
                found.push(edge);
            }
        };
        for (span, access) in &accesses {
            if let (true, Some(known)) = (access.reads(), touched.get(&span.buffer)) {
                for from in touching(&known.writers, span) {
                    add(from, span.buffer, Hazard::ReadAfterWrite);
                }
            }
        }
        for (span, access) in &accesses {
            let Some(known) = touched.get(&span.buffer).filter(|_| access.writes()) else {
                continue;
            };
            for from in touching(&known.readers, span) {
                add(from, span.buffer, Hazard::WriteAfterRead);
            }
            if !access.reads() {
                for from in touching(&known.writers, span) {
                    add(from, span.buffer, Hazard::WriteAfterWrite);
                }
            }
        }
        edges.extend(found);
        for (span, access) in &accesses {
            let known = touched.entry(span.buffer).or_default();
            if access.writes() {
                cut(&mut known.writers, span);
                cut(&mut known.readers, span);
                known.writers.push((span.offset, span.end(), to));
            } else {
                known.readers.push((span.offset, span.end(), to));
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
    /// Conditional nodes (ifs and loops) recorded; the launches and copies
    /// inside their bodies are counted above, each once.
    pub conditionals: usize,
    /// Device bytes the graph pins (slices its recording touched).
    pub device_bytes: u64,
    /// Pinned host bytes it pins (what its recorded copies read).
    pub host_bytes: u64,
    /// Bytes of the buffers its recording touched, as requested (the pins
    /// round each up to the pool's alignment).
    pub touched_bytes: u64,
    /// Bytes of its temporaries (buffers its capture allocated and dropped
    /// inside its run), in the arena its stream's graphs share: counted in
    /// `device_bytes` too.
    pub temporary_bytes: u64,
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
        bindings: bindings
            .iter()
            .map(|&(b, a)| (Span::whole(BufferId(b), 64), a))
            .collect(),
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
                span: Span::whole(BufferId(1), 64),
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

    #[test]
    fn cutting_keeps_only_the_bytes_on_either_side() {
        let span = |offset, len| Span {
            buffer: BufferId(1),
            offset,
            len,
        };
        let cut_from = |range: (u64, u64, usize), cut_out: Span| {
            let mut ranges = vec![range];
            cut(&mut ranges, &cut_out);
            ranges
        };
        assert_eq!(cut_from((0, 100, 7), span(0, 50)), [(50, 100, 7)]);
        assert_eq!(cut_from((0, 100, 7), span(60, 40)), [(0, 60, 7)]);
        assert_eq!(
            cut_from((0, 100, 7), span(20, 30)),
            [(0, 20, 7), (50, 100, 7)]
        );
        assert_eq!(cut_from((0, 100, 7), span(0, 100)), []);
        assert_eq!(
            cut_from((0, 100, 7), span(100, 50)),
            [(0, 100, 7)],
            "after it"
        );
        assert_eq!(
            cut_from((50, 100, 7), span(0, 50)),
            [(50, 100, 7)],
            "before it"
        );
        let spans = [(0, 10, 1), (10, 20, 2), (40, 50, 3)];
        let touched: Vec<usize> = touching(&spans, &span(5, 10)).collect();
        assert_eq!(touched, [1, 2]);
    }

    #[test]
    fn an_overwritten_range_leaves_no_edge_and_each_edge_comes_once() {
        use Access::{Read, Write};
        use Hazard::*;
        let log = vec![
            ranged("w_all", &[(0, 1024, Write)]),
            ranged("w_mid", &[(256, 256, Write)]),
            ranged("r_all", &[(0, 1024, Read)]),
            ranged("w_again", &[(0, 1024, Write)]),
            ranged("r_low", &[(0, 256, Read)]),
        ];
        let edges = sorted_edges(&log);
        assert_eq!(
            edges,
            [
                (0, 1, WriteAfterWrite),
                // w_all's bytes on either side of w_mid's: one edge.
                (0, 2, ReadAfterWrite),
                (1, 2, ReadAfterWrite),
                (0, 3, WriteAfterWrite),
                (1, 3, WriteAfterWrite),
                (2, 3, WriteAfterRead),
                // Only the last writer of the bytes read.
                (3, 4, ReadAfterWrite),
            ]
        );
    }

    /// The edges of `log` as `(from, to, hazard)`, by `to` then `from`.
    fn sorted_edges(log: &[Entry]) -> Vec<(usize, usize, Hazard)> {
        let mut edges: Vec<_> = edges(log)
            .into_iter()
            .map(|e| (e.from, e.to, e.hazard))
            .collect();
        edges.sort_by_key(|&(from, to, _)| (to, from));
        edges
    }

    /// A launch of `kernel` over byte ranges `(offset, len)` of buffer 1.
    fn ranged(kernel: &str, ranges: &[(u64, u64, Access)]) -> Entry {
        Entry::Launch {
            kernel: Arc::from(kernel),
            groups: [1, 1, 1],
            bindings: ranges
                .iter()
                .map(|&(offset, len, access)| {
                    let span = Span {
                        buffer: BufferId(1),
                        offset,
                        len,
                    };
                    (span, access)
                })
                .collect(),
            info: None,
            info_bytes: 0,
            param_bytes: 0,
        }
    }

    #[test]
    fn edges_compare_byte_ranges_within_a_buffer() {
        use Access::{Read, ReadWrite, Write};
        use Hazard::*;
        let log = vec![
            ranged("w_all", &[(0, 1024, Write)]),
            ranged("w_low", &[(0, 256, Write)]),
            ranged("r_high", &[(768, 256, Read)]),
            ranged("r_mid", &[(128, 256, Read)]),
            ranged("w_mid", &[(256, 256, ReadWrite)]),
            ranged("w_top", &[(768, 256, Write)]),
            ranged("r_all", &[(0, 1024, Read)]),
            ranged("r_gap", &[(512, 256, Read)]),
        ];
        let edges = sorted_edges(&log);
        assert_eq!(
            edges,
            [
                // w_low overwrites part of w_all's bytes.
                (0, 1, WriteAfterWrite),
                // r_high reads only bytes w_all wrote.
                (0, 2, ReadAfterWrite),
                // r_mid reads bytes of both writers.
                (0, 3, ReadAfterWrite),
                (1, 3, ReadAfterWrite),
                // w_mid reads what w_all wrote and overwrites what r_mid read.
                (0, 4, ReadAfterWrite),
                (3, 4, WriteAfterRead),
                // w_top overwrites w_all's bytes there and what r_high read.
                (0, 5, WriteAfterWrite),
                (2, 5, WriteAfterRead),
                // r_all reads every writer's part, each once.
                (0, 6, ReadAfterWrite),
                (1, 6, ReadAfterWrite),
                (4, 6, ReadAfterWrite),
                (5, 6, ReadAfterWrite),
                // r_gap reads only what w_all wrote and nobody overwrote.
                (0, 7, ReadAfterWrite),
            ]
        );
        // Disjoint parts: w_low and r_high, w_mid and w_top.
        for pair in [(1, 2), (4, 5), (2, 3)] {
            assert!(!edges.iter().any(|&(f, t, _)| (f, t) == pair), "{pair:?}");
        }
    }
}
