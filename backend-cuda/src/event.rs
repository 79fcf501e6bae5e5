//! The events behind signals and fences, recycled so that a long-running
//! stream does not create (or leak) one per signal; and the [`Event`] one
//! stream records for another to wait on.
//!
//! A signal is a sequence number; the ring maps each outstanding one to the
//! event recorded for it. Work on a stream completes in order, so once a
//! fence sees signal `n` done, every signal up to `n` is done too and their
//! events go back to the free list. Signals nobody fences are reaped by
//! `cuEventQuery` once more than [`REAP_ABOVE`] are outstanding, so a caller
//! that never fences holds a bounded number of events beyond what the device
//! has yet to finish.

use std::collections::VecDeque;
use std::sync::Arc;

use capture_core::DriverError;

use crate::device::Device;
use crate::error::refuse;
use crate::sys::{self, Api, CUevent, CUstream};

/// Outstanding signals tolerated before the oldest are polled.
const REAP_ABOVE: usize = 32;

/// Recorded events by signal number, plus spare events.
pub(crate) struct EventRing {
    api: &'static Api,
    pending: VecDeque<(u64, CUevent)>,
    free: Vec<CUevent>,
    /// The number the next signal gets; numbers start at 1.
    next: u64,
    /// Every signal numbered up to this one has completed.
    done_through: u64,
}

impl EventRing {
    pub(crate) fn new(api: &'static Api) -> Self {
        Self {
            api,
            pending: VecDeque::new(),
            free: Vec::new(),
            next: 1,
            done_through: 0,
        }
    }

    /// Record an event at the current end of `stream` and return its number.
    /// The caller has made the stream's context current.
    pub(crate) fn record(&mut self, stream: CUstream) -> Result<u64, DriverError> {
        const OP: &str = "signal";
        let api = self.api;
        if self.pending.len() > REAP_ABOVE {
            self.reap();
        }
        let event = match self.free.pop() {
            Some(event) => event,
            None => {
                let mut event: CUevent = std::ptr::null_mut();
                // SAFETY: `event` is a valid place for the handle. Timing is
                // disabled: these events only order, and timing makes
                // recording and waiting on them slower.
                api.check(OP, unsafe {
                    (api.event_create)(&mut event, sys::CU_EVENT_DISABLE_TIMING)
                })?;
                event
            }
        };
        // SAFETY: both handles are live: the event is owned by this ring and
        // the stream by its caller.
        if let Err(e) = api.check(OP, unsafe { (api.event_record)(event, stream) }) {
            self.free.push(event);
            return Err(e);
        }
        let number = self.next;
        self.next += 1;
        self.pending.push_back((number, event));
        Ok(number)
    }

    /// Block until signal `number` has completed. The caller has made the
    /// stream's context current.
    pub(crate) fn wait(&mut self, number: u64) -> Result<(), DriverError> {
        const OP: &str = "fence";
        let Some(event) = self.pending_event(OP, number)? else {
            return Ok(());
        };
        let api = self.api;
        // SAFETY: the event is owned by this ring and was recorded.
        api.check(OP, unsafe { (api.event_synchronize)(event) })?;
        self.retire_through(number);
        Ok(())
    }

    /// Whether signal `number` has completed, without waiting. The caller
    /// has made the stream's context current.
    pub(crate) fn query(&mut self, number: u64) -> Result<bool, DriverError> {
        const OP: &str = "ask whether a signal is done";
        let Some(event) = self.pending_event(OP, number)? else {
            return Ok(true);
        };
        let api = self.api;
        // SAFETY: the event is owned by this ring and was recorded.
        match unsafe { (api.event_query)(event) } {
            sys::CUDA_SUCCESS => {
                self.retire_through(number);
                Ok(true)
            }
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            code => api.check(OP, code).map(|()| false),
        }
    }

    /// The event of signal `number`, or `None` when it is known done.
    fn pending_event(&self, op: &'static str, number: u64) -> Result<Option<CUevent>, DriverError> {
        if number <= self.done_through {
            return Ok(None);
        }
        match self.pending.iter().find(|(n, _)| *n == number) {
            Some(&(_, event)) => Ok(Some(event)),
            None => Err(refuse(
                op,
                format!("signal {number} was never given by this stream"),
            )),
        }
    }

    /// The event of the latest signal still pending, for a stream that
    /// must wait for everything signalled so far.
    pub(crate) fn latest(&self) -> Option<CUevent> {
        self.pending.back().map(|&(_, event)| event)
    }

    /// Recycle the oldest events the device has passed, without blocking.
    fn reap(&mut self) {
        while let Some(&(number, event)) = self.pending.front() {
            // SAFETY: the event is owned by this ring and was recorded.
            let state = unsafe { (self.api.event_query)(event) };
            // NOT_READY stops the scan; an error is left for a fence to
            // report, since it belongs to the work, not to this signal.
            if state != sys::CUDA_SUCCESS {
                break;
            }
            self.retire_through(number);
        }
    }

    fn retire_through(&mut self, number: u64) {
        while let Some(&(n, event)) = self.pending.front() {
            if n > number {
                break;
            }
            self.pending.pop_front();
            self.free.push(event);
        }
        self.done_through = self.done_through.max(number);
    }

    /// Destroy every event. The caller has made the context current and
    /// waited for the stream, so none is still pending on the device.
    pub(crate) fn destroy_all(&mut self) {
        let events = self
            .pending
            .drain(..)
            .map(|(_, e)| e)
            .chain(self.free.drain(..));
        let api = self.api;
        for event in events {
            // SAFETY: each event is owned by this ring and destroyed once;
            // the driver defers the release of one still pending.
            let destroyed = unsafe { (api.event_destroy)(event) };
            if let Err(e) = api.check("destroy event", destroyed) {
                log::warn!("{e}");
            }
        }
    }
}

/// A point recorded on one stream that other streams of the same device
/// wait for on the device (`cuStreamWaitEvent`), never the host.
///
/// It holds its device, so it is destroyed in its own context even after
/// every stream of the device is gone. Dropping it right after a wait is
/// fine: the driver releases an event still pending on the device once the
/// device reaches it.
pub struct Event {
    device: Arc<Device>,
    raw: CUevent,
}

// SAFETY: a CUevent is a process-wide driver handle any thread may use once
// its context is current, which every use here ensures; the handle itself
// never changes after creation.
unsafe impl Send for Event {}
// SAFETY: shared access only passes the handle to `cuStreamWaitEvent`,
// which the driver allows from several threads at once.
unsafe impl Sync for Event {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Event {
    /// Record a fresh event at the current end of `stream`, on `device`.
    pub(crate) fn record(device: &Arc<Device>, stream: CUstream) -> Result<Self, DriverError> {
        const OP: &str = "record an event";
        let api = device.api();
        let _current = device.enter()?;
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place for the handle; the context is
        // current. Timing is disabled, as for the signals' events.
        api.check(OP, unsafe {
            (api.event_create)(&mut raw, sys::CU_EVENT_DISABLE_TIMING)
        })?;
        // Owned from here, so that a failed record still destroys it.
        let event = Self {
            device: Arc::clone(device),
            raw,
        };
        // SAFETY: the event was just created and the stream is live, both
        // in the current context.
        api.check(OP, unsafe { (api.event_record)(event.raw, stream) })?;
        Ok(event)
    }

    /// Make `stream`'s later work wait for this event, where the stream is
    /// on `device`.
    pub(crate) fn wait_on(&self, device: &Device, stream: CUstream) -> Result<(), DriverError> {
        const OP: &str = "wait for an event";
        if !self.device.same_context(device) {
            return Err(refuse(OP, "the event was recorded on another device"));
        }
        let api = device.api();
        let _current = device.enter()?;
        // SAFETY: the stream and the event are live and belong to the
        // current context; the flags are 0, the only documented value.
        api.check(OP, unsafe { (api.stream_wait_event)(stream, self.raw, 0) })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let api = self.device.api();
        let current = match self.device.enter() {
            Ok(current) => current,
            Err(e) => {
                log::warn!("leaking an event: {e}");
                return;
            }
        };
        // SAFETY: the event is owned here and destroyed once; the driver
        // defers the release of one a stream still waits for.
        let destroyed = unsafe { (api.event_destroy)(self.raw) };
        if let Err(e) = api.check("destroy event", destroyed) {
            log::warn!("{e}");
        }
        drop(current);
    }
}
