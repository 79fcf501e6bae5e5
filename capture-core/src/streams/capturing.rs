//! One stream's capture state: `None → Prepared(owner) → Recording(owner) →
//! None`, every transition checked, and what the open window has recorded.
//!
//! A refused transition changes nothing, so the caller can always make the
//! call the state expects next. `abort` returns to `None` from anywhere; it is
//! how every unwinding path (a driver that refused to begin, a window closed
//! before it opened) leaves the stream usable.

use std::any::Any;
use std::sync::Arc;
use std::thread::ThreadId;

use crate::error::Error;
use crate::hashing::FastSet;
use crate::ids::{BufferId, StreamId, WindowId};
use crate::kernels::span::Span;
use crate::memory::pool::SliceHandle;
use crate::recorded::conditional::Conditional;
use crate::recorded::entries::Entry;
use crate::streams::join::Join;

pub use crate::phase::Phase;

/// How `end` found the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The window that was recording.
    pub owner: WindowId,
    /// Who closed it.
    pub closer: WindowId,
}

impl Outcome {
    /// Closed by a caller that does not own it: closed all the same, but no
    /// graph may come out of it.
    pub fn is_abandoned(&self) -> bool {
        self.owner != self.closer
    }

    /// The refusal an abandoned window yields, carrying whatever had already
    /// doomed it so the caller sees both reasons.
    pub fn abandoned_error(&self, doomed: Option<Error>) -> Error {
        Error::Abandoned {
            window: self.owner,
            closer: self.closer,
            doomed: doomed.map(Into::into),
        }
    }
}

/// The capture state of one stream, and what its open window accumulated.
#[derive(Debug)]
pub struct StreamCapture {
    phase: Phase,
    /// The thread whose work the open recording takes: the one that called
    /// `begin`, or the one that adopted the window since.
    recorder: Option<ThreadId>,
    /// Buffers the recorded work writes, each once.
    written: Vec<BufferId>,
    written_seen: FastSet<BufferId>,
    /// Buffers the recorded work writes all of, each once.
    renewed: Vec<BufferId>,
    renewed_seen: FastSet<BufferId>,
    /// Buffers the recorded work reads, each once.
    read: Vec<BufferId>,
    read_seen: FastSet<BufferId>,
    /// Every device slice the recorded work touches, allocated in the window
    /// or before it, each once.
    touched: Vec<SliceHandle>,
    touched_seen: FastSet<BufferId>,
    /// Every kernel the recorded work launches, each once.
    kernels: Vec<KeptKernel>,
    /// Streams joined to the open window and not joined back.
    joins: Vec<(StreamId, Arc<Join>)>,
    kernels_seen: FastSet<usize>,
    /// Every operation recorded, in order.
    log: Vec<Entry>,
    /// Operations the last window recorded: the next reserves room for as
    /// many at once, instead of growing its log step by step.
    last_len: usize,
    /// The first operation inside the window that failed or was skipped.
    failure: Option<Error>,
    /// Conditionals open in the recording, outermost first: while one is,
    /// `log` is its current body's.
    open: Vec<OpenConditional>,
}

/// A conditional node being recorded.
#[derive(Debug)]
struct OpenConditional {
    kind: Conditional,
    flag: Span,
    /// The log of the body (or window) it was opened in.
    outer: Vec<Entry>,
    /// Its bodies recorded so far.
    bodies: Vec<Vec<Entry>>,
}

/// A conditional whose bodies were all recorded, for its entry.
#[derive(Debug)]
pub struct ClosedConditional {
    /// Its kind.
    pub kind: Conditional,
    /// Its flag's bytes.
    pub flag: Span,
    /// Its bodies' logs.
    pub bodies: Vec<Vec<Entry>>,
}

impl Default for StreamCapture {
    fn default() -> Self {
        Self {
            phase: Phase::None,
            recorder: None,
            written: Vec::new(),
            written_seen: FastSet::default(),
            renewed: Vec::new(),
            renewed_seen: FastSet::default(),
            read: Vec::new(),
            read_seen: FastSet::default(),
            touched: Vec::new(),
            touched_seen: FastSet::default(),
            kernels: Vec::new(),
            kernels_seen: FastSet::default(),
            joins: Vec::new(),
            log: Vec::new(),
            last_len: 0,
            failure: None,
            open: Vec::new(),
        }
    }
}

/// What a closed window recorded.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Buffers the recorded work writes.
    pub written: Vec<BufferId>,
    /// Buffers it writes all of (through no view only), which a replay that
    /// succeeds leaves holding fresh bytes.
    pub renewed: Vec<BufferId>,
    /// Buffers the recorded work reads.
    pub read: Vec<BufferId>,
    /// Device slices the recorded work touches.
    pub touched: Vec<SliceHandle>,
    /// Kernels the recorded work launches.
    pub kernels: Vec<KeptKernel>,
    /// Every operation recorded, in order.
    pub log: Vec<Entry>,
}

/// A kernel a recording launched, held for as long as the recorded work
/// may run (rule 19): a backend may unload its code when the last hold goes.
pub type KeptKernel = Arc<dyn Any + Send + Sync>;

impl StreamCapture {
    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether a window is open, prepared or recording.
    pub fn is_active(&self) -> bool {
        self.phase != Phase::None
    }

    /// Whether the driver is recording.
    pub fn is_recording(&self) -> bool {
        matches!(self.phase, Phase::Recording(_))
    }

    /// `None → Prepared(window)`.
    pub fn prepare(&mut self, window: WindowId) -> Result<(), String> {
        match self.phase {
            Phase::None => {
                self.phase = Phase::Prepared(window);
                Ok(())
            }
            Phase::Prepared(open) => Err(format!("{open} is already prepared")),
            Phase::Recording(open) => Err(format!("{open} is recording")),
        }
    }

    /// `Prepared(window) → Recording(window)`, recording `recorder`'s work.
    pub fn begin(&mut self, window: WindowId, recorder: ThreadId) -> Result<(), String> {
        match self.phase {
            Phase::Prepared(open) if open == window => {
                self.phase = Phase::Recording(window);
                self.recorder = Some(recorder);
                self.log.reserve(self.last_len);
                Ok(())
            }
            Phase::Prepared(open) => Err(format!("{open} is prepared, not {window}")),
            Phase::None => Err("no window is prepared".into()),
            Phase::Recording(open) => Err(format!("{open} is already recording")),
        }
    }

    /// From here the recording takes `recorder`'s work, and no other
    /// thread's; only the window's token can hand it over.
    pub fn adopt(&mut self, window: WindowId, recorder: ThreadId) -> Result<(), String> {
        match self.phase {
            Phase::Recording(open) if open == window => {
                self.recorder = Some(recorder);
                Ok(())
            }
            Phase::Recording(open) => Err(format!("{open} is recording, not {window}")),
            Phase::Prepared(open) => Err(format!("{open} was prepared but never began recording")),
            Phase::None => Err("no window is open".into()),
        }
    }

    /// Whether work issued by `thread` may enter the open recording: only
    /// the recorder's may. Always true when not recording.
    pub fn records_for(&self, thread: ThreadId) -> bool {
        !self.is_recording() || self.recorder == Some(thread)
    }

    /// The recording window, if the stream records.
    pub fn recording_window(&self) -> Option<WindowId> {
        match self.phase {
            Phase::Recording(window) => Some(window),
            _ => None,
        }
    }

    /// `Recording(owner) → None`, closed by `closer`.
    pub fn end(&mut self, closer: WindowId) -> Result<Outcome, String> {
        match self.phase {
            Phase::Recording(owner) => {
                self.phase = Phase::None;
                self.recorder = None;
                Ok(Outcome { owner, closer })
            }
            Phase::Prepared(open) => Err(format!("{open} was prepared but never began recording")),
            Phase::None => Err("no window is open".into()),
        }
    }

    /// Back to `None` from anywhere, forgetting what was recorded.
    pub fn abort(&mut self) {
        self.phase = Phase::None;
        self.recorder = None;
        let _unjoined = self.close_joins();
        self.clear();
    }

    /// `stream` joined the window: its work is recorded here until it is
    /// joined back.
    pub fn join(&mut self, stream: StreamId, join: Arc<Join>) {
        self.joins.push((stream, join));
    }

    /// `stream` was joined back: its joins close, and what its refused
    /// calls left dooms the window.
    pub fn join_back(&mut self, stream: StreamId) {
        let mut failed = None;
        self.joins.retain(|(joined, join)| {
            if *joined != stream {
                return true;
            }
            join.close();
            failed = failed.take().or_else(|| join.take_failure());
            false
        });
        if let Some(err) = failed {
            self.record_failure(err);
        }
    }

    /// Close every join: the window is closing. The first stream that was
    /// never joined back makes the window's refusal, after any call its
    /// joined streams refused.
    pub fn close_joins(&mut self) -> Option<StreamId> {
        let first = self.joins.first().map(|(stream, _)| *stream);
        for (_, join) in std::mem::take(&mut self.joins) {
            join.close();
            if let Some(err) = join.take_failure() {
                self.record_failure(err);
            }
        }
        first
    }

    /// The recorded work writes `buffer`: all of it when `whole`. A write
    /// inside a conditional's body may not run, so it renews nothing.
    pub fn record_write(&mut self, buffer: BufferId, whole: bool) {
        if self.written_seen.insert(buffer) {
            self.written.push(buffer);
        }
        if whole && self.open.is_empty() && self.renewed_seen.insert(buffer) {
            self.renewed.push(buffer);
        }
    }

    /// The recorded work reads `buffer`.
    pub fn record_read(&mut self, buffer: BufferId) {
        if self.read_seen.insert(buffer) {
            self.read.push(buffer);
        }
    }

    /// The recorded work touches `slice`; the graph must pin it.
    pub fn record_touch(&mut self, slice: &SliceHandle) {
        if self.touched_seen.insert(slice.id()) {
            self.touched.push(slice.clone());
        }
    }

    /// An operation was recorded.
    pub fn record_entry(&mut self, entry: Entry) {
        self.log.push(entry);
    }

    /// An operation inside the window failed or was skipped. The first one
    /// is kept: it is the one that explains the rest.
    pub fn record_failure(&mut self, error: Error) {
        self.failure.get_or_insert(error);
    }

    /// Hold `kernel`, which the recorded work launches.
    pub fn record_kernel<K: Send + Sync + 'static>(&mut self, kernel: &Arc<K>) {
        if self.kernels_seen.insert(Arc::as_ptr(kernel).addr()) {
            self.kernels.push(kernel.clone());
        }
    }

    /// Open a conditional reading `flag`: what is recorded from here goes
    /// into its first body.
    pub fn open_conditional(&mut self, kind: Conditional, flag: Span) {
        let outer = std::mem::take(&mut self.log);
        self.open.push(OpenConditional {
            kind,
            flag,
            outer,
            bodies: Vec::with_capacity(kind.bodies()),
        });
    }

    /// The innermost open conditional's body is recorded: what is recorded
    /// from here goes into its next one.
    pub fn next_body(&mut self) {
        if let Some(open) = self.open.last_mut() {
            open.bodies.push(std::mem::take(&mut self.log));
        }
    }

    /// Close the innermost open conditional: its last body is recorded, and
    /// the log is its outer one again, where the caller logs its entry.
    pub fn close_conditional(&mut self) -> Option<ClosedConditional> {
        let mut open = self.open.pop()?;
        open.bodies
            .push(std::mem::replace(&mut self.log, open.outer));
        Some(ClosedConditional {
            kind: open.kind,
            flag: open.flag,
            bodies: open.bodies,
        })
    }

    /// Conditionals open around what is recorded now: 0 outside any body.
    pub fn depth(&self) -> usize {
        self.open.len()
    }

    /// The operations the open recording logged so far.
    pub fn log(&self) -> &[Entry] {
        &self.log
    }

    /// Operations logged so far by the open recording.
    pub fn logged(&self) -> usize {
        self.log.len()
    }

    /// The first failure inside the window, if any.
    pub fn take_failure(&mut self) -> Option<Error> {
        self.failure.take()
    }

    /// Everything the window recorded, leaving nothing behind: a
    /// conditional still open is closed where it stands.
    pub fn take_recorded(&mut self) -> Recorded {
        while let Some(closed) = self.close_conditional() {
            self.log.push(Entry::Conditional {
                kind: closed.kind,
                flag: closed.flag,
                bodies: closed.bodies,
            });
        }
        self.written_seen.clear();
        self.renewed_seen.clear();
        self.read_seen.clear();
        self.touched_seen.clear();
        self.kernels_seen.clear();
        if !self.log.is_empty() {
            self.last_len = self.log.len();
        }
        // Room reserved for a longer recording than this one is not kept
        // for the graph's life.
        if self.log.capacity() > 2 * self.log.len() {
            self.log.shrink_to_fit();
        }
        Recorded {
            written: std::mem::take(&mut self.written),
            renewed: std::mem::take(&mut self.renewed),
            read: std::mem::take(&mut self.read),
            touched: std::mem::take(&mut self.touched),
            kernels: std::mem::take(&mut self.kernels),
            log: std::mem::take(&mut self.log),
        }
    }

    fn clear(&mut self) {
        self.open.clear();
        drop(self.take_recorded());
        self.failure = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W1: WindowId = WindowId(1);
    const W2: WindowId = WindowId(2);

    fn me() -> ThreadId {
        std::thread::current().id()
    }

    fn other() -> ThreadId {
        std::thread::spawn(|| std::thread::current().id())
            .join()
            .expect("a thread")
    }

    fn write(buffer: u64) -> Entry {
        Entry::Write {
            span: crate::kernels::span::Span::whole(BufferId(buffer), 4),
        }
    }

    #[test]
    fn a_window_reserves_the_last_ones_log_and_a_graph_keeps_no_spare() {
        let mut state = StreamCapture::default();
        state.prepare(W1).expect("prepare");
        state.begin(W1, me()).expect("begin");
        (0..100).for_each(|i| state.record_entry(write(i)));
        state.end(W1).expect("end");
        assert_eq!(state.take_recorded().log.len(), 100);
        state.abort();
        state.prepare(W2).expect("prepare again");
        state.begin(W2, me()).expect("begin again");
        assert!(
            state.log.capacity() >= 100,
            "room for the last window's log"
        );
        state.record_entry(write(1));
        let small = state.take_recorded().log;
        assert_eq!(small.len(), 1);
        assert!(
            small.capacity() <= 2,
            "{} kept for one entry",
            small.capacity()
        );
    }

    #[test]
    fn only_the_recorder_records() {
        let mut state = StreamCapture::default();
        let (a, b) = (me(), other());
        assert!(state.records_for(b), "nothing records");
        state.prepare(W1).expect("prepare");
        assert!(state.records_for(b), "warmup runs for real");
        assert!(state.adopt(W1, b).is_err(), "nothing to adopt yet");
        state.begin(W1, a).expect("begin");
        assert!(state.records_for(a));
        assert!(!state.records_for(b));
        assert_eq!(state.recording_window(), Some(W1));
        assert!(state.adopt(W2, b).is_err(), "another window's token");
        assert!(!state.records_for(b));
        state.adopt(W1, b).expect("the token hands it over");
        assert!(state.records_for(b));
        assert!(!state.records_for(a));
        state.end(W1).expect("end");
        assert!(state.records_for(a) && state.records_for(b));
        assert_eq!(state.recording_window(), None);
        assert!(state.adopt(W1, a).is_err(), "closed");
        state.prepare(W2).expect("prepare");
        state.begin(W2, a).expect("begin");
        state.abort();
        assert!(state.records_for(b), "abort forgets the recorder");
    }

    #[test]
    fn the_happy_path() {
        let mut state = StreamCapture::default();
        state.prepare(W1).expect("from None");
        state.begin(W1, me()).expect("from Prepared");
        assert!(state.is_recording());
        let outcome = state.end(W1).expect("from Recording");
        assert!(!outcome.is_abandoned());
        assert_eq!(state.phase(), Phase::None);
    }

    #[test]
    fn refused_transitions_change_nothing() {
        let mut state = StreamCapture::default();
        assert!(state.begin(W1, me()).is_err());
        assert!(state.end(W1).is_err());
        assert_eq!(state.phase(), Phase::None);

        state.prepare(W1).expect("from None");
        assert!(state.prepare(W2).is_err());
        assert!(state.begin(W2, me()).is_err(), "another window's begin");
        assert!(state.end(W1).is_err(), "not recording yet");
        assert_eq!(state.phase(), Phase::Prepared(W1));

        state
            .begin(W1, me())
            .expect("the expected call still works");
        assert!(state.prepare(W2).is_err());
        assert!(state.begin(W1, me()).is_err());
        assert_eq!(state.phase(), Phase::Recording(W1));
    }

    #[test]
    fn a_foreign_close_is_a_close() {
        let mut state = StreamCapture::default();
        state.prepare(W1).expect("prepare");
        state.begin(W1, me()).expect("begin");
        let outcome = state.end(W2).expect("closed all the same");
        assert!(outcome.is_abandoned());
        assert!(!state.is_active());
        let err = outcome.abandoned_error(Some(Error::EmptyBuffer));
        assert!(err.to_string().contains("does not own it"));
        assert!(err.to_string().contains("also doomed"));
    }

    #[test]
    fn a_join_keeps_only_its_recorders_refusals_and_closes_once() {
        let join = Join::new(StreamId(2), W1, me());
        assert!(join.is_open());
        std::thread::scope(|scope| {
            scope.spawn(|| join.refused(&Error::Poisoned));
        });
        assert_eq!(join.take_failure(), None, "another thread's refusal");
        join.refused(&Error::EmptyBuffer);
        join.refused(&Error::Poisoned);
        assert_eq!(join.take_failure(), Some(Error::EmptyBuffer), "the first");
        assert_eq!(join.take_failure(), None, "taken once");
        join.close();
        assert!(!join.is_open());
    }

    #[test]
    fn joins_close_when_joined_back_or_when_the_window_closes() {
        let mut state = StreamCapture::default();
        let (a, b) = (StreamId(2), StreamId(3));
        let (join_a, join_b) = (
            Arc::new(Join::new(a, W1, me())),
            Arc::new(Join::new(b, W1, me())),
        );
        state.join(a, join_a.clone());
        state.join(b, join_b.clone());
        join_a.refused(&Error::EmptyBuffer);
        state.join_back(a);
        assert!(!join_a.is_open() && join_b.is_open(), "only a joined back");
        assert_eq!(
            state.take_failure(),
            Some(Error::EmptyBuffer),
            "a's refusal dooms"
        );
        join_b.refused(&Error::Poisoned);
        assert_eq!(state.close_joins(), Some(b), "b was never joined back");
        assert!(!join_b.is_open());
        assert_eq!(state.take_failure(), Some(Error::Poisoned));
        assert_eq!(state.close_joins(), None, "none left");
    }

    #[test]
    fn bodies_are_logs_of_their_own_and_renew_nothing() {
        let mut state = StreamCapture::default();
        state.prepare(W1).expect("prepare");
        state.begin(W1, me()).expect("begin");
        state.record_entry(write(1));
        let flag = Span::whole(BufferId(9), 4);
        state.open_conditional(Conditional::IfElse, flag);
        assert_eq!(state.depth(), 1);
        assert_eq!(state.logged(), 0, "the body's own log");
        state.record_entry(write(2));
        state.record_write(BufferId(2), true);
        state.next_body();
        state.open_conditional(Conditional::While { bound: 3 }, flag);
        assert_eq!(state.depth(), 2);
        state.record_entry(write(3));
        let inner = state.close_conditional().expect("inner");
        assert_eq!(inner.bodies, vec![vec![write(3)]]);
        state.record_entry(Entry::Conditional {
            kind: inner.kind,
            flag,
            bodies: inner.bodies,
        });
        let outer = state.close_conditional().expect("outer");
        assert_eq!(outer.kind, Conditional::IfElse);
        assert_eq!(outer.bodies.len(), 2);
        assert_eq!(outer.bodies[0], vec![write(2)]);
        assert_eq!(state.depth(), 0);
        assert_eq!(state.log(), [write(1)], "the window's log again");
        assert!(state.close_conditional().is_none());
        state.record_write(BufferId(4), true);
        state.open_conditional(Conditional::If, flag);
        state.record_entry(write(5));
        let recorded = state.take_recorded();
        assert_eq!(recorded.written, vec![BufferId(2), BufferId(4)]);
        assert_eq!(recorded.renewed, vec![BufferId(4)], "only outside bodies");
        assert_eq!(recorded.log.len(), 2, "the open one closed where it stood");
        assert_eq!(state.depth(), 0);
    }

    #[test]
    fn the_log_so_far_is_what_was_recorded() {
        let mut state = StreamCapture::default();
        state.record_entry(write(1));
        state.record_entry(write(2));
        assert_eq!(state.logged(), 2);
        assert_eq!(state.log(), [write(1), write(2)]);
    }

    #[test]
    fn a_log_is_shrunk_only_past_twice_its_length() {
        let recorded = |entries: u64| {
            let mut state = StreamCapture::default();
            for buffer in 0..entries {
                state.record_entry(write(buffer));
            }
            let capacity = state.log.capacity();
            (capacity, state.take_recorded().log.capacity())
        };
        // A vector grows to four, then doubles.
        assert_eq!(recorded(1), (4, 1), "four for one: shrunk");
        assert_eq!(recorded(2), (4, 4), "four for two: kept");
        assert_eq!(recorded(5), (8, 8), "eight for five: kept");
    }

    #[test]
    fn recordings_are_deduplicated_and_drained() {
        let mut state = StreamCapture::default();
        state.record_write(BufferId(1), false);
        state.record_write(BufferId(1), true);
        state.record_write(BufferId(2), false);
        state.record_read(BufferId(2));
        state.record_failure(Error::EmptyBuffer);
        state.record_failure(Error::Poisoned);
        assert_eq!(state.take_failure(), Some(Error::EmptyBuffer));
        let recorded = state.take_recorded();
        assert_eq!(recorded.written, vec![BufferId(1), BufferId(2)]);
        assert_eq!(recorded.renewed, vec![BufferId(1)], "2 only in part");
        assert_eq!(recorded.read, vec![BufferId(2)]);
        assert!(state.take_recorded().written.is_empty());
    }

    #[test]
    fn abort_returns_to_none_from_anywhere() {
        let mut state = StreamCapture::default();
        state.prepare(W1).expect("prepare");
        state.record_failure(Error::EmptyBuffer);
        state.abort();
        assert_eq!(state.phase(), Phase::None);
        assert_eq!(state.take_failure(), None, "abort forgets the failure");
        state.prepare(W1).expect("usable again");
        state.begin(W1, me()).expect("begin");
        state.abort();
        assert_eq!(state.phase(), Phase::None);
    }
}
