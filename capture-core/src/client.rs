//! What a user calls: a cheap, clonable handle to one device.
//!
//! A client may be used from any number of threads at once. Each call locks
//! only the stream it works on (see [`server`](crate::server) for the lock
//! order), so streams driven from different threads run independently, and
//! a driver must not depend on the calling thread.
//!
//! # What may cross threads
//!
//! - Any call, from any thread, on any stream that is not recording.
//! - While a stream records a capture window, only the recording thread
//!   (the one that called [`Client::begin`], or the one that took the
//!   window over with [`Client::adopt`]) may issue work on it: a launch, a
//!   write or an allocation from any other thread is refused with
//!   [`Error::NotRecorder`] and never recorded. Any thread holding the
//!   window's token may close it with [`Client::instantiate`].
//! - Buffers and graph handles may be dropped anywhere: the memory returns
//!   to its stream's pool through the drop queue, and a graph is destroyed
//!   after its stream is synced.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::builtin::{Builtin, BuiltinInfo, Builtins, groups_for};
use crate::capture_state::Phase;
#[cfg(feature = "raw")]
use crate::driver::DeviceSlice;
use crate::driver::{DeviceInfo, Driver, GraphDriver};
use crate::error::Error;
use crate::graph::GraphKey;
use crate::graph_log::GraphInfo;
use crate::ids::{BufferId, GraphId, StreamId, WindowId};
use crate::pool::{Place, SliceHandle};
use crate::server::{AnySlot, Bound, BufferRef, Server, StreamRef};
use crate::signature::Signature;
use crate::span::Span;
use crate::stream::{Config, StreamUsage};
use crate::window::Update;

struct Shared<D: GraphDriver> {
    server: Server<D>,
    device: Arc<D::Device>,
    /// Which client this is: buffers carry it, so another client's buffer,
    /// whose ids and offsets mean nothing here, is refused.
    id: u64,
}

/// Numbers clients, for [`Shared::id`].
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// A handle to one device. `Clone + Send + Sync`: clones share the device.
pub struct Client<D: GraphDriver> {
    shared: Arc<Shared<D>>,
}

impl<D: GraphDriver> Clone for Client<D> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// A device buffer, or a view of part of one ([`Buffer::range`]). Clones
/// and views share the allocation; once the last of them drops, its memory
/// returns to the pool after a fence, unless a graph still uses it, in which
/// case the graph keeps it for its lifetime.
pub struct Buffer {
    inner: Arc<BufferInner>,
    /// The bytes of the allocation this handle names.
    view: Span,
}

struct BufferInner {
    slice: Option<SliceHandle>,
    /// The slice's id and place, copied: a launch reads them here, a load
    /// nearer than the slice's own.
    id: BufferId,
    place: Place,
    stream: StreamId,
    /// The stream's slot: launches find their stream here, and the drop
    /// leaves the slice in its graveyard.
    slot: Arc<dyn AnySlot>,
    client: u64,
    /// Set once another stream used the buffer: from then on every
    /// operation on it is ordered across streams.
    shared: AtomicBool,
}

impl Clone for Buffer {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            view: self.view,
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_view() {
            write!(f, "Buffer({}, {})", self.view, self.inner.stream)
        } else {
            write!(
                f,
                "Buffer({}, {} bytes, {})",
                self.id(),
                self.len(),
                self.inner.stream
            )
        }
    }
}

impl Bound for &Buffer {
    #[inline]
    fn slice(&self) -> &SliceHandle {
        Buffer::slice(self)
    }

    #[inline]
    fn stream(&self) -> StreamId {
        self.inner.stream
    }

    #[inline]
    fn id(&self) -> BufferId {
        self.inner.id
    }

    #[inline]
    fn place(&self) -> Place {
        self.inner.place.narrowed(&self.view)
    }

    #[inline]
    fn span(&self) -> Span {
        self.view
    }

    #[inline]
    fn stream_slot(&self) -> Option<&dyn AnySlot> {
        Some(&*self.inner.slot)
    }

    #[inline]
    fn shared(&self) -> &AtomicBool {
        &self.inner.shared
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        // The device may still be using the memory: hand it to the server,
        // which queues it for a fence, instead of freeing it here.
        if let Some(slice) = self.slice.take() {
            self.slot.graveyard().bury(slice);
        }
    }
}

impl Buffer {
    #[inline]
    fn slice(&self) -> &SliceHandle {
        // Only `Drop` takes the slice out, so a live buffer always has it.
        self.inner
            .slice
            .as_ref()
            .unwrap_or_else(|| unreachable!("a live buffer holds its slice"))
    }

    /// The allocation's id, as errors name it.
    #[inline]
    pub fn id(&self) -> BufferId {
        self.inner.id
    }

    /// Size in bytes: of the view, for a view.
    #[inline]
    pub fn len(&self) -> u64 {
        self.view.len
    }

    /// Whether the buffer holds no bytes (never: empty buffers and views
    /// are refused).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of the allocation this handle names: all of them, or a
    /// view's.
    pub fn span(&self) -> Span {
        self.view
    }

    /// Whether this handle names only part of its allocation.
    pub fn is_view(&self) -> bool {
        self.view.len != self.inner.place.len
    }

    /// A view of `len` bytes of this buffer from `offset`: a buffer of its
    /// own to launches, writes and reads, over the same memory. It keeps the
    /// allocation alive as a clone would.
    ///
    /// Operations on disjoint views of one allocation are independent: a
    /// graph's dependency edges (and the ordering of its replays) compare
    /// byte ranges, so they may run side by side. A launch may bind disjoint
    /// views of one allocation, one of them written; a written view that
    /// overlaps another binding is refused as a written buffer bound twice.
    /// What is tracked per allocation stays per allocation: a failed write
    /// to a view claims the whole allocation ([`Error::Claimed`]) until an
    /// operation writes all of it again, and work on another stream waits
    /// for every earlier user of the allocation.
    ///
    /// # Errors
    ///
    /// [`Error::BadRange`] when `len` is 0, when the range does not lie
    /// inside this buffer, or when `offset` is not a multiple of
    /// [`SLICE_ALIGN`](crate::SLICE_ALIGN) (the binding alignment every
    /// backend can bind).
    pub fn range(&self, offset: u64, len: u64) -> Result<Buffer, Error> {
        let refuse = |reason: &'static str| {
            Err(Error::BadRange {
                buffer: self.id(),
                offset,
                len,
                size: self.len(),
                reason,
            })
        };
        if len == 0 {
            return refuse("a view holds at least one byte");
        }
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            return refuse("the range runs past the buffer's end");
        }
        if !offset.is_multiple_of(crate::pool::SLICE_ALIGN) {
            return refuse("a view's offset is a multiple of SLICE_ALIGN");
        }
        Ok(Buffer {
            inner: self.inner.clone(),
            view: Span {
                buffer: self.view.buffer,
                offset: self.view.offset + offset,
                len,
            },
        })
    }

    /// The stream it was allocated on, whose pool holds it. Any stream of
    /// the client may use it: work on another stream is ordered after what
    /// the buffer's last users did (rule 20).
    pub fn stream(&self) -> StreamId {
        self.inner.stream
    }

    /// Where the buffer's allocation lies in its stream's device pool (a
    /// view's whole allocation): for diagnostics and for tests proving no
    /// two live users share memory.
    pub fn placement(&self) -> Placement {
        let slice = self.slice();
        Placement {
            stream: self.inner.stream,
            page: slice.slot(),
            offset: slice.offset(),
            span: slice.span(),
        }
    }
}

/// Where a buffer lies: its stream's pool page, and the aligned byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The stream whose pool holds it.
    pub stream: StreamId,
    /// The page's slot in that pool.
    pub page: usize,
    /// Byte offset in the page.
    pub offset: u64,
    /// Bytes reserved (the length rounded up to the slice alignment).
    pub span: u64,
}

impl Placement {
    /// Whether the two ranges share a byte.
    pub fn overlaps(&self, other: &Placement) -> bool {
        self.stream == other.stream
            && self.page == other.page
            && self.offset < other.offset + other.span
            && other.offset < self.offset + self.span
    }
}

/// A compiled kernel and its [`Signature`]. Cheap to clone.
///
/// Made from a kernel the backend built: each backend has its own
/// constructors (a Rust closure on the host backend, SPIR-V or WGSL on
/// Vulkan, PTX or CUDA C++ on CUDA, a code object or HIP C++ on HIP), those
/// for GPU code `unsafe`, since only the caller can promise what the code
/// does.
pub struct Kernel<D: Driver>(pub(crate) Arc<D::Kernel>);

impl<D: Driver> Kernel<D> {
    /// Wrap a kernel the backend built.
    pub fn new(kernel: D::Kernel) -> Self {
        Self(Arc::new(kernel))
    }

    /// The backend's kernel, for calling the driver directly.
    pub fn raw(&self) -> &D::Kernel {
        &self.0
    }

    /// What every launch of the kernel must match.
    pub fn signature(&self) -> &Signature {
        D::signature(&self.0)
    }
}

impl<D: Driver> std::fmt::Debug for Kernel<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({})", self.signature())
    }
}

impl<D: Driver> Clone for Kernel<D> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

/// A graph. Clones share it; the last drop destroys it after syncing its
/// stream (deferred until the window closes if that stream is recording).
pub struct GraphHandle<D: GraphDriver> {
    inner: Arc<GraphInner<D>>,
}

struct GraphInner<D: GraphDriver> {
    id: GraphId,
    /// Where its stream holds it.
    key: GraphKey,
    stream: StreamId,
    /// Its stream, kept: a replay finds it without the device's map.
    at: StreamRef<D>,
    shared: Weak<Shared<D>>,
}

impl<D: GraphDriver> Clone for GraphHandle<D> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<D: GraphDriver> std::fmt::Debug for GraphHandle<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphHandle({}, {})", self.inner.id, self.inner.stream)
    }
}

impl<D: GraphDriver> GraphHandle<D> {
    /// The graph's id.
    pub fn id(&self) -> GraphId {
        self.inner.id
    }

    /// The stream it replays on.
    pub fn stream(&self) -> StreamId {
        self.inner.stream
    }
}

impl<D: GraphDriver> GraphHandle<D> {
    /// Enqueue the graph's recorded work on its stream: the same as
    /// [`Client::replay`] with this graph.
    ///
    /// # Errors
    ///
    /// As [`Client::replay`]; [`Error::UnknownGraph`] once the client is
    /// gone.
    pub fn replay(&self) -> Result<(), Error> {
        let Some(shared) = self.inner.shared.upgrade() else {
            return Err(Error::UnknownGraph(self.inner.id));
        };
        let inner = &*self.inner;
        shared
            .server
            .replay_at(inner.id, inner.key, inner.stream, &inner.at)
    }
}

impl<D: GraphDriver> Drop for GraphInner<D> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.server.destroy_graph(self.id);
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

    /// `buffer` as this client's server sees it. Every client numbers its
    /// streams and buffers from one and cuts its own pages, so another
    /// client's buffer would name memory of this one's that it never owned.
    fn buffer_ref<'b>(&self, buffer: &'b Buffer) -> Result<BufferRef<'b>, Error> {
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

    /// Destroy a stream, its graphs and its memory.
    pub fn destroy_stream(&self, stream: StreamId) -> Result<(), Error> {
        self.server()?.destroy_stream(stream)
    }

    /// Allocate `len` bytes on `stream`, contents unspecified.
    pub fn allocate(&self, stream: StreamId, len: u64) -> Result<Buffer, Error> {
        let server = self.server()?;
        let slot = server.buffer_slot(stream)?;
        let slice = server.allocate(stream, len)?;
        Ok(Buffer {
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
        })
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
        self.server()?.write(buffer, bytes)
    }

    /// Enqueue a copy of `values` into `buffer`.
    pub fn write_f32(&self, buffer: &Buffer, values: &[f32]) -> Result<(), Error> {
        self.write(buffer, &f32_bytes(values))
    }

    /// Read `buffer` back, waiting for the work before it. Fails with the
    /// claim if an operation that was to write it failed or never ran.
    pub fn read(&self, buffer: &Buffer) -> Result<Vec<u8>, Error> {
        let buffer = self.buffer_ref(buffer)?;
        self.server()?.read(buffer)
    }

    /// Read `buffer` back as `f32`s.
    ///
    /// # Errors
    ///
    /// [`Error::NotWhole`] when the buffer's size is not a multiple of 4.
    pub fn read_f32(&self, buffer: &Buffer) -> Result<Vec<f32>, Error> {
        if !buffer.len().is_multiple_of(4) {
            return Err(Error::NotWhole {
                buffer: buffer.id(),
                bytes: buffer.len(),
                element: 4,
            });
        }
        let bytes = self.read(buffer)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Wait for everything enqueued on `stream`.
    pub fn sync(&self, stream: StreamId) -> Result<(), Error> {
        self.server()?.sync(stream)
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
        self.server()?.wait(stream, other)
    }

    /// Give back every page of `stream` that holds no live slice.
    pub fn trim(&self, stream: StreamId) -> Result<usize, Error> {
        self.server()?.trim(stream)
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
        if !owned {
            self.check_clients(buffers)
                .map_err(|err| self.shared.server.refuse(stream, err))?;
        }
        self.server()?
            .launch(stream, &kernel.0, groups, buffers, info, params, owned)
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
    pub fn replay(&self, graph: &GraphHandle<D>) -> Result<(), Error> {
        let id = self.graph_id(graph)?;
        let inner = &*graph.inner;
        self.server()?
            .replay_at(id, inner.key, inner.stream, &inner.at)
    }

    /// Replay graph `id`, which may be unknown or destroyed.
    pub fn replay_id(&self, id: GraphId) -> Result<(), Error> {
        self.server()?.replay(id)
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
        let server = self.server()?;
        // One pass over the buffers on the hot path; which check failed,
        // and the first compile of the kernel, are the cold path's.
        let need = u64::from(n) * 4;
        let owned = buffers.len() == which.accesses().len()
            && self.on(stream, buffers, |b| b.len() >= need);
        let kernel = match server.compiled(which) {
            Some(kernel) if owned => kernel,
            _ => self
                .check_builtin(server, which, buffers, n)
                .map_err(|err| server.refuse(stream, err))?,
        };
        let info = BuiltinInfo::new(n, scalar).to_bytes();
        server.launch(stream, kernel, groups_for(n), buffers, &info, &[], owned)
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
