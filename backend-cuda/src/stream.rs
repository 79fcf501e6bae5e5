//! One capture-core stream: a non-blocking CUDA stream, its signals, the
//! copies and launches enqueued on it, and its recording transitions
//! (stream capture begun and ended).
//!
//! Captures run in `CU_STREAM_CAPTURE_MODE_RELAXED`: capture-core drives a
//! device from whichever thread calls, so `begin` and `end` may arrive on
//! different threads, which the global and thread-local modes refuse with
//! `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`. What those modes guard against,
//! an implicitly synchronizing call while a capture is open, capture-core
//! refuses on the recording stream itself (no host sync, no page released),
//! and the device defers frees other streams make meanwhile.

use std::ffi::{c_uint, c_void};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use capture_core::{
    Binding, Bodies, Conditional, DeviceSlice, Driver, DriverError, HostSlice, Launch, Order,
};
use capture_core::{MAX_BINDINGS, MAX_PARAM_BYTES};

use crate::conditional::Nesting;
use crate::device::{Device, Release};
use crate::error::refuse;
use crate::event::{Event, EventRing};
use crate::foreign::{Foreign, ForeignBuffer};
use crate::graph::{Executable, Level, Recording};
use crate::kernels::Kernel;
use crate::memory::{DevicePage, HostPage};
use crate::sys::{self, CUcontext, CUgraph, CUstream};
use capture_core::{KeepAlive, Rejected};

/// Bytes of one kernel parameter's slot: the largest parameter a
/// signature declares, and a device pointer.
const SLOT_BYTES: usize = 8;

/// Most parameters one launch passes: every buffer, the info pointer, and
/// the most by-value parameters (all of one byte) a signature may declare.
const MAX_ARGS: usize = MAX_BINDINGS + 1 + MAX_PARAM_BYTES as usize;

/// One kernel parameter's bytes, aligned as a device pointer.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Slot([u8; SLOT_BYTES]);

impl Slot {
    const ZERO: Slot = Slot([0; SLOT_BYTES]);
}

/// A point in one stream's work that a fence can wait for.
///
/// A number rather than an event handle, because a signal is `Copy` and may
/// be dropped without a fence; the stream owns the events and recycles them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    stream: u64,
    number: u64,
}

/// A non-blocking CUDA stream and the state recording it needs.
///
/// Non-blocking, so it never waits on (or is waited on by) the legacy
/// default stream other code in the process may use; a capture on it is then
/// not invalidated by such code either.
///
/// [`Stream::from_raw`] makes one over a stream made elsewhere, which the
/// library then never destroys.
pub struct Stream {
    device: Arc<Device>,
    raw: CUstream,
    /// Whether `raw` is the library's own, destroyed when the stream drops.
    owned: bool,
    /// What keeps an adopted stream alive, dropped after the library's last
    /// use of it.
    keep_alive: Option<KeepAlive>,
    id: u64,
    events: EventRing,
    /// Whether a capture begun here has not been ended yet, for `Drop`.
    recording: bool,
    /// What the stream issued into its recording since the capture began.
    level: Level,
    /// The conditionals open in the recording, and what records them.
    nesting: Nesting,
    /// Whether work was enqueued since the latest signal, which otherwise
    /// stands for the stream's end still.
    unsignalled: bool,
    /// The latest signal's number (0 before the first).
    latest: u64,
}

// SAFETY: the stream and its events are process-wide driver handles any
// thread may use once the context is current, which every method ensures.
// capture-core hands out `&mut` access only, so no two threads use one at once.
unsafe impl Send for Stream {}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("recording", &self.recording)
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// A new stream on `device`.
    pub(crate) fn create(device: &Arc<Device>) -> Result<Self, DriverError> {
        let api = device.api();
        let _current = device.enter()?;
        let mut raw: CUstream = ptr::null_mut();
        // SAFETY: `raw` is a valid place for the handle; the context is
        // current.
        api.check("create stream", unsafe {
            (api.stream_create)(&mut raw, sys::CU_STREAM_NON_BLOCKING)
        })?;
        Ok(Self::over(device, raw, None))
    }

    /// The stream over `raw`: the library's own when `keep_alive` is
    /// `None`, else adopted.
    fn over(device: &Arc<Device>, raw: CUstream, keep_alive: Option<KeepAlive>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Self {
            device: Arc::clone(device),
            raw,
            owned: keep_alive.is_none(),
            keep_alive,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            events: EventRing::new(device.api()),
            recording: false,
            level: Level::default(),
            nesting: Nesting::default(),
            unsignalled: false,
            latest: 0,
        }
    }

    /// Whether the stream was adopted: other code may enqueue work on it
    /// too, so every signal covers that work and a capture may hold nodes
    /// the library did not issue. Its keep-alive goes only with it.
    fn adopted(&self) -> bool {
        self.keep_alive.is_some()
    }

    /// A stream over `raw`, a stream of `device`'s context made elsewhere
    /// (`cuStreamCreate`, cudarc's `CudaStream`), for
    /// `Client::adopt_stream`. The library enqueues its work on it and
    /// records events on it, and never destroys it.
    ///
    /// `keep_alive` is dropped once the library is past its last use of the
    /// stream (after the stream drops and no stream of the GPU records): to
    /// hand the stream over, pass a value whose drop destroys it; to keep
    /// it, pass `()`. Refused, it is handed back untouched in the
    /// [`Rejected`].
    ///
    /// # The caller's own work
    ///
    /// Work the caller enqueues on `raw` itself is ordered with the
    /// library's by the stream, and a signal or sync of the library's covers
    /// it too. Between a window's `begin` and its `instantiate` the stream
    /// captures in `CU_STREAM_CAPTURE_MODE_RELAXED`, from whichever thread
    /// the library is called on: the caller's launches, asynchronous copies
    /// and memsets on `raw` then become nodes of the graph, in stream order
    /// among the library's, and run on every replay. Such a graph replays
    /// as captured, one node after another, since the library cannot place
    /// nodes it did not issue in a dependency order. While a window records
    /// the caller must not synchronize or query the stream, wait on it from
    /// outside the capture, begin or end a capture of its own on it, or
    /// allocate on it (`cuMemAllocAsync`, whose node makes `instantiate`
    /// refuse); the buffers its own work touches are not tracked by the
    /// library. Nor may anyone synchronize the whole context meanwhile
    /// (`cuCtxSynchronize`, cudarc's `CudaContext::synchronize` or first
    /// `new_stream`): that invalidates the capture (see the crate's docs).
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of `device`'s context and stays alive until
    /// `keep_alive` is dropped; nothing destroys it meanwhile. Work the
    /// caller issues on it reads and writes only memory the library's work
    /// does not use at the time, or is ordered with it by the stream.
    ///
    /// # Errors
    ///
    /// A null handle, the legacy or per-thread default stream (which a
    /// capture from any thread cannot use), a blocking stream (made without
    /// `CU_STREAM_NON_BLOCKING`: work on the legacy default stream anywhere
    /// in the process would invalidate its captures), a stream of another
    /// context, or one capturing already.
    pub unsafe fn from_raw<K: Send + 'static>(
        device: &Arc<Device>,
        raw: CUstream,
        keep_alive: K,
    ) -> Result<Self, Rejected<K>> {
        // SAFETY: the caller's promise, passed on.
        match unsafe { check_adoptable(device, raw) } {
            Ok(()) => Ok(Self::over(device, raw, Some(KeepAlive::new(keep_alive)))),
            Err(e) => Err(Rejected::new(e, keep_alive)),
        }
    }

    /// The driver's handle of the stream: the caller's own for an adopted
    /// one (unless a failed capture replaced it, see `Driver::end`).
    pub fn raw(&self) -> CUstream {
        self.raw
    }

    /// The device the stream runs on.
    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Enqueue a copy from a pinned host page into a device page.
    pub(crate) fn copy_to_device<D>(
        &mut self,
        src: HostSlice<'_, D>,
        dst: DeviceSlice<'_, D>,
    ) -> Result<(), DriverError>
    where
        D: Driver<HostPage = HostPage, DevicePage = DevicePage>,
    {
        const OP: &str = "copy to device";
        let len = same_len(OP, src.len, dst.len)?;
        let from = src.page.address(&self.device, src.offset, src.len, OP)?;
        let to = dst.page.address(&self.device, dst.offset, dst.len, OP)?;
        if len == 0 {
            return Ok(());
        }
        self.nesting.refusal(OP)?;
        let target = self.nesting.target(self.raw);
        let api = self.device.api();
        let _current = self.device.enter()?;
        // SAFETY: both ranges were checked to lie in live pages of this
        // device; the host page is pinned, and capture-core keeps it (and,
        // while recording, the bytes) alive until the copy has run.
        api.check(OP, unsafe {
            (api.memcpy_htod_async)(to, from.cast_const(), len, target)
        })?;
        self.issued_copy();
        Ok(())
    }

    /// Enqueue a copy from a device page into a pinned host page.
    pub(crate) fn copy_to_host<D>(
        &mut self,
        src: DeviceSlice<'_, D>,
        dst: HostSlice<'_, D>,
    ) -> Result<(), DriverError>
    where
        D: Driver<HostPage = HostPage, DevicePage = DevicePage>,
    {
        const OP: &str = "copy to host";
        let len = same_len(OP, src.len, dst.len)?;
        let from = src.page.address(&self.device, src.offset, src.len, OP)?;
        let to = dst.page.address(&self.device, dst.offset, dst.len, OP)?;
        if len == 0 {
            return Ok(());
        }
        self.nesting.refusal(OP)?;
        let target = self.nesting.target(self.raw);
        let api = self.device.api();
        let _current = self.device.enter()?;
        // SAFETY: both ranges were checked to lie in live pages of this
        // device; capture-core reads the host bytes only after a fence.
        api.check(OP, unsafe {
            (api.memcpy_dtoh_async)(to, from, len, target)
        })?;
        self.issued_copy();
        Ok(())
    }

    fn issued_copy(&mut self) {
        self.nesting.level(&mut self.level).copies += 1;
        self.unsignalled = true;
    }

    /// Enqueue `launch`, whose shape capture-core has matched to its
    /// kernel's signature (binding count, info and parameter sizes, grid).
    ///
    /// Allocates nothing: the parameters are packed into stack slots.
    pub(crate) fn launch<D>(&mut self, launch: Launch<'_, D>) -> Result<(), DriverError>
    where
        D: Driver<DevicePage = DevicePage, Kernel = Kernel>,
    {
        const OP: &str = "launch";
        let kernel = launch.kernel;
        if !kernel.device().same_context(&self.device) {
            return Err(refuse(OP, "the kernel was compiled for another device"));
        }
        if let Some(foreign) = kernel.foreign_code() {
            return self.foreign(foreign, launch.bindings);
        }
        let signature = kernel.signature();
        // Every kernel parameter gets a slot of its own, in the kernel ABI's
        // order: the buffer pointers, the info pointer, then each by-value
        // parameter's bytes. The driver copies each from the slot its entry
        // in `args` points at, reading as many bytes as the kernel's image
        // says the parameter has; an 8-byte slot holds any parameter a
        // signature can declare. Slots past the last are zero and `args`
        // points at them too, so even an entry taking more than its
        // signature says reads zeros here rather than the stack around.
        let mut slots = [Slot::ZERO; MAX_ARGS];
        let mut used = 0usize;
        let mut push = |bytes: &[u8]| -> Result<(), DriverError> {
            let slot = slots
                .get_mut(used)
                .and_then(|slot| slot.0.get_mut(..bytes.len()))
                .ok_or_else(|| {
                    refuse(
                        OP,
                        format!("the kernel takes more than {MAX_ARGS} parameters"),
                    )
                })?;
            slot.copy_from_slice(bytes);
            used += 1;
            Ok(())
        };
        for binding in launch.bindings {
            let slice = binding.slice;
            let address = slice
                .page
                .address(&self.device, slice.offset, slice.len, OP)?;
            push(&address.to_ne_bytes())?;
        }
        if let Some(info) = launch.info {
            let address = info.page.address(&self.device, info.offset, info.len, OP)?;
            push(&address.to_ne_bytes())?;
        }
        let mut at = 0usize;
        for &size in signature.param_sizes() {
            let size = size as usize;
            // Sizes are 1, 2, 4 or 8 bytes (the signature was validated) and
            // capture-core passes exactly their sum, so this always holds.
            let bytes = at
                .checked_add(size)
                .and_then(|end| launch.params.get(at..end))
                .ok_or_else(|| {
                    refuse(
                        OP,
                        format!(
                            "{} parameter bytes passed, the signature {signature} takes {}",
                            launch.params.len(),
                            signature.param_bytes()
                        ),
                    )
                })?;
            push(bytes)?;
            at += size;
        }
        let mut args = [ptr::null_mut::<c_void>(); MAX_ARGS];
        for (arg, slot) in args.iter_mut().zip(slots.iter_mut()) {
            *arg = slot.0.as_mut_ptr().cast::<c_void>();
        }
        let [x, y, z] = launch.groups;
        let [bx, by, bz] = signature.workgroup_size();
        self.nesting.refusal(OP)?;
        let target = self.nesting.target(self.raw);
        let api = self.device.api();
        let _current = self.device.enter()?;
        // SAFETY: the function is live (the kernel owns its module and holds
        // the device, and so the context); `args` has an entry for every
        // parameter the kernel takes (its constructor's contract, and where
        // the driver can tell, its check), each pointing at an 8-byte slot
        // that outlives the call, which copies them; every buffer address
        // was checked to lie in a live page of this device.
        api.check(OP, unsafe {
            (api.launch_kernel)(
                kernel.function(),
                x,
                y,
                z,
                bx,
                by,
                bz,
                0,
                target,
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        })?;
        self.nesting.level(&mut self.level).launches += 1;
        self.unsignalled = true;
        Ok(())
    }

    /// Enqueue foreign operation `foreign` over `bindings`, its declared
    /// buffers. Allocates nothing outside a window.
    fn foreign<D>(
        &mut self,
        foreign: &Foreign,
        bindings: &[Binding<'_, D>],
    ) -> Result<(), DriverError>
    where
        D: Driver<DevicePage = DevicePage, Kernel = Kernel>,
    {
        const OP: &str = "foreign operation";
        let mut buffers = [ForeignBuffer::NONE; MAX_BINDINGS];
        if bindings.len() > buffers.len() {
            return Err(refuse(OP, format!("more than {MAX_BINDINGS} buffers")));
        }
        for (buffer, binding) in buffers.iter_mut().zip(bindings) {
            let slice = &binding.slice;
            *buffer = ForeignBuffer {
                address: slice
                    .page
                    .address(&self.device, slice.offset, slice.len, OP)?,
                len: slice.len,
                access: binding.access,
            };
        }
        self.nesting.refusal(OP)?;
        let target = self.nesting.target(self.raw);
        let _current = self.device.enter()?;
        foreign.enqueue(
            &mut self.nesting,
            target,
            self.recording,
            &buffers[..bindings.len()],
        )?;
        self.nesting.level(&mut self.level).launches += 1;
        self.unsignalled = true;
        Ok(())
    }

    /// Mark the current end of the stream's work: an event recorded there,
    /// or the latest signal again when nothing was enqueued since.
    pub(crate) fn signal(&mut self) -> Result<Signal, DriverError> {
        if self.unsignalled || self.latest == 0 || self.adopted() {
            let _current = self.device.enter()?;
            self.latest = self.events.record(self.raw)?;
            self.unsignalled = false;
        }
        Ok(Signal {
            stream: self.id,
            number: self.latest,
        })
    }

    /// Block until the stream's work up to `signal` has finished.
    pub(crate) fn fence(&mut self, signal: Signal) -> Result<(), DriverError> {
        self.own(signal, "fence")?;
        let _current = self.device.enter()?;
        self.events.wait(signal.number)
    }

    /// Whether the stream's work up to `signal` has finished, without
    /// waiting.
    pub(crate) fn is_done(&mut self, signal: Signal) -> Result<bool, DriverError> {
        self.own(signal, "ask whether a signal is done")?;
        let _current = self.device.enter()?;
        self.events.query(signal.number)
    }

    fn own(&self, signal: Signal, op: &'static str) -> Result<(), DriverError> {
        if signal.stream == self.id {
            Ok(())
        } else {
            Err(refuse(op, "the signal was given by another stream"))
        }
    }

    /// Record an event at the current end of the stream's work, for another
    /// stream of the device to wait on.
    pub(crate) fn record_event(&mut self) -> Result<Event, DriverError> {
        Event::record(&self.device, self.raw)
    }

    /// Make the work enqueued from here wait, on the device, for `event`.
    pub(crate) fn wait_event(&mut self, event: &Event) -> Result<(), DriverError> {
        event.wait_on(&self.device, self.raw)?;
        // The next signal is taken after the wait, so that a fence on it
        // also covers the work the event stands for.
        self.unsignalled = true;
        Ok(())
    }

    /// Start recording: from here copies and launches are captured, and the
    /// device counts the stream as recording.
    pub(crate) fn begin(&mut self) -> Result<(), DriverError> {
        const OP: &str = "begin capture";
        let api = self.device.api();
        let _current = self.device.enter()?;
        // Before the capture, so that no module loads while it records.
        self.device.prepare_conditionals();
        // A point after everything enqueued so far, taken while the stream
        // still runs work: a capture left open cannot record one, and a
        // stream replacing this one (see `leave_capture`) waits for it.
        if self.unsignalled || self.adopted() {
            self.latest = self.events.record(self.raw)?;
            self.unsignalled = false;
        }
        let raw = self.raw;
        self.device.begin_recording(|| {
            // SAFETY: the stream is live and its context current.
            api.check(OP, unsafe {
                (api.stream_begin_capture)(raw, sys::CU_STREAM_CAPTURE_MODE_RELAXED)
            })
        })?;
        self.recording = true;
        self.level = Level::default();
        self.nesting.begin();
        Ok(())
    }

    /// Stop recording and hand back what was captured. The stream leaves
    /// recording mode on every path: where the driver would leave it
    /// capturing, it is replaced by a fresh stream.
    pub(crate) fn end(&mut self) -> Result<Recording, DriverError> {
        const OP: &str = "end capture";
        let api = self.device.api();
        let device = Arc::clone(&self.device);
        // Ended even when the context cannot be made current: a stream left
        // recording would swallow every later launch.
        let current = device.enter();
        // Bodies still open (capture-core closes each; a stream dropped
        // while recording may not have) end first.
        self.nesting.abandon(&device);
        if self.nesting.take_invalidated() {
            // The driver freed a body graph the capture refers to, and
            // would crash ending it (NVBUG 6805256): the capture is left
            // open on a stream that is never used again.
            device.end_recording(|| ());
            self.recording = false;
            self.level = Level::default();
            let note = self.replace_raw(true);
            drop(current);
            return Err(refuse(
                OP,
                format!(
                    "a conditional body's capture was invalidated (a context-wide \
                     synchronization, such as cuCtxSynchronize or cudarc's \
                     CudaContext::synchronize or first new_stream, ran while the window \
                     recorded), so the capture was abandoned rather than ended; {note}"
                ),
            ));
        }
        let mut graph: CUgraph = ptr::null_mut();
        let raw = self.raw;
        // SAFETY: the stream is live; `graph` is a valid place for the
        // handle. Called even when the capture was invalidated: that is what
        // returns the stream to normal.
        let code = device.end_recording(|| unsafe { (api.stream_end_capture)(raw, &mut graph) });
        self.recording = false;
        // An invalidated capture may still hand back a partial graph; owning
        // it first makes sure it is destroyed whatever the answer.
        let level = std::mem::take(&mut self.level);
        let counters = self.nesting.counters_of_recording();
        let recording = (!graph.is_null())
            .then(|| Recording::new(graph, level, &device, self.adopted(), counters));
        let ended = match (code, recording) {
            (sys::CUDA_SUCCESS, Some(recording)) => return Ok(recording),
            (sys::CUDA_SUCCESS, None) => "the driver ended the capture without a graph".to_owned(),
            (sys::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, _) => format!(
                "{}; an operation the capture cannot hold was issued while it recorded",
                api.describe(code)
            ),
            (code, _) => api.describe(code),
        };
        let message = match self.leave_capture() {
            Some(note) => format!("{ended}; {note}"),
            None => ended,
        };
        drop(current);
        Err(refuse(OP, message))
    }

    /// Make sure the stream is not capturing after a failed end: ask the
    /// driver, and replace a stream it still counts as capturing with a
    /// fresh one, ordered after everything the old one held: the newest
    /// event, which `begin` recorded after the last work enqueued before
    /// the capture (a capturing stream can record none that a stream
    /// outside the capture may wait for). Says what was done, if anything.
    fn leave_capture(&mut self) -> Option<String> {
        let api = self.device.api();
        let mut status = sys::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the stream is live; `status` is a valid place for it.
        let asked = unsafe { (api.stream_is_capturing)(self.raw, &mut status) };
        if asked == sys::CUDA_SUCCESS && status == sys::CU_STREAM_CAPTURE_STATUS_NONE {
            return None;
        }
        Some(self.replace_raw(false))
    }

    /// Replace the stream by a fresh one ordered after everything the old
    /// one held (see `leave_capture`), and say what was done. An
    /// `abandoned` stream, whose capture the driver cannot end safely, is
    /// never destroyed: destroying a capturing stream tears its capture
    /// down too.
    fn replace_raw(&mut self, abandoned: bool) -> String {
        let api = self.device.api();
        let mut fresh: CUstream = ptr::null_mut();
        // SAFETY: `fresh` is a valid place for the handle.
        let created = unsafe { (api.stream_create)(&mut fresh, sys::CU_STREAM_NON_BLOCKING) };
        if created != sys::CUDA_SUCCESS {
            return format!(
                "the stream may still be recording, and no fresh stream could replace it: {}",
                api.describe(created)
            );
        }
        if let Some(event) = self.events.latest() {
            // SAFETY: both handles are live; the event was recorded before
            // the capture began, outside it, after all the stream's work.
            let waited = unsafe { (api.stream_wait_event)(fresh, event, 0) };
            if let Err(e) = api.check("order the fresh stream", waited) {
                log::warn!("{e}");
            }
        }
        let old = std::mem::replace(&mut self.raw, fresh);
        if !std::mem::replace(&mut self.owned, true) {
            // The caller's stream is theirs to end and destroy.
            return "the adopted stream was still recording, so a fresh stream of the library's \
                    replaced it; the caller's stream is left as it is"
                .to_owned();
        }
        if abandoned {
            return "the stream was replaced by a fresh one, and the old one is left capturing \
                    (never destroyed)"
                .to_owned();
        }
        // SAFETY: the old stream is owned here and destroyed once; work
        // already on it still completes, and its events stay valid.
        let destroyed = unsafe { (api.stream_destroy)(old) };
        if let Err(e) = api.check("destroy the stream left recording", destroyed) {
            log::warn!("{e}");
        }
        "the stream was still recording, so it was replaced by a fresh one".to_owned()
    }

    /// Whether the stream's recordings can hold conditional nodes, and what
    /// their bodies may hold: copies too, since a body graph holds memcpy
    /// nodes, between device memory and pinned host memory, which is
    /// mapped for the device wherever unified addressing is (every 64-bit
    /// platform the driver supports).
    pub(crate) fn conditionals(&self) -> Result<Bodies, String> {
        self.device.conditionals().map(|_| Bodies { copies: true })
    }

    /// Open a conditional of `kind` over the `u32` `flag` in the recording.
    pub(crate) fn open_conditional<D>(
        &mut self,
        kind: Conditional,
        flag: DeviceSlice<'_, D>,
    ) -> Result<(), DriverError>
    where
        D: Driver<DevicePage = DevicePage>,
    {
        const OP: &str = "open conditional";
        if flag.len != 4 || !flag.offset.is_multiple_of(4) {
            return Err(refuse(
                OP,
                format!("the flag is not an aligned u32: {flag:?}"),
            ));
        }
        let address = flag.page.address(&self.device, flag.offset, flag.len, OP)?;
        self.nesting.open(&self.device, self.raw, kind, address)
    }

    /// Switch the open conditional to its next body.
    pub(crate) fn next_body(&mut self) -> Result<(), DriverError> {
        self.nesting.next_body(&self.device)
    }

    /// Close the innermost open conditional with its bodies' orders.
    pub(crate) fn close_conditional(&mut self, orders: &[Order<'_>]) -> Result<(), DriverError> {
        self.nesting.close(&self.device, &mut self.level, orders)
    }

    /// Pre-stage `exec` on this stream.
    pub(crate) fn upload(&mut self, exec: &Executable) -> Result<(), DriverError> {
        exec.upload(&self.device, self.raw)?;
        self.unsignalled = true;
        Ok(())
    }

    /// Enqueue `exec`'s work on this stream. Allocates nothing.
    pub(crate) fn replay(&mut self, exec: &Executable) -> Result<(), DriverError> {
        exec.launch(&self.device, self.raw)?;
        self.unsignalled = true;
        Ok(())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let api = self.device.api();
        let current = match self.device.enter() {
            Ok(current) => current,
            Err(e) => {
                log::warn!("leaking a stream: {e}");
                return;
            }
        };
        if self.recording {
            // A stream cannot be waited on while it records; close the
            // recording and throw it away first.
            drop(self.end());
        }
        // SAFETY: the stream is live; waiting makes sure no event is still
        // in use by its work when they go.
        let waited = unsafe { (api.stream_synchronize)(self.raw) };
        if let Err(e) = api.check("wait for stream", waited) {
            log::warn!("{e}");
        }
        self.events.destroy_all();
        self.nesting.destroy(&self.device);
        if self.owned {
            // SAFETY: the stream is owned here and destroyed once.
            let destroyed = unsafe { (api.stream_destroy)(self.raw) };
            if let Err(e) = api.check("destroy stream", destroyed) {
                log::warn!("{e}");
            }
        }
        drop(current);
        if let Some(keep_alive) = self.keep_alive.take() {
            self.device.release(Release::KeepAlive(keep_alive));
        }
    }
}

/// Whether `raw` may be adopted on `device`: a stream of its context, not
/// a default one, non-blocking, not capturing.
///
/// # Safety
///
/// `raw` is null, a default stream's handle, or a live stream.
unsafe fn check_adoptable(device: &Device, raw: CUstream) -> Result<(), DriverError> {
    const OP: &str = "adopt stream";
    if raw.is_null() {
        return Err(refuse(
            OP,
            "the stream handle is null (the legacy default stream cannot be captured)",
        ));
    }
    let special = raw as usize;
    if special == sys::CU_STREAM_LEGACY || special == sys::CU_STREAM_PER_THREAD {
        return Err(refuse(
            OP,
            "the legacy and per-thread default streams cannot be adopted: a capture on \
             them cannot begin and end on any thread",
        ));
    }
    let api = device.api();
    let _current = device.enter()?;
    let mut context: CUcontext = ptr::null_mut();
    // SAFETY: the caller promises a live stream; `context` is a valid
    // place for the handle.
    api.check(OP, unsafe { (api.stream_get_ctx)(raw, &mut context) })?;
    if context != device.raw_context() {
        return Err(refuse(
            OP,
            "the stream belongs to another context than the device's",
        ));
    }
    let mut flags: c_uint = 0;
    // SAFETY: the stream is live; `flags` is a valid place for them.
    api.check(OP, unsafe { (api.stream_get_flags)(raw, &mut flags) })?;
    if flags & sys::CU_STREAM_NON_BLOCKING == 0 {
        return Err(refuse(
            OP,
            "the stream is blocking (made without CU_STREAM_NON_BLOCKING): work on the legacy \
             default stream anywhere in the process would invalidate its captures; make it \
             with CU_STREAM_NON_BLOCKING (cudarc's `CudaContext::new_stream` does)",
        ));
    }
    let mut status = sys::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the stream is live; `status` is a valid place for it.
    api.check(OP, unsafe { (api.stream_is_capturing)(raw, &mut status) })?;
    if status != sys::CU_STREAM_CAPTURE_STATUS_NONE {
        return Err(refuse(OP, "the stream is capturing already"));
    }
    Ok(())
}

fn same_len(op: &'static str, src: u64, dst: u64) -> Result<usize, DriverError> {
    if src != dst {
        return Err(refuse(
            op,
            format!("source holds {src} bytes, destination {dst}"),
        ));
    }
    usize::try_from(src).map_err(|_| refuse(op, format!("{src} bytes do not fit this host")))
}
