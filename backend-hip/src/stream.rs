//! Streams, and the events that serve as their signals and fences.

use std::collections::VecDeque;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use capture_core::DriverError;

use crate::device::HipDevice;
use crate::error::{self, other};
use crate::ffi;

/// Most idle events a stream keeps for reuse; beyond that they are destroyed,
/// so a burst of signals does not pin events for the stream's whole life.
const SPARE_EVENTS: usize = 16;

/// A point in one stream's work.
///
/// A sequence number rather than the event itself, because a signal is `Copy`
/// and may outlive the event that marked it: an event is recycled once its
/// point has passed, and a signal whose event is gone is known complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HipSignal {
    stream: u64,
    seq: u64,
}

/// A non-blocking HIP stream on one device.
pub struct HipStream {
    pub(crate) device: Arc<HipDevice>,
    raw: ffi::Stream,
    id: u64,
    /// The last sequence number handed out; 0 means none, which every fence
    /// treats as already reached.
    last_seq: u64,
    /// Recorded events not yet known complete, oldest first.
    pending: VecDeque<(u64, ffi::Event)>,
    spare: Vec<ffi::Event>,
    /// Whether a capture begun by `begin` is still open.
    pub(crate) capturing: bool,
}

// SAFETY: the stream and event handles are runtime objects usable from any
// thread (the device is made current on every entry); the struct is only
// reached through `&mut`, so no two threads use it at once.
unsafe impl Send for HipStream {}

impl HipStream {
    /// The runtime's handle, for enqueuing work.
    pub(crate) fn raw(&self) -> ffi::Stream {
        self.raw
    }

    pub(crate) fn create(device: &Arc<HipDevice>) -> Result<Self, DriverError> {
        const OP: &str = "create stream";
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let api = device.api;
        device.make_current(OP)?;
        let mut raw = ptr::null_mut();
        // SAFETY: the out-pointer is a live local; the flag is a documented one.
        let code = unsafe { (api.stream_create_with_flags)(&mut raw, ffi::STREAM_NON_BLOCKING) };
        error::check(api, OP, code)?;
        Ok(Self {
            device: Arc::clone(device),
            raw,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            last_seq: 0,
            pending: VecDeque::new(),
            spare: Vec::new(),
            capturing: false,
        })
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
            self.pending.pop_front();
            self.recycle(event);
        }
    }

    fn recycle(&mut self, event: ffi::Event) {
        if self.spare.len() < SPARE_EVENTS {
            self.spare.push(event);
        } else {
            destroy_event(self.device.api, event);
        }
    }

    pub(crate) fn signal(&mut self) -> Result<HipSignal, DriverError> {
        const OP: &str = "signal";
        if self.capturing {
            // Recorded work only runs at replay, so the stream's real work
            // ends where the capture began: `begin` recorded the last signal
            // just before opening it. Recording an event here would put an
            // event node into the graph instead.
            return Ok(HipSignal {
                stream: self.id,
                seq: self.last_seq,
            });
        }
        let api = self.device.api;
        self.device.make_current(OP)?;
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
        Ok(HipSignal {
            stream: self.id,
            seq: self.last_seq,
        })
    }

    pub(crate) fn fence(&mut self, signal: HipSignal) -> Result<(), DriverError> {
        const OP: &str = "fence";
        if signal.stream != self.id {
            return Err(other(OP, "the signal was made by another stream"));
        }
        if signal.seq > self.last_seq {
            return Err(other(OP, "the signal was never handed out by this stream"));
        }
        // Events leave `pending` only once complete, so a signal whose event
        // is gone has been reached.
        let Some(index) = self.pending.iter().position(|&(seq, _)| seq == signal.seq) else {
            return Ok(());
        };
        let api = self.device.api;
        self.device.make_current(OP)?;
        let event = self.pending[index].1;
        // SAFETY: the event is live and was recorded on this stream.
        let code = unsafe { (api.event_synchronize)(event) };
        error::check(api, OP, code)?;
        // The stream is in order: everything recorded before this event is
        // done too.
        for _ in 0..=index {
            if let Some((_, event)) = self.pending.pop_front() {
                self.recycle(event);
            }
        }
        Ok(())
    }
}

fn destroy_event(api: &crate::loader::Api, event: ffi::Event) {
    // SAFETY: the event is live and leaves every list before this call, so it
    // is destroyed once.
    let code = unsafe { (api.event_destroy)(event) };
    if let Err(error) = error::check(api, "destroy event", code) {
        log::warn!("{error}");
    }
}

impl Drop for HipStream {
    fn drop(&mut self) {
        let api = self.device.api;
        if let Err(error) = self.device.make_current("destroy stream") {
            log::warn!("{error}; the stream is destroyed on whichever device is current");
        }
        if self.capturing {
            crate::graph::abandon_capture(self);
        }
        // SAFETY: the stream is live; waiting lets its events and the pages
        // capture-core frees after it be released with no work in flight.
        let code = unsafe { (api.stream_synchronize)(self.raw) };
        if let Err(error) = error::check(api, "destroy stream", code) {
            log::warn!("{error}");
        }
        for (_, event) in std::mem::take(&mut self.pending) {
            destroy_event(api, event);
        }
        for event in std::mem::take(&mut self.spare) {
            destroy_event(api, event);
        }
        // SAFETY: the stream is live and destroyed exactly once, here.
        let code = unsafe { (api.stream_destroy)(self.raw) };
        if let Err(error) = error::check(api, "destroy stream", code) {
            log::warn!("{error}");
        }
    }
}
