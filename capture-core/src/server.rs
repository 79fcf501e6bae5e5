//! The device state every client call is served from: one lock per stream,
//! and small device-wide locks for the little that streams share.
//!
//! # Locks
//!
//! Streams are the unit of concurrency, so each stream's whole state (its
//! pools, drop queue, info cache, capture state, failure claims and graphs)
//! sits under its own mutex, and a call on one stream never waits for a call
//! on another. The device-wide state is small and each part has its own
//! lock:
//!
//! - `streams` (a read-write lock): the map from id to stream. Read-locked
//!   only to clone a stream's `Arc` out; write-locked to add or remove one.
//!   Never held while a stream is locked.
//! - one mutex per stream: held for the whole of a call on it, including
//!   the driver waits that call makes (a read's fence, a destroy's sync);
//!   those block only that stream.
//! - `graphs` (a mutex): which stream each live graph belongs to. Taken
//!   while a stream is locked, never the other way round.
//! - `kernels` (a mutex): the builtins compiled so far. Taken with no
//!   stream locked.
//!
//! So the order is: `streams`, released before any stream lock; then one
//! stream; then `graphs`. No call holds two streams' locks, so no two calls
//! can wait for each other.
//!
//! # Threads and capture windows
//!
//! A recording takes the work of one thread: the one that called `begin`
//! (or adopted the window since, with its token). Work another thread issues
//! on a recording stream (a launch, a write, an allocation) is refused with
//! [`Error::NotRecorder`] and never recorded, so it can neither run silently
//! inside every replay nor vanish from a graph. Every call of the recording
//! thread that the stream refuses (a launch, a write, an allocation, a host
//! sync, a replay) dooms the window: a recording that skipped an operation
//! never becomes a graph. Capture calls out of order (a second `begin`) are
//! the exception: they change nothing, as rule 1 says.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use smallvec::SmallVec;

use crate::builtin::{Builtin, Builtins};
use crate::capture_state::Phase;
use crate::driver::{Binding, DeviceSlice, Driver, GraphDriver, Launch};
use crate::error::Error;
use crate::graph::{Captures, Refused};
use crate::graph_log::{self, Entry, GraphInfo};
use crate::graveyard::Graveyard;
use crate::hashing::FastMap;
use crate::ids::{BufferId, GraphId, StreamId, WindowId};
use crate::pool::SliceHandle;
use crate::signature::{MAX_BINDINGS, Signature};
use crate::stream::{Config, StreamState, StreamUsage};
use crate::window::{Update, Window};

/// A buffer as the server sees it: the slice and the stream it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct BufferRef<'a> {
    /// The buffer's slice.
    pub slice: &'a SliceHandle,
    /// The stream it was allocated on.
    pub stream: StreamId,
}

/// One stream and the graphs that replay on it, under the stream's lock.
struct Lane<D: GraphDriver> {
    state: StreamState<D>,
    graphs: Captures<D>,
    /// Set once the stream is destroyed: a call that fetched the lane just
    /// before finds it closed.
    closed: bool,
}

/// A stream's lock and the graveyard its buffers' drops fill.
struct Slot<D: GraphDriver> {
    lane: Mutex<Lane<D>>,
    graveyard: Arc<Graveyard>,
}

/// Ids handed out on a device; counters, so never reused.
#[derive(Debug, Default)]
struct Ids {
    stream: AtomicU64,
    buffer: AtomicU64,
    graph: AtomicU64,
    window: AtomicU64,
}

impl Ids {
    fn next(counter: &AtomicU64) -> u64 {
        counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn buffer(&self) -> BufferId {
        BufferId(Self::next(&self.buffer))
    }
}

/// The state of one device: its streams, graphs and failures.
pub struct Server<D: GraphDriver> {
    device: Arc<D::Device>,
    config: Config,
    /// The device's grid limit, every launch is checked against.
    max_groups: [u32; 3],
    streams: RwLock<FastMap<StreamId, Arc<Slot<D>>>>,
    graphs: Mutex<FastMap<GraphId, StreamId>>,
    /// The builtins compiled so far, in [`Builtin::ALL`] order: read
    /// without a lock once built.
    kernels: [OnceLock<Arc<D::Kernel>>; 4],
    ids: Ids,
}

impl<D: GraphDriver> Lane<D> {
    /// Refuse a call of a thread other than the recorder on a recording
    /// stream. Nothing is recorded and the window is not doomed: its owner
    /// did nothing wrong.
    fn check_recorder(&self) -> Result<(), Error> {
        let capture = &self.state.capture;
        // Asked only while recording: naming the thread costs a reference
        // count, on the hot path otherwise.
        if !capture.is_recording() || capture.records_for(std::thread::current().id()) {
            return Ok(());
        }
        Err(Error::NotRecorder {
            stream: self.state.id,
            window: capture.recording_window().unwrap_or(WindowId(0)),
        })
    }

    /// A call was refused with `err`: if the calling thread records a
    /// window here, the window can no longer seal. Another thread's refused
    /// call (a read it may not make while the stream records) leaves the
    /// window alone.
    fn refused<T>(&mut self, err: Error) -> Result<T, Error> {
        let capture = &mut self.state.capture;
        if capture.is_recording() && capture.records_for(std::thread::current().id()) {
            capture.record_failure(err.clone());
        }
        Err(err)
    }
}

impl<D: GraphDriver> Server<D> {
    /// The server of an opened device.
    pub(crate) fn new(device: Arc<D::Device>, config: Config) -> Self {
        let max_groups = D::device_info(&device).max_groups;
        Self {
            device,
            config,
            max_groups,
            streams: RwLock::default(),
            graphs: Mutex::default(),
            kernels: Default::default(),
            ids: Ids::default(),
        }
    }

    /// The device.
    pub fn device(&self) -> &Arc<D::Device> {
        &self.device
    }

    fn slot(&self, id: StreamId) -> Result<Arc<Slot<D>>, Error> {
        let streams = self.streams.read().map_err(|_| Error::Poisoned)?;
        streams.get(&id).cloned().ok_or(Error::UnknownStream(id))
    }

    /// Run `f` on stream `id`, locked, after collecting what its buffers'
    /// drops left behind.
    fn with<R>(
        &self,
        id: StreamId,
        f: impl FnOnce(&mut Lane<D>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let slot = self.slot(id)?;
        let mut lane = slot.lane.lock().map_err(|_| Error::Poisoned)?;
        if lane.closed {
            return Err(Error::UnknownStream(id));
        }
        collect_dead(&slot.graveyard, &mut lane.state);
        f(&mut lane)
    }

    /// `err` refused a call on `stream` before it reached the stream: if
    /// the calling thread records a window there, the window can no longer
    /// seal. Returns `err`.
    pub(crate) fn refuse(&self, stream: StreamId, err: Error) -> Error {
        let doomed = self.with(stream, |lane| {
            let _: Result<(), Error> = lane.refused(err.clone());
            Ok(())
        });
        drop(doomed);
        err
    }

    /// Create a stream.
    pub fn create_stream(&self) -> Result<StreamId, Error> {
        let raw = D::create_stream(&self.device)?;
        let id = StreamId(Ids::next(&self.ids.stream));
        let slot = Arc::new(Slot {
            lane: Mutex::new(Lane {
                state: StreamState::new(id, raw, &self.config),
                graphs: Captures::default(),
                closed: false,
            }),
            graveyard: Arc::default(),
        });
        self.streams
            .write()
            .map_err(|_| Error::Poisoned)?
            .insert(id, slot);
        Ok(id)
    }

    /// The graveyard of stream `id`, where its buffers' drops go.
    pub(crate) fn graveyard(&self, id: StreamId) -> Result<Weak<Graveyard>, Error> {
        Ok(Arc::downgrade(&self.slot(id)?.graveyard))
    }

    /// Destroy a stream: close any window on it, sync it, destroy its graphs
    /// and release its pages. Buffers of it still held fail every later use.
    pub fn destroy_stream(&self, id: StreamId) -> Result<(), Error> {
        let slot = self
            .streams
            .write()
            .map_err(|_| Error::Poisoned)?
            .remove(&id)
            .ok_or(Error::UnknownStream(id))?;
        // A panic under the lock leaves the lane as consistent as any
        // between calls; closing it is better than leaking its memory.
        let mut lane = slot
            .lane
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.close_lane(&mut lane);
        Ok(())
    }

    fn close_lane(&self, lane: &mut Lane<D>) {
        if lane.closed {
            return;
        }
        lane.closed = true;
        let state = &mut lane.state;
        if state.capture.is_active() {
            // Closing the driver's recording is the one thing that must
            // happen; what it recorded is worthless now.
            let closed = Window::on(state).instantiate(WindowId(0), GraphId(0));
            drop(closed);
        }
        if let Err(err) = state.sync() {
            log::warn!("{}: sync before destroy failed: {err}", state.id);
        }
        let ids = lane.graphs.ids();
        let mut registry = self.graph_registry();
        for id in &ids {
            registry.remove(id);
        }
        drop(registry);
        for id in ids {
            drop(lane.graphs.remove(id));
        }
        lane.state.release_all();
    }

    /// Allocate a buffer of `len` bytes on `stream`.
    pub fn allocate(&self, stream: StreamId, len: u64) -> Result<SliceHandle, Error> {
        self.with(stream, |lane| {
            lane.check_recorder()?;
            if len == 0 {
                return lane.refused(Error::EmptyBuffer);
            }
            // A length the pool cannot align (a config that lifts the limit
            // to near `u64::MAX`) is as much too large as one past the limit.
            let alignable = u64::MAX - (crate::pool::SLICE_ALIGN - 1);
            let limit = self.config.max_allocation_bytes.min(alignable);
            if len > limit {
                return lane.refused(Error::TooLarge {
                    requested: len,
                    limit,
                });
            }
            let id = self.ids.buffer();
            match lane.state.allocate_device(id, len) {
                Ok(slice) => {
                    lane.state.failures.track(id);
                    Ok(slice)
                }
                Err(err) => lane.refused(err),
            }
        })
    }

    /// Enqueue a copy of `bytes` into `buffer`.
    pub fn write(&self, buffer: BufferRef<'_>, bytes: &[u8]) -> Result<(), Error> {
        self.with(buffer.stream, |lane| {
            lane.check_recorder()?;
            let slice = buffer.slice;
            if bytes.len() as u64 != slice.len() {
                return lane.refused(Error::SizeMismatch {
                    buffer: slice.id(),
                    expected: slice.len(),
                    got: bytes.len() as u64,
                });
            }
            let staging = self.ids.buffer();
            let state = &mut lane.state;
            let recording = state.capture.is_recording();
            match state.stage_to_device(staging, bytes, slice) {
                Ok(()) if recording => {
                    state.capture.record_write(slice.id());
                    state.capture.record_entry(Entry::Write {
                        buffer: slice.id(),
                        bytes: slice.len(),
                    });
                }
                Ok(()) => state.failures.clear(slice.id()),
                Err(err) => {
                    let cause = Arc::new(err.clone());
                    state.failures.claim(slice.id(), &cause);
                    return lane.refused(err);
                }
            }
            state.maybe_flush();
            Ok(())
        })
    }

    /// Copy `buffer` back to the host. A host sync: refused while its
    /// stream records (and the window can no longer seal).
    pub fn read(&self, buffer: BufferRef<'_>) -> Result<Vec<u8>, Error> {
        self.with(buffer.stream, |lane| {
            if lane.state.capture.is_recording() {
                return lane.refused(Error::SyncWhileRecording(buffer.stream));
            }
            if let Some(err) = lane.state.failures.read_error(buffer.slice.id()) {
                return Err(err);
            }
            let staging = self.ids.buffer();
            lane.state.read_back(staging, buffer.slice)
        })
    }

    /// Wait for everything enqueued on `stream`.
    pub fn sync(&self, stream: StreamId) -> Result<(), Error> {
        self.with(stream, |lane| {
            if lane.state.capture.is_recording() {
                return lane.refused(Error::SyncWhileRecording(stream));
            }
            lane.state.sync().map_err(Error::from)
        })
    }

    /// Release every page of `stream` no slice is held in.
    pub fn trim(&self, stream: StreamId) -> Result<usize, Error> {
        self.with(stream, |lane| match lane.state.trim() {
            Ok(released) => Ok(released),
            Err(err) => lane.refused(err),
        })
    }

    /// Enqueue (or, while recording, record) a launch of `kernel` over
    /// `args`, in its binding order, with `info` and `params` bytes.
    ///
    /// The launch is checked against the kernel's signature first; a
    /// mismatch reaches no driver and changes nothing, except that a window
    /// recording on the stream can no longer seal (it would miss the
    /// launch). Each binding's access is the signature's. A launch that
    /// reads a claimed buffer is not run: it would compute from bytes nobody
    /// wrote. It fails with that claim, and what it would have written is
    /// claimed in turn; inside a window it dooms the window.
    pub fn launch(
        &self,
        stream: StreamId,
        kernel: &D::Kernel,
        groups: [u32; 3],
        args: &[BufferRef<'_>],
        info: &[u8],
        params: &[u8],
    ) -> Result<(), Error> {
        let signature = D::signature(kernel);
        let checked = check_launch(
            signature,
            self.max_groups,
            stream,
            groups,
            args,
            info,
            params,
        );
        self.with(stream, |lane| {
            lane.check_recorder()?;
            if let Err(err) = checked {
                return lane.refused(err);
            }
            let state = &mut lane.state;
            let recording = state.capture.is_recording();
            let accesses = signature.accesses();
            let poisoned = args
                .iter()
                .zip(accesses)
                .filter(|(_, access)| access.reads())
                .find_map(|(buffer, _)| state.failures.read_error(buffer.slice.id()));
            let outcome = match poisoned {
                Some(err) => Err(err),
                None if info.is_empty() => {
                    enqueue_launch::<D>(state, kernel, groups, args, None, params).map(|()| None)
                }
                None => {
                    let mut ids = || self.ids.buffer();
                    state.info_slice(info, &mut ids).and_then(|info_slice| {
                        enqueue_launch::<D>(state, kernel, groups, args, Some(&info_slice), params)
                            .map(|()| Some(info_slice))
                    })
                }
            };
            match outcome {
                Ok(info_slice) => {
                    if recording {
                        state.capture.record_entry(Entry::Launch {
                            kernel: signature.shared_name(),
                            groups,
                            bindings: args
                                .iter()
                                .zip(accesses)
                                .map(|(buffer, access)| (buffer.slice.id(), *access))
                                .collect(),
                            info_bytes: info.len() as u32,
                            param_bytes: params.len() as u32,
                        });
                        if let Some(info_slice) = &info_slice {
                            state.capture.record_touch(info_slice);
                        }
                        for (buffer, access) in args.iter().zip(accesses) {
                            state.capture.record_touch(buffer.slice);
                            if access.reads() {
                                state.capture.record_read(buffer.slice.id());
                            }
                            if access.writes() {
                                state.capture.record_write(buffer.slice.id());
                            }
                        }
                    } else {
                        state.issued();
                        for (buffer, access) in args.iter().zip(accesses) {
                            if access.writes() {
                                state.failures.clear(buffer.slice.id());
                            }
                        }
                        state.maybe_flush();
                    }
                    Ok(())
                }
                Err(err) => {
                    let cause = Arc::new(err.clone());
                    for (buffer, access) in args.iter().zip(accesses) {
                        if access.writes() {
                            state.failures.claim(buffer.slice.id(), &cause);
                        }
                    }
                    lane.refused(err)
                }
            }
        })
    }

    /// Open a capture window on `stream`: arm its pools for the warmup run.
    pub fn prepare(&self, stream: StreamId) -> Result<WindowId, Error> {
        self.with(stream, |lane| {
            lane.check_recorder()?;
            // A capture call out of order changes nothing (rule 1), so it
            // does not doom the window it was refused in.
            let window = WindowId(Ids::next(&self.ids.window));
            Window::on(&mut lane.state).prepare(window)?;
            Ok(window)
        })
    }

    /// Start recording `window` on `stream`, taking the calling thread's
    /// work.
    pub fn begin(&self, stream: StreamId, window: WindowId) -> Result<(), Error> {
        self.with(stream, |lane| {
            lane.check_recorder()?;
            Window::on(&mut lane.state).begin(window)
        })
    }

    /// Make the calling thread the one whose work `window`'s recording
    /// takes.
    pub fn adopt(&self, stream: StreamId, window: WindowId) -> Result<(), Error> {
        self.with(stream, |lane| {
            lane.state
                .capture
                .adopt(window, std::thread::current().id())
                .map_err(|reason| Error::OutOfOrder {
                    call: "adopt",
                    stream,
                    reason,
                })
        })
    }

    /// Close `window` on `stream` and make a graph of what it recorded.
    ///
    /// A refusal claims every buffer the recording would have written, so a
    /// later read of one fails with the refusal instead of returning bytes
    /// nobody wrote.
    pub fn instantiate(&self, stream: StreamId, window: WindowId) -> Result<GraphId, Error> {
        self.with(stream, |lane| {
            let id = GraphId(Ids::next(&self.ids.graph));
            let result = Window::on(&mut lane.state).instantiate(window, id);
            let deferred = std::mem::take(&mut lane.state.deferred_destroys);
            let result = match result {
                Ok(graph) => {
                    lane.graphs.insert(id, graph);
                    self.graph_registry().insert(id, stream);
                    Ok(id)
                }
                Err(Refused { error, written }) => {
                    let cause = Arc::new(error.clone());
                    for buffer in written {
                        lane.state.failures.claim(buffer, &cause);
                    }
                    Err(error)
                }
            };
            for graph in deferred {
                self.destroy_in(lane, graph);
            }
            result
        })
    }

    /// Close `window` on `stream` and make graph `id` (of the same stream)
    /// run what it recorded: updated in place where the driver can,
    /// instantiated anew behind the same id otherwise.
    ///
    /// A refusal leaves the graph as it was and claims nothing: the graph
    /// still writes what it wrote, on its next replay.
    pub fn update(&self, stream: StreamId, window: WindowId, id: GraphId) -> Result<Update, Error> {
        self.with(stream, |lane| {
            let Lane { state, graphs, .. } = lane;
            let result = match graphs.get_mut(id) {
                Some(graph) => Window::on(state)
                    .update(window, graph, id)
                    .map_err(|refused| refused.error),
                None => {
                    Window::on(state).discard(window);
                    Err(Error::UnknownGraph(id))
                }
            };
            let deferred = std::mem::take(&mut lane.state.deferred_destroys);
            for graph in deferred {
                self.destroy_in(lane, graph);
            }
            result
        })
    }

    /// Close `window` on `stream`, keeping nothing it recorded.
    pub(crate) fn discard(&self, stream: StreamId, window: WindowId) {
        let closed = self.with(stream, |lane| {
            Window::on(&mut lane.state).discard(window);
            Ok(())
        });
        drop(closed);
    }

    /// The stream graph `id` replays on, if it is live.
    fn stream_of(&self, id: GraphId) -> Option<StreamId> {
        self.graph_registry().get(&id).copied()
    }

    /// Enqueue graph `id`'s recorded work on `stream`, the graph's own
    /// (found from the id when not given).
    ///
    /// Allocation-free on the success path: a replay is what graphs exist to
    /// make cheap, and the core must add nothing the driver does not.
    pub fn replay(&self, id: GraphId, stream: Option<StreamId>) -> Result<(), Error> {
        let stream = stream
            .or_else(|| self.stream_of(id))
            .ok_or(Error::UnknownGraph(id))?;
        let found = self.with(stream, |lane| {
            lane.check_recorder()?;
            if lane.state.capture.is_recording() {
                return lane.refused(Error::ReplayWhileRecording(stream));
            }
            let Lane { state, graphs, .. } = lane;
            let graph = graphs.get_mut(id).ok_or(Error::UnknownGraph(id))?;
            let failures = &mut state.failures;
            // A claimed input: the replay would compute from bytes nobody
            // wrote. The one exception is a claim this graph's own failed
            // replay left on a buffer it reads and rewrites (`x += y`):
            // retrying is how that claim is repaired, and the design's rule
            // for a failed replay.
            let poisoned = if failures.is_empty() {
                None
            } else {
                graph.read.iter().find_map(|buffer| {
                    let own_failed_replay = failures.check(*buffer).is_some_and(
                        |cause| matches!(**cause, Error::ReplayFailed { graph, .. } if graph == id),
                    );
                    if own_failed_replay {
                        None
                    } else {
                        failures.read_error(*buffer)
                    }
                })
            };
            let outcome = match poisoned {
                Some(err) => Err(err),
                None => {
                    D::replay(&graph.exec, &mut state.raw).map_err(|cause| Error::ReplayFailed {
                        graph: id,
                        cause: Arc::new(cause.into()),
                    })
                }
            };
            match outcome {
                Ok(()) => {
                    state.issued();
                    graph.info.replays += 1;
                    let failures = &mut state.failures;
                    if !failures.is_empty() {
                        for buffer in &graph.written {
                            failures.clear(*buffer);
                        }
                    }
                    Ok(())
                }
                Err(err) => {
                    let cause = Arc::new(err.clone());
                    for buffer in &graph.written {
                        failures.claim(*buffer, &cause);
                    }
                    Err(err)
                }
            }
        });
        // A graph handle names its stream; a stream destroyed since means
        // the graph went with it.
        match found {
            Err(Error::UnknownStream(_)) => Err(Error::UnknownGraph(id)),
            other => other,
        }
    }

    /// Destroy graph `id`: sync its stream (a replay may still run), drop the
    /// executable and its pins, and free the info-cache entries no other
    /// graph pins. A no-op for an unknown id. Deferred to the window's close
    /// if its stream is recording, since the sync would abort the recording.
    pub fn destroy_graph(&self, id: GraphId) {
        let Some(stream) = self.stream_of(id) else {
            return;
        };
        let destroyed = self.with(stream, |lane| {
            self.destroy_in(lane, id);
            Ok(())
        });
        if let Err(err) = destroyed {
            log::warn!("{id}: destroy on {stream} failed: {err}");
        }
    }

    fn destroy_in(&self, lane: &mut Lane<D>, id: GraphId) {
        if !lane.graphs.contains(id) {
            return;
        }
        let state = &mut lane.state;
        if state.capture.is_recording() {
            if !state.deferred_destroys.contains(&id) {
                state.deferred_destroys.push(id);
            }
            return;
        }
        let synced = state.sync();
        let graph = lane.graphs.remove(id);
        self.graph_registry().remove(&id);
        if let Err(err) = synced {
            log::warn!("{id}: sync before destroy failed, destroying anyway: {err}");
            // A replay may still be running, so what the graph pinned waits
            // in the drop queue for a fence that succeeds instead of going
            // straight back to the pool.
            if let Some(graph) = graph {
                for slice in graph._retained {
                    state.queue_drop(slice);
                }
            }
        }
        for slice in state.info.graph_release(id) {
            state.queue_drop(slice);
        }
    }

    /// Graph `id`'s log drawn as Graphviz DOT.
    pub fn graph_dot(&self, id: GraphId, stream: StreamId) -> Result<String, Error> {
        self.with(stream, |lane| {
            let graph = lane.graphs.get(id).ok_or(Error::UnknownGraph(id))?;
            Ok(graph_log::dot(&id.to_string(), graph.log()))
        })
    }

    /// What graph `id` is and has done.
    pub fn graph_info(&self, id: GraphId, stream: StreamId) -> Result<GraphInfo, Error> {
        self.with(stream, |lane| {
            let graph = lane.graphs.get(id).ok_or(Error::UnknownGraph(id))?;
            Ok(graph.info())
        })
    }

    /// Where `stream` is in a capture window's life.
    pub fn phase(&self, stream: StreamId) -> Result<Phase, Error> {
        self.with(stream, |lane| Ok(lane.state.capture.phase()))
    }

    /// Whether `id` names a live graph. A poisoned registry is read as it
    /// is: only a panic between two of its one-line updates could poison
    /// it, and none can panic.
    pub fn has_graph(&self, id: GraphId) -> bool {
        self.graph_registry().contains_key(&id)
    }

    /// Live graphs on the device.
    pub fn live_graphs(&self) -> usize {
        self.graph_registry().len()
    }

    fn graph_registry(&self) -> std::sync::MutexGuard<'_, FastMap<GraphId, StreamId>> {
        self.graphs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Buffers currently claimed by a failure, on every stream. Read from
    /// poisoned locks too: a count is right even where a panic interrupted
    /// a call.
    pub fn claimed_buffers(&self) -> usize {
        let slots: Vec<Arc<Slot<D>>> = {
            let streams = self
                .streams
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            streams.values().cloned().collect()
        };
        slots
            .iter()
            .map(|slot| {
                slot.lane
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .state
                    .failures
                    .len()
            })
            .sum()
    }

    /// What `stream` holds now.
    pub fn usage(&self, stream: StreamId) -> Result<StreamUsage, Error> {
        self.with(stream, |lane| Ok(lane.state.usage()))
    }

    /// Call `f` with graph `id`'s executable and its stream's driver stream,
    /// under the stream's lock: how a benchmark measures the raw driver's
    /// replay of the very executable the core replays. `f` runs under the
    /// lock, so it must not call back into the client on that stream (nor
    /// drop a graph handle of it, whose drop does).
    pub fn with_raw_graph<R>(
        &self,
        id: GraphId,
        f: impl FnOnce(&D::Executable, &mut D::Stream) -> R,
    ) -> Result<R, Error> {
        let stream = self.stream_of(id).ok_or(Error::UnknownGraph(id))?;
        self.with(stream, |lane| {
            let Lane { state, graphs, .. } = lane;
            let graph = graphs.get(id).ok_or(Error::UnknownGraph(id))?;
            Ok(f(&graph.exec, &mut state.raw))
        })
    }

    /// Call `f` with `stream`'s driver stream and the device slices of
    /// `buffers`: how a benchmark issues the raw driver's launch on the very
    /// memory the core uses. Under the stream's lock, as for
    /// [`Server::with_raw_graph`].
    pub fn with_raw_stream<R>(
        &self,
        stream: StreamId,
        buffers: &[BufferRef<'_>],
        f: impl FnOnce(&mut D::Stream, &[DeviceSlice<'_, D>]) -> R,
    ) -> Result<R, Error> {
        for buffer in buffers {
            check_owner(*buffer, stream)?;
        }
        self.with(stream, |lane| {
            let state = &mut lane.state;
            let mut slices: SmallVec<[DeviceSlice<'_, D>; 8]> = SmallVec::new();
            for buffer in buffers {
                let page = state
                    .device
                    .page(buffer.slice)
                    .ok_or(Error::UnknownStream(stream))?;
                slices.push(DeviceSlice {
                    page,
                    offset: buffer.slice.offset(),
                    len: buffer.slice.len(),
                });
            }
            Ok(f(&mut state.raw, &slices))
        })
    }
}

impl<D: GraphDriver + Builtins> Server<D> {
    /// Builtin kernel `which`, compiled once per device. Two threads
    /// asking first may both compile it; one result is kept.
    pub fn builtin(&self, which: Builtin) -> Result<&Arc<D::Kernel>, Error> {
        let slot = &self.kernels[which.index()];
        if let Some(kernel) = slot.get() {
            return Ok(kernel);
        }
        let kernel = Arc::new(D::builtin(&self.device, which)?);
        Ok(slot.get_or_init(|| kernel))
    }
}

impl<D: GraphDriver> Drop for Server<D> {
    fn drop(&mut self) {
        let slots: Vec<Arc<Slot<D>>> = match self.streams.get_mut() {
            Ok(streams) => streams.drain().map(|(_, slot)| slot).collect(),
            Err(poisoned) => poisoned
                .into_inner()
                .drain()
                .map(|(_, slot)| slot)
                .collect(),
        };
        for slot in slots {
            let mut lane = slot
                .lane
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.close_lane(&mut lane);
        }
        for kernel in &mut self.kernels {
            drop(kernel.take());
        }
    }
}

/// Queue every buffer of `state`'s stream dropped since its last call for a
/// fence, and forget their claims: nothing can read them any more.
fn collect_dead<D: Driver>(graveyard: &Graveyard, state: &mut StreamState<D>) {
    let mut any = false;
    graveyard.exhume(|slice| {
        state.failures.forget(slice.id());
        state.queue_drop(slice);
        any = true;
    });
    if any {
        state.maybe_flush();
    }
}

/// Refuse `buffer` on any stream but its own.
fn check_owner(buffer: BufferRef<'_>, stream: StreamId) -> Result<(), Error> {
    if buffer.stream == stream {
        Ok(())
    } else {
        Err(Error::ForeignBuffer {
            buffer: buffer.slice.id(),
            owner: buffer.stream,
            used: stream,
        })
    }
}

/// Whether a launch matches `signature` and binds only `stream`'s buffers.
fn check_launch(
    signature: &Signature,
    max_groups: [u32; 3],
    stream: StreamId,
    groups: [u32; 3],
    args: &[BufferRef<'_>],
    info: &[u8],
    params: &[u8],
) -> Result<(), Error> {
    if args.len() > MAX_BINDINGS {
        return Err(Error::KernelMismatch {
            kernel: signature.to_string(),
            reason: format!("{} buffers bound; at most {MAX_BINDINGS}", args.len()),
        });
    }
    let ids: SmallVec<[BufferId; 8]> = args.iter().map(|b| b.slice.id()).collect();
    signature.check_launch(groups, max_groups, &ids, info.len(), params.len())?;
    args.iter()
        .try_for_each(|buffer| check_owner(*buffer, stream))
}

/// Issue the driver launch over `args`, `info_slice` and `params`; each
/// binding's access is the kernel signature's.
fn enqueue_launch<D: Driver>(
    state: &mut StreamState<D>,
    kernel: &D::Kernel,
    groups: [u32; 3],
    args: &[BufferRef<'_>],
    info_slice: Option<&SliceHandle>,
    params: &[u8],
) -> Result<(), Error> {
    let missing = || Error::UnknownStream(state.id);
    let mut bindings: SmallVec<[Binding<'_, D>; 8]> = SmallVec::new();
    for (buffer, access) in args.iter().zip(D::signature(kernel).accesses()) {
        let page = state.device.page(buffer.slice).ok_or_else(missing)?;
        bindings.push(Binding {
            slice: DeviceSlice {
                page,
                offset: buffer.slice.offset(),
                len: buffer.slice.len(),
            },
            access: *access,
        });
    }
    let info = match info_slice {
        Some(slice) => Some(DeviceSlice {
            page: state.device.page(slice).ok_or_else(missing)?,
            offset: slice.offset(),
            len: slice.len(),
        }),
        None => None,
    };
    D::launch(
        &mut state.raw,
        Launch {
            kernel,
            groups,
            bindings: &bindings,
            info,
            params,
        },
    )
    .map_err(Error::from)
}
