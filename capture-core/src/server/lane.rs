//! One stream's state under its lock, and the ids a device hands out.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::capture::graph::Captures;
use crate::driver::GraphDriver;
use crate::error::Error;
use crate::ids::{BufferId, WindowId};
use crate::memory::graveyard::Graveyard;
use crate::memory::lingering::Lingering;
use crate::streams::order::StreamOrder;
use crate::streams::state::StreamState;

/// One stream and the graphs that replay on it, under the stream's lock.
pub(super) struct Lane<D: GraphDriver> {
    pub(super) state: StreamState<D>,
    pub(super) graphs: Captures<D>,
}

/// A stream's lock and the graveyard its buffers' drops fill.
///
/// Every buffer of the stream keeps its slot, so that a launch reaches its
/// stream through its first buffer: no map, no lock of it, no reference
/// count. A destroyed stream's lane is gone (`None`), so what a buffer
/// outliving its stream keeps is this lock and the graveyard, nothing of
/// the driver's.
pub(super) struct Slot<D: GraphDriver> {
    pub(super) lane: Mutex<Option<Lane<D>>>,
    pub(super) graveyard: Graveyard,
    /// The device's order of shared buffers.
    pub(super) order: Arc<Mutex<StreamOrder>>,
    /// The device's dropped buffers whose memory is still in use.
    pub(super) lingering: Arc<Mutex<Lingering>>,
    /// Whether the stream's pool holds memory imported from elsewhere,
    /// which another stream's sync may be the last to let go of.
    pub(super) imports: AtomicBool,
    /// Another stream's sweep found the lock taken: the stream drops its
    /// free imports at its next call.
    pub(super) imports_due: AtomicBool,
}

impl<D: GraphDriver> Slot<D> {
    /// The stream's lock, for a call that then opens the lane
    /// (`Server::open`). Poisoned only by a panic in a caller's code run
    /// under it, after which the stream refuses every call until it is
    /// destroyed. Taken by every launch and replay: `inline(always)`, as
    /// plain `inline` left the launch an instruction longer (callgrind).
    #[inline(always)]
    pub(super) fn lock(&self) -> Result<MutexGuard<'_, Option<Lane<D>>>, Error> {
        self.lane.lock().map_err(|_| Error::Poisoned)
    }

    /// Drop the imported pages nothing holds any more: every stream that
    /// used one keeps a hold until the device is past its use, so a free
    /// one is one the device is done with. Never waits for the lock: a
    /// stream busy now does it at its next call.
    pub(super) fn sweep_imports(&self) {
        if !self.imports.load(Ordering::Relaxed) {
            return;
        }
        match self.lane.try_lock() {
            Ok(mut lane) => {
                if let Some(lane) = lane.as_mut() {
                    lane.state.device.drop_free_imports();
                }
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                self.imports_due.store(true, Ordering::Release);
            }
            // A poisoned stream refuses every call until it is destroyed,
            // which lets go of its pages.
            Err(std::sync::TryLockError::Poisoned(_)) => {}
        }
    }
}

/// A stream's slot as a buffer keeps it, whatever the driver: the server
/// that launches on the buffer downcasts it to its own.
pub(crate) trait AnySlot: Any + Send + Sync {
    /// Where the buffer's drop leaves its slice.
    fn graveyard(&self) -> &Graveyard;
}

impl<D: GraphDriver> AnySlot for Slot<D> {
    fn graveyard(&self) -> &Graveyard {
        &self.graveyard
    }
}

/// Ids handed out on a device; counters, so never reused.
#[derive(Debug, Default)]
pub(super) struct Ids {
    pub(super) stream: AtomicU64,
    pub(super) buffer: AtomicU64,
    pub(super) graph: AtomicU64,
    pub(super) window: AtomicU64,
}

impl Ids {
    pub(super) fn next(counter: &AtomicU64) -> u64 {
        counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(super) fn buffer(&self) -> BufferId {
        BufferId(Self::next(&self.buffer))
    }
}

impl<D: GraphDriver> Lane<D> {
    /// Refuse a call of a thread other than the recorder on a recording
    /// stream. Nothing is recorded and the window is not doomed: its owner
    /// did nothing wrong.
    pub(super) fn check_recorder(&self) -> Result<(), Error> {
        let capture = &self.state.capture;
        // Asked only while recording: naming the thread costs a reference
        // count, on the hot path otherwise.
        if !capture.is_recording() || capture.records_for(std::thread::current().id()) {
            return Ok(());
        }
        Err(Error::NotRecorder {
            stream: self.state.id,
            window: capture.recording_window().unwrap_or(WindowId(0)),
        })
    }

    /// A call was refused with `err`: if the calling thread records a
    /// window here, the window can no longer seal. Another thread's refused
    /// call (a read it may not make while the stream records) leaves the
    /// window alone.
    pub(super) fn refused<T>(&mut self, err: Error) -> Result<T, Error> {
        let capture = &mut self.state.capture;
        if capture.is_recording() && capture.records_for(std::thread::current().id()) {
            capture.record_failure(err.clone());
        }
        // A stream joined to a window: that window misses the call too.
        if let Some(join) = self.state.join() {
            join.refused(&err);
        }
        Err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_count_from_one_so_that_zero_names_nothing() {
        // Closing a stream's window names window and graph 0: no real one.
        let ids = Ids::default();
        let first: Vec<u64> = (0..3).map(|_| Ids::next(&ids.window)).collect();
        assert_eq!(first, [1, 2, 3]);
        assert_eq!(ids.buffer(), BufferId(1));
        assert_eq!(ids.buffer(), BufferId(2));
    }
}
