//! The device state every client call is served from.
//!
//! Uses capture, streams and every part below them; only the client uses
//! it.
//!
//! # Locks
//!
//! Each stream's whole state sits under its own mutex, held for the whole
//! of a call on it (its driver waits included), so a call on one stream
//! never waits for a call on another. What streams share has small locks of
//! its own, always taken in this order, so no two calls wait for each
//! other:
//!
//! 1. `streams`, the map of streams, released before any stream lock. Hot
//!    calls skip it: a buffer and a graph handle keep their stream's slot.
//! 2. Stream locks: one, or for work on shared buffers several, in
//!    ascending id (`shared.rs`).
//! 3. `lingering`, then `order`, `graphs` and the claims.
//!
//! `kernels`, the builtins compiled so far, is taken with no stream locked.
//!
//! # Threads and capture windows
//!
//! A recording takes the work of one thread, the one that began or adopted
//! it: another thread's launch, write or allocation on a recording stream is
//! refused with [`Error::NotRecorder`], so it can neither run inside every
//! replay nor vanish from a graph. Any refused call of the recording thread
//! dooms the window (rule 23), through one path, the client's `refusing`:
//! the server only says no. Capture calls out of order change nothing
//! (rule 1).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::builtin::{Builtin, Builtins};
use crate::capture::graph::Captures;
use crate::capture::window::Window;
use crate::driver::GraphDriver;
use crate::error::Error;
use crate::failures::claims::Claims;
use crate::hashing::FastMap;
use crate::ids::{BufferId, GraphId, StreamId, WindowId};
use crate::kernels::span::Span;
use crate::memory::graveyard::Graveyard;
use crate::memory::lingering::Lingering;
use crate::memory::pool::{Place, SliceHandle};
use crate::streams::capturing::Phase;
use crate::streams::order::StreamOrder;
use crate::streams::state::{Config, StreamState, StreamUsage};

pub(crate) use lane::AnySlot;
use lane::{Ids, Lane, Slot};

pub(crate) mod conditional;
mod graphs;
mod lane;
mod launch;
mod memory;
#[cfg(feature = "raw")]
mod raw;
mod shared;

/// A buffer as the server sees it: the slice and the stream it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferRef<'a> {
    /// The buffer's slice.
    pub slice: &'a SliceHandle,
    /// The stream it was allocated on.
    pub stream: StreamId,
    /// Whether another stream used it.
    pub shared: &'a AtomicBool,
    /// The bytes of the slice it names: all of them, or a view's.
    pub span: Span,
}

/// What a launch binds: a buffer's slice and the stream it belongs to.
/// Launches take any binding type that names both, so the client's own
/// buffers go in as they are, with no copy collected per launch.
pub(crate) trait Bound {
    /// The buffer's slice.
    fn slice(&self) -> &SliceHandle;
    /// The stream it was allocated on.
    fn stream(&self) -> StreamId;
    /// The buffer's id.
    fn id(&self) -> BufferId {
        self.slice().id()
    }
    /// Where the bound bytes lie: the whole slice, or the part a view
    /// names.
    fn place(&self) -> Place {
        self.slice().place()
    }
    /// The bound bytes, from the allocation's start.
    fn span(&self) -> Span {
        let slice = self.slice();
        Span::whole(slice.id(), slice.len())
    }
    /// Whether it binds every byte of its allocation: only a write of all
    /// of them clears a claim.
    fn is_whole(&self) -> bool {
        self.span().covers(self.slice().len())
    }
    /// The slot of that stream, where the binding keeps it.
    fn stream_slot(&self) -> Option<&dyn AnySlot> {
        None
    }
    /// Whether it is shared with another stream, and the flag that says so.
    fn shared(&self) -> &AtomicBool;
}

/// A stream as a graph handle keeps it: its slot, so that a replay reaches
/// its stream without the device's map of streams (a lock, a lookup and two
/// reference counts fewer). A destroyed stream's slot keeps nothing of the
/// driver's, so holding it keeps nothing alive.
pub(crate) struct StreamRef<D: GraphDriver>(Option<Arc<Slot<D>>>);

/// The state of one device: its streams, graphs and failures.
pub(crate) struct Server<D: GraphDriver> {
    device: Arc<D::Device>,
    config: Config,
    /// The device's grid limit, every launch is checked against.
    max_groups: [u32; 3],
    streams: RwLock<FastMap<StreamId, Arc<Slot<D>>>>,
    graphs: Mutex<FastMap<GraphId, StreamId>>,
    /// Which stream waits for which around shared buffers; each stream's
    /// slot holds it too, to forget the buffers it collects.
    order: Arc<Mutex<StreamOrder>>,
    /// The buffers failures claimed, on every stream.
    failures: Arc<Claims>,
    /// Dropped buffers whose memory a graph or queued work still uses.
    lingering: Arc<Mutex<Lingering>>,
    /// Destroyed streams whose pages other streams' graphs or queued work
    /// still use: kept, with their driver streams, until those pages are
    /// free.
    retired: Mutex<Vec<StreamState<D>>>,
    /// The builtins compiled so far, in [`Builtin::ALL`] order: read
    /// without a lock once built.
    kernels: [OnceLock<Arc<D::Kernel>>; 4],
    ids: Ids,
    /// Whether memory was ever imported: only then do host waits look at
    /// other streams' imported pages.
    imported: AtomicBool,
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
            order: Arc::default(),
            failures: Arc::default(),
            lingering: Arc::default(),
            retired: Mutex::default(),
            kernels: Default::default(),
            ids: Ids::default(),
            imported: AtomicBool::new(false),
        }
    }

    #[inline]
    fn slot(&self, id: StreamId) -> Result<Arc<Slot<D>>, Error> {
        let streams = self.streams.read().map_err(|_| Error::Poisoned)?;
        // A match, not `ok_or`: the error is not built (and dropped) on
        // every successful lookup.
        match streams.get(&id) {
            Some(slot) => Ok(slot.clone()),
            None => Err(Error::UnknownStream(id)),
        }
    }

    /// Run `f` on stream `id`, locked, after collecting what its buffers'
    /// drops left behind.
    #[inline]
    fn with<R>(
        &self,
        id: StreamId,
        f: impl FnOnce(&mut Lane<D>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let slot = self.slot(id)?;
        Self::with_slot(&slot, id, f)
    }

    #[inline]
    fn with_slot<R>(
        slot: &Slot<D>,
        id: StreamId,
        f: impl FnOnce(&mut Lane<D>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut lane = slot.lock()?;
        f(Self::open(slot, &mut lane, id)?)
    }

    /// The lane `slot`'s lock guards, `lane`, once the stream's dead buffers
    /// are collected; refused if the stream is destroyed. Apart from
    /// [`Server::with_slot`] so that a launch takes it in its own frame.
    #[inline]
    fn open<'g>(
        slot: &Slot<D>,
        lane: &'g mut Option<Lane<D>>,
        id: StreamId,
    ) -> Result<&'g mut Lane<D>, Error> {
        let Some(lane) = lane.as_mut() else {
            return Err(Error::UnknownStream(id));
        };
        collect_dead(slot, &mut lane.state);
        if slot.imports_due.load(Ordering::Relaxed)
            && slot.imports_due.swap(false, Ordering::Acquire)
        {
            lane.state.device.drop_free_imports();
        }
        Ok(lane)
    }

    /// `err` refused a call on `stream`: if the calling thread records a
    /// window there, or one `stream` is joined to, the window can no longer
    /// seal. The client's one path for refusals (`Client::refusing`).
    pub(crate) fn doom(&self, stream: StreamId, err: &Error) {
        let doomed = self.with(stream, |lane| {
            let _: Result<(), Error> = lane.refused(err.clone());
            Ok(())
        });
        drop(doomed);
    }

    /// The device's map of streams, held for writing: a test proves the
    /// calls that must not ask it finish while it is held.
    #[cfg(test)]
    pub(crate) fn hold_streams(&self) -> impl Sized + '_ {
        self.streams
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Create a stream.
    pub fn create_stream(&self) -> Result<StreamId, Error> {
        let raw = D::create_stream(&self.device)?;
        self.add_stream(raw)
    }

    /// A stream the backend made over handles of the caller's; refused when
    /// it was made on another device (dropping it, which leaves a borrowed
    /// handle to its owner).
    pub fn adopt_stream(&self, raw: D::Stream) -> Result<StreamId, Error> {
        if !D::is_stream_of(&self.device, &raw) {
            return Err(Error::OtherDevice {
                backend: D::NAME,
                what: "stream",
            });
        }
        self.add_stream(raw)
    }

    /// Number `raw` and give it its lane.
    fn add_stream(&self, raw: D::Stream) -> Result<StreamId, Error> {
        let id = StreamId(Ids::next(&self.ids.stream));
        let slot = Arc::new(Slot {
            lane: Mutex::new(Some(Lane {
                state: StreamState::new(id, raw, &self.config, self.failures.clone()),
                graphs: Captures::default(),
            })),
            graveyard: Graveyard::default(),
            order: self.order.clone(),
            lingering: self.lingering.clone(),
            imports: AtomicBool::new(false),
            imports_due: AtomicBool::new(false),
        });
        self.streams
            .write()
            .map_err(|_| Error::Poisoned)?
            .insert(id, slot);
        Ok(id)
    }

    /// Stream `id` as a graph handle keeps it (nothing, if it is gone).
    pub(crate) fn stream_ref(&self, id: StreamId) -> StreamRef<D> {
        StreamRef(self.slot(id).ok())
    }

    /// The slot of stream `id`, as its buffers keep it.
    pub(crate) fn buffer_slot(&self, id: StreamId) -> Result<Arc<dyn AnySlot>, Error> {
        Ok(self.slot(id)?)
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
        self.close_slot(&slot);
        self.after_host_wait();
        Ok(())
    }

    /// Close a stream's slot: a call that fetched it just before finds it
    /// closed, and what its buffers keep of it is the slot alone.
    fn close_slot(&self, slot: &Slot<D>) {
        let mut lane = slot
            .lane
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lane) = lane.take() {
            self.close_lane(lane);
        }
        // Whatever a panic under the lock left half done went with the lane:
        // the slot now holds nothing, consistently, so a call that reaches it
        // through a buffer or a handle is told the stream is gone, not that
        // it is poisoned. Cleared under the lock, so no call sees between.
        slot.lane.clear_poison();
        drop(lane);
        slot.graveyard.close();
    }

    fn close_lane(&self, mut lane: Lane<D>) {
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
        crate::streams::order::lock(&self.order).forget_stream(lane.state.id);
        let mut state = lane.state;
        // Only a stream that shared buffers can have pages other streams'
        // graphs or queued work use; the others' pages all go now.
        if !state.shares {
            state.release_all();
        } else if !state.release_unheld() {
            self.retired_streams().push(state);
        }
        self.sweep_lingering();
    }

    /// A host wait let go of what it held, which may have been the last
    /// hold on memory of any stream, its own included: dropped buffers'
    /// (lingering) and imported pages, whose keep-alives go once every
    /// stream that used them is past that use, in whatever order their
    /// host waits come (rule 24).
    fn after_host_wait(&self) {
        self.sweep_lingering();
        if !self.imported.load(Ordering::Relaxed) {
            self.sweep_retired();
            return;
        }
        let slots: Vec<Arc<Slot<D>>> = match self.streams.read() {
            Ok(streams) => streams
                .iter()
                .filter(|(_, slot)| slot.imports.load(Ordering::Relaxed))
                .map(|(_, slot)| slot.clone())
                .collect(),
            Err(_) => return,
        };
        for slot in slots {
            slot.sweep_imports();
        }
        self.sweep_retired();
    }

    /// Forget what is keyed by the dropped buffers whose memory was
    /// released since the last look.
    fn sweep_lingering(&self) {
        // A buffer the order never knew leaves it unchanged.
        lock(&self.lingering).sweep(|id| {
            forget_buffer(&self.order, &self.failures, id, true);
        });
    }

    /// Dropped buffers whose memory a graph or queued work still uses.
    pub fn lingering_buffers(&self) -> usize {
        lock(&self.lingering).len()
    }

    /// Buffers the order of shared buffers keeps something of.
    #[cfg(test)]
    pub(crate) fn ordered_buffers(&self) -> usize {
        crate::streams::order::lock(&self.order).buffers()
    }

    /// The destroyed streams kept for their pages.
    fn retired_streams(&self) -> std::sync::MutexGuard<'_, Vec<StreamState<D>>> {
        self.retired
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Let go of the destroyed streams whose pages nothing uses any more.
    fn sweep_retired(&self) {
        self.retired_streams()
            .retain_mut(|state| !state.release_unheld());
    }

    /// The stream graph `id` replays on, if it is live.
    pub(crate) fn stream_of(&self, id: GraphId) -> Option<StreamId> {
        self.graph_registry().get(&id).copied()
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

    /// Buffers currently claimed by a failure, on every stream.
    pub fn claimed_buffers(&self) -> usize {
        self.failures.len()
    }

    /// What `stream` holds now.
    pub fn usage(&self, stream: StreamId) -> Result<StreamUsage, Error> {
        self.with(stream, |lane| Ok(lane.state.usage()))
    }
}

impl<D: GraphDriver + Builtins> Server<D> {
    /// Builtin kernel `which`, if it is compiled already.
    #[inline]
    pub(crate) fn compiled(&self, which: Builtin) -> Option<&Arc<D::Kernel>> {
        self.kernels[which.index()].get()
    }

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
            self.close_slot(&slot);
        }
        // Every stream is closed: nothing can use their pages any more.
        for mut state in std::mem::take(&mut *self.retired_streams()) {
            state.release_all();
        }
        for kernel in &mut self.kernels {
            drop(kernel.take());
        }
    }
}

/// Queue every buffer of `state`'s stream dropped since its last call for a
/// fence. Their claims and order go with their memory: at once when nothing
/// else holds it, else once the graphs and frees that do let go.
#[inline]
fn collect_dead<D: GraphDriver>(slot: &Slot<D>, state: &mut StreamState<D>) {
    let mut any = false;
    slot.graveyard.exhume(|slice| {
        if state.capture.is_active()
            && let Some(temporaries) = &mut state.temporaries
        {
            temporaries.dropped(slice.id());
        }
        if slice.held_elsewhere() {
            lock(&slot.lingering).linger(&slice);
        } else {
            forget_buffer(&slot.order, &state.failures, slice.id(), state.shares);
        }
        state.queue_drop(slice);
        any = true;
    });
    if any {
        lock(&slot.lingering)
            .sweep_if_due(|id| forget_buffer(&slot.order, &state.failures, id, true));
        state.maybe_flush();
    }
}

/// Buffer `id` is gone, memory and all: nothing can use it any more, so
/// its claim and, if the order of shared buffers may know it, its order go.
fn forget_buffer(order: &Mutex<StreamOrder>, failures: &Claims, id: BufferId, ordered: bool) {
    failures.forget(id);
    if ordered {
        crate::streams::order::lock(order).forget(id);
    }
}

/// `mutex`, locked. Its state is a list a panic cannot leave half
/// changed.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
