//! Buffers dropped by clients, waiting for their stream to queue them for a
//! fence.
//!
//! A buffer's drop may run on any thread, at any time, even while its stream
//! is locked by another call, so it cannot take the stream's lock: it leaves
//! its slice here, and the stream's next call collects it under its own
//! lock. Each stream has its own, so collecting never touches another
//! stream. The flag lets every call skip the lock when nothing died, which
//! is almost always.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::pool::SliceHandle;

/// The slices one stream's buffers left behind.
#[derive(Debug, Default)]
pub struct Graveyard {
    pending: AtomicBool,
    dead: Mutex<Vec<SliceHandle>>,
}

impl Graveyard {
    /// A buffer holding `slice` was dropped.
    pub fn bury(&self, slice: SliceHandle) {
        let mut dead = self
            .dead
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        dead.push(slice);
        self.pending.store(true, Ordering::Release);
    }

    /// Everything buried since the last call, handed to `collect`.
    pub fn exhume(&self, mut collect: impl FnMut(SliceHandle)) {
        // A plain load first: the common case writes nothing to the flag.
        if !self.pending.load(Ordering::Relaxed) || !self.pending.swap(false, Ordering::Acquire) {
            return;
        }
        let dead = std::mem::take(
            &mut *self
                .dead
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        dead.into_iter().for_each(&mut collect);
    }
}
