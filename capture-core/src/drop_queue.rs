//! Frees that wait for the device.
//!
//! A slice dropped on the host may still be read or written by work already
//! enqueued: a pinned staging slice a copy has not read yet, a buffer a kernel
//! is still writing. Its handle waits here until a fence proves that work
//! done, and only then can the pool hand the range out again.
//!
//! A flush is a host sync, so none runs while a window records (the sync
//! would abort the recording); the window drains the queue itself just before
//! it opens and just after it closes.

use crate::pool::SliceHandle;

/// Slices waiting for a fence before they may be reused.
#[derive(Debug, Default)]
pub struct DropQueue {
    pending: Vec<SliceHandle>,
    threshold: usize,
}

impl DropQueue {
    /// A queue that asks to be flushed once it holds `threshold` slices.
    pub fn new(threshold: usize) -> Self {
        Self {
            pending: Vec::new(),
            threshold: threshold.max(1),
        }
    }

    /// Hold `slice` until the next flush.
    pub fn push(&mut self, slice: SliceHandle) {
        self.pending.push(slice);
    }

    /// Slices waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether enough waits that the execution path should flush (when it
    /// may: never while recording).
    pub fn wants_flush(&self) -> bool {
        self.pending.len() >= self.threshold
    }

    /// Wait for the device with `fence`, then let every waiting slice go.
    ///
    /// A failed fence keeps them all: the device may still be using them.
    pub fn drain<E>(&mut self, fence: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        if self.pending.is_empty() {
            return Ok(());
        }
        fence()?;
        self.pending.clear();
        Ok(())
    }

    /// Let every waiting slice go without a fence, for a caller that has
    /// just fenced everything they could be used by.
    pub fn release_fenced(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BufferId;
    use crate::pool::Pool;

    #[test]
    fn slices_wait_for_the_fence() {
        let mut pool = Pool::new(1024);
        let slice = pool
            .reserve(BufferId(1), 8, true, |_| Ok(()))
            .ok()
            .flatten()
            .expect("grows");
        let mut queue = DropQueue::new(2);
        queue.push(slice);
        assert!(!queue.wants_flush());
        assert_eq!(pool.usage().in_use_bytes, 256, "queued is still in use");

        let failed: Result<(), &str> = queue.drain(|| Err("device lost"));
        assert!(failed.is_err());
        assert_eq!(queue.len(), 1, "a failed fence frees nothing");

        let mut fenced = false;
        queue
            .drain(|| {
                fenced = true;
                Ok::<(), ()>(())
            })
            .expect("fence succeeds");
        assert!(fenced && queue.is_empty());
        assert_eq!(pool.usage().in_use_bytes, 0);
    }

    #[test]
    fn an_empty_queue_does_not_sync() {
        let mut queue = DropQueue::new(4);
        queue
            .drain(|| -> Result<(), ()> { panic!("no fence for an empty queue") })
            .expect("nothing to do");
    }
}
