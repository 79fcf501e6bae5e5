//! The calls a client makes on its device: streams, memory, launches,
//! captures and replays.

use super::buffer::{Buffer, BufferInner};
use super::graph_handle::{GraphHandle, GraphInner};
use super::kernel::Kernel;
use super::shared::{NEXT_CLIENT, Shared};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::builtin::{Builtin, BuiltinInfo, Builtins, groups_for};
use crate::capture::window::Update;
use crate::driver::{DeviceInfo, DeviceSlice, GraphDriver};
use crate::error::Error;
use crate::ids::{GraphId, StreamId, WindowId};
use crate::kernels::span::Span;
use crate::memory::keep_alive::Rejected;
use crate::memory::pool::SliceHandle;
use crate::recorded::entries::GraphInfo;
use crate::server::{AnySlot, Bound, BufferRef, Server};
use crate::streams::capturing::Phase;
use crate::streams::state::{Config, StreamUsage};

/// A handle to one device. `Clone + Send + Sync`: clones share the device.
pub struct Client<D: GraphDriver> {
    pub(crate) shared: Arc<Shared<D>>,
}

impl<D: GraphDriver> Clone for Client<D> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// Which run of a one-call capture the closure is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The warmup run, executed for real, that grows the pools.
    Warmup,
    /// The run that is recorded into the graph.
    Record,
}

impl<D: GraphDriver> Client<D> {
    /// Open the device the backend's environment selects, with default sizes.
    pub fn open() -> Result<Self, Error> {
        Self::open_with(Config::default())
    }

    /// Open the device the backend's environment selects.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] with the driver's reason when the backend has
    /// no usable device here (no library, no device, a driver too old).
    pub fn open_with(config: Config) -> Result<Self, Error> {
        let device = D::open().map_err(|err| Error::Unavailable {
            backend: D::NAME,
            reason: err.message,
        })?;
        Ok(Self::with_device(device, config))
    }

    /// Open device `index` of [`Client::devices`] with default sizes: one
    /// client per device, so a process can drive every GPU of a machine.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] with the driver's reason.
    pub fn open_device(index: usize) -> Result<Self, Error> {
        Self::open_device_with(index, Config::default())
    }

    /// Open device `index` of [`Client::devices`].
    pub fn open_device_with(index: usize, config: Config) -> Result<Self, Error> {
        let device = D::open_index(index).map_err(|err| Error::Unavailable {
            backend: D::NAME,
            reason: err.message,
        })?;
        Ok(Self::with_device(device, config))
    }

    /// Every device the backend sees, in the order
    /// [`Client::open_device`] numbers them.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the backend sees none, with why.
    pub fn devices() -> Result<Vec<DeviceInfo>, Error> {
        D::devices().map_err(|err| Error::Unavailable {
            backend: D::NAME,
            reason: err.message,
        })
    }

    /// A client over an already opened device.
    pub fn with_device(device: Arc<D::Device>, config: Config) -> Self {
        Self {
            shared: Arc::new(Shared {
                server: Server::new(device.clone(), config),
                device,
                id: NEXT_CLIENT.fetch_add(1, Ordering::Relaxed),
            }),
        }
    }

    pub(crate) fn server(&self) -> Result<&Server<D>, Error> {
        Ok(&self.shared.server)
    }

    /// A call that `streams` may refuse. Every such refusal passes here, so
    /// no call has to remember it: a window the calling thread records on
    /// one of them, or that one of them is joined to, can no longer seal
    /// (rule 23). Capture calls made out of order and queries go around it,
    /// since they change nothing (rule 1).
    #[inline(always)]
    pub(crate) fn refusing<R>(
        &self,
        streams: &[StreamId],
        call: impl FnOnce(&Server<D>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let server = &self.shared.server;
        call(server).inspect_err(|err| {
            for &stream in streams {
                server.doom(stream, err);
            }
        })
    }

    /// `buffer` as this client's server sees it. Every client numbers its
    /// streams and buffers from one and cuts its own pages, so another
    /// client's buffer would name memory of this one's that it never owned.
    pub(crate) fn buffer_ref<'b>(&self, buffer: &'b Buffer) -> Result<BufferRef<'b>, Error> {
        if buffer.inner.client != self.shared.id {
            return Err(Error::OtherClient(buffer.id()));
        }
        Ok(BufferRef {
            slice: buffer.slice(),
            stream: buffer.inner.stream,
            shared: &buffer.inner.shared,
            span: buffer.view,
        })
    }

    /// `graph`'s id, if this client made it: graph ids, too, are numbered
    /// per client, and another's would name a graph of this one.
    fn graph_id(&self, graph: &GraphHandle<D>) -> Result<GraphId, Error> {
        if std::ptr::eq(graph.inner.shared.as_ptr(), Arc::as_ptr(&self.shared)) {
            Ok(graph.id())
        } else {
            Err(Error::UnknownGraph(graph.id()))
        }
    }

    /// The opened device.
    pub fn device(&self) -> &Arc<D::Device> {
        &self.shared.device
    }

    /// What the device is.
    pub fn device_info(&self) -> DeviceInfo {
        D::device_info(&self.shared.device)
    }

    /// Create a stream.
    pub fn create_stream(&self) -> Result<StreamId, Error> {
        self.server()?.create_stream()
    }

    /// Take in a stream the backend made over the caller's own handle (a
    /// CUDA or HIP stream from `Stream::from_raw`): captures on it record
    /// between the caller's own launches on that handle, and
    /// [`Client::destroy_stream`] leaves the handle to its owner unless its
    /// ownership was handed over.
    ///
    /// # Errors
    ///
    /// [`Error::OtherDevice`] for a stream of another device than the
    /// client's.
    pub fn adopt_stream(&self, stream: D::Stream) -> Result<StreamId, Error> {
        self.server()?.adopt_stream(stream)
    }

    /// Call `f` with the device page `buffer` lies in, its offset there and
    /// its length (a view's own), for the caller's own launches on that
    /// memory: a CUDA or HIP device pointer is the page's plus the offset.
    /// `f` runs under the buffer's stream's lock, so it must not call this
    /// client.
    ///
    /// The core knows nothing of the caller's work: the caller orders it
    /// with the client's (launching on an adopted stream, or syncing).
    ///
    /// # Errors
    ///
    /// [`Error::OtherClient`] for another client's buffer, and
    /// [`Error::UnknownStream`] once the buffer's stream is destroyed.
    pub fn with_device_slice<R>(
        &self,
        buffer: &Buffer,
        f: impl FnOnce(DeviceSlice<'_, D>) -> R,
    ) -> Result<R, Error> {
        if buffer.inner.client != self.shared.id {
            return Err(Error::OtherClient(buffer.id()));
        }
        self.server()?.with_device_slice(buffer, f)
    }

    /// Destroy a stream, its graphs and its memory.
    pub fn destroy_stream(&self, stream: StreamId) -> Result<(), Error> {
        self.server()?.destroy_stream(stream)
    }

    /// Allocate `len` bytes on `stream`, contents unspecified.
    pub fn allocate(&self, stream: StreamId, len: u64) -> Result<Buffer, Error> {
        self.refusing(&[stream], |server| {
            let slot = server.buffer_slot(stream)?;
            let slice = server.allocate(stream, len)?;
            Ok(self.buffer(stream, slot, slice))
        })
    }

    /// A buffer on `stream` over memory allocated elsewhere: `page`, made by
    /// the backend's import constructor. It is tracked like any buffer of
    /// the stream (hazards, claims, views, the pins of graphs, the order of
    /// streams that share it), but the pools never cut or free it: once
    /// every handle, view, graph and queued use is done with it, the page
    /// is dropped, which lets go of what kept the memory alive.
    ///
    /// # Errors
    ///
    /// Refused, with `page` handed back: [`Error::NotImported`] for a page
    /// the backend did not make from imported memory, [`Error::EmptyBuffer`]
    /// for an empty one, [`Error::OutOfOrder`] while `stream` records, and
    /// [`Error::UnknownStream`].
    pub fn import(
        &self,
        stream: StreamId,
        page: D::DevicePage,
    ) -> Result<Buffer, Rejected<D::DevicePage>> {
        let server = &self.shared.server;
        let imported = match server.buffer_slot(stream) {
            Ok(slot) => server
                .import(stream, page)
                .map(|slice| self.buffer(stream, slot, slice)),
            Err(err) => Err((err, page)),
        };
        imported.map_err(|(err, page)| {
            server.doom(stream, &err);
            Rejected::new(err, page)
        })
    }

    /// A new buffer of this client on `stream` (whose slot is `slot`) over
    /// `slice`.
    fn buffer(&self, stream: StreamId, slot: Arc<dyn AnySlot>, slice: SliceHandle) -> Buffer {
        Buffer {
            view: Span::whole(slice.id(), slice.len()),
            inner: Arc::new(BufferInner {
                id: slice.id(),
                place: slice.place(),
                slice: Some(slice),
                stream,
                slot,
                client: self.shared.id,
                shared: AtomicBool::new(false),
            }),
        }
    }

    /// Allocate a buffer on `stream` holding `bytes`.
    pub fn create(&self, stream: StreamId, bytes: &[u8]) -> Result<Buffer, Error> {
        let buffer = self.allocate(stream, bytes.len() as u64)?;
        self.write(&buffer, bytes)?;
        Ok(buffer)
    }

    /// Allocate a buffer on `stream` holding `values`.
    pub fn create_f32(&self, stream: StreamId, values: &[f32]) -> Result<Buffer, Error> {
        self.create(stream, &f32_bytes(values))
    }

    /// Enqueue a copy of `bytes` (exactly the buffer's size) into `buffer`.
    pub fn write(&self, buffer: &Buffer, bytes: &[u8]) -> Result<(), Error> {
        let buffer = self.buffer_ref(buffer)?;
        self.refusing(&[buffer.stream], |server| server.write(buffer, bytes))
    }

    /// Enqueue a copy of `values` into `buffer`.
    pub fn write_f32(&self, buffer: &Buffer, values: &[f32]) -> Result<(), Error> {
        self.write(buffer, &f32_bytes(values))
    }

    /// Read `buffer` back, waiting for the work before it. Fails with the
    /// claim if an operation that was to write it failed or never ran.
    pub fn read(&self, buffer: &Buffer) -> Result<Vec<u8>, Error> {
        let buffer = self.buffer_ref(buffer)?;
        self.refusing(&[buffer.stream], |server| server.read(buffer))
    }

    /// Read `buffer` back as `f32`s.
    ///
    /// # Errors
    ///
    /// [`Error::NotWhole`] when the buffer's size is not a multiple of 4.
    pub fn read_f32(&self, buffer: &Buffer) -> Result<Vec<f32>, Error> {
        let at = self.buffer_ref(buffer)?;
        let bytes = self.refusing(&[at.stream], |server| {
            if !buffer.len().is_multiple_of(4) {
                return Err(Error::NotWhole {
                    buffer: buffer.id(),
                    bytes: buffer.len(),
                    element: 4,
                });
            }
            server.read(at)
        })?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Wait for everything enqueued on `stream`.
    pub fn sync(&self, stream: StreamId) -> Result<(), Error> {
        self.refusing(&[stream], |server| server.sync(stream))
    }

    /// Order `stream` after `other`: the work issued on `stream` from here
    /// runs after all the work issued on `other` so far, on the device (the
    /// host does not wait). For a caller that orders streams itself; work
    /// on shared buffers is ordered without it.
    ///
    /// Inside a capture window this is fork and join (rule 21): while
    /// `other` records, its thread's `wait(stream, other)` makes `stream`
    /// join the window (its launches are recorded into the graph), and
    /// `wait(other, stream)` joins it back; a window closed with a stream
    /// still joined is refused.
    ///
    /// # Errors
    ///
    /// [`Error::NotRecorder`] when another thread than the window's forks or
    /// joins; [`Error::WaitOutsideWindow`] when a stream whose work a window
    /// records would wait for work outside it; [`Error::WaitOnRecording`]
    /// when `other`'s work is being recorded; [`Error::OutOfOrder`] for a
    /// stream that cannot join (it has a window of its own, or is joined to
    /// another); [`Error::UnknownStream`]; or the driver's refusal.
    pub fn wait(&self, stream: StreamId, other: StreamId) -> Result<(), Error> {
        self.refusing(&[stream, other], |server| server.wait(stream, other))
    }

    /// Give back every page of `stream` that holds no live slice.
    pub fn trim(&self, stream: StreamId) -> Result<usize, Error> {
        self.refusing(&[stream], |server| server.trim(stream))
    }

    /// Enqueue a launch of `kernel` with `groups` workgroups over
    /// `buffers` (in the kernel's binding order), `info` bytes (staged in
    /// device memory, for kernels that read info) and `params` (its by-value
    /// parameters, packed in order: see [`Params`](crate::Params)).
    ///
    /// # Errors
    ///
    /// [`Error::KernelMismatch`] when the launch does not match the
    /// kernel's signature (binding count, info or parameter size, a grid
    /// outside the device's limits, a written buffer bound twice): refused
    /// before it reaches the driver. A launch that reads a buffer a failure
    /// claimed fails with that claim and claims what it writes.
    pub fn launch(
        &self,
        stream: StreamId,
        kernel: &Kernel<D>,
        groups: [u32; 3],
        buffers: &[&Buffer],
        info: &[u8],
        params: &[u8],
    ) -> Result<(), Error> {
        let owned = self.on(stream, buffers, |_| true);
        self.refusing(&[stream], |server| {
            if !owned {
                self.check_clients(buffers)?;
            }
            server.launch(stream, &kernel.0, groups, buffers, info, params, owned)
        })
    }

    /// Enqueue `op`, a foreign operation (a kernel whose signature is
    /// [`Signature::foreign`](crate::Signature::foreign): another library's
    /// work, built by the backend's `unsafe` constructor), over `buffers` in
    /// its declared order.
    ///
    /// The core treats it as a launch over the declared accesses,
    /// everywhere a launch counts: hazards and dependency edges, pins while
    /// a graph holds it, the written set and claims when it fails or its
    /// window is doomed, ordering across streams, temporaries. What each
    /// backend hands the operation, and where it may not go (Vulkan keeps it
    /// out of conditional bodies), is on the backend's constructor.
    ///
    /// # Errors
    ///
    /// [`Error::BadLaunch`] when `op` is a kernel rather than a foreign
    /// operation; otherwise as [`Client::launch`]: a buffer of another
    /// client, the wrong number of buffers, or a written buffer declared
    /// twice is refused before the driver sees it.
    pub fn foreign(
        &self,
        stream: StreamId,
        op: &Kernel<D>,
        buffers: &[&Buffer],
    ) -> Result<(), Error> {
        if !op.signature().is_foreign() {
            return Err(Error::BadLaunch(format!(
                "{} is a kernel, not a foreign operation: launch it with Client::launch",
                op.signature().name()
            )));
        }
        self.launch(stream, op, [1, 1, 1], buffers, &[], &[])
    }

    /// Refuse buffers of another client: see [`Client::buffer_ref`].
    fn check_clients(&self, buffers: &[&Buffer]) -> Result<(), Error> {
        match buffers.iter().find(|b| b.inner.client != self.shared.id) {
            Some(other) => Err(Error::OtherClient(other.id())),
            None => Ok(()),
        }
    }

    /// Whether every one of `buffers` is this client's buffer of `stream`
    /// and passes `also`, in one pass: a launch's quick check. Each buffer
    /// keeps its stream's slot, one per stream of one client, so buffers
    /// that keep the first one's slot are where the first one is. Which
    /// buffer is wrong, and how, is for the checks that explain.
    #[inline]
    fn on(&self, stream: StreamId, buffers: &[&Buffer], also: impl Fn(&Buffer) -> bool) -> bool {
        let Some(first) = buffers.first() else {
            return true;
        };
        let first = &first.inner;
        first.client == self.shared.id
            && first.stream == stream
            && buffers
                .iter()
                .all(|b| Arc::ptr_eq(&b.inner.slot, &first.slot) && also(b))
    }

    /// Open a capture window on `stream` and arm its pools: run the warmup
    /// next, then [`Client::begin`].
    pub fn prepare(&self, stream: StreamId) -> Result<WindowId, Error> {
        self.server()?.prepare(stream)
    }

    /// Start recording `window`: the work the calling thread issues on
    /// `stream` from here until [`Client::instantiate`] is recorded, not
    /// run. Work other threads issue on the stream meanwhile is refused
    /// ([`Error::NotRecorder`]).
    pub fn begin(&self, stream: StreamId, window: WindowId) -> Result<(), Error> {
        self.server()?.begin(stream, window)
    }

    /// Make the calling thread the one whose work `window`'s recording
    /// takes, for a recording that moves between threads (a task resumed
    /// elsewhere). The thread that recorded until now is refused from here.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfOrder`] when `window` is not the one recording.
    pub fn adopt(&self, stream: StreamId, window: WindowId) -> Result<(), Error> {
        self.server()?.adopt(stream, window)
    }

    /// Close `window` and make a graph of what it recorded. The stream
    /// leaves capture mode whatever the answer.
    pub fn instantiate(&self, stream: StreamId, window: WindowId) -> Result<GraphHandle<D>, Error> {
        let (id, key) = self.server()?.instantiate(stream, window)?;
        Ok(GraphHandle {
            inner: Arc::new(GraphInner {
                id,
                key,
                stream,
                at: self.shared.server.stream_ref(stream),
                shared: Arc::downgrade(&self.shared),
            }),
        })
    }

    /// Capture in one call: run `body` once for real as warmup
    /// ([`Pass::Warmup`]), then once more recorded ([`Pass::Record`]), and
    /// instantiate. Returns the graph and what the recorded run returned.
    ///
    /// `body` must issue the same work in both passes; whatever it
    /// allocates in the recorded run must have been allocated in warmup.
    ///
    /// What the warmup allocates and drops before it returns is a
    /// temporary: in the recorded run, the same allocation is cut from the
    /// arena the stream's graphs share (see [`Config::share_temporaries`]).
    /// What it returns, or keeps elsewhere, is an ordinary buffer.
    ///
    /// # Errors
    ///
    /// A body that fails in either pass seals nothing: its error comes
    /// back (or the window's own refusal, when an operation inside it
    /// failed first), the window is closed, and what the recorded run would
    /// have written is claimed by that error until something writes it.
    pub fn capture<T>(
        &self,
        stream: StreamId,
        body: impl FnMut(Pass) -> Result<T, Error>,
    ) -> Result<(GraphHandle<D>, T), Error> {
        self.record(stream, body, false, |window| {
            self.instantiate(stream, window)
        })
    }

    /// The one-call capture's shared half: a window on `stream`, the body's
    /// warmup and recorded runs, then `seal` (instantiate or update). The
    /// window is closed on every path, a panicking body's included.
    fn record<T, R>(
        &self,
        stream: StreamId,
        mut body: impl FnMut(Pass) -> Result<T, Error>,
        updating: bool,
        seal: impl FnOnce(WindowId) -> Result<R, Error>,
    ) -> Result<(R, T), Error> {
        let window = self.prepare(stream)?;
        // Closes the window if `body` panics, so an unwinding caller does
        // not leave the stream armed or recording, nor a graph behind.
        let guard = CloseOnUnwind {
            client: self,
            stream,
            window,
            updating,
        };
        let warm = match body(Pass::Warmup) {
            Ok(warm) => warm,
            Err(err) => {
                // Closing from Prepared disarms the pools; its refusal says
                // nothing the warmup's own error does not.
                std::mem::forget(guard);
                let _closed = self.shared.server.instantiate(stream, window);
                return Err(err);
            }
        };
        // What the body dropped by now were its temporaries; what it
        // returned (dropped next) is kept by the caller in the recorded run.
        self.shared.server.warmed(stream, window);
        drop(warm);
        if let Err(err) = self.begin(stream, window) {
            std::mem::forget(guard);
            return Err(err);
        }
        let recorded = body(Pass::Record);
        std::mem::forget(guard);
        match recorded {
            Ok(value) => Ok((seal(window)?, value)),
            // A run that failed recorded only part of its work, or work the
            // caller disowns: nothing of it may seal, a graph updated least
            // of all.
            Err(err) => Err(self.shared.server.abandon(stream, window, err)),
        }
    }

    /// Close `window` and make `graph` run what it recorded instead of its
    /// old work: the three-step form of [`Client::recapture`]. The window
    /// must be on the graph's stream.
    ///
    /// # Errors
    ///
    /// As [`Client::instantiate`]; a refusal leaves `graph` as it was,
    /// replayable with its old work, and claims nothing.
    pub fn update(&self, graph: &GraphHandle<D>, window: WindowId) -> Result<Update, Error> {
        let id = self.graph_id(graph)?;
        self.server()?.update(graph.stream(), window, id)
    }

    /// Capture `body` again into the existing `graph`, as
    /// [`Client::capture`] does (a warmup run, then the recorded run), and
    /// update the graph's executable instead of making a new graph: in
    /// place where the new recording has the same shape (the same kernels
    /// in the same order; buffers, grids, parameters and info may change),
    /// instantiated anew behind the same handle otherwise. Says which.
    ///
    /// Every replay enqueued before keeps running the old work: what the
    /// old recording pinned is released only once the device is past them.
    ///
    /// ```
    /// use capture_core::{Builtin, Builtins, Client, Error, GraphDriver, Update};
    ///
    /// fn grow<D: GraphDriver + Builtins>(client: &Client<D>) -> Result<(), Error> {
    ///     let stream = client.create_stream()?;
    ///     let x = client.create_f32(stream, &[0.0; 256])?;
    ///     let (graph, ()) = client.capture(stream, |_| {
    ///         client.run_builtin(stream, Builtin::Fill, &[&x], 128, 1.0)
    ///     })?;
    ///     // The next step covers more elements: same kernel, new info.
    ///     let (how, ()) = client.recapture(&graph, |_| {
    ///         client.run_builtin(stream, Builtin::Fill, &[&x], 256, 2.0)
    ///     })?;
    ///     assert_eq!(how, Update::InPlace);
    ///     graph.replay()?;
    ///     assert_eq!(client.read_f32(&x)?, vec![2.0; 256]);
    ///     Ok(())
    /// }
    ///
    /// grow(&Client::<backend_host::Host>::open()?)?;
    /// # Ok::<(), Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Client::capture`]: a refusal, or a body that fails, leaves
    /// `graph` as it was, replaying its old work.
    pub fn recapture<T>(
        &self,
        graph: &GraphHandle<D>,
        body: impl FnMut(Pass) -> Result<T, Error>,
    ) -> Result<(Update, T), Error> {
        self.graph_id(graph)?;
        self.record(graph.stream(), body, true, |window| {
            self.update(graph, window)
        })
    }

    /// Enqueue `graph`'s recorded work on its stream.
    ///
    /// # Errors
    ///
    /// [`Error::Claimed`] where the graph reads a buffer a failure claimed,
    /// and [`Error::ReplayFailed`] where the driver refuses; either claims
    /// what the graph writes. A buffer claimed only by this graph's own
    /// failed replay does not refuse the retry, which clears it; any later
    /// failure on that buffer takes the claim over.
    pub fn replay(&self, graph: &GraphHandle<D>) -> Result<(), Error> {
        let id = self.graph_id(graph)?;
        let inner = &*graph.inner;
        self.refusing(&[inner.stream], |server| {
            server.replay_at(id, inner.key, inner.stream, &inner.at)
        })
    }

    /// Replay graph `id`, which may be unknown or destroyed.
    pub fn replay_id(&self, id: GraphId) -> Result<(), Error> {
        let server = &self.shared.server;
        let stream = server.stream_of(id);
        self.refusing(stream.as_slice(), |server| server.replay(id))
    }

    /// Destroy `graph` now, after syncing its stream. Later replays of it
    /// fail with [`Error::UnknownGraph`]; destroying twice is a no-op.
    pub fn destroy(&self, graph: &GraphHandle<D>) -> Result<(), Error> {
        // Another client's graph is not this one's to destroy: a no-op.
        if let Ok(id) = self.graph_id(graph) {
            self.server()?.destroy_graph(id);
        }
        Ok(())
    }

    /// `graph` drawn as Graphviz DOT, from its window's log: a node per
    /// recorded launch and copy (kernel, grid, each binding's access and
    /// buffer), an edge per dependency its declared accesses imply
    /// (read-after-write, write-after-read, write-after-write). Launches
    /// with no path between them could run side by side.
    pub fn graph_dot(&self, graph: &GraphHandle<D>) -> Result<String, Error> {
        let id = self.graph_id(graph)?;
        self.server()?.graph_dot(id, graph.stream())
    }

    /// What `graph` is and has done: launches, copies, bytes pinned, the
    /// time to instantiate, whether upload succeeded, replays and updates.
    pub fn graph_info(&self, graph: &GraphHandle<D>) -> Result<GraphInfo, Error> {
        let id = self.graph_id(graph)?;
        self.server()?.graph_info(id, graph.stream())
    }

    /// Whether `graph` is live.
    pub fn is_live(&self, graph: &GraphHandle<D>) -> bool {
        self.graph_id(graph)
            .is_ok_and(|id| self.shared.server.has_graph(id))
    }

    /// Where `stream` is in a capture window's life.
    pub fn phase(&self, stream: StreamId) -> Result<Phase, Error> {
        self.server()?.phase(stream)
    }

    /// Live graphs on the device.
    pub fn live_graphs(&self) -> usize {
        self.shared.server.live_graphs()
    }

    /// Buffers currently claimed by a failure.
    pub fn claimed_buffers(&self) -> usize {
        self.shared.server.claimed_buffers()
    }

    /// Buffers whose every handle dropped while a graph or queued work
    /// still uses their memory: their claims and order across streams are
    /// kept until it lets go.
    pub fn lingering_buffers(&self) -> usize {
        self.shared.server.lingering_buffers()
    }

    /// What `stream` holds now.
    pub fn usage(&self, stream: StreamId) -> Result<StreamUsage, Error> {
        self.server()?.usage(stream)
    }

    #[cfg(feature = "raw")]
    /// Run `f` on `graph`'s executable and its driver stream under the
    /// stream's lock; for measuring the raw driver against the core on the
    /// same executable. `f` must not call this client on that stream (nor
    /// drop a graph handle of it): the lock is held.
    pub fn with_raw_graph<R>(
        &self,
        graph: &GraphHandle<D>,
        f: impl FnOnce(&D::Executable, &mut D::Stream) -> R,
    ) -> Result<R, Error> {
        let id = self.graph_id(graph)?;
        self.server()?.with_raw_graph(id, f)
    }

    #[cfg(feature = "raw")]
    /// Run `f` on `stream`'s driver stream and the device slices of
    /// `buffers` under the lock; for measuring raw driver launches against
    /// the core's on the same memory. `f` must not call this client: the
    /// lock is held.
    pub fn with_raw_stream<R>(
        &self,
        stream: StreamId,
        buffers: &[&Buffer],
        f: impl FnOnce(&mut D::Stream, &[DeviceSlice<'_, D>]) -> R,
    ) -> Result<R, Error> {
        let mut refs: smallvec::SmallVec<[BufferRef<'_>; 8]> = smallvec::SmallVec::new();
        for buffer in buffers {
            refs.push(self.buffer_ref(buffer)?);
        }
        self.server()?.with_raw_stream(stream, &refs, f)
    }
}

impl<D: GraphDriver + Builtins> Client<D> {
    /// Launch builtin `which` over `n` elements of `buffers` (in the
    /// kernel's binding order) with `scalar`.
    pub fn run_builtin(
        &self,
        stream: StreamId,
        which: Builtin,
        buffers: &[&Buffer],
        n: u32,
        scalar: f32,
    ) -> Result<(), Error> {
        // One pass over the buffers on the hot path; which check failed,
        // and the first compile of the kernel, are the cold path's.
        let need = u64::from(n) * 4;
        let owned = buffers.len() == which.accesses().len()
            && self.on(stream, buffers, |b| b.len() >= need);
        self.refusing(&[stream], |server| {
            let kernel = match server.compiled(which) {
                Some(kernel) if owned => kernel,
                _ => self.check_builtin(server, which, buffers, n)?,
            };
            let info = BuiltinInfo::new(n, scalar).to_bytes();
            server.launch(stream, kernel, groups_for(n), buffers, &info, &[], owned)
        })
    }

    /// [`Client::run_builtin`]'s checks one by one, in the order their
    /// errors are reported, and the kernel compiled if it is not yet.
    #[cold]
    fn check_builtin<'s>(
        &self,
        server: &'s Server<D>,
        which: Builtin,
        buffers: &[&Buffer],
        n: u32,
    ) -> Result<&'s Arc<D::Kernel>, Error> {
        let accesses = which.accesses();
        if buffers.len() != accesses.len() {
            return Err(Error::BadLaunch(format!(
                "{} binds {} buffers, got {}",
                which.name(),
                accesses.len(),
                buffers.len()
            )));
        }
        if let Some(short) = buffers.iter().find(|b| b.len() < u64::from(n) * 4) {
            return Err(Error::BadLaunch(format!(
                "{} over {n} elements needs {} bytes, {} holds {}",
                which.name(),
                u64::from(n) * 4,
                short.id(),
                short.len()
            )));
        }
        let kernel = server.builtin(which)?;
        self.check_clients(buffers)?;
        Ok(kernel)
    }
}

/// Closes a one-call capture's window when its body unwinds.
struct CloseOnUnwind<'a, D: GraphDriver> {
    client: &'a Client<D>,
    stream: StreamId,
    window: WindowId,
    /// A re-capture: the graph it updates stays as it was.
    updating: bool,
}

impl<D: GraphDriver> Drop for CloseOnUnwind<'_, D> {
    fn drop(&mut self) {
        // Only reached while unwinding: every normal path forgets the guard.
        // Closing the window is what must happen; a graph it made has no
        // handle to reach it and would live forever, so it goes at once.
        let server = &self.client.shared.server;
        if self.updating {
            server.discard(self.stream, self.window);
        } else if let Ok((graph, _)) = server.instantiate(self.stream, self.window) {
            server.destroy_graph(graph);
        }
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
