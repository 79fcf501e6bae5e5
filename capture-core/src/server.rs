//! The device state every client call is served from, under one lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use crate::builtin::{Builtin, Builtins};
use crate::capture_state::Phase;
use crate::driver::{Binding, DeviceSlice, Driver, GraphDriver, Launch};
use crate::error::Error;
use crate::failure::FailureStore;
use crate::graph::{Captures, Refused};
use crate::hashing::FastMap;
use crate::ids::{BufferId, GraphId, StreamId, WindowId};
use crate::pool::SliceHandle;
use crate::signature::{MAX_BINDINGS, Signature};
use crate::stream::{Config, StreamState, StreamUsage};
use crate::window::Window;

/// Buffers dropped by clients, waiting for the server to queue them for a
/// fence. A buffer's drop cannot take the server lock (it may run anywhere),
/// so it leaves its slice here and the next call collects it. The flag lets
/// every call skip the lock when nothing died, which is almost always.
#[derive(Default)]
pub(crate) struct Graveyard {
    pending: AtomicBool,
    dead: Mutex<Vec<(StreamId, SliceHandle)>>,
}

impl Graveyard {
    /// `slice` of `stream` is no longer held by its buffer.
    pub(crate) fn bury(&self, stream: StreamId, slice: SliceHandle) {
        if let Ok(mut dead) = self.dead.lock() {
            dead.push((stream, slice));
            self.pending.store(true, Ordering::Release);
        }
    }

    /// Everything buried since the last call.
    fn exhume(&self) -> Vec<(StreamId, SliceHandle)> {
        // A plain load first: the common case writes nothing to the flag.
        if !self.pending.load(Ordering::Relaxed) || !self.pending.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        self.dead
            .lock()
            .map(|mut dead| std::mem::take(&mut *dead))
            .unwrap_or_default()
    }
}

/// A buffer as the server sees it: the slice and the stream it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct BufferRef<'a> {
    /// The buffer's slice.
    pub slice: &'a SliceHandle,
    /// The stream it was allocated on.
    pub stream: StreamId,
}

/// The state of one device: its streams, graphs and failures.
pub struct Server<D: GraphDriver> {
    device: Arc<D::Device>,
    config: Config,
    streams: FastMap<StreamId, StreamState<D>>,
    captures: Captures<D>,
    failures: FailureStore,
    graveyard: Arc<Graveyard>,
    kernels: FastMap<Builtin, Arc<D::Kernel>>,
    /// The device's grid limit, every launch is checked against.
    max_groups: [u32; 3],
    next_stream: u64,
    next_buffer: u64,
    next_graph: u64,
    next_window: u64,
}

impl<D: GraphDriver> Server<D> {
    /// The server of an opened device.
    pub(crate) fn new(device: Arc<D::Device>, config: Config, graveyard: Arc<Graveyard>) -> Self {
        let max_groups = D::device_info(&device).max_groups;
        Self {
            device,
            max_groups,
            config,
            streams: FastMap::default(),
            captures: Captures::default(),
            failures: FailureStore::default(),
            graveyard,
            kernels: FastMap::default(),
            next_stream: 0,
            next_buffer: 0,
            next_graph: 0,
            next_window: 0,
        }
    }

    /// The device.
    pub fn device(&self) -> &Arc<D::Device> {
        &self.device
    }

    fn stream(&mut self, id: StreamId) -> Result<&mut StreamState<D>, Error> {
        self.streams.get_mut(&id).ok_or(Error::UnknownStream(id))
    }

    fn buffer_id(&mut self) -> BufferId {
        self.next_buffer += 1;
        BufferId(self.next_buffer)
    }

    /// Queue every buffer clients dropped since the last call for a fence,
    /// and forget their claims: nothing can read them any more.
    pub(crate) fn collect_dead(&mut self) {
        for (stream, slice) in self.graveyard.exhume() {
            self.failures.forget(slice.id());
            if let Some(state) = self.streams.get_mut(&stream) {
                state.drops.push(slice);
                state.maybe_flush();
            }
        }
    }

    /// Create a stream.
    pub fn create_stream(&mut self) -> Result<StreamId, Error> {
        self.collect_dead();
        let raw = D::create_stream(&self.device)?;
        self.next_stream += 1;
        let id = StreamId(self.next_stream);
        self.streams
            .insert(id, StreamState::new(id, raw, &self.config));
        Ok(id)
    }

    /// Destroy a stream: close any window on it, sync it, destroy its graphs
    /// and release its pages. Buffers of it still held fail every later use.
    pub fn destroy_stream(&mut self, id: StreamId) -> Result<(), Error> {
        self.collect_dead();
        let mut state = self.streams.remove(&id).ok_or(Error::UnknownStream(id))?;
        let graphs = self.captures.on_stream(id);
        Self::close_stream(&mut state, &mut self.captures, &graphs);
        Ok(())
    }

    fn close_stream(state: &mut StreamState<D>, captures: &mut Captures<D>, graphs: &[GraphId]) {
        if state.capture.is_active() {
            // Closing the driver's recording is the one thing that must
            // happen; what it recorded is worthless now.
            let closed = Window::on(state).instantiate(WindowId(0), GraphId(0));
            drop(closed);
        }
        if let Err(err) = state.sync() {
            log::warn!("{}: sync before destroy failed: {err}", state.id);
        }
        for graph in graphs {
            drop(captures.remove(*graph));
        }
        state.release_all();
    }

    /// Allocate a buffer of `len` bytes on `stream`.
    pub fn allocate(&mut self, stream: StreamId, len: u64) -> Result<SliceHandle, Error> {
        self.collect_dead();
        if len == 0 {
            return Err(Error::EmptyBuffer);
        }
        if len > self.config.max_allocation_bytes {
            return Err(Error::TooLarge {
                requested: len,
                limit: self.config.max_allocation_bytes,
            });
        }
        let id = self.buffer_id();
        let slice = self.stream(stream)?.allocate_device(id, len)?;
        self.failures.track(id);
        Ok(slice)
    }

    /// Enqueue a copy of `bytes` into `buffer`.
    pub fn write(&mut self, buffer: BufferRef<'_>, bytes: &[u8]) -> Result<(), Error> {
        self.collect_dead();
        let slice = buffer.slice;
        if bytes.len() as u64 != slice.len() {
            return Err(Error::SizeMismatch {
                buffer: slice.id(),
                expected: slice.len(),
                got: bytes.len() as u64,
            });
        }
        let staging = self.buffer_id();
        let state = self
            .streams
            .get_mut(&buffer.stream)
            .ok_or(Error::UnknownStream(buffer.stream))?;
        let recording = state.capture.is_recording();
        match state.stage_to_device(staging, bytes, slice) {
            Ok(()) if recording => state.capture.record_write(slice.id()),
            Ok(()) => self.failures.clear(slice.id()),
            Err(err) => {
                let cause = Arc::new(err.clone());
                self.failures.claim(slice.id(), &cause);
                if recording {
                    state.capture.record_failure(err.clone());
                }
                return Err(err);
            }
        }
        state.maybe_flush();
        Ok(())
    }

    /// Copy `buffer` back to the host. A host sync: refused while its
    /// stream records.
    pub fn read(&mut self, buffer: BufferRef<'_>) -> Result<Vec<u8>, Error> {
        self.collect_dead();
        let staging = self.buffer_id();
        let state = self
            .streams
            .get_mut(&buffer.stream)
            .ok_or(Error::UnknownStream(buffer.stream))?;
        if state.capture.is_recording() {
            return Err(Error::SyncWhileRecording(buffer.stream));
        }
        if let Some(err) = self.failures.read_error(buffer.slice.id()) {
            return Err(err);
        }
        state.read_back(staging, buffer.slice)
    }

    /// Wait for everything enqueued on `stream`.
    pub fn sync(&mut self, stream: StreamId) -> Result<(), Error> {
        self.collect_dead();
        let state = self.stream(stream)?;
        if state.capture.is_recording() {
            return Err(Error::SyncWhileRecording(stream));
        }
        state.sync().map_err(Error::from)
    }

    /// Release every page of `stream` no slice is held in.
    pub fn trim(&mut self, stream: StreamId) -> Result<usize, Error> {
        self.collect_dead();
        self.stream(stream)?.trim()
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
        &mut self,
        stream: StreamId,
        kernel: &D::Kernel,
        groups: [u32; 3],
        args: &[BufferRef<'_>],
        info: &[u8],
        params: &[u8],
    ) -> Result<(), Error> {
        self.collect_dead();
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
        let Self {
            streams,
            failures,
            next_buffer,
            ..
        } = self;
        let state = streams
            .get_mut(&stream)
            .ok_or(Error::UnknownStream(stream))?;
        let recording = state.capture.is_recording();
        if let Err(err) = checked {
            if recording {
                state.capture.record_failure(err.clone());
            }
            return Err(err);
        }
        let accesses = signature.accesses();

        let poisoned = args
            .iter()
            .zip(accesses)
            .filter(|(_, access)| access.reads())
            .find_map(|(buffer, _)| failures.read_error(buffer.slice.id()));
        let outcome = match poisoned {
            Some(err) => Err(err),
            None if info.is_empty() => {
                enqueue_launch::<D>(state, kernel, groups, args, None, params).map(|()| None)
            }
            None => {
                let mut ids = || {
                    *next_buffer += 1;
                    BufferId(*next_buffer)
                };
                state.info_slice(info, &mut ids).and_then(|info_slice| {
                    enqueue_launch::<D>(state, kernel, groups, args, Some(&info_slice), params)
                        .map(|()| Some(info_slice))
                })
            }
        };
        match outcome {
            Ok(info_slice) => {
                if recording {
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
                    for (buffer, access) in args.iter().zip(accesses) {
                        if access.writes() {
                            failures.clear(buffer.slice.id());
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
                        failures.claim(buffer.slice.id(), &cause);
                    }
                }
                if recording {
                    state.capture.record_failure(err.clone());
                }
                Err(err)
            }
        }
    }

    /// Open a capture window on `stream`: arm its pools for the warmup run.
    pub fn prepare(&mut self, stream: StreamId) -> Result<WindowId, Error> {
        self.collect_dead();
        self.next_window += 1;
        let window = WindowId(self.next_window);
        Window::on(self.stream(stream)?).prepare(window)?;
        Ok(window)
    }

    /// Start recording `window` on `stream`.
    pub fn begin(&mut self, stream: StreamId, window: WindowId) -> Result<(), Error> {
        self.collect_dead();
        Window::on(self.stream(stream)?).begin(window)
    }

    /// Close `window` on `stream` and make a graph of what it recorded.
    ///
    /// A refusal claims every buffer the recording would have written, so a
    /// later read of one fails with the refusal instead of returning bytes
    /// nobody wrote.
    pub fn instantiate(&mut self, stream: StreamId, window: WindowId) -> Result<GraphId, Error> {
        self.collect_dead();
        self.next_graph += 1;
        let id = GraphId(self.next_graph);
        let state = self
            .streams
            .get_mut(&stream)
            .ok_or(Error::UnknownStream(stream))?;
        let result = Window::on(state).instantiate(window, id);
        let deferred = std::mem::take(&mut state.deferred_destroys);
        let result = match result {
            Ok(graph) => {
                self.captures.insert(id, graph);
                Ok(id)
            }
            Err(Refused { error, written }) => {
                let cause = Arc::new(error.clone());
                for buffer in written {
                    self.failures.claim(buffer, &cause);
                }
                Err(error)
            }
        };
        for graph in deferred {
            self.destroy_graph(graph);
        }
        result
    }

    /// Enqueue graph `id`'s recorded work.
    ///
    /// Allocation-free on the success path: a replay is what graphs exist to
    /// make cheap, and the core must add nothing the driver does not.
    pub fn replay(&mut self, id: GraphId) -> Result<(), Error> {
        self.collect_dead();
        let Self {
            streams,
            captures,
            failures,
            ..
        } = self;
        let graph = captures.get(id).ok_or(Error::UnknownGraph(id))?;
        let state = streams
            .get_mut(&graph.stream)
            .ok_or(Error::UnknownStream(graph.stream))?;
        if state.capture.is_recording() {
            return Err(Error::ReplayWhileRecording(graph.stream));
        }
        // A claimed input: the replay would compute from bytes nobody wrote.
        // The one exception is a claim this graph's own failed replay left on
        // a buffer it reads and rewrites (`x += y`): retrying is how that
        // claim is repaired, and the design's rule for a failed replay.
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
            None => D::replay(&graph.exec, &mut state.raw).map_err(|cause| Error::ReplayFailed {
                graph: id,
                cause: Arc::new(cause.into()),
            }),
        };
        match outcome {
            Ok(()) => {
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
    }

    /// Destroy graph `id`: sync its stream (a replay may still run), drop the
    /// executable and its pins, and free the info-cache entries no other
    /// graph pins. A no-op for an unknown id. Deferred to the window's close
    /// if its stream is recording, since the sync would abort the recording.
    pub fn destroy_graph(&mut self, id: GraphId) {
        self.collect_dead();
        let Some(stream) = self.captures.get(id).map(|graph| graph.stream) else {
            return;
        };
        let Some(state) = self.streams.get_mut(&stream) else {
            drop(self.captures.remove(id));
            return;
        };
        if state.capture.is_recording() {
            if !state.deferred_destroys.contains(&id) {
                state.deferred_destroys.push(id);
            }
            return;
        }
        let synced = state.sync();
        let graph = self.captures.remove(id);
        if let Err(err) = synced {
            log::warn!("{id}: sync before destroy failed, destroying anyway: {err}");
            // A replay may still be running, so what the graph pinned waits
            // in the drop queue for a fence that succeeds instead of going
            // straight back to the pool.
            if let Some(graph) = graph {
                for slice in graph._retained {
                    state.drops.push(slice);
                }
            }
        }
        for slice in state.info.graph_release(id) {
            state.drops.push(slice);
        }
    }

    /// Where `stream` is in a capture window's life.
    pub fn phase(&mut self, stream: StreamId) -> Result<Phase, Error> {
        Ok(self.stream(stream)?.capture.phase())
    }

    /// Whether `id` names a live graph.
    pub fn has_graph(&self, id: GraphId) -> bool {
        self.captures.contains(id)
    }

    /// Live graphs on the device.
    pub fn live_graphs(&self) -> usize {
        self.captures.len()
    }

    /// Buffers currently claimed by a failure.
    pub fn claimed_buffers(&self) -> usize {
        self.failures.len()
    }

    /// What `stream` holds now.
    pub fn usage(&mut self, stream: StreamId) -> Result<StreamUsage, Error> {
        self.collect_dead();
        Ok(self.stream(stream)?.usage())
    }

    /// Call `f` with graph `id`'s executable and its stream's driver stream,
    /// under the lock: how a benchmark measures the raw driver's replay of
    /// the very executable the core replays. `f` runs under the device's
    /// lock, so it must not call back into the client (nor drop a graph
    /// handle, whose drop does).
    pub fn with_raw_graph<R>(
        &mut self,
        id: GraphId,
        f: impl FnOnce(&D::Executable, &mut D::Stream) -> R,
    ) -> Result<R, Error> {
        let graph = self.captures.get(id).ok_or(Error::UnknownGraph(id))?;
        let state = self
            .streams
            .get_mut(&graph.stream)
            .ok_or(Error::UnknownStream(graph.stream))?;
        Ok(f(&graph.exec, &mut state.raw))
    }

    /// Call `f` with `stream`'s driver stream and the device slices of
    /// `buffers`: how a benchmark issues the raw driver's launch on the very
    /// memory the core uses. Under the device's lock, as for
    /// [`Server::with_raw_graph`].
    pub fn with_raw_stream<R>(
        &mut self,
        stream: StreamId,
        buffers: &[BufferRef<'_>],
        f: impl FnOnce(&mut D::Stream, &[DeviceSlice<'_, D>]) -> R,
    ) -> Result<R, Error> {
        for buffer in buffers {
            check_owner(*buffer, stream)?;
        }
        let state = self.stream(stream)?;
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
    }
}

impl<D: GraphDriver + Builtins> Server<D> {
    /// Builtin kernel `which`, compiled once per device.
    pub fn builtin(&mut self, which: Builtin) -> Result<Arc<D::Kernel>, Error> {
        if let Some(kernel) = self.kernels.get(&which) {
            return Ok(kernel.clone());
        }
        let kernel = Arc::new(D::builtin(&self.device, which)?);
        self.kernels.insert(which, kernel.clone());
        Ok(kernel)
    }
}

impl<D: GraphDriver> Drop for Server<D> {
    fn drop(&mut self) {
        self.collect_dead();
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(mut state) = self.streams.remove(&id) {
                let graphs = self.captures.on_stream(id);
                Self::close_stream(&mut state, &mut self.captures, &graphs);
            }
        }
        self.kernels.clear();
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
