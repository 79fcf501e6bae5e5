//! The events behind signals and fences, recycled so that a long-running
//! stream does not create (or leak) one per signal.
//!
//! A signal is a sequence number; the ring maps each outstanding one to the
//! event recorded for it. Work on a stream completes in order, so once a
//! fence sees signal `n` done, every signal up to `n` is done too and their
//! events go back to the free list. Signals nobody fences are reaped by
//! `cuEventQuery` once more than [`REAP_ABOVE`] are outstanding, so a caller
//! that never fences holds a bounded number of events beyond what the device
//! has yet to finish.

use std::collections::VecDeque;

use capture_core::DriverError;

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
