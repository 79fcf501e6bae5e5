//! Streams: the work enqueued on them, the events that serve as their
//! signals and fences, and their recording into a HIP graph (opening and
//! closing a capture are stream transitions).
//!
//! Captures run in `hipStreamCaptureModeRelaxed`. capture-core drives a
//! stream from whichever thread calls, so `begin` and `end` may arrive on
//! different threads; the global and thread-local modes refuse that
//! (`hipErrorStreamCaptureWrongThread`). Relaxed mode allows allocations
//! while a capture records. The real risk is process-wide: on ROCm any
//! synchronous `hipMemcpy` or `hipMemset`, on any thread, invalidates every
//! capture in progress, and `hipStreamEndCapture` then fails without ending
//! it, so a failed end replaces the stream (`Stream::end`). Frees and
//! unloads on the GPU wait while any of its streams records (see
//! [`Device`](crate::Device)).

use std::collections::VecDeque;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use capture_core::DriverError;

use crate::device::Device;
use crate::error::{self, describe, other};
use crate::ffi;
use crate::foreign::{Foreign, ForeignBuffer};
use crate::kernels::{Kernel, MAX_POINTERS, MAX_VALUES};
use capture_core::{KeepAlive, Rejected};

/// Most idle events a stream keeps for reuse; beyond that they are destroyed,
/// so a burst of signals does not pin events for the stream's whole life.
const SPARE_EVENTS: usize = 16;

/// A point in one stream's work.
///
/// A sequence number rather than the event itself, because a signal is `Copy`
/// and may outlive the event that marked it: an event is recycled once its
/// point has passed, and a signal whose event is gone is known complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    stream: u64,
    seq: u64,
}

/// One operation a capture recorded, in issue order: one node of the graph.
///
/// A stream's capture is a chain, so this order is the graph's topological
/// order, the one `hipGraphExecUpdate` pairs nodes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// A kernel node running this function.
    Kernel(usize),
    /// A host-to-device copy node.
    ToDevice,
    /// A device-to-host copy node.
    ToHost,
    /// A child graph node holding this foreign operation's work.
    Foreign(usize),
}

/// What a capture in progress has recorded so far.
#[derive(Default)]
struct Capture {
    work: Vec<Work>,
}

impl Capture {
    fn kernel(&mut self, kernel: &Kernel) {
        self.work.push(Work::Kernel(kernel.function() as usize));
    }
}

/// A closed recording: the captured `hipGraph_t` (destroyed when this
/// drops) and what was recorded into it. The modules its kernel nodes run
/// stay loaded because capture-core holds their kernels for as long as the
/// recording or an executable made from it may run (its rule 19).
pub struct Recording {
    pub(crate) graph: ffi::Graph,
    pub(crate) work: Vec<Work>,
    pub(crate) device: Arc<Device>,
    /// Whether the stream was adopted, so that the caller's own work on it
    /// may add nodes the library did not issue.
    pub(crate) adopted: bool,
    /// Nodes beyond the library's, found by the node check: the caller's
    /// own work on an adopted stream.
    pub(crate) foreign: usize,
    /// Set once the captured chain's edges were rewritten (see
    /// `graph::arrange`); `None` while the graph is the chain as captured.
    pub(crate) rewritten: Option<Rewritten>,
}

/// A recording's graph whose edges are no longer the captured chain.
pub(crate) struct Rewritten {
    /// Node `i` is operation `i`, the `i`-th launch or copy issued.
    pub(crate) nodes: Vec<ffi::GraphNode>,
    /// The edges the graph holds, sorted.
    pub(crate) edges: Vec<capture_core::edges::Edge>,
}

// SAFETY: a graph is a runtime object usable from any thread (the device is
// made current on every entry); it is destroyed only by Drop, once.
unsafe impl Send for Recording {}

impl Drop for Recording {
    fn drop(&mut self) {
        const OP: &str = "destroy captured graph";
        let api = self.device.api;
        let _current = self.device.enter(OP);
        // SAFETY: the graph came from hipStreamEndCapture and is destroyed
        // exactly once, here (an executable made from it holds its own copy).
        let code = unsafe { (api.graph_destroy)(self.graph) };
        if let Err(error) = error::check(api, OP, code) {
            log::warn!("{error}");
        }
    }
}

/// A non-blocking HIP stream on one device.
///
/// [`Stream::from_raw`] makes one over a stream made elsewhere, which the
/// library then never destroys.
pub struct Stream {
    pub(crate) device: Arc<Device>,
    raw: ffi::Stream,
    /// Whether `raw` is the library's own, destroyed when the stream drops.
    owned: bool,
    /// What keeps an adopted stream alive, dropped after the library's last
    /// use of it.
    keep_alive: Option<KeepAlive>,
    id: u64,
    /// The last sequence number handed out; 0 means none, which every fence
    /// treats as already reached.
    last_seq: u64,
    /// Recorded events not yet known complete, oldest first. An entry
    /// `(seq, event)` stands for every sequence number after the previous
    /// entry's up to `seq`.
    pending: VecDeque<(u64, ffi::Event)>,
    /// Every sequence number up to this one has been reached.
    reached: u64,
    spare: Vec<ffi::Event>,
    /// The capture `begin` opened, until `end` closes it.
    capture: Option<Capture>,
    /// Whether work was enqueued since the newest event was recorded.
    unsignalled: bool,
    /// The stream's own stream for capturing foreign operations' work,
    /// made on first use.
    side: Option<ffi::Stream>,
}

// SAFETY: the stream and event handles are runtime objects usable from any
// thread (the device is made current on every entry); the struct is only
// reached through `&mut`, so no two threads use it at once.
unsafe impl Send for Stream {}

/// Create a non-blocking stream on the current device.
fn create_raw(device: &Device, op: &'static str) -> Result<ffi::Stream, DriverError> {
    let api = device.api;
    let mut raw = ptr::null_mut();
    // SAFETY: the out-pointer is a live local; the flag is a documented one.
    let code = unsafe { (api.stream_create_with_flags)(&mut raw, ffi::STREAM_NON_BLOCKING) };
    error::check(api, op, code)?;
    Ok(raw)
}

impl Stream {
    /// The runtime's handle, for enqueuing work.
    pub(crate) fn raw(&self) -> ffi::Stream {
        self.raw
    }

    /// Work was enqueued (a capture's work is recorded, not run, so it
    /// needs no event).
    pub(crate) fn enqueued(&mut self) {
        if self.capture.is_none() {
            self.unsignalled = true;
        }
    }

    pub(crate) fn create(device: &Arc<Device>) -> Result<Self, DriverError> {
        const OP: &str = "create stream";
        let _current = device.enter(OP)?;
        let raw = create_raw(device, OP)?;
        Ok(Self::over(device, raw, None))
    }

    /// A stream over `raw`, a stream of `device` made elsewhere
    /// (`hipStreamCreate` by another library of this process), for
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
    /// captures in `hipStreamCaptureModeRelaxed`, from whichever thread the
    /// library is called on: the caller's launches and asynchronous copies
    /// on `raw` then become nodes of the graph, in stream order among the
    /// library's, and run on every replay. Such a graph replays as captured,
    /// one node after another, and is never updated in place, since the
    /// library cannot match nodes it did not issue. While a window records
    /// the caller must not synchronize or query the stream, make a
    /// synchronous copy or memset anywhere (on ROCm that invalidates every
    /// capture of the process), or begin or end a capture of its own on it;
    /// the buffers its own work touches are not tracked by the library.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of `device` and stays alive until
    /// `keep_alive` is dropped; nothing destroys it meanwhile. Work the
    /// caller issues on it reads and writes only memory the library's work
    /// does not use at the time, or is ordered with it by the stream.
    ///
    /// # Errors
    ///
    /// A null handle, the legacy (`hipStreamLegacy`) or per-thread default
    /// stream (which a capture from any thread cannot use), a stream of another device (where the runtime
    /// can say, ROCm 6 on), or one capturing already.
    pub unsafe fn from_raw<K: Send + 'static>(
        device: &Arc<Device>,
        raw: ffi::Stream,
        keep_alive: K,
    ) -> Result<Self, Rejected<K>> {
        // SAFETY: the caller's promise, passed on.
        match unsafe { check_adoptable(device, raw) } {
            Ok(()) => Ok(Self::over(device, raw, Some(KeepAlive::new(keep_alive)))),
            Err(e) => Err(Rejected::new(e, keep_alive)),
        }
    }

    /// The runtime's handle of the stream: the caller's own for an adopted
    /// one (unless a failed capture replaced it).
    pub fn as_raw(&self) -> ffi::Stream {
        self.raw
    }

    /// The stream over `raw`: the library's own when `keep_alive` is
    /// `None`, else adopted.
    fn over(device: &Arc<Device>, raw: ffi::Stream, keep_alive: Option<KeepAlive>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Self {
            device: Arc::clone(device),
            raw,
            owned: keep_alive.is_none(),
            keep_alive,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            last_seq: 0,
            pending: VecDeque::new(),
            reached: 0,
            spare: Vec::new(),
            capture: None,
            unsignalled: false,
            side: None,
        }
    }

    /// Whether the stream was adopted: other code may enqueue work on it
    /// too, so a capture begins after a fresh signal and may hold nodes the
    /// library did not issue. Its keep-alive goes only with it.
    fn adopted(&self) -> bool {
        self.keep_alive.is_some()
    }

    /// Recycle the oldest events whose work has finished, so that a stream
    /// signalled often but fenced rarely holds few events.
    fn reap(&mut self) {
        let api = self.device.api;
        while let Some(&(_, event)) = self.pending.front() {
            // SAFETY: the event is live (created here, destroyed only on drop
            // or when over the spare limit, after leaving `pending`).
            let code = unsafe { (api.event_query)(event) };
            if code != ffi::SUCCESS {
                // Not ready, or an error that the fence on it will report.
                break;
            }
            self.pop_reached();
        }
    }

    /// The oldest pending event has been reached.
    fn pop_reached(&mut self) {
        if let Some((seq, event)) = self.pending.pop_front() {
            self.reached = seq;
            self.recycle(event);
        }
    }

    fn recycle(&mut self, event: ffi::Event) {
        if self.spare.len() < SPARE_EVENTS {
            self.spare.push(event);
        } else {
            destroy_event(&self.device, event);
        }
    }

    /// Every event up to `index` of `pending` has been reached.
    fn passed(&mut self, index: usize) {
        for _ in 0..=index {
            self.pop_reached();
        }
    }

    /// Record an event: one `hipEventRecord` on a recycled event, no wait.
    pub(crate) fn signal(&mut self) -> Result<Signal, DriverError> {
        const OP: &str = "signal";
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        self.reap();
        let event = match self.spare.pop() {
            Some(event) => event,
            None => {
                let mut event = ptr::null_mut();
                // SAFETY: the out-pointer is a live local; the flag is a
                // documented one.
                let code =
                    unsafe { (api.event_create_with_flags)(&mut event, ffi::EVENT_DISABLE_TIMING) };
                error::check(api, OP, code)?;
                event
            }
        };
        // SAFETY: the event and the stream are live and on the current device.
        let code = unsafe { (api.event_record)(event, self.raw) };
        if let Err(error) = error::check(api, OP, code) {
            self.recycle(event);
            return Err(error);
        }
        self.last_seq += 1;
        self.pending.push_back((self.last_seq, event));
        self.unsignalled = false;
        Ok(Signal {
            stream: self.id,
            seq: self.last_seq,
        })
    }

    /// Where `signal` sits in `pending`, or `None` when it has been reached.
    fn find(&self, op: &'static str, signal: Signal) -> Result<Option<usize>, DriverError> {
        if signal.stream != self.id {
            return Err(other(op, "the signal was made by another stream"));
        }
        if signal.seq > self.last_seq {
            return Err(other(op, "the signal was never handed out by this stream"));
        }
        if signal.seq <= self.reached {
            return Ok(None);
        }
        // The first event at or after the signal stands for it.
        Ok(self.pending.iter().position(|&(seq, _)| seq >= signal.seq))
    }

    pub(crate) fn fence(&mut self, signal: Signal) -> Result<(), DriverError> {
        const OP: &str = "fence";
        let Some(index) = self.find(OP, signal)? else {
            return Ok(());
        };
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        let event = self.pending[index].1;
        // SAFETY: the event is live and was last recorded on this stream's
        // current handle, which is live.
        let code = unsafe { (api.event_synchronize)(event) };
        error::check(api, OP, code)?;
        // The stream is in order: everything recorded before this event is
        // done too.
        self.passed(index);
        Ok(())
    }

    pub(crate) fn is_done(&mut self, signal: Signal) -> Result<bool, DriverError> {
        const OP: &str = "query signal";
        let Some(index) = self.find(OP, signal)? else {
            return Ok(true);
        };
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        let event = self.pending[index].1;
        // SAFETY: as for `fence`.
        match unsafe { (api.event_query)(event) } {
            ffi::SUCCESS => {
                self.passed(index);
                Ok(true)
            }
            ffi::ERROR_NOT_READY => Ok(false),
            code => error::check(api, OP, code).map(|()| false),
        }
    }

    /// Enqueue a copy of `len` bytes from pinned `host` to device `device`.
    /// Both ranges lie inside live pages, which capture-core keeps alive
    /// until a fence passes the copy.
    pub(crate) fn copy_to_device(
        &mut self,
        host: *mut u8,
        device: *mut c_void,
        len: usize,
    ) -> Result<(), DriverError> {
        const OP: &str = "copy to device";
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        // SAFETY: both ranges lie inside live allocations (pinned host and
        // device, checked by the caller), the stream is live, and the copy is
        // asynchronous: capture-core keeps both pages alive until a fence
        // passes it.
        let code = unsafe { (api.memcpy_htod_async)(device, host.cast(), len, self.raw) };
        error::check(api, OP, code)?;
        self.enqueued();
        if let Some(capture) = &mut self.capture {
            capture.work.push(Work::ToDevice);
        }
        Ok(())
    }

    /// Enqueue a copy of `len` bytes from device `device` to pinned `host`,
    /// under the same promise as [`Stream::copy_to_device`].
    pub(crate) fn copy_to_host(
        &mut self,
        device: *mut c_void,
        host: *mut u8,
        len: usize,
    ) -> Result<(), DriverError> {
        const OP: &str = "copy to host";
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        // SAFETY: as for copy_to_device, in the other direction.
        let code = unsafe { (api.memcpy_dtoh_async)(host.cast(), device, len, self.raw) };
        error::check(api, OP, code)?;
        self.enqueued();
        if let Some(capture) = &mut self.capture {
            capture.work.push(Work::ToHost);
        }
        Ok(())
    }

    /// Enqueue `kernel` on a grid of `groups` blocks, passing `pointers` (the
    /// device addresses of its bindings, then of its info block) and then
    /// each by-value parameter packed in `params`, in the convention
    /// [`Kernel`] documents. Everything is on the stack: capture-core's
    /// limits bound the counts.
    pub(crate) fn launch(
        &mut self,
        kernel: &Kernel,
        groups: [u32; 3],
        pointers: &[*mut c_void],
        params: &[u8],
    ) -> Result<(), DriverError> {
        const OP: &str = "launch";
        let ordinal = kernel.device().ordinal;
        if ordinal != self.device.ordinal {
            return Err(other(
                OP,
                format!(
                    "the kernel was loaded on HIP device {ordinal} and the stream is on device {}",
                    self.device.ordinal
                ),
            ));
        }
        let mut values = [0u64; MAX_VALUES];
        let value_count = kernel.pack_params(params, &mut values);
        // hipModuleLaunchKernel takes an array of pointers to the parameters
        // and copies the values at the call (and into the node when
        // capturing); it only reads through them.
        let mut args = [ptr::null_mut::<c_void>(); MAX_POINTERS + MAX_VALUES];
        let targets = pointers
            .iter()
            .take(MAX_POINTERS)
            .map(|p| ptr::from_ref(p).cast_mut().cast::<c_void>())
            .chain(
                values[..value_count]
                    .iter_mut()
                    .map(|v| ptr::from_mut(v).cast::<c_void>()),
            );
        for (arg, target) in args.iter_mut().zip(targets) {
            *arg = target;
        }
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        let [gx, gy, gz] = groups;
        let [bx, by, bz] = kernel.signature().workgroup_size();
        // SAFETY: the function is live (its module is held by the kernel);
        // the first `pointers.len() + value_count` entries of `args` point at
        // `pointers` and `values`, both live across the call and holding the
        // kernel's parameters in order, as its signature declares them
        // (checked against the code object's metadata where it could be
        // read, else the constructor's caller's promise); `extra` is unused.
        let code = unsafe {
            (api.module_launch_kernel)(
                kernel.function(),
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                0,
                self.raw,
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        error::check(api, OP, code)?;
        self.enqueued();
        if let Some(capture) = &mut self.capture {
            capture.kernel(kernel);
        }
        Ok(())
    }

    /// Enqueue foreign operation `foreign` over `buffers`: at once on the
    /// stream, or inside a window as one child graph node of its own work.
    pub(crate) fn foreign(
        &mut self,
        foreign: &Foreign,
        buffers: &[ForeignBuffer],
    ) -> Result<(), DriverError> {
        const OP: &str = "foreign operation";
        if foreign.device.ordinal != self.device.ordinal {
            return Err(other(
                OP,
                format!(
                    "it was made for HIP device {} and the stream is on device {}",
                    foreign.device.ordinal, self.device.ordinal
                ),
            ));
        }
        let _current = self.device.enter(OP)?;
        if self.capture.is_none() {
            foreign.run(self.raw, false, buffers)?;
            self.enqueued();
            return Ok(());
        }
        let side = match self.side {
            Some(side) => side,
            None => *self.side.insert(create_raw(&self.device, OP)?),
        };
        if let Err(error) = foreign.capture_into(self.raw, side, buffers) {
            self.retire_side_left_capturing(side);
            return Err(error);
        }
        if let Some(capture) = &mut self.capture {
            capture
                .work
                .push(Work::Foreign(ptr::from_ref(foreign) as usize));
        }
        Ok(())
    }

    /// After a failed foreign capture: a side stream the runtime left
    /// capturing (ROCm may fail an end without ending it) is never used
    /// again. An invalidated one is destroyed; an active one is leaked, as
    /// nothing can end it. The device is current.
    fn retire_side_left_capturing(&mut self, side: ffi::Stream) {
        const OP: &str = "retire a side stream left capturing";
        let api = self.device.api;
        let status = match api.stream_is_capturing {
            Some(is_capturing) => {
                let mut status = ffi::CAPTURE_STATUS_ACTIVE;
                // SAFETY: the side stream is live; the out-pointer is a
                // live local.
                let code = unsafe { is_capturing(side, &mut status) };
                (code == ffi::SUCCESS).then_some(status)
            }
            None => None,
        };
        if status == Some(ffi::CAPTURE_STATUS_NONE) {
            return;
        }
        self.side = None;
        if status == Some(ffi::CAPTURE_STATUS_ACTIVE) {
            log::warn!("hip: a side stream was left capturing a foreign operation; it is leaked");
            return;
        }
        // SAFETY: the side stream is the stream's own, holds no work that
        // ran (a capture runs nothing), is no longer reachable, and is
        // destroyed once, here.
        let code = unsafe { (api.stream_destroy)(side) };
        if let Err(error) = error::check(api, OP, code) {
            log::warn!("{error}");
        }
    }

    /// Open a capture: from here every launch and copy is recorded.
    ///
    /// Refused on a runtime older than ROCm 5.3, whose launches would run
    /// at once instead of being recorded.
    pub(crate) fn begin(&mut self) -> Result<(), DriverError> {
        const OP: &str = "begin capture";
        if let Some(reason) = &self.device.capture_refusal {
            return Err(other(OP, reason.clone()));
        }
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        // A point after everything enqueued so far, taken while the stream
        // still runs work: a capture left open cannot record one, and a
        // stream replacing this one (see `replace`) waits for it.
        if self.unsignalled || self.adopted() {
            self.signal()?;
        }
        // Counted before the capture opens, so that no free on the GPU can
        // run once it is open.
        self.device.recording_starts();
        // SAFETY: the stream is live; the mode is a documented one.
        let code = unsafe { (api.stream_begin_capture)(self.raw, ffi::CAPTURE_MODE_RELAXED) };
        if let Err(error) = error::check(api, OP, code) {
            self.device.recording_ends();
            return Err(error);
        }
        self.capture = Some(Capture::default());
        Ok(())
    }

    /// Close the capture and hand back what it recorded. The stream leaves
    /// recording mode on every path: when the runtime's end fails and leaves
    /// the stream capturing (some releases answer
    /// `hipErrorStreamCaptureInvalidated` without ending it), the stream is
    /// replaced by a fresh one. A capture the runtime still calls active
    /// cannot be replaced, and the error says so.
    pub(crate) fn end(&mut self) -> Result<Recording, DriverError> {
        const OP: &str = "end capture";
        let api = self.device.api;
        let capture = self.capture.take().unwrap_or_default();
        // The device matters to nothing below but the runtime's bookkeeping;
        // the capture is closed whether or not it could be made current.
        let current = self.device.enter(OP);
        if let Err(error) = &current {
            log::warn!("{error}; ending the capture on whichever device is current");
        }
        let mut graph = ptr::null_mut();
        // SAFETY: the stream is live; the out-pointer is a live local.
        let code = unsafe { (api.stream_end_capture)(self.raw, &mut graph) };
        // Owned from here, so the graph is destroyed on every path below.
        let recording = (!graph.is_null()).then(|| Recording {
            graph,
            work: capture.work,
            device: Arc::clone(&self.device),
            adopted: self.adopted(),
            foreign: 0,
            rewritten: None,
        });
        let result = if code != ffi::SUCCESS {
            let mut message = describe(Some(api), code);
            let status = self.capture_status();
            if status != Some(ffi::CAPTURE_STATUS_NONE) {
                match self.replace(status) {
                    Ok(()) => message.push_str(
                        "; the stream was left capturing, so it was replaced by a fresh one",
                    ),
                    Err(error) => {
                        log::error!("{error}");
                        message.push_str("; the stream was left capturing and was not replaced: ");
                        message.push_str(&error.message);
                    }
                }
            }
            Err(DriverError::new(error::BACKEND, OP, message))
        } else {
            recording
                .ok_or_else(|| other(OP, "hipStreamEndCapture succeeded but returned no graph"))
        };
        drop(current);
        self.device.recording_ends();
        result
    }

    /// The stream's capture status, or `None` when the runtime cannot say.
    /// A stream it cannot answer for is taken as capturing, since replacing
    /// an idle stream costs little and keeping a capturing one loses all
    /// later work.
    fn capture_status(&self) -> Option<ffi::CaptureStatus> {
        let is_capturing = self.device.api.stream_is_capturing?;
        let mut status = ffi::CAPTURE_STATUS_ACTIVE;
        // SAFETY: the stream is live; the out-pointer is a live local.
        let code = unsafe { is_capturing(self.raw, &mut status) };
        (code == ffi::SUCCESS).then_some(status)
    }

    /// Put a fresh stream in place of this one, which a broken capture left
    /// capturing (`status` is what the runtime said of it). The new stream
    /// first waits for the newest event of the old one, which `begin`
    /// recorded after everything enqueued before the capture; destroying the
    /// old stream ends its capture and (on ROCm's runtime) waits for the
    /// work issued on it before the capture opened.
    ///
    /// ROCm's `hipEventQuery` and `hipEventSynchronize` read the stream an
    /// event was last recorded on without checking it, so no event of the
    /// old stream may outlive it: one event recorded on the fresh stream
    /// after its wait stands for every pending signal, and the old events
    /// are destroyed first. On an error the old stream is kept.
    fn replace(&mut self, status: Option<ffi::CaptureStatus>) -> Result<(), DriverError> {
        const OP: &str = "replace a stream left capturing";
        if status == Some(ffi::CAPTURE_STATUS_ACTIVE) {
            // After hipErrorStreamCaptureUnjoined the capture stays open; a
            // wait on its stream's event would be refused
            // (hipErrorStreamCaptureIsolation) and leave a fresh stream
            // unordered after the old one's work.
            return Err(other(
                OP,
                "the capture is still active (a stream joined into it was never joined back), \
                 so no fresh stream can be ordered after it",
            ));
        }
        let api = self.device.api;
        let fresh = create_raw(&self.device, OP)?;
        let marker = match self.pending.back() {
            Some(&(newest, event)) => match order_after(&self.device, fresh, event) {
                Ok(marker) => Some((newest, marker)),
                Err(error) => {
                    // SAFETY: the fresh stream was created above, holds no
                    // work anyone waits for, and is destroyed once, here.
                    let code = unsafe { (api.stream_destroy)(fresh) };
                    if let Err(error) = error::check(api, OP, code) {
                        log::warn!("{error}");
                    }
                    return Err(error);
                }
            },
            None => None,
        };
        for (_, event) in std::mem::take(&mut self.pending) {
            destroy_event(&self.device, event);
        }
        for event in std::mem::take(&mut self.spare) {
            destroy_event(&self.device, event);
        }
        self.pending.extend(marker);
        let old = std::mem::replace(&mut self.raw, fresh);
        if !std::mem::replace(&mut self.owned, true) {
            // The caller's stream is theirs to end and destroy.
            log::warn!(
                "hip: an adopted stream was left capturing; a fresh stream of the library's \
                 replaces it, and the caller's stream is left as it is"
            );
            return Ok(());
        }
        // SAFETY: the old stream is live and no longer reachable, and no
        // event recorded on it is left: it is destroyed exactly once, here.
        let code = unsafe { (api.stream_destroy)(old) };
        if let Err(error) = error::check(api, OP, code) {
            log::warn!("{error}");
        }
        Ok(())
    }
}

/// Make `fresh` wait for `event` and record a new event on it after the
/// wait, which is reached once `event` is.
fn order_after(
    device: &Device,
    fresh: ffi::Stream,
    event: ffi::Event,
) -> Result<ffi::Event, DriverError> {
    const OP: &str = "replace a stream left capturing";
    let api = device.api;
    // SAFETY: the fresh stream and the event are live; the flags are the
    // default, 0.
    let code = unsafe { (api.stream_wait_event)(fresh, event, 0) };
    error::check(api, OP, code)?;
    let mut marker = ptr::null_mut();
    // SAFETY: the out-pointer is a live local; the flag is a documented one.
    let code = unsafe { (api.event_create_with_flags)(&mut marker, ffi::EVENT_DISABLE_TIMING) };
    error::check(api, OP, code)?;
    // SAFETY: the event was just created and the fresh stream is live, both
    // on the current device.
    let code = unsafe { (api.event_record)(marker, fresh) };
    if let Err(error) = error::check(api, OP, code) {
        destroy_event(device, marker);
        return Err(error);
    }
    Ok(marker)
}

/// A point recorded on one stream that other streams of the same device
/// wait for on the device (`hipStreamWaitEvent`), never the host.
///
/// It holds its device, so it is destroyed on that device even after every
/// stream of it is gone. Dropping it right after a wait is fine: the runtime
/// releases an event still pending on the device once the device reaches it.
pub struct Event {
    device: Arc<Device>,
    raw: ffi::Event,
}

// SAFETY: an event is a runtime object usable from any thread (its device
// is made current on every use); the handle never changes after creation.
unsafe impl Send for Event {}
// SAFETY: shared access only passes the handle to `hipStreamWaitEvent`,
// which the runtime allows from several threads at once.
unsafe impl Sync for Event {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.device.ordinal)
            .finish_non_exhaustive()
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        const OP: &str = "destroy event";
        let current = self.device.enter(OP);
        if let Err(error) = &current {
            log::warn!("{error}; the event is destroyed on whichever device is current");
        }
        destroy_event(&self.device, self.raw);
        drop(current);
    }
}

impl Stream {
    /// Record a fresh event at the current end of the stream's work, for
    /// another stream of the device to wait on.
    pub(crate) fn record_event(&mut self) -> Result<Event, DriverError> {
        const OP: &str = "record an event";
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        let mut raw = ptr::null_mut();
        // SAFETY: the out-pointer is a live local; the flag is a documented
        // one (timing disabled, as for the signals' events).
        let code = unsafe { (api.event_create_with_flags)(&mut raw, ffi::EVENT_DISABLE_TIMING) };
        error::check(api, OP, code)?;
        // Owned from here, so that a failed record still destroys it.
        let event = Event {
            device: Arc::clone(&self.device),
            raw,
        };
        // SAFETY: the event was just created and the stream is live, both on
        // the current device.
        let code = unsafe { (api.event_record)(event.raw, self.raw) };
        error::check(api, OP, code)?;
        Ok(event)
    }

    /// Make the work enqueued from here wait, on the device, for `event`.
    pub(crate) fn wait_event(&mut self, event: &Event) -> Result<(), DriverError> {
        const OP: &str = "wait for an event";
        if event.device.ordinal != self.device.ordinal {
            return Err(other(
                OP,
                format!(
                    "the event was recorded on HIP device {} and the stream is on device {}",
                    event.device.ordinal, self.device.ordinal
                ),
            ));
        }
        let api = self.device.api;
        let _current = self.device.enter(OP)?;
        // SAFETY: the stream and the event are live and on the current
        // device; the flags are 0, the only documented value.
        let code = unsafe { (api.stream_wait_event)(self.raw, event.raw, 0) };
        error::check(api, OP, code)?;
        // The next signal is taken after the wait, so that a fence on it
        // also covers the work the event stands for.
        self.enqueued();
        Ok(())
    }
}

fn destroy_event(device: &Device, event: ffi::Event) {
    let api = device.api;
    // SAFETY: the event is live and leaves every list before this call, so it
    // is destroyed once.
    let code = unsafe { (api.event_destroy)(event) };
    if let Err(error) = error::check(api, "destroy event", code) {
        log::warn!("{error}");
    }
}

/// Whether `raw` may be adopted on `device`: not a default stream, of its
/// device where the runtime can say, not capturing.
///
/// # Safety
///
/// `raw` is null, a default stream's handle, or a live stream.
unsafe fn check_adoptable(device: &Device, raw: ffi::Stream) -> Result<(), DriverError> {
    const OP: &str = "adopt stream";
    if raw.is_null() {
        return Err(other(
            OP,
            "the stream handle is null (the null stream cannot be captured)",
        ));
    }
    if raw as usize == ffi::STREAM_LEGACY || raw as usize == ffi::STREAM_PER_THREAD {
        return Err(other(
            OP,
            "the legacy and per-thread default streams cannot be adopted: a capture on \
                 them cannot begin and end on any thread",
        ));
    }
    let api = device.api;
    let _current = device.enter(OP)?;
    if let Some(get_device) = api.stream_get_device {
        let mut ordinal: ffi::Device = -1;
        // SAFETY: the caller promises a live stream; the out-pointer is
        // a live local.
        let code = unsafe { get_device(raw, &mut ordinal) };
        error::check(api, OP, code)?;
        if ordinal != device.ordinal {
            return Err(other(
                OP,
                format!(
                    "the stream belongs to device {ordinal}, not device {}",
                    device.ordinal
                ),
            ));
        }
    }
    if let Some(is_capturing) = api.stream_is_capturing {
        let mut status = ffi::CAPTURE_STATUS_NONE;
        // SAFETY: the stream is live; the out-pointer is a live local.
        let code = unsafe { is_capturing(raw, &mut status) };
        error::check(api, OP, code)?;
        if status != ffi::CAPTURE_STATUS_NONE {
            return Err(other(OP, "the stream is capturing already"));
        }
    }
    Ok(())
}

impl Drop for Stream {
    fn drop(&mut self) {
        const OP: &str = "destroy stream";
        let api = self.device.api;
        // A stream dropped mid-recording (its owner went away) closes the
        // capture first, or the synchronize below would fail.
        if self.capture.is_some() {
            match self.end() {
                Ok(recording) => drop(recording),
                Err(error) => log::warn!("{error}"),
            }
        }
        let current = self.device.enter(OP);
        if let Err(error) = &current {
            log::warn!("{error}; the stream is destroyed on whichever device is current");
        }
        // SAFETY: the stream is live; waiting lets its events and the pages
        // capture-core frees after it be released with no work in flight.
        let code = unsafe { (api.stream_synchronize)(self.raw) };
        if let Err(error) = error::check(api, OP, code) {
            log::warn!("{error}");
        }
        for (_, event) in std::mem::take(&mut self.pending) {
            destroy_event(&self.device, event);
        }
        for event in std::mem::take(&mut self.spare) {
            destroy_event(&self.device, event);
        }
        if let Some(side) = self.side.take() {
            // SAFETY: the side stream is the stream's own, not capturing
            // (every capture on it ends where it began), and destroyed once.
            let code = unsafe { (api.stream_destroy)(side) };
            if let Err(error) = error::check(api, OP, code) {
                log::warn!("{error}");
            }
        }
        if self.owned {
            // SAFETY: the stream is live and destroyed exactly once, here.
            let code = unsafe { (api.stream_destroy)(self.raw) };
            if let Err(error) = error::check(api, OP, code) {
                log::warn!("{error}");
            }
        }
        drop(current);
        if let Some(keep_alive) = self.keep_alive.take() {
            self.device.let_go(keep_alive);
        }
    }
}
