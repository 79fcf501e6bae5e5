//! The operations a model program is made of, how they are drawn at random,
//! and how a program is written out as code a test can paste.
//!
//! An operation names streams, buffers, flags and graphs by small numbers
//! that pick among those alive when it runs (modulo their count), so every
//! part of a program is a program too: a failing one shrinks by dropping
//! operations.

use std::fmt;

/// Which bytes of a buffer an operation binds: all of it, or one of its two
/// halves through a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole buffer.
    Whole,
    /// Its first half.
    Low,
    /// Its second half.
    High,
}

/// A buffer and the part of it bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Which live buffer.
    pub buffer: u8,
    /// Which bytes of it.
    pub part: Part,
}

/// The kinds of conditional.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    /// `if`.
    If,
    /// `if/else`.
    IfElse,
    /// `while`, at most this many iterations.
    While(u32),
}

/// What a capture body, a conditional's body, or eager work on one stream
/// issues: the stream is the one the body runs on.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// `fill` builtin.
    Fill(Target, f32),
    /// `add` builtin: the first += the second.
    Add(Target, Target),
    /// `copy` builtin: from the first into the second.
    Copy(Target, Target),
    /// `axpy` builtin: the second += a * the first.
    Axpy(Target, Target, f32),
    /// The workload's `scale` kernel: x = x * a + b, parameters by value.
    Scale(Target, f32, f32),
    /// The workload's `countdown` kernel on a buffer's first element and
    /// one of the stream's two flags.
    Countdown(u8, u8),
    /// A launch that does not match its kernel (a binding too many).
    Mismatch(Target),
    /// A builtin over more elements than its buffer holds.
    TooLong(Target),
    /// A host write of the whole buffer (a copy).
    Write(u8, f32),
    /// A buffer allocated, filled, added into a target and dropped inside
    /// the work: a temporary of a capture.
    Temporary(Target, f32),
    /// A conditional on one of the stream's two flags.
    Conditional(Cond, u8, Vec<Vec<Work>>),
    /// A conditional on another stream's flag, or a short one.
    BadFlag,
    /// The host sets one of the stream's two flags.
    SetFlag(u8, u32),
    /// `wait(stream, other)`: inside a window, a join of a stream that never
    /// forked (refused), inside a body a wait across its edge (refused).
    WaitFor(u8),
    /// Another stream forks from this one (`wait(other, stream)`), runs
    /// the launches on itself (recorded into the window inside one), and
    /// joins back (`wait(stream, other)`): inside a body, the fork is
    /// refused.
    ForkJoin(u8, Vec<Work>),
    /// A conditional on another client's flag (refused).
    ForeignFlag,
    /// Work whose error the body ignores and goes on: a refusal inside a
    /// window dooms it all the same.
    Ignore(Box<Work>),
    /// Work that may bind any stream's buffers, inside a window too.
    Shared(Box<Work>),
    /// A buffer's handle dropped: at once eagerly, at the end of the
    /// recorded pass inside a window (the warmup keeps it, so that both
    /// passes issue the same work).
    DropBuffer(u8),
    /// A conditional whose node the driver refuses to create.
    RefusedConditional,
    /// A graph destroyed through the client: at once eagerly, in the
    /// recorded pass inside a window (deferred then until it closes).
    DestroyGraph(u8),
    /// A foreign operation copying the first into the second, where the
    /// backend has foreign operations: a `copy` to the bookkeeping.
    ForeignCopy(Target, Target),
    /// A foreign operation filling the target with [`FOREIGN_FILL`].
    ForeignFill(Target),
    /// A foreign operation whose code fails, where the backend runs that
    /// code while recording: a refused call now, or inside a window the
    /// graph's making refused.
    ForeignFail(Target),
}

/// The value [`Work::ForeignFill`] fills with.
pub const FOREIGN_FILL: f32 = 3.0;

/// A primitive whose next call an operation makes fail, where the model
/// says what its failure leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The driver's `begin`: the capture is refused, its warmup stays.
    Begin,
    /// `instantiate`: the recording is claimed.
    Instantiate,
    /// `update` of a re-capture: the old graph stays, nothing is claimed.
    Update,
    /// `upload`: best effort, counted.
    Upload,
}

/// How a capture's window is opened and closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `Client::capture`.
    OneCall,
    /// `prepare`, the warmup, `begin`, the recorded run, `instantiate`.
    ThreeStep,
    /// The one-call form whose body fails in its recorded run.
    Failing,
    /// The one-call form whose body panics in its recorded run.
    Panicking,
}

/// One operation of a program.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A new stream, with its flag.
    CreateStream,
    /// A raw stream of the device, adopted.
    AdoptStream,
    /// A stream destroyed.
    DestroyStream(u8),
    /// A buffer allocated on a stream (contents unspecified).
    Allocate(u8),
    /// A buffer created on a stream holding a value.
    Create(u8, f32),
    /// Memory made outside the library, imported on a stream.
    Import(u8, f32),
    /// A buffer's handle dropped.
    DropBuffer(u8),
    /// A host write of a whole buffer.
    Write(u8, f32),
    /// A write of the wrong size.
    WriteWrongSize(u8),
    /// A read of a buffer, or of a view of it.
    Read(Target),
    /// `sync`.
    Sync(u8),
    /// `trim`.
    Trim(u8),
    /// `usage`.
    Usage(u8),
    /// `wait(first, second)`.
    Wait(u8, u8),
    /// Work issued eagerly on a stream.
    Eager(u8, Work),
    /// A capture of work on a stream into a graph.
    Capture(u8, Style, Vec<Work>),
    /// A graph captured again, updated: by `Client::recapture` with a body
    /// that fails in its recorded run where the style says so.
    Recapture(u8, Style, Vec<Work>),
    /// A graph captured again from the work of its last good capture:
    /// the same shape, updated in place where the driver can.
    RecaptureSame(u8),
    /// A graph replayed.
    Replay(u8),
    /// A graph replayed by its id.
    ReplayId(u8),
    /// A graph's handle dropped.
    DropGraph(u8),
    /// A graph destroyed through the client.
    Destroy(u8),
    /// The next call of the driver's launch fails.
    FailNextLaunch,
    /// The next replay the driver is asked for fails.
    FailNextReplay,
    /// Two threads at once, each launching on a stream of its own: the
    /// first on its stream's buffers; the second, once the first is done
    /// issuing, writes its own stream's buffers from either's.
    Threads(u8, u8, Vec<Work>, Vec<Work>),
    /// `GraphCache::run` on a stream's cache (two graphs at most): a key,
    /// a fingerprint, and the step.
    Cached(u8, u8, u8, Vec<Work>),
    /// `Client::conditionals` on a stream.
    Conditionals(u8),
    /// The user kernels dropped and built again; graphs keep the old ones.
    ReloadKernels,
    /// The next call of a primitive fails.
    FailNext(Fault),
    /// A write whose copy the driver refuses.
    WriteFailing(u8, f32),
    /// A sync whose fence the driver refuses.
    SyncFailing(u8),
    /// Eager work with the next event recorded (`false`) or waited for
    /// (`true`) refused.
    EventFailing(u8, bool, Work),
}

impl Op {
    /// A name per kind, for counting kinds.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::CreateStream => "create stream",
            Op::AdoptStream => "adopt stream",
            Op::DestroyStream(_) => "destroy stream",
            Op::Allocate(_) => "allocate",
            Op::Create(..) => "create",
            Op::Import(..) => "import",
            Op::DropBuffer(_) => "drop buffer",
            Op::Write(..) => "write",
            Op::WriteWrongSize(_) => "write wrong size",
            Op::Read(_) => "read",
            Op::Sync(_) => "sync",
            Op::Trim(_) => "trim",
            Op::Usage(_) => "usage",
            Op::Wait(..) => "wait",
            Op::Eager(_, work) => work.kind(),
            Op::Capture(_, Style::OneCall, _) => "capture",
            Op::Capture(_, Style::ThreeStep, _) => "capture in three steps",
            Op::Capture(_, Style::Failing, _) => "capture failing",
            Op::Capture(_, Style::Panicking, _) => "capture panicking",
            Op::Recapture(..) => "recapture",
            Op::RecaptureSame(_) => "recapture the same work",
            Op::Replay(_) => "replay",
            Op::ReplayId(_) => "replay by id",
            Op::DropGraph(_) => "drop graph",
            Op::Destroy(_) => "destroy graph",
            Op::FailNextLaunch => "fail next launch",
            Op::FailNextReplay => "fail next replay",
            Op::Threads(..) => "threads",
            Op::Cached(..) => "graph cache",
            Op::Conditionals(_) => "conditionals query",
            Op::ReloadKernels => "drop kernels",
            Op::FailNext(Fault::Begin) => "fail next begin",
            Op::FailNext(Fault::Instantiate) => "fail next instantiate",
            Op::FailNext(Fault::Update) => "fail next update",
            Op::FailNext(Fault::Upload) => "fail next upload",
            Op::WriteFailing(..) => "write failing",
            Op::SyncFailing(_) => "sync failing",
            Op::EventFailing(_, false, _) => "event record failing",
            Op::EventFailing(_, true, _) => "event wait failing",
        }
    }

    /// Every kind of operation in `self`, the work inside it included.
    pub fn kinds(&self, out: &mut Vec<&'static str>) {
        out.push(self.kind());
        if let Op::Capture(_, _, works) | Op::Recapture(_, _, works) | Op::Cached(.., works) = self
        {
            for work in works {
                work.kinds(out);
            }
        }
        if let Op::Eager(_, work) | Op::EventFailing(_, _, work) = self {
            work.kinds(out);
        }
    }
}

impl Work {
    /// The buffer a launch reads that it does not write, if any.
    pub fn read_target(&self) -> Option<Target> {
        match self {
            Work::Add(_, y) | Work::Axpy(y, ..) => Some(*y),
            Work::Copy(x, _) | Work::ForeignCopy(x, _) => Some(*x),
            _ => None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Work::Fill(..) => "fill",
            Work::Add(..) => "add",
            Work::Copy(..) => "copy",
            Work::Axpy(..) => "axpy",
            Work::Scale(..) => "scale kernel",
            Work::Countdown(..) => "countdown kernel",
            Work::Mismatch(_) => "mismatched launch",
            Work::TooLong(_) => "builtin too long",
            Work::Write(..) => "write in work",
            Work::Temporary(..) => "temporary",
            Work::Conditional(Cond::If, ..) => "if",
            Work::Conditional(Cond::IfElse, ..) => "if/else",
            Work::Conditional(Cond::While(_), ..) => "while",
            Work::BadFlag => "bad flag",
            Work::SetFlag(..) => "set flag",
            Work::WaitFor(_) => "wait in work",
            Work::ForkJoin(..) => "fork and join",
            Work::ForeignFlag => "another client's flag",
            Work::Ignore(_) => "ignored error",
            Work::Shared(_) => "another stream's buffers",
            Work::DropBuffer(_) => "drop buffer in work",
            Work::DestroyGraph(_) => "destroy graph in work",
            Work::RefusedConditional => "refused conditional node",
            Work::ForeignCopy(..) => "foreign copy",
            Work::ForeignFill(_) => "foreign fill",
            Work::ForeignFail(_) => "failing foreign operation",
        }
    }

    fn kinds(&self, out: &mut Vec<&'static str>) {
        out.push(self.kind());
        if let Work::Conditional(_, _, bodies) = self {
            for work in bodies.iter().flatten() {
                work.kinds(out);
            }
        }
        if let Work::ForkJoin(_, works) = self {
            for work in works {
                work.kinds(out);
            }
        }
        if let Work::Ignore(work) | Work::Shared(work) = self {
            work.kinds(out);
        }
    }
}

/// A small deterministic generator (xorshift64*).
pub struct Draw(u64);

impl Draw {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (at least 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.bits() % n.max(1)
    }

    /// A small index, for picking among live entities.
    pub fn index(&mut self) -> u8 {
        self.below(8) as u8
    }

    /// Whether an event of `percent` in a hundred happens.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A small integer-valued float, from enough of them that a value
    /// (and so a launch's info bytes) is often met for the first time.
    pub fn value(&mut self) -> f32 {
        self.below(61) as f32 - 30.0
    }

    fn part(&mut self) -> Part {
        match self.below(4) {
            0 => Part::Low,
            1 => Part::High,
            _ => Part::Whole,
        }
    }

    fn target(&mut self) -> Target {
        Target {
            buffer: self.index(),
            part: self.part(),
        }
    }

    /// A fill's value inside a body: from a few of their own, so that a
    /// body often passes info bytes nothing before it passed.
    fn body_value(&mut self, depth: u32) -> f32 {
        if depth > 0 {
            100.0 + self.below(2) as f32
        } else {
            self.value()
        }
    }

    /// Inside bodies, mostly whole buffers: the same info bytes more often.
    fn body_target(&mut self, depth: u32) -> Target {
        let mut target = self.target();
        if depth > 0 && self.chance(70) {
            target.part = Part::Whole;
        }
        target
    }

    fn flag(&mut self) -> u8 {
        self.below(2) as u8
    }

    /// Work for a body `depth` conditionals deep.
    pub fn work(&mut self, depth: u32) -> Work {
        // Inside a body, fills first: info met first inside bodies is where
        // conditionals meet the info cache.
        let roll = if depth > 0 && self.chance(30) {
            0
        } else {
            self.below(100)
        };
        match roll {
            0..=13 => Work::Fill(self.body_target(depth), self.body_value(depth)),
            14..=27 => Work::Add(self.target(), self.target()),
            28..=34 => Work::Copy(self.target(), self.target()),
            35..=36 => Work::ForeignCopy(self.target(), self.target()),
            37 => Work::ForeignFill(self.body_target(depth)),
            38..=45 => Work::Axpy(self.target(), self.target(), self.below(3) as f32 - 1.0),
            46..=53 => Work::Scale(self.target(), self.below(4) as f32 - 1.0, self.value()),
            54..=61 => Work::Countdown(self.index(), self.flag()),
            62..=63 => Work::Mismatch(self.target()),
            64..=65 => Work::TooLong(self.target()),
            66..=69 => Work::Write(self.index(), self.value()),
            70..=74 => Work::Temporary(self.target(), self.value()),
            75..=76 => Work::BadFlag,
            82..=84 => Work::Ignore(Box::new(match self.below(7) {
                0 => Work::BadFlag,
                1 => Work::ForeignFlag,
                2 => Work::Mismatch(self.target()),
                3 => Work::TooLong(self.target()),
                4 => Work::ForkJoin(self.index(), Vec::new()),
                5 => Work::ForeignFail(self.target()),
                _ => Work::WaitFor(self.index()),
            })),
            87 => Work::ForkJoin(self.index(), self.branch()),
            88 => match self.below(5) {
                0 => Work::DropBuffer(self.index()),
                3 => Work::DestroyGraph(self.index()),
                4 => Work::ForeignFail(self.target()),
                1 => Work::RefusedConditional,
                _ => Work::Shared(Box::new(match self.below(3) {
                    0 => Work::Add(self.target(), self.target()),
                    1 => Work::Copy(self.target(), self.target()),
                    _ => Work::Fill(self.target(), self.value()),
                })),
            },
            85 => Work::WaitFor(self.index()),
            86 => Work::ForeignFlag,
            77..=81 => Work::SetFlag(self.flag(), self.below(3) as u32),
            _ if depth < 2 => {
                let cond = match self.below(3) {
                    0 => Cond::If,
                    1 => Cond::IfElse,
                    _ => Cond::While(self.below(4) as u32),
                };
                let bodies = if cond == Cond::IfElse { 2 } else { 1 };
                let bodies = (0..bodies).map(|_| self.works(depth + 1, 3)).collect();
                Work::Conditional(cond, self.flag(), bodies)
            }
            _ => Work::Fill(self.target(), self.value()),
        }
    }

    /// A forked stream's launches: on its own buffers, or now and then on
    /// any stream's.
    fn branch(&mut self) -> Vec<Work> {
        (0..self.below(4))
            .map(|_| {
                let launch = match self.below(5) {
                    0 => Work::Fill(self.target(), self.value()),
                    1 => Work::Add(self.target(), self.target()),
                    2 => Work::Copy(self.target(), self.target()),
                    3 => Work::Axpy(self.target(), self.target(), 1.0),
                    _ => Work::Scale(self.target(), 2.0, self.value()),
                };
                if self.chance(25) {
                    Work::Shared(Box::new(launch))
                } else {
                    launch
                }
            })
            .collect()
    }

    /// A capture's work: often holding conditionals side by side.
    fn capture_works(&mut self) -> Vec<Work> {
        let mut works = self.works(0, 5);
        while self.chance(40) {
            let cond = match self.below(3) {
                0 | 1 => Cond::If,
                _ => Cond::IfElse,
            };
            let bodies = if cond == Cond::IfElse { 2 } else { 1 };
            let bodies = (0..bodies).map(|_| self.works(1, 3)).collect();
            let at = self.below(works.len() as u64 + 1) as usize;
            works.insert(at, Work::Conditional(cond, self.flag(), bodies));
        }
        works
    }

    /// Up to `most` pieces of work.
    pub fn works(&mut self, depth: u32, most: u64) -> Vec<Work> {
        let n = 1 + self.below(most);
        (0..n).map(|_| self.work(depth)).collect()
    }

    /// One top-level operation.
    pub fn op(&mut self) -> Op {
        match self.below(100) {
            0..=2 => Op::CreateStream,
            3 => Op::AdoptStream,
            4 => Op::DestroyStream(self.index()),
            5..=6 => Op::Allocate(self.index()),
            7..=12 => Op::Create(self.index(), self.value()),
            13..=15 => Op::Import(self.index(), self.value()),
            16..=19 => Op::DropBuffer(self.index()),
            20..=24 => Op::Write(self.index(), self.value()),
            25 => Op::WriteWrongSize(self.index()),
            26..=33 => Op::Read(self.target()),
            34..=37 => Op::Sync(self.index()),
            38 => Op::Trim(self.index()),
            39 => Op::Usage(self.index()),
            40..=42 => Op::Wait(self.index(), self.index()),
            43..=52 => Op::Eager(self.index(), self.work(0)),
            53..=59 => Op::Eager(
                self.index(),
                Work::SetFlag(self.flag(), self.below(2) as u32),
            ),
            60..=69 => {
                let style = match self.below(10) {
                    0..=5 => Style::OneCall,
                    6..=7 => Style::ThreeStep,
                    8 => Style::Failing,
                    _ => Style::Panicking,
                };
                Op::Capture(self.index(), style, self.capture_works())
            }
            70..=72 => {
                let style = if self.chance(20) {
                    Style::Failing
                } else {
                    Style::OneCall
                };
                if self.chance(35) {
                    Op::RecaptureSame(self.index())
                } else {
                    Op::Recapture(self.index(), style, self.capture_works())
                }
            }
            73..=83 => Op::Replay(self.index()),
            84..=85 => Op::ReplayId(self.index()),
            86..=88 => Op::DropGraph(self.index()),
            89..=90 => Op::Destroy(self.index()),
            91..=92 => Op::FailNextLaunch,
            95..=97 => {
                let launches = |d: &mut Self| {
                    (0..1 + d.below(4))
                        .map(|_| match d.below(4) {
                            0 => Work::Fill(d.target(), d.value()),
                            1 => Work::Add(d.target(), d.target()),
                            2 => Work::Copy(d.target(), d.target()),
                            _ => Work::Scale(d.target(), d.below(3) as f32 - 1.0, d.value()),
                        })
                        .collect::<Vec<_>>()
                };
                let (first, second) = (launches(self), launches(self));
                Op::Threads(self.index(), self.index(), first, second)
            }
            93 => Op::FailNextReplay,
            94 => match self.below(10) {
                0 => Op::FailNext(Fault::Begin),
                1 => Op::FailNext(Fault::Instantiate),
                2 => Op::FailNext(Fault::Update),
                3 => Op::FailNext(Fault::Upload),
                4 => Op::WriteFailing(self.index(), self.value()),
                5 => Op::SyncFailing(self.index()),
                6 => {
                    // A launch, often over another stream's buffer: where
                    // the order across streams needs an event.
                    let launch = match self.below(3) {
                        0 => Work::Add(self.target(), self.target()),
                        1 => Work::Copy(self.target(), self.target()),
                        _ => Work::Axpy(self.target(), self.target(), 1.0),
                    };
                    Op::EventFailing(self.index(), self.chance(50), launch)
                }
                7 => Op::Conditionals(self.index()),
                _ => Op::ReloadKernels,
            },
            98..=99 if self.chance(70) => Op::Cached(
                self.index(),
                self.below(3) as u8,
                self.below(2) as u8,
                self.capture_works(),
            ),
            _ => Op::Eager(self.index(), self.work(0)),
        }
    }

    /// A program of `n` operations, the first few making streams and
    /// buffers so that the rest has something to work on.
    pub fn program(&mut self, n: usize) -> Vec<Op> {
        let mut ops = vec![
            Op::Create(0, 1.0),
            Op::Create(1, 2.0),
            Op::Create(0, 3.0),
            Op::Create(1, 0.0),
        ];
        while ops.len() < n {
            ops.push(self.op());
        }
        ops.truncate(n.max(1));
        ops
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t({}, Part::{:?})", self.buffer, self.part)
    }
}

/// A program as Rust source: the `Vec<Op>` a test can paste into
/// `conformance::model::check_program`.
pub fn as_code(ops: &[Op]) -> String {
    let mut out = String::from("vec![\n");
    for op in ops {
        out.push_str(&format!("    Op::{op:?},\n"));
    }
    out.push(']');
    out
}
