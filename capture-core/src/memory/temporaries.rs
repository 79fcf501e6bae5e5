//! Temporaries: the buffers a capture window's run allocates and drops
//! inside itself. The graphs of one stream replay one at a time, so their
//! temporaries share one arena of that stream: each window cuts its own
//! from the arena's start, and a graph's replay writes every temporary
//! before reading it, so it never reads what another graph left there.
//!
//! Which allocations are temporaries is learnt from the warmup: the same
//! body runs twice, so the recorded run's n-th allocation is a temporary
//! when the warmup's n-th, of the same length, was dropped before the
//! warmup ended. What the recording does with it is then checked when the
//! window closes (see [`Temporaries::close`]).

use crate::hashing::FastSet;
use crate::ids::BufferId;
use crate::kernels::signature::Access;
use crate::memory::pool::{Place, SliceHandle, aligned};
use crate::recorded::entries::Entry;

/// One stream's arena and what its open window learnt of temporaries.
#[derive(Debug, Default)]
pub(crate) struct Temporaries {
    /// The arena this stream's windows cut their temporaries from. The
    /// stream keeps it for its next window until a larger one replaces it,
    /// a temporary is kept past its window, or `trim` finds no graph cutting
    /// from it; the graphs whose temporaries lie in it hold it besides.
    arena: Option<SliceHandle>,
    /// The arena the recording cuts from, held while it records.
    armed: Option<SliceHandle>,
    /// The open window's warmup allocations, in order, with their lengths.
    warmup: Vec<(BufferId, u64)>,
    /// Buffers dropped while the window is open.
    dropped: FastSet<BufferId>,
    /// For each warmup allocation, its length when it was a temporary.
    predicted: Vec<Option<u64>>,
    /// Whether the warmup has ended (`predicted` is set).
    warmed: bool,
    /// Allocations of the recorded run so far.
    allocations: usize,
    /// Bytes of the arena the recorded run has cut.
    used: u64,
    /// The recorded run's temporaries.
    taken: Vec<SliceHandle>,
    /// Temporaries the caller kept past their window, and where they lie,
    /// not yet marked on the graphs that share their memory.
    kept: Vec<(BufferId, Place)>,
}

/// What a closed window's temporaries came to.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    /// The graph's temporaries, each where it lies.
    pub taken: Vec<(BufferId, Place)>,
    /// Bytes they span.
    pub bytes: u64,
    /// A temporary the recording read before writing all of it, and the
    /// operation that did.
    pub read_first: Option<(BufferId, usize)>,
}

/// The bytes a slice of `len` spans in its pool.
fn span_of(len: u64) -> u64 {
    aligned(len).unwrap_or(u64::MAX)
}

impl Temporaries {
    /// Forget what the open window learnt, the arena kept: when a window
    /// is prepared, and when one closes or unwinds.
    pub fn reset(&mut self) {
        self.armed = None;
        self.warmup.clear();
        self.dropped.clear();
        self.predicted.clear();
        self.warmed = false;
        self.allocations = 0;
        self.used = 0;
        self.taken.clear();
    }

    /// The warmup allocated `len` bytes for `id`.
    pub fn warmup_allocated(&mut self, id: BufferId, len: u64) {
        if !self.warmed {
            self.warmup.push((id, len));
        }
    }

    /// The caller dropped `id` while a window was open.
    pub fn dropped(&mut self, id: BufferId) {
        self.dropped.insert(id);
    }

    /// The warmup run is over: what it dropped so far were its
    /// temporaries. Later calls change nothing.
    pub fn warmup_ended(&mut self) {
        if self.warmed {
            return;
        }
        self.warmed = true;
        let dropped = &self.dropped;
        self.predicted = self
            .warmup
            .drain(..)
            .map(|(id, len)| dropped.contains(&id).then_some(len))
            .collect();
        self.dropped.clear();
    }

    /// Bytes of arena the recorded run needs: one span per predicted
    /// temporary, none reused, since the replay may run them side by side.
    pub fn needed(&self) -> u64 {
        self.predicted
            .iter()
            .flatten()
            .map(|&len| span_of(len))
            .sum()
    }

    /// The arena there is, if it holds `bytes`.
    pub fn holding(&self, bytes: u64) -> Option<SliceHandle> {
        self.arena.clone().filter(|arena| arena.span() >= bytes)
    }

    /// The recorded run cuts its temporaries from `arena`, which is the
    /// stream's from here. One it replaces is held by the older graphs that
    /// cut from it alone, and its page serves the pool once they are gone.
    pub fn arm(&mut self, arena: SliceHandle) {
        self.arena = Some(arena.clone());
        self.armed = Some(arena);
    }

    /// The arena, if no graph holds it any more: the stream lets it go, so
    /// that its page can be released (at `trim`).
    pub fn unheld_arena(&mut self) -> Option<SliceHandle> {
        self.arena.take_if(|arena| !arena.held_elsewhere())
    }

    /// The stream is going away: the arena is the graphs' that hold it.
    pub fn let_go_of_arena(&mut self) {
        self.arena = None;
    }

    /// Bytes of the arena the next window would cut from.
    pub fn arena_bytes(&self) -> u64 {
        self.arena.as_ref().map_or(0, SliceHandle::span)
    }

    /// The recorded run allocates `len` bytes for `id`: a slice of the
    /// arena when the warmup's allocation at this point was a temporary of
    /// that length and the arena has room, else `None`.
    pub fn take(&mut self, id: BufferId, len: u64) -> Option<SliceHandle> {
        let at = self.allocations;
        self.allocations += 1;
        if self.predicted.get(at).copied().flatten() != Some(len) {
            return None;
        }
        let arena = self.armed.as_ref()?;
        let span = span_of(len);
        if self.used + span > arena.span() {
            return None;
        }
        let slice = arena.cut(id, self.used, len);
        self.used += span;
        self.taken.push(slice.clone());
        Some(slice)
    }

    /// The window closes over `log`: what its temporaries came to. A
    /// temporary the caller still holds retires the arena, so no later
    /// window cuts over it, and waits in [`Temporaries::take_kept`] for the
    /// graphs whose temporaries its memory is.
    pub fn close(&mut self, log: &[Entry]) -> Closed {
        let mut closed = Closed::default();
        let before = self.kept.len();
        for slice in std::mem::take(&mut self.taken) {
            let (id, place) = (slice.id(), slice.place());
            closed.taken.push((id, place));
            closed.bytes += slice.span();
            if !self.dropped.contains(&id) {
                self.kept.push((id, place));
            }
            if closed.read_first.is_none()
                && let Some(operation) = read_first(log, id, slice.len())
            {
                closed.read_first = Some((id, operation));
            }
        }
        if self.kept.len() > before {
            self.arena = None;
        }
        self.reset();
        closed
    }

    /// Temporaries kept past their windows since the last call.
    pub fn take_kept(&mut self) -> Vec<(BufferId, Place)> {
        std::mem::take(&mut self.kept)
    }
}

/// The operation of `log` that first touches buffer `id` (of `len` bytes),
/// if it does anything but write all of it.
fn read_first(log: &[Entry], id: BufferId, len: u64) -> Option<usize> {
    log.iter()
        .enumerate()
        .find_map(|(at, entry)| match first_touch(entry, id, len)? {
            Touch::WritesAll => Some(None),
            Touch::ReadsFirst => Some(Some(at)),
        })?
}

/// How an operation first touches a temporary.
enum Touch {
    /// It writes every byte before anything reads one.
    WritesAll,
    /// It reads bytes nothing wrote before.
    ReadsFirst,
}

/// How `entry` touches buffer `id` (of `len` bytes) first, where that
/// decides: a conditional whose bodies write it first decides nothing, as
/// the bodies may not run, and what comes after it does.
fn first_touch(entry: &Entry, id: BufferId, len: u64) -> Option<Touch> {
    if let Entry::Conditional { flag, bodies, .. } = entry {
        let reads = flag.buffer == id || bodies.iter().any(|b| read_first(b, id, len).is_some());
        return reads.then_some(Touch::ReadsFirst);
    }
    let mut touches = entry
        .accesses()
        .into_iter()
        .filter(|(span, _)| span.buffer == id);
    let first = touches.next()?;
    let writes_all = |(span, access): &(crate::kernels::span::Span, Access)| {
        *access == Access::Write && span.offset == 0 && span.len == len
    };
    // Touched here: fine only if every binding of it writes all of it.
    if writes_all(&first) && touches.all(|t| writes_all(&t)) {
        Some(Touch::WritesAll)
    } else {
        Some(Touch::ReadsFirst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::span::Span;
    use crate::memory::pool::Pool;
    use crate::recorded::entries::test_launch;

    /// An arena of `bytes`, in a page of `pool`, which holds it as a
    /// stream's does.
    fn arena(pool: &mut Pool<()>, bytes: u64) -> SliceHandle {
        pool.reserve_page(BufferId(100), bytes, |_| Ok(()))
            .expect("a page")
    }

    #[test]
    fn a_temporary_written_in_a_body_is_read_first_only_where_the_body_may_not_run() {
        use crate::recorded::conditional::Conditional;
        let write = test_launch("w", &[(5, Access::Write)]);
        let read = test_launch("r", &[(5, Access::Read)]);
        let node = |body: Vec<Entry>| Entry::Conditional {
            kind: Conditional::While { bound: 2 },
            flag: Span::whole(BufferId(9), 4),
            bodies: vec![body],
        };
        let len = 64;
        let inside = node(vec![write.clone(), read.clone()]);
        assert_eq!(
            read_first(std::slice::from_ref(&inside), BufferId(5), len),
            None
        );
        assert_eq!(
            read_first(&[inside.clone(), read.clone()], BufferId(5), len),
            Some(1)
        );
        assert_eq!(
            read_first(&[inside.clone(), write.clone()], BufferId(5), len),
            None
        );
        let reads = node(vec![read.clone(), write.clone()]);
        assert_eq!(
            read_first(&[write.clone(), reads.clone()], BufferId(5), len),
            None
        );
        assert_eq!(read_first(&[reads], BufferId(5), len), Some(0));
        let nested = node(vec![node(vec![read.clone()])]);
        assert_eq!(read_first(&[nested], BufferId(5), len), Some(0));
        let untouched = node(vec![test_launch("o", &[(6, Access::Write)])]);
        assert_eq!(read_first(&[untouched, read], BufferId(5), len), Some(1));
        let flag = node(vec![]);
        assert_eq!(
            read_first(&[flag], BufferId(9), 4),
            Some(0),
            "a flag is read"
        );
    }

    #[test]
    fn the_recorded_run_takes_what_the_warmup_dropped() {
        let mut pool: Pool<()> = Pool::new(4096);
        let mut temps = Temporaries::default();
        temps.reset();
        temps.warmup_allocated(BufferId(1), 64);
        temps.warmup_allocated(BufferId(2), 300);
        temps.warmup_allocated(BufferId(3), 50);
        temps.dropped(BufferId(1));
        temps.dropped(BufferId(3));
        temps.warmup_ended();
        temps.dropped(BufferId(2)); // after the warmup: kept by the body
        assert_eq!(temps.needed(), 512);
        assert!(temps.holding(512).is_none());
        temps.arm(arena(&mut pool, 512));
        let first = temps.take(BufferId(11), 64).expect("a temporary");
        assert!(temps.take(BufferId(12), 300).is_none(), "kept in warmup");
        let third = temps
            .take(BufferId(13), 50)
            .expect("the third, a temporary");
        assert_eq!(third.place().offset, 256, "after the first");
        assert!(temps.take(BufferId(14), 8).is_none(), "past the warmup");
        drop(third);
        assert!(first.is_temporary());
        assert_eq!((first.place().offset, first.len()), (0, 64));
        temps.dropped(BufferId(11));
        temps.dropped(BufferId(13));
        let log = vec![test_launch("fill", &[(11, Access::Write)])];
        let closed = temps.close(&log);
        assert_eq!((closed.taken.len(), closed.bytes), (2, 512));
        assert!(temps.take_kept().is_empty() && closed.read_first.is_none());
        assert_eq!(temps.arena_bytes(), 512, "the arena stays while held");
        assert!(temps.holding(512).is_some() && temps.holding(513).is_none());
        assert!(temps.unheld_arena().is_none(), "a graph cuts from it");
        drop(first);
        assert_eq!(temps.arena_bytes(), 512, "the stream's until let go");
        assert_eq!(temps.unheld_arena().map(|a| a.span()), Some(512));
        assert_eq!(temps.arena_bytes(), 0, "let go");
        assert!(temps.holding(1).is_none());
    }

    #[test]
    fn a_length_other_than_the_warmups_is_no_temporary() {
        let mut pool: Pool<()> = Pool::new(4096);
        let mut temps = Temporaries::default();
        temps.reset();
        temps.warmup_allocated(BufferId(1), 64);
        temps.dropped(BufferId(1));
        temps.warmup_ended();
        temps.arm(arena(&mut pool, 256));
        assert!(temps.take(BufferId(11), 60).is_none());
    }

    #[test]
    fn a_kept_temporary_retires_the_arena_and_a_read_one_is_named() {
        let mut pool: Pool<()> = Pool::new(4096);
        let mut temps = Temporaries::default();
        temps.reset();
        for id in 1..=3 {
            temps.warmup_allocated(BufferId(id), 64);
            temps.dropped(BufferId(id));
        }
        temps.warmup_ended();
        temps.arm(arena(&mut pool, 768));
        let slices: Vec<_> = (11..=13)
            .map(|id| temps.take(BufferId(id), 64).expect("a temporary"))
            .collect();
        let offsets: Vec<u64> = slices.iter().map(|s| s.place().offset).collect();
        assert_eq!(offsets, [0, 256, 512], "none reused inside a window");
        temps.dropped(BufferId(11));
        temps.dropped(BufferId(13));
        let log = vec![
            test_launch("w", &[(11, Access::Write)]),
            test_launch("rw", &[(13, Access::ReadWrite)]),
            test_launch("r", &[(12, Access::Read)]),
        ];
        let closed = temps.close(&log);
        let kept = temps.take_kept();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0], (BufferId(12), slices[1].place()));
        assert!(temps.take_kept().is_empty(), "taken once");
        assert_eq!(
            closed.read_first,
            Some((BufferId(12), 2)),
            "in issue order of temporaries"
        );
        assert_eq!(temps.arena_bytes(), 0, "retired");
    }

    #[test]
    fn only_a_write_of_every_byte_may_come_first() {
        let whole = Span::whole(BufferId(5), 64);
        let write = |span: Span, access| Entry::Launch {
            kernel: "k".into(),
            groups: [1, 1, 1],
            bindings: [(span, access)].into_iter().collect(),
            info: None,
            info_bytes: 0,
            param_bytes: 0,
        };
        let part = Span { len: 32, ..whole };
        assert_eq!(
            read_first(&[write(whole, Access::Write)], BufferId(5), 64),
            None
        );
        assert_eq!(
            read_first(&[Entry::Write { span: whole }], BufferId(5), 64),
            None
        );
        assert_eq!(
            read_first(&[write(part, Access::Write)], BufferId(5), 64),
            Some(0)
        );
        assert_eq!(
            read_first(&[write(whole, Access::Read)], BufferId(5), 64),
            Some(0)
        );
        let other = write(Span::whole(BufferId(6), 64), Access::Read);
        assert_eq!(
            read_first(
                &[other.clone(), write(whole, Access::ReadWrite)],
                BufferId(5),
                64
            ),
            Some(1)
        );
        assert_eq!(read_first(&[other], BufferId(5), 64), None, "never touched");
    }
}
