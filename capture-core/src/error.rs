//! What can go wrong, said so that the caller knows what to do next.

use std::sync::Arc;

use crate::driver::DriverError;
use crate::ids::{BufferId, GraphId, StreamId, WindowId};

/// Any failure of a capture-core call.
///
/// Cheap to clone: a failure is stored on every buffer it claims and handed
/// back by each read of them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The backend has no usable device here.
    #[error("{backend} is unavailable: {reason}")]
    Unavailable {
        /// The backend asked for.
        backend: &'static str,
        /// Why, in the driver's words.
        reason: String,
    },
    /// A driver primitive failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// A call arrived in a state that cannot take it. A capture call made
    /// out of order (prepare, begin, adopt, a close from inside a body)
    /// changes nothing, and the call the state expects still works; any
    /// other call the recording thread is refused on a recording stream
    /// dooms the window, as every such refusal does.
    #[error("{call} refused on {stream}: {reason}")]
    OutOfOrder {
        /// The refused call.
        call: &'static str,
        /// The stream it was made on.
        stream: StreamId,
        /// The state that refused it.
        reason: String,
    },
    /// The stream id names no live stream of this client.
    #[error("{0} is unknown or destroyed")]
    UnknownStream(StreamId),
    /// The graph id names no live graph; nothing was enqueued.
    #[error("{0} is unknown or already destroyed")]
    UnknownGraph(GraphId),
    /// A stream would have to wait for a stream that records a capture
    /// window: its recorded work has not run, and will run only when the
    /// graph replays.
    #[error(
        "{stream} would wait for {recording}, which is recording a capture window; \
         close the window first"
    )]
    WaitOnRecording {
        /// The stream that would wait.
        stream: StreamId,
        /// The recording stream.
        recording: StreamId,
    },
    /// A stream whose work a capture window records (the recording stream,
    /// or one joined to its window) would wait for work from outside the
    /// window, which a graph cannot wait for when it replays.
    #[error(
        "{stream}'s work is recorded by a capture window and would wait for {other}'s work \
         from outside it; order the streams before the window opens"
    )]
    WaitOutsideWindow {
        /// The stream that would wait.
        stream: StreamId,
        /// The stream it would wait for.
        other: StreamId,
    },
    /// A capture window closed while a stream that joined it (by waiting
    /// for the recording stream) was not joined back (the recording stream
    /// waiting for it): the graph would miss that stream's later work.
    #[error(
        "{window} closed while {stream}, which joined it, was not joined back; make the \
         recording stream wait for {stream} before closing the window"
    )]
    Unjoined {
        /// The joined stream.
        stream: StreamId,
        /// The window.
        window: WindowId,
    },
    /// A buffer of a stream that records a capture window was to be shared
    /// with another stream: sharing orders the other stream after the
    /// buffer's stream, which cannot be waited for while it records.
    #[error(
        "{buffer} cannot be shared with another stream while its {stream} records a \
         capture window; share it before the window begins or after it closes"
    )]
    SharedWhileRecording {
        /// The buffer.
        buffer: BufferId,
        /// Its stream, whose window is open.
        stream: StreamId,
    },
    /// A buffer allocated by another client (another server, with its own
    /// pools and numbering) was passed to this one.
    #[error("{0} belongs to another client and cannot be used on this one")]
    OtherClient(BufferId),
    /// A buffer of zero bytes was asked for.
    #[error("a buffer must hold at least one byte")]
    EmptyBuffer,
    /// A page handed to `Client::import` that its backend did not make
    /// from imported memory.
    #[error(
        "{backend} did not make this page from imported memory: only its own import constructors do"
    )]
    NotImported {
        /// The backend.
        backend: &'static str,
    },
    /// A page or stream handed to a client that was made for another
    /// device than the client's.
    #[error("{backend}: this {what} was made for another device than this client's")]
    OtherDevice {
        /// The backend.
        backend: &'static str,
        /// `"page"` or `"stream"`.
        what: &'static str,
    },
    /// A buffer larger than the configured limit was asked for.
    #[error("{requested} bytes requested, but one allocation may hold at most {limit}")]
    TooLarge {
        /// Bytes asked for.
        requested: u64,
        /// The limit (`Config::max_allocation`).
        limit: u64,
    },
    /// Bytes written or read do not match the buffer's size.
    #[error("{buffer} holds {expected} bytes, the call passed {got}")]
    SizeMismatch {
        /// The buffer.
        buffer: BufferId,
        /// Its size.
        expected: u64,
        /// What the call passed.
        got: u64,
    },
    /// A temporary of a capture window (allocated and dropped inside its
    /// warmup run, so its memory is shared with the stream's other graphs'
    /// temporaries) that the recording reads before writing all of it: it
    /// would read what another graph left there.
    #[error(
        "{buffer} is a temporary of a capture window on {stream} (the warmup allocated and \
         dropped it), whose memory the stream's graphs share, but operation {operation} of the \
         recording reads it before anything writes all of it: it would read another graph's \
         temporaries. Write all of it first, keep it past the warmup, or turn \
         Config::share_temporaries off"
    )]
    TemporaryReadFirst {
        /// The window's stream.
        stream: StreamId,
        /// The temporary.
        buffer: BufferId,
        /// The operation, in the window's log.
        operation: usize,
    },
    /// A temporary of a capture window bound on another stream: its memory
    /// is shared by its own stream's graphs, which nothing orders another
    /// stream's work after.
    #[error(
        "{buffer} is a temporary of a capture window on {home} (the warmup allocated and \
         dropped it), whose memory that stream's graphs share: {stream} may not use it. Keep \
         it past the warmup to make it a buffer of its own"
    )]
    TemporaryElsewhere {
        /// The temporary.
        buffer: BufferId,
        /// Its stream.
        home: StreamId,
        /// The stream that bound it.
        stream: StreamId,
    },
    /// A temporary a caller kept past its capture window, overwritten by
    /// another graph whose temporaries share its memory.
    #[error(
        "{buffer} was a temporary of a capture window (the warmup allocated and dropped it) \
         that the caller kept; {graph}'s temporaries share its memory and its replay \
         overwrote it"
    )]
    Overwritten {
        /// The kept temporary.
        buffer: BufferId,
        /// The graph whose replay overwrote it.
        graph: GraphId,
    },
    /// A view asked of a buffer ([`Buffer::range`](crate::Buffer::range))
    /// that it cannot have.
    #[error("no view of {len} bytes at {offset} of {buffer}, which holds {size}: {reason}")]
    BadRange {
        /// The buffer.
        buffer: BufferId,
        /// The view's first byte, from the buffer's start.
        offset: u64,
        /// The view's bytes.
        len: u64,
        /// The buffer's size (the view's, for a view of a view).
        size: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A buffer read as elements of `element` bytes holds a part of one.
    #[error("{buffer} holds {bytes} bytes, not a whole number of {element}-byte elements")]
    NotWhole {
        /// The buffer.
        buffer: BufferId,
        /// Its size.
        bytes: u64,
        /// The element size asked for.
        element: u64,
    },
    /// A launch's arguments do not fit its kernel (builtin launches, whose
    /// element count must fit the buffers).
    #[error("bad launch: {0}")]
    BadLaunch(String),
    /// A launch does not match its kernel's signature: the binding count,
    /// the info or parameter size, the grid, or a written buffer bound
    /// twice. Refused before it reached the driver; nothing changed, except
    /// that a window recording on the stream can no longer seal.
    #[error("launch of {kernel} refused: {reason}")]
    KernelMismatch {
        /// The kernel's signature, as text.
        kernel: String,
        /// What does not match.
        reason: String,
    },
    /// A kernel could not be built: its source did not compile, its module
    /// did not load, or it disagrees with the signature it was given. The
    /// log is the compiler's or driver's own.
    #[error("kernel {kernel} could not be built: {log}")]
    Compile {
        /// The kernel's name.
        kernel: String,
        /// The compiler's or driver's log.
        log: String,
    },
    /// A host sync (a read, a synchronize) on a stream that is recording;
    /// the sync would abort the recording, so it is refused on the spot.
    #[error(
        "{0} is recording a capture window, or joined to one; host syncs are refused until \
         the window closes"
    )]
    SyncWhileRecording(StreamId),
    /// Work issued on a recording stream by a thread other than the one
    /// whose work the recording takes. Refused and never recorded; the
    /// window is not doomed. The recording thread is the one that called
    /// `begin`, or the one that adopted the window since
    /// ([`Client::adopt`](crate::Client::adopt)).
    #[error(
        "{stream} is recording {window} for another thread; work from this thread is refused \
         until the window is instantiated (or adopt the window with its token)"
    )]
    NotRecorder {
        /// The recording stream.
        stream: StreamId,
        /// Its window.
        window: WindowId,
    },
    /// A replay on a stream that is recording another window.
    #[error("{0} is recording a capture window, or joined to one; replay once the window closes")]
    ReplayWhileRecording(StreamId),
    /// The buffer holds no valid bytes: an operation that was to write it
    /// failed or never ran. A successful write clears this.
    #[error("{buffer} holds no valid data: {cause}")]
    Claimed {
        /// The buffer read.
        buffer: BufferId,
        /// Why it was never written.
        cause: Arc<Error>,
    },
    /// A device page was requested from the driver while the window recorded.
    #[error(
        "a device or host page was allocated while {0} was recording; warm the pools with a \
         warmup run between prepare and begin that allocates what the recorded run will"
    )]
    AllocationWhileRecording(StreamId),
    /// A launch of the recorded run passed info bytes no launch of its
    /// warmup passed, more of them than the room kept for such launches,
    /// so its info needed a page while the window recorded.
    #[error(
        "operation {operation} of {stream}'s recording, a launch of `{kernel}`, passes info \
         bytes its warmup never passed, and the room kept for such launches was used up; \
         pass the same info bytes in the warmup run"
    )]
    InfoFirstSeenWhileRecording {
        /// The recording stream.
        stream: StreamId,
        /// The launch's kernel.
        kernel: String,
        /// The launch's place among the recording's operations, from 0.
        operation: usize,
    },
    /// Work inside the window failed or was skipped, so the recording is
    /// missing an operation and cannot become a graph.
    #[error(
        "an operation inside the capture window failed or was skipped, so the recording cannot seal: {0}"
    )]
    Doomed(Arc<Error>),
    /// The window was closed by a caller that does not own it. It is closed
    /// all the same; no graph comes out.
    #[error("{window} was closed by {closer}, which does not own it; no graph was made{}", doomed_suffix(.doomed))]
    Abandoned {
        /// The window that was open.
        window: WindowId,
        /// The caller that closed it.
        closer: WindowId,
        /// What had already doomed the recording, if anything.
        doomed: Option<Arc<Error>>,
    },
    /// The driver refused to replay the graph, so none of its launches ran.
    #[error("replay of {graph} failed: {cause}")]
    ReplayFailed {
        /// The graph.
        graph: GraphId,
        /// The driver's refusal.
        cause: Arc<Error>,
    },
    /// A conditional or loop cannot be recorded on this backend or stream;
    /// it still runs eagerly, on the host's word, outside a capture.
    #[error("{backend} cannot record a conditional: {reason}")]
    NoConditionals {
        /// The backend.
        backend: &'static str,
        /// Why, in the backend's words.
        reason: String,
    },
    /// Something a conditional's body cannot hold was asked for inside one
    /// while recording (a wait between streams, from either side; a copy
    /// the backend cannot skip): refused, and the window can no longer
    /// seal.
    #[error("{what} cannot go inside a conditional's body on {stream}: {reason}")]
    InBody {
        /// The stream recording the body.
        stream: StreamId,
        /// What was asked for (`a copy`, `a join`, ...).
        what: &'static str,
        /// Why not.
        reason: String,
    },
    /// A conditional's flag is not a `u32` of the conditional's stream: it
    /// holds fewer than four bytes, or belongs to another stream.
    #[error("{buffer} cannot be a conditional's flag: {reason}")]
    BadFlag {
        /// The buffer offered.
        buffer: BufferId,
        /// What is wrong with it.
        reason: String,
    },
    /// The client's server lock was poisoned by a panic on another thread.
    #[error("the device state was poisoned by a panic on another thread")]
    Poisoned,
}

fn doomed_suffix(doomed: &Option<Arc<Error>>) -> String {
    match doomed {
        Some(reason) => format!("; it was also doomed: {reason}"),
        None => String::new(),
    }
}

impl Error {
    /// The cause behind a [`Error::Claimed`] or [`Error::Doomed`] chain, or
    /// `self`.
    pub fn root(&self) -> &Error {
        match self {
            Error::Claimed { cause, .. } | Error::Doomed(cause) => cause.root(),
            Error::ReplayFailed { cause, .. } => cause.root(),
            other => other,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
