//! One stream and everything capture-core keeps for it.

use std::sync::Arc;

use crate::driver::{DeviceSlice, Driver, DriverError, HostSlice};
use crate::error::Error;
use crate::failures::claims::Claims;
use crate::ids::{BufferId, GraphId, StreamId, WindowId};
use crate::kernels::signature::MAX_INFO_BYTES;
use crate::kernels::span::Span;
use crate::memory::drop_queue::{DropQueue, Stamp};
use crate::memory::info_cache::InfoCache;
use crate::memory::pool::{Place, Pool, PoolUsage, SliceHandle};
use crate::memory::temporaries::Temporaries;
use crate::phase::Phase;
use crate::recorded::entries::Entry;
use crate::streams::capturing::StreamCapture;
use crate::streams::join::Join;

/// Sizes and limits of a device's pools and queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Bytes of the largest device page asked of the driver (more for a
    /// larger buffer).
    pub device_page_bytes: u64,
    /// Bytes of the largest pinned host page asked of the driver.
    pub host_page_bytes: u64,
    /// Bytes of each pool's first page (more for a larger buffer). Later
    /// pages grow with what the pool holds, a quarter of it each, up to the
    /// largest page, so a small working set reserves little, a large one
    /// takes few pages, and a warm pool's pages exceed what its buffers span
    /// by about a quarter at most. Set it to the page size for pages all of
    /// one size.
    pub first_page_bytes: u64,
    /// The largest single buffer a caller may allocate.
    pub max_allocation_bytes: u64,
    /// Slices the drop queue holds before the execution path flushes it.
    pub drop_queue_threshold: usize,
    /// Info-cache entries kept before unpinned ones are evicted.
    pub info_cache_capacity: usize,
    /// The order a graph's operations keep when it replays: only what
    /// their declared accesses require (the default), or the order the
    /// stream issued them in.
    pub replay_order: ReplayOrder,
    /// Whether the graphs of one stream share the memory of their
    /// temporaries (the default): the buffers a capture's run allocates
    /// and drops inside its warmup are cut, in the recorded run, from one
    /// arena per stream that every graph of the stream reuses. Off, each
    /// graph keeps its temporaries' memory to itself, as any buffer.
    pub share_temporaries: bool,
}

/// How much of a recording's issue order its graph keeps.
///
/// A graph replays the same values either way; what differs is how much of
/// it may run at once. [`ReplayOrder::Chain`] is for measuring what the
/// dependency graph gains, for a workload of tiny launches on a backend
/// where running them side by side costs more than it saves (the host
/// backend on a machine of one or two cores), and for comparing with what a
/// driver's own stream capture records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplayOrder {
    /// Operations are ordered only where one touches what another wrote,
    /// or writes what another read (the graph's [`Dependencies`]): the
    /// rest may run at the same time.
    ///
    /// [`Dependencies`]: crate::Dependencies
    #[default]
    Dependencies,
    /// Each operation waits for the one issued before it.
    Chain,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            device_page_bytes: 4 << 20,
            host_page_bytes: 1 << 20,
            first_page_bytes: crate::memory::pool::SLICE_ALIGN,
            max_allocation_bytes: 1 << 32,
            drop_queue_threshold: 64,
            info_cache_capacity: 1024,
            replay_order: ReplayOrder::Dependencies,
            share_temporaries: true,
        }
    }
}

/// What one stream holds, as a test or a dashboard reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamUsage {
    /// The device pool.
    pub device: PoolUsage,
    /// The pinned host pool.
    pub host: PoolUsage,
    /// Slices waiting in the drop queue for a fence.
    pub pending_drops: usize,
    /// Info-cache entries.
    pub info_entries: usize,
    /// Graph uploads that failed (best-effort, so only counted and logged).
    pub upload_failures: usize,
    /// Bytes of the arena the stream's graphs cut their temporaries from
    /// (counted in `device` too, once).
    pub temporary_arena_bytes: u64,
}

/// A stream: the driver's stream, its pools, drop queue, info cache and
/// capture state.
pub struct StreamState<D: Driver> {
    pub(crate) id: StreamId,
    pub(crate) raw: D::Stream,
    pub(crate) device: Pool<D::DevicePage>,
    pub(crate) host: Pool<D::HostPage>,
    pub(crate) drops: DropQueue<D::Signal>,
    /// The newest signal taken, and whether work was issued since: a free
    /// stamps itself with it when no work came after, or takes a new one.
    last_signal: Option<D::Signal>,
    work_since_signal: bool,
    pub(crate) info: InfoCache,
    pub(crate) capture: StreamCapture,
    /// The device's buffers that hold no valid bytes, and why: shared by
    /// every stream, since a buffer may be used on any.
    pub(crate) failures: Arc<Claims>,
    /// Graphs whose destroy arrived while this stream recorded: a destroy
    /// syncs, which would abort the recording, so it waits for the close.
    pub(crate) deferred_destroys: Vec<GraphId>,
    pub(crate) upload_failures: usize,
    /// Whether a buffer of this stream was used on another: its graphs'
    /// replays then ask the order what they must wait for.
    pub(crate) shares: bool,
    /// Pages (device, host) the open window took only to keep room for new
    /// info, by slot.
    room_pages: (Vec<usize>, Vec<usize>),
    /// The window this stream's work is recorded into, while it is joined
    /// to another stream's (rule 21).
    pub(crate) joined: Option<Arc<Join>>,
    /// Whether work was issued since the stream's last point in the order
    /// of shared buffers: another stream that waits for it then waits past
    /// a new point.
    unordered: bool,
    /// The order its graphs keep when they replay.
    pub(crate) replay_order: ReplayOrder,
    /// The arena its graphs share their temporaries in, and what the open
    /// window learnt of them; `None` when they are not shared.
    pub(crate) temporaries: Option<Temporaries>,
}

fn missing_page() -> Error {
    // A slice always comes from a live page of its stream's pool; this is
    // the answer if that invariant were ever broken, instead of a panic.
    Error::Driver(DriverError::new(
        "core",
        "page lookup",
        "a slice's page is no longer in its pool",
    ))
}

impl<D: Driver> StreamState<D> {
    /// A fresh stream over `raw`.
    pub(crate) fn new(
        id: StreamId,
        raw: D::Stream,
        config: &Config,
        failures: Arc<Claims>,
    ) -> Self {
        Self {
            id,
            raw,
            device: Pool::growing(config.first_page_bytes, config.device_page_bytes),
            host: Pool::growing(config.first_page_bytes, config.host_page_bytes),
            drops: DropQueue::new(config.drop_queue_threshold),
            last_signal: None,
            work_since_signal: false,
            info: InfoCache::new(config.info_cache_capacity),
            capture: StreamCapture::default(),
            failures,
            deferred_destroys: Vec::new(),
            upload_failures: 0,
            shares: false,
            room_pages: (Vec::new(), Vec::new()),
            joined: None,
            unordered: false,
            replay_order: config.replay_order,
            temporaries: config.share_temporaries.then(Temporaries::default),
        }
    }

    /// Work was enqueued: a free from here needs a newer signal.
    #[inline]
    pub(crate) fn issued(&mut self) {
        self.work_since_signal = true;
        self.unordered = true;
    }

    /// The open window this stream is joined to, if any; a join its window
    /// closed since is forgotten here.
    pub(crate) fn join(&mut self) -> Option<&Arc<Join>> {
        if self.joined.as_ref().is_some_and(|join| !join.is_open()) {
            self.joined = None;
        }
        self.joined.as_ref()
    }

    /// Whether work was issued since the stream's last point in the order
    /// of shared buffers; from here there is none.
    pub(crate) fn take_unordered(&mut self) -> bool {
        std::mem::take(&mut self.unordered)
    }

    /// The stamp for something freed now: the newest signal if no work came
    /// after it, else a new one. None can be taken while recording.
    fn stamp(&mut self) -> Stamp<D::Signal> {
        if self.capture.is_recording() {
            return Stamp::Unstamped;
        }
        if !self.work_since_signal
            && let Some(signal) = self.last_signal
        {
            return Stamp::Newest(signal);
        }
        match self.take_signal() {
            Ok(signal) => Stamp::New(signal),
            Err(err) => {
                log::warn!("{}: a free waits for the next fence: {err}", self.id);
                Stamp::Unstamped
            }
        }
    }

    /// A window closed without a graph: the info entries made while it
    /// recorded were never written, so they leave the cache (through the
    /// drop queue: the recorded copy may have been enqueued).
    pub(crate) fn discard_window_info(&mut self) {
        for never_written in self.info.capture_discard() {
            self.queue_drop(never_written);
        }
    }

    /// Take a signal now: the newest, which every later free may stamp
    /// itself with until more work is issued.
    fn take_signal(&mut self) -> Result<D::Signal, DriverError> {
        let signal = D::signal(&mut self.raw)?;
        self.last_signal = Some(signal);
        self.work_since_signal = false;
        Ok(signal)
    }

    /// Hold `slice` until the device is past the work issued so far.
    pub(crate) fn queue_drop(&mut self, slice: SliceHandle) {
        let stamp = self.stamp();
        self.drops.push(slice, stamp);
    }

    /// Hold `item` until the device is past the work issued so far.
    pub(crate) fn queue_keep(&mut self, item: Box<dyn Send>) {
        let stamp = self.stamp();
        self.drops.keep(item, stamp);
    }

    /// Wait for everything enqueued so far, then free what waited for it.
    pub(crate) fn sync(&mut self) -> Result<(), DriverError> {
        self.fence_all()?;
        self.drops.release_fenced();
        self.device.drop_free_imports();
        Ok(())
    }

    /// Signal and wait for everything enqueued so far.
    fn fence_all(&mut self) -> Result<(), DriverError> {
        let signal = self.take_signal()?;
        D::fence(&mut self.raw, signal)
    }

    /// Empty the drop queue, fencing the work it waits for (no fence when it
    /// is empty): before a window opens, so the recorded run finds free
    /// what warmup freed.
    pub(crate) fn drain_drops(&mut self) -> Result<(), DriverError> {
        if self.drops.is_empty() {
            return Ok(());
        }
        self.sync()
    }

    /// A window closed: stamp the frees it deferred, then reclaim what the
    /// device is done with, without waiting.
    pub(crate) fn after_window(&mut self) {
        if self.drops.has_unstamped() {
            match self.take_signal() {
                Ok(signal) => self.drops.stamp_unstamped(signal),
                Err(err) => log::warn!("{}: frees deferred by the window wait: {err}", self.id),
            }
        }
        self.reclaim();
    }

    /// Release every queued free the device is past, without waiting. An
    /// error is logged: the frees stay queued and the error resurfaces at
    /// the next fence.
    fn reclaim(&mut self) {
        let raw = &mut self.raw;
        if let Err(err) = self.drops.reclaim(|signal| D::is_done(raw, signal)) {
            log::warn!("{}: deferred frees kept: {err}", self.id);
        }
        self.device.drop_free_imports();
    }

    /// Reclaim the drop queue if it has grown past its threshold and the
    /// stream is not recording. Never waits for the device.
    #[inline]
    pub(crate) fn maybe_flush(&mut self) {
        if !self.capture.is_recording() && self.drops.wants_flush() {
            self.reclaim();
        }
    }

    /// A device slice of `len` bytes for the caller's allocation `id`:
    /// inside a window's recorded run, a temporary's comes from the arena.
    pub(crate) fn allocate_buffer(&mut self, id: BufferId, len: u64) -> Result<SliceHandle, Error> {
        if let Some(temporaries) = &mut self.temporaries {
            match self.capture.phase() {
                Phase::Prepared(_) => temporaries.warmup_allocated(id, len),
                Phase::Recording(_) => {
                    if let Some(slice) = temporaries.take(id, len) {
                        self.device.retain(slice.clone());
                        return Ok(slice);
                    }
                }
                Phase::None => {}
            }
        }
        self.allocate_device(id, len)
    }

    /// Before the recorded run: the warmup is over. The arena its
    /// temporaries are cut from: the stream's if it holds what they need,
    /// else a new one for allocation `id`, in a page of its own so the other
    /// pages keep the room the warmup sized. Armed once the driver records.
    pub(crate) fn arena_for_recording(
        &mut self,
        id: BufferId,
    ) -> Result<Option<SliceHandle>, Error> {
        let Some(temporaries) = &mut self.temporaries else {
            return Ok(None);
        };
        temporaries.warmup_ended();
        let needed = temporaries.needed();
        if needed == 0 {
            return Ok(None);
        }
        if let Some(arena) = temporaries.holding(needed) {
            return Ok(Some(arena));
        }
        let raw = &mut self.raw;
        let arena = self
            .device
            .reserve_page(id, needed, |size| D::allocate_device_page(raw, size))?;
        Ok(Some(arena))
    }

    /// An arena from [`StreamState::arena_for_recording`] that the window
    /// will not use: its page goes back if nothing else holds it.
    pub(crate) fn release_arena(&mut self, arena: SliceHandle) {
        let slot = arena.slot();
        drop(arena);
        let raw = &mut self.raw;
        self.device
            .release_if_free(slot, |page| D::release_device_page(raw, page));
    }

    /// A device slice of `len` bytes for allocation `id`.
    pub(crate) fn allocate_device(&mut self, id: BufferId, len: u64) -> Result<SliceHandle, Error> {
        let phase = self.capture.phase();
        let Self {
            raw, device, drops, ..
        } = self;
        allocate::<D, _>(device, raw, drops, phase, id, len, D::allocate_device_page)
    }

    /// Keep room for `slots` info entries the recorded run of `window` may
    /// meet first (info bytes its warmup never passed): a device slice and
    /// its staging slice each, taken as warmup's are and given back with
    /// them, so the recording finds them free instead of needing a page.
    pub(crate) fn keep_info_room(
        &mut self,
        window: WindowId,
        slots: usize,
        ids: &mut impl FnMut() -> BufferId,
    ) -> Result<(), Error> {
        let phase = Phase::Prepared(window);
        let len = u64::from(MAX_INFO_BYTES);
        let Self {
            raw,
            device,
            host,
            drops,
            room_pages,
            ..
        } = self;
        for _ in 0..slots {
            let pages = device.page_count();
            let slice = allocate::<D, _>(
                device,
                raw,
                drops,
                phase,
                ids(),
                len,
                D::allocate_device_page,
            )?;
            if device.page_count() > pages {
                room_pages.0.push(slice.slot());
            }
            let pages = host.page_count();
            let slice =
                allocate::<D, _>(host, raw, drops, phase, ids(), len, D::allocate_host_page)?;
            if host.page_count() > pages {
                room_pages.1.push(slice.slot());
            }
        }
        Ok(())
    }

    /// The window closed: a page taken only to keep room for new info that
    /// the recording did not use goes back, so the room costs no memory
    /// past the window.
    pub(crate) fn release_room(&mut self) {
        let (device, host) = std::mem::take(&mut self.room_pages);
        let raw = &mut self.raw;
        for slot in device {
            self.device
                .release_if_free(slot, |page| D::release_device_page(raw, page));
        }
        for slot in host {
            self.host
                .release_if_free(slot, |page| D::release_host_page(raw, page));
        }
    }

    /// A pinned host slice of `len` bytes for allocation `id`.
    pub(crate) fn allocate_host(&mut self, id: BufferId, len: u64) -> Result<SliceHandle, Error> {
        let phase = self.capture.phase();
        let Self {
            raw, host, drops, ..
        } = self;
        allocate::<D, _>(host, raw, drops, phase, id, len, D::allocate_host_page)
    }

    /// Enqueue a copy of `bytes` into `dst` through a pinned staging slice.
    ///
    /// The staging slice waits in the drop queue until a fence proves the
    /// copy read it; while recording, the graph also keeps it, since the
    /// recorded copy reads it again on every replay. The bytes land `at`
    /// bytes into `dst`.
    pub(crate) fn stage_to_device(
        &mut self,
        staging_id: BufferId,
        bytes: &[u8],
        dst: &SliceHandle,
        at: u64,
    ) -> Result<(), Error> {
        let len = bytes.len() as u64;
        let staging = self.allocate_host(staging_id, len)?;
        let host_page = self.host.page(&staging).ok_or_else(missing_page)?;
        D::write_host(host_page, staging.offset(), bytes);
        let device_page = self.device.page(dst).ok_or_else(missing_page)?;
        let copied = D::copy_to_device(
            &mut self.raw,
            HostSlice {
                page: host_page,
                offset: staging.offset(),
                len,
            },
            DeviceSlice {
                page: device_page,
                offset: dst.offset() + at,
                len,
            },
        );
        if self.capture.is_recording() {
            // The staging slice was handed out while recording, so the host
            // pool keeps it for the graph, which reads it on every replay.
            self.capture.record_touch(dst);
        } else {
            self.issued();
        }
        self.queue_drop(staging);
        copied.map_err(Error::from)
    }

    /// Copy `src` back to the host, waiting for it: a host sync.
    pub(crate) fn read_back(
        &mut self,
        staging_id: BufferId,
        src: &SliceHandle,
        span: &Span,
    ) -> Result<Vec<u8>, Error> {
        let len = span.len;
        let staging = self.allocate_host(staging_id, len)?;
        let host_page = self.host.page(&staging).ok_or_else(missing_page)?;
        let device_page = self.device.page(src).ok_or_else(missing_page)?;
        D::copy_to_host(
            &mut self.raw,
            DeviceSlice {
                page: device_page,
                offset: src.offset() + span.offset,
                len,
            },
            HostSlice {
                page: host_page,
                offset: staging.offset(),
                len,
            },
        )?;
        self.issued();
        // Queued before the fence: if it fails, the copy may still be
        // writing the staging slice, which must not go back to the pool
        // until a later fence proves the copy done.
        self.queue_drop(staging.clone());
        self.fence_all()?;
        let mut out = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        let host_page = self.host.page(&staging).ok_or_else(missing_page)?;
        D::read_host(host_page, staging.offset(), &mut out);
        // Everything enqueued before the signal has finished, so whatever
        // waited in the drop queue is free too.
        self.drops.release_fenced();
        Ok(out)
    }

    /// Where the device slice holding `bytes` lies, from the info cache or
    /// staged now: a launch that keeps no hold on it (an eager one) takes
    /// only this, and the cache's hit costs no reference count. Inlined
    /// always: it is on every eager launch with info.
    #[inline(always)]
    pub(crate) fn info_place(
        &mut self,
        bytes: &[u8],
        ids: &mut impl FnMut() -> BufferId,
    ) -> Result<Place, Error> {
        let cached = match self.capture.phase() {
            Phase::None => self.info.eager_place(bytes),
            phase => self.info.get(bytes, phase).map(SliceHandle::place),
        };
        match cached {
            Some(place) => Ok(place),
            None => self.info_slice(bytes, ids).map(|slice| slice.place()),
        }
    }

    /// The device slice holding `bytes`, from the info cache or staged now.
    pub(crate) fn info_slice(
        &mut self,
        bytes: &[u8],
        ids: &mut impl FnMut() -> BufferId,
    ) -> Result<SliceHandle, Error> {
        let phase = self.capture.phase();
        if let Some(slice) = self.info.get(bytes, phase) {
            return Ok(slice.clone());
        }
        let slice = self.allocate_device(ids(), bytes.len() as u64)?;
        self.stage_to_device(ids(), bytes, &slice, 0)?;
        if self.capture.is_recording() {
            // The copy is one of the recording's operations: logged, so the
            // dependency graph numbers what the driver recorded.
            self.capture.record_entry(Entry::Write {
                span: Span::whole(slice.id(), slice.len()),
            });
        }
        let depth = self.capture.depth();
        for evicted in self.info.insert(bytes, slice.clone(), phase, depth) {
            self.queue_drop(evicted);
        }
        Ok(slice)
    }

    /// The body being recorded is done, and what is recorded from here
    /// lies outside it: the info staged inside it was written by copies a
    /// replay skips with the body, so nothing after it may use them.
    pub(crate) fn body_recorded(&mut self) {
        self.info.body_closed(self.capture.depth());
    }

    /// What the stream holds now.
    pub(crate) fn usage(&self) -> StreamUsage {
        StreamUsage {
            device: self.device.usage(),
            host: self.host.usage(),
            pending_drops: self.drops.len(),
            info_entries: self.info.len(),
            upload_failures: self.upload_failures,
            temporary_arena_bytes: self
                .temporaries
                .as_ref()
                .map_or(0, Temporaries::arena_bytes),
        }
    }

    /// Release every page no slice is held in. Syncs first.
    pub(crate) fn trim(&mut self) -> Result<usize, Error> {
        if self.capture.is_recording() {
            return Err(Error::SyncWhileRecording(self.id));
        }
        self.sync()?;
        if let Some(temporaries) = &mut self.temporaries {
            drop(temporaries.unheld_arena());
        }
        let raw = &mut self.raw;
        let mut released = self.device.trim(|page| D::release_device_page(raw, page));
        released += self.host.trim(|page| D::release_host_page(raw, page));
        Ok(released)
    }

    /// Release every page no slice is held in any more (the stream is going
    /// away and has been synced); whether none is left. A page another
    /// stream's graph or queued work still uses stays until it is free.
    pub(crate) fn release_unheld(&mut self) -> bool {
        self.info.clear();
        self.drops.release_fenced();
        if let Some(temporaries) = &mut self.temporaries {
            temporaries.let_go_of_arena();
        }
        let raw = &mut self.raw;
        self.device.trim(|page| D::release_device_page(raw, page));
        self.host.trim(|page| D::release_host_page(raw, page));
        let device = self.device.usage();
        device.pages == 0 && device.imported_bytes == 0 && self.host.usage().pages == 0
    }

    /// Release every page: the stream is going away and has been synced.
    pub(crate) fn release_all(&mut self) {
        self.info.clear();
        self.drops.release_fenced();
        let raw = &mut self.raw;
        self.device
            .release_all(|page| D::release_device_page(raw, page));
        self.host
            .release_all(|page| D::release_host_page(raw, page));
    }
}

/// A slice of `len` bytes from `pool`.
///
/// Reuses free memory first; before growing, takes back what the drop queue
/// holds that the device is done with, then waits for its oldest frees one
/// batch at a time, only until the slice fits (unless `recording`, where no
/// signal may be queried or waited for). A page obtained while recording is
/// noticed by the pool itself, and the window refuses to seal for it.
fn allocate<D: Driver, P>(
    pool: &mut Pool<P>,
    raw: &mut D::Stream,
    drops: &mut DropQueue<D::Signal>,
    phase: Phase,
    id: BufferId,
    len: u64,
    allocate_page: fn(&mut D::Stream, u64) -> Result<P, DriverError>,
) -> Result<SliceHandle, Error> {
    let recording = matches!(phase, Phase::Recording(_));
    let reuse = |pool: &mut Pool<P>| pool.reserve(id, len, false, phase, |_| unreachable_page());
    if let Some(slice) = reuse(pool)? {
        return Ok(slice);
    }
    if !recording && !drops.is_empty() {
        drops.reclaim(|signal| D::is_done(raw, signal))?;
        if let Some(slice) = reuse(pool)? {
            return Ok(slice);
        }
        while drops.wait_oldest(|signal| D::fence(raw, signal))? {
            if let Some(slice) = reuse(pool)? {
                return Ok(slice);
            }
        }
    }
    pool.reserve(id, len, true, phase, |size| allocate_page(raw, size))?
        .ok_or_else(missing_page)
}

/// The page allocator passed when growth is not allowed; never called.
fn unreachable_page<P>() -> Result<P, DriverError> {
    Err(DriverError::new(
        "core",
        "allocate page",
        "growth was not allowed for this reservation",
    ))
}
