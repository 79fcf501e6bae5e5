//! A replay that runs independent steps at the same time: the dependency
//! graph capture-core computed, cut into levels (steps whose longest chain
//! of predecessors is equally long have no edge between them), each level
//! spread over a pool of threads sized to the machine.
//!
//! Before a graph runs this way, its edges are checked against the byte
//! ranges its steps really touch: two steps that share a byte, one writing
//! it, must be joined by a path, or instantiating fails.

use std::ops::Range as Span;
use std::sync::OnceLock;

use capture_core::Dependencies;
use fixedbitset::FixedBitSet;

use crate::memory::Range;

/// Most steps whose edges are checked against their ranges (a bit per pair
/// of steps, 2 MiB here); a larger graph is trusted.
pub(crate) const CHECKED_STEPS: usize = 4096;

/// Bytes a level's steps must touch between them before the level is
/// spread over the pool: waking the pool's threads costs tens of
/// microseconds, more than a level of small launches takes on one.
pub(crate) const SPREAD_BYTES: u64 = 256 << 10;

/// A program's steps, level after level.
#[derive(Debug, Clone, Default)]
pub(crate) struct Schedule {
    order: Vec<u32>,
    levels: Vec<Span<usize>>,
    /// Whether each level is worth spreading over the pool.
    spread: Vec<bool>,
}

impl Schedule {
    /// The levels of `dependencies`, each level's steps in issue order; a
    /// level of several steps that touch `SPREAD_BYTES` between them (as
    /// `bytes` counts each step's) runs spread over the pool, unless a step
    /// of it must run alone (`bytes` says `None`).
    pub(crate) fn of(dependencies: &Dependencies, bytes: impl Fn(usize) -> Option<u64>) -> Self {
        let mut schedule = Self::default();
        for level in dependencies.levels() {
            let start = schedule.order.len();
            schedule.order.extend(level.iter().map(|&step| step as u32));
            schedule.levels.push(start..schedule.order.len());
            let touched: Option<u64> = level.iter().map(|&step| bytes(step)).sum();
            schedule
                .spread
                .push(level.len() > 1 && touched.is_some_and(|t| t >= SPREAD_BYTES));
        }
        schedule
    }

    /// Levels, the steps each holds.
    #[cfg(test)]
    fn levels(&self) -> Vec<Vec<u32>> {
        self.levels
            .iter()
            .map(|level| self.order[level.clone()].to_vec())
            .collect()
    }

    /// Run every step, level after level: a level worth spreading with
    /// `together`, its steps at once with the pool's help; any other (a
    /// level of one step, of small steps, or any level on a machine of one
    /// core) step by step with `alone`. The first error stops the program
    /// after the level it happened in.
    pub(crate) fn run(
        &self,
        alone: impl Fn(usize) -> Result<(), String>,
        together: impl Fn(&[u32], &rayon::ThreadPool) -> Result<(), String>,
    ) -> Result<(), String> {
        for (level, &spread) in self.levels.iter().zip(&self.spread) {
            let steps = &self.order[level.clone()];
            match pool().filter(|_| spread) {
                Some(pool) => together(steps, pool)?,
                None => steps.iter().try_for_each(|&s| alone(s as usize))?,
            }
        }
        Ok(())
    }
}

/// The threads that help a replay's thread with a level, one per core
/// besides it, shared by every stream; `None` on a machine of one core, or
/// where no thread could be started (replays then run their steps one by
/// one).
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        rayon::ThreadPoolBuilder::new()
            .num_threads(helpers(cores)?)
            .thread_name(|i| format!("host-replay-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// The pool's threads on a machine of `cores` cores: one per core besides
/// the replay's own thread, none on one core.
fn helpers(cores: usize) -> Option<usize> {
    (cores >= 2).then(|| cores - 1)
}

/// One step's access to a range: its page, start and end, the step, and
/// whether it writes.
type Access = (u64, usize, usize, usize, bool);

/// Whether `edges` order every pair of the `steps` (each a list of ranges
/// and whether the step writes them) that share a byte with one writing
/// it; the first such pair left unordered otherwise.
pub(crate) fn check_hazards(
    steps: &[Vec<(&Range, bool)>],
    edges: &[(usize, usize)],
) -> Result<(), String> {
    let nodes = steps.len();
    if nodes > CHECKED_STEPS {
        return Ok(());
    }
    // What each step reaches, built from the last step back.
    let mut reach = vec![FixedBitSet::with_capacity(nodes); nodes];
    for &(from, to) in edges.iter().rev() {
        let below = reach[to].clone();
        reach[from].insert(to);
        reach[from].union_with(&below);
    }
    let unordered = |a: usize, b: usize, page: u64| {
        let (first, second) = (a.min(b), a.max(b));
        if first == second || reach[first].contains(second) {
            return Ok(());
        }
        Err(format!(
            "steps {first} and {second} touch the same bytes of page {page}, one writing \
             them, and no edge orders them"
        ))
    };
    // Every access, grouped by the exact range it touches, in step order.
    let mut all: Vec<Access> = steps
        .iter()
        .enumerate()
        .flat_map(|(step, ranges)| {
            ranges.iter().map(move |(range, writes)| {
                let end = range.offset.saturating_add(range.len);
                (range.memory.id(), range.offset, end, step, *writes)
            })
        })
        .collect();
    all.sort_unstable();
    let groups: Vec<&[Access]> = all
        .chunk_by(|a, b| (a.0, a.1, a.2) == (b.0, b.1, b.2))
        .collect();
    // Within one range, order is transitive: each access need only follow
    // the last write before it, and each write the reads since that write.
    for group in &groups {
        let (mut last_write, mut reads) = (None, Vec::new());
        for &(page, _, _, step, writes) in *group {
            if let Some(write) = last_write {
                unordered(write, step, page)?;
            }
            if writes {
                for &read in &reads {
                    unordered(read, step, page)?;
                }
                reads.clear();
                last_write = Some(step);
            } else {
                reads.push(step);
            }
        }
    }
    // Distinct ranges that overlap (rare: a binding is a whole buffer) are
    // paired access by access.
    let mut rest = &groups[..];
    while let Some((group, later)) = rest.split_first() {
        rest = later;
        let (page, _, end, ..) = group[0];
        for other in later {
            let (other_page, start, ..) = other[0];
            if other_page != page || start >= end {
                break;
            }
            for &(_, _, _, a, a_writes) in *group {
                for &(_, _, _, b, b_writes) in *other {
                    if a_writes || b_writes {
                        unordered(a, b, page)?;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Memory, PageKind};

    fn deps(nodes: usize, edges: &[(usize, usize)]) -> Dependencies {
        Dependencies {
            nodes,
            edges: edges.to_vec(),
            ..Dependencies::default()
        }
    }

    #[test]
    fn levels_hold_the_steps_whose_longest_chain_is_as_long() {
        // 0 -> 2 -> 3, 1 -> 3, 4 alone.
        let schedule = Schedule::of(&deps(5, &[(0, 2), (1, 3), (2, 3)]), |_| Some(0));
        assert_eq!(schedule.levels(), [vec![0, 1, 4], vec![2], vec![3]]);
        assert!(Schedule::of(&deps(0, &[]), |_| Some(0)).levels().is_empty());
    }

    #[test]
    fn the_pool_has_a_thread_per_core_besides_the_replays() {
        assert_eq!(helpers(1), None);
        assert_eq!(helpers(2), Some(1));
        assert_eq!(helpers(16), Some(15));
        let threads = pool().map(rayon::ThreadPool::current_num_threads);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(threads, helpers(cores));
    }

    #[test]
    fn a_level_of_one_step_is_never_spread() {
        let schedule = Schedule::of(&deps(3, &[(0, 2), (1, 2)]), |_| Some(SPREAD_BYTES));
        assert_eq!(schedule.levels(), [vec![0, 1], vec![2]]);
        assert_eq!(schedule.spread, [true, false]);
        let half = Schedule::of(&deps(2, &[]), |_| Some(SPREAD_BYTES / 2));
        assert_eq!(half.spread, [true], "two steps of half the bytes each");
        let alone = Schedule::of(&deps(2, &[]), |step| (step == 0).then_some(SPREAD_BYTES));
        assert_eq!(alone.spread, [false], "a step that must run alone");
    }

    #[test]
    fn a_level_runs_every_step_and_stops_at_an_error() {
        use std::sync::Mutex;
        let edges = [(0, 3), (1, 3), (2, 3)];
        let runs = |each: u64| {
            let ran = Mutex::new(Vec::new());
            let alone = |step: usize| {
                ran.lock().unwrap().push(vec![step as u32]);
                Ok(())
            };
            let together = |steps: &[u32], _: &rayon::ThreadPool| {
                ran.lock().unwrap().push(steps.to_vec());
                Ok(())
            };
            Schedule::of(&deps(4, &edges), |_| Some(each))
                .run(alone, together)
                .expect("runs");
            ran.into_inner().unwrap()
        };
        let one_by_one = [vec![0], vec![1], vec![2], vec![3]];
        match pool() {
            Some(_) => assert_eq!(runs(SPREAD_BYTES / 2), [vec![0, 1, 2], vec![3]]),
            None => assert_eq!(runs(SPREAD_BYTES / 2), one_by_one),
        }
        // Small steps run one by one, however wide their level.
        assert_eq!(runs(SPREAD_BYTES / 4), one_by_one);
        let schedule = Schedule::of(&deps(4, &edges), |_| Some(SPREAD_BYTES));
        let after = Mutex::new(false);
        let err = schedule.run(
            |step| {
                if step == 3 {
                    *after.lock().unwrap() = true;
                }
                if step == 1 { Err("1".into()) } else { Ok(()) }
            },
            |_, _| Err("1".to_string()),
        );
        assert_eq!(err, Err("1".into()));
        assert!(!*after.lock().unwrap(), "nothing runs after a failed level");
    }

    #[test]
    fn an_unordered_pair_touching_one_byte_is_named() {
        let page = Memory::new(PageKind::Device, 64).expect("a page");
        let range = |offset, len| Range::new(&page, offset, len);
        let (a, b, c) = (range(0, 16), range(8, 16), range(32, 16));
        // 0 writes a, 1 reads b (overlapping a), 2 writes c, 3 reads c.
        let steps = vec![
            vec![(&a, true)],
            vec![(&b, false)],
            vec![(&c, true)],
            vec![(&c, false), (&b, false)],
        ];
        assert!(check_hazards(&steps, &[(0, 1), (1, 3), (2, 3)]).is_ok());
        // 3 reads what 0 wrote through a range that only overlaps it.
        assert!(check_hazards(&steps, &[(0, 1), (2, 3)]).is_err());
        assert!(check_hazards(&steps, &[(0, 3), (1, 3), (2, 3)]).is_err());
        let err = check_hazards(&steps, &[(0, 1), (1, 3)]).expect_err("2 and 3 unordered");
        assert!(err.contains("steps 2 and 3"), "{err}");
        // One range: write, read, read, write, read. Each read must follow
        // the write before it and the second write both reads.
        let one = vec![
            vec![(&a, true)],
            vec![(&a, false)],
            vec![(&a, false)],
            vec![(&a, true)],
            vec![(&a, false)],
        ];
        let chain = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)];
        assert!(check_hazards(&one, &chain).is_ok());
        for missing in 0..chain.len() {
            let mut edges = chain.to_vec();
            let (from, to) = edges.remove(missing);
            let err = check_hazards(&one, &edges).expect_err("a link is missing");
            assert!(err.contains(&format!("steps {from} and {to}")), "{err}");
        }
        // Two readers of one range need no order.
        let readers = vec![vec![(&b, false)], vec![(&b, false)]];
        assert!(check_hazards(&readers, &[]).is_ok());
    }

    #[test]
    fn graphs_of_more_than_the_checked_steps_are_trusted() {
        let page = Memory::new(PageKind::Device, 64).expect("a page");
        let range = Range::new(&page, 0, 16);
        // Every step writes the one range, and no edge orders them.
        let writers = |steps: usize| vec![vec![(&range, true)]; steps];
        assert!(check_hazards(&writers(CHECKED_STEPS), &[]).is_err());
        assert!(check_hazards(&writers(CHECKED_STEPS + 1), &[]).is_ok());
    }
}
