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
use cudarc::driver::sys::{self, CUevent, CUresult, CUstream};

use crate::error::{check, refuse};

/// Outstanding signals tolerated before the oldest are polled.
const REAP_ABOVE: usize = 32;

/// Recorded events by signal number, plus spare events.
pub(crate) struct EventRing {
    pending: VecDeque<(u64, CUevent)>,
    free: Vec<CUevent>,
    /// The number the next signal gets; numbers start at 1.
    next: u64,
    /// Every signal numbered up to this one has completed.
    done_through: u64,
}

impl EventRing {
    pub(crate) fn new() -> Self {
        Self {
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
                check(OP, unsafe {
                    sys::cuEventCreate(
                        &mut event,
                        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
                    )
                })?;
                event
            }
        };
        // SAFETY: both handles are live: the event is owned by this ring and
        // the stream by its caller.
        if let Err(e) = check(OP, unsafe { sys::cuEventRecord(event, stream) }) {
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
        if number <= self.done_through {
            return Ok(());
        }
        let Some(&(_, event)) = self.pending.iter().find(|(n, _)| *n == number) else {
            return Err(refuse(
                OP,
                format!("signal {number} was never given by this stream"),
            ));
        };
        // SAFETY: the event is owned by this ring and was recorded.
        check(OP, unsafe { sys::cuEventSynchronize(event) })?;
        self.retire_through(number);
        Ok(())
    }

    /// Recycle the oldest events the device has passed, without blocking.
    fn reap(&mut self) {
        while let Some(&(number, event)) = self.pending.front() {
            // SAFETY: the event is owned by this ring and was recorded.
            let state = unsafe { sys::cuEventQuery(event) };
            // NOT_READY stops the scan; an error is left for a fence to
            // report, since it belongs to the work, not to this signal.
            if state != CUresult::CUDA_SUCCESS {
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
        for event in events {
            // SAFETY: each event is owned by this ring and destroyed once;
            // the driver defers the release of one still pending.
            let destroyed = unsafe { sys::cuEventDestroy_v2(event) };
            if let Err(e) = check("destroy event", destroyed) {
                log::warn!("{e}");
            }
        }
    }
}
