//! Frees that wait for the device, each only as long as it must.
//!
//! A slice dropped on the host may still be used by enqueued work, so its
//! handle waits here until the device is past that work (an executable an
//! update replaced, too). Frees are batched under a signal taken after
//! their last use; reclaiming never waits, and a pool that cannot grow
//! waits for the oldest batch alone ([`DropQueue::wait_oldest`]). While a
//! window records, no signal may be taken: frees queue unstamped until it
//! closes.

use std::collections::VecDeque;

use crate::memory::pool::SliceHandle;

/// Which signal covers a freed slice's last use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp<S> {
    /// The newest signal, taken before: no work was issued since. Joins
    /// the newest stamped batch, or opens one with it when none waits (as
    /// after a sync released them all).
    Newest(S),
    /// A signal just taken, after the last use: opens a new batch.
    New(S),
    /// None could be taken (the stream records, or the signal failed): the
    /// slice waits for a later stamp or a full fence.
    Unstamped,
}

/// Slices (and anything else) freed after the same stream position.
struct Batch<S> {
    stamp: Option<S>,
    slices: Vec<SliceHandle>,
    kept: Vec<Box<dyn Send>>,
}

impl<S> Batch<S> {
    fn new(stamp: Option<S>) -> Self {
        Self {
            stamp,
            slices: Vec::new(),
            kept: Vec::new(),
        }
    }
}

/// Slices waiting for the device before they may be reused, oldest first.
pub struct DropQueue<S> {
    batches: VecDeque<Batch<S>>,
    held: usize,
    threshold: usize,
}

impl<S> std::fmt::Debug for DropQueue<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropQueue")
            .field("batches", &self.batches.len())
            .field("held", &self.held)
            .finish()
    }
}

impl<S: Copy> DropQueue<S> {
    /// A queue that asks to be reclaimed once it holds `threshold` slices.
    pub fn new(threshold: usize) -> Self {
        Self {
            batches: VecDeque::new(),
            held: 0,
            threshold: threshold.max(1),
        }
    }

    /// The batch a free with `stamp` belongs to.
    fn batch(&mut self, stamp: Stamp<S>) -> &mut Batch<S> {
        let reuse = match stamp {
            Stamp::Newest(_) => self.batches.back().is_some_and(|b| b.stamp.is_some()),
            Stamp::Unstamped => self.batches.back().is_some_and(|b| b.stamp.is_none()),
            Stamp::New(_) => false,
        };
        if !reuse {
            let fresh = match stamp {
                Stamp::New(signal) | Stamp::Newest(signal) => Some(signal),
                Stamp::Unstamped => None,
            };
            self.batches.push_back(Batch::new(fresh));
        }
        // Just pushed or found above.
        let last = self.batches.len() - 1;
        &mut self.batches[last]
    }

    /// Hold `slice` until the device has passed `stamp`.
    pub fn push(&mut self, slice: SliceHandle, stamp: Stamp<S>) {
        self.batch(stamp).slices.push(slice);
        self.held += 1;
    }

    /// Hold `item` (an executable a replay may still run) until the device
    /// has passed `stamp`, then drop it.
    pub fn keep(&mut self, item: Box<dyn Send>, stamp: Stamp<S>) {
        self.batch(stamp).kept.push(item);
    }

    /// Stamp every unstamped batch with `signal`, taken after all of their
    /// frees: how a closed window's frees join the queue.
    pub fn stamp_unstamped(&mut self, signal: S) {
        for batch in &mut self.batches {
            batch.stamp.get_or_insert(signal);
        }
    }

    /// Whether a batch waits for a stamp.
    pub fn has_unstamped(&self) -> bool {
        self.batches.iter().any(|b| b.stamp.is_none())
    }

    /// Slices waiting.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Whether enough waits that the execution path should reclaim (when it
    /// may: never while recording).
    #[inline]
    pub fn wants_flush(&self) -> bool {
        self.held >= self.threshold
    }

    fn release_front(&mut self) {
        if let Some(batch) = self.batches.pop_front() {
            self.held -= batch.slices.len();
        }
    }

    /// Let go of every batch, oldest first, whose stamp `is_done` says the
    /// device has passed; stop at the first it has not (or an unstamped
    /// one). Never waits. Returns how many slices were released.
    ///
    /// An error keeps the batch it was asked about and those after it.
    pub fn reclaim<E>(
        &mut self,
        mut is_done: impl FnMut(S) -> Result<bool, E>,
    ) -> Result<usize, E> {
        let before = self.held;
        while let Some(stamp) = self.batches.front().and_then(|b| b.stamp) {
            if !is_done(stamp)? {
                break;
            }
            self.release_front();
        }
        Ok(before - self.held)
    }

    /// Wait with `fence` for the oldest stamped batch and let it go; `false`
    /// when no batch is stamped. A failed fence keeps it.
    pub fn wait_oldest<E>(&mut self, fence: impl FnOnce(S) -> Result<(), E>) -> Result<bool, E> {
        match self.batches.front().and_then(|b| b.stamp) {
            Some(stamp) => {
                fence(stamp)?;
                self.release_front();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Let everything go, for a caller that has just fenced all the work
    /// the queued frees could be used by.
    pub fn release_fenced(&mut self) {
        self.batches.clear();
        self.held = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::ids::BufferId;
    use crate::memory::pool::Pool;

    fn slices(pool: &mut Pool<()>, n: u64) -> Vec<SliceHandle> {
        (0..n)
            .map(|i| {
                pool.reserve(BufferId(i + 1), 8, true, crate::phase::Phase::None, |_| {
                    Ok(())
                })
                .ok()
                .flatten()
                .expect("grows")
            })
            .collect()
    }

    #[test]
    fn batches_are_reclaimed_in_order_without_waiting() {
        let mut pool = Pool::new(4096);
        let mut s = slices(&mut pool, 5).into_iter();
        let mut queue = DropQueue::<u32>::new(3);
        queue.push(s.next().unwrap(), Stamp::New(1));
        queue.push(s.next().unwrap(), Stamp::Newest(1));
        queue.push(s.next().unwrap(), Stamp::New(2));
        assert!(queue.wants_flush());
        queue.push(s.next().unwrap(), Stamp::New(3));
        assert_eq!(queue.len(), 4);
        assert_eq!(pool.usage().in_use_bytes, 5 * 256, "queued is still in use");

        // The device is past 2 but not 3.
        let released = queue
            .reclaim(|stamp| Ok::<_, ()>(stamp <= 2))
            .expect("no error");
        assert_eq!(released, 3);
        assert_eq!(queue.len(), 1);
        assert!(!queue.wants_flush());
        assert_eq!(pool.usage().in_use_bytes, 2 * 256);
        assert_eq!(format!("{queue:?}"), "DropQueue { batches: 1, held: 1 }");

        let failed = queue.reclaim(|_| Err("device lost"));
        assert_eq!(failed, Err("device lost"));
        assert_eq!(queue.len(), 1, "an error frees nothing");
        assert_eq!(queue.reclaim(|_| Ok::<_, ()>(false)), Ok(0));
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn a_miss_waits_for_the_oldest_batch_only() {
        let mut pool = Pool::new(4096);
        let mut s = slices(&mut pool, 3).into_iter();
        let mut queue = DropQueue::<u32>::new(64);
        queue.push(s.next().unwrap(), Stamp::New(7));
        queue.push(s.next().unwrap(), Stamp::New(9));
        let mut waited = Vec::new();
        assert_eq!(
            queue.wait_oldest(|stamp| -> Result<(), ()> {
                waited.push(stamp);
                Ok(())
            }),
            Ok(true)
        );
        assert_eq!(waited, [7], "the newer batch's work is not waited for");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.wait_oldest(|_| Err("lost")), Err("lost"));
        assert_eq!(queue.len(), 1, "a failed fence keeps the batch");
        assert_eq!(queue.wait_oldest(|_| Ok::<_, ()>(())), Ok(true));
        assert!(queue.is_empty());
        assert_eq!(
            queue.wait_oldest(|_| -> Result<(), ()> { panic!("nothing to wait for") }),
            Ok(false)
        );
        drop(s);
    }

    #[test]
    fn unstamped_frees_wait_for_a_stamp() {
        let mut pool = Pool::new(4096);
        let mut s = slices(&mut pool, 4).into_iter();
        let mut queue = DropQueue::<u32>::new(64);
        queue.push(s.next().unwrap(), Stamp::Unstamped);
        queue.push(s.next().unwrap(), Stamp::Unstamped);
        assert!(queue.has_unstamped());
        assert_eq!(
            queue.reclaim(|_| -> Result<bool, ()> { panic!("nothing is stamped") }),
            Ok(0)
        );
        assert_eq!(
            queue.wait_oldest(|_| -> Result<(), ()> { panic!("nothing is stamped") }),
            Ok(false)
        );
        queue.stamp_unstamped(5);
        assert!(!queue.has_unstamped());
        queue.push(s.next().unwrap(), Stamp::New(6));
        assert_eq!(queue.reclaim(|stamp| Ok::<_, ()>(stamp == 5)), Ok(2));
        assert_eq!(queue.len(), 1);
        queue.push(s.next().unwrap(), Stamp::Unstamped);
        queue.release_fenced();
        assert!(queue.is_empty());
        assert_eq!(queue.len(), 0);
        assert_eq!(pool.usage().in_use_bytes, 0);
    }

    #[test]
    fn a_free_after_a_sync_is_stamped_with_the_newest_signal() {
        let mut pool = Pool::new(4096);
        let mut s = slices(&mut pool, 3).into_iter();
        let mut queue = DropQueue::<u32>::new(64);
        queue.push(s.next().unwrap(), Stamp::New(4));
        // A sync released everything; the signal it took is the newest.
        queue.release_fenced();
        queue.push(s.next().unwrap(), Stamp::Newest(4));
        assert!(!queue.has_unstamped(), "a free after a sync has a stamp");
        assert_eq!(queue.reclaim(|stamp| Ok::<_, ()>(stamp <= 4)), Ok(1));
        assert!(queue.is_empty());
        // Behind an unstamped batch, the newest signal opens its own batch.
        queue.push(s.next().unwrap(), Stamp::Unstamped);
        let mut more = slices(&mut pool, 1).into_iter();
        queue.push(more.next().unwrap(), Stamp::Newest(5));
        assert_eq!(queue.wait_oldest(|_| Ok::<_, ()>(())), Ok(false));
        queue.stamp_unstamped(6);
        assert_eq!(queue.reclaim(|stamp| Ok::<_, ()>(stamp <= 6)), Ok(2));
        assert_eq!(pool.usage().in_use_bytes, 0);
    }

    #[test]
    fn kept_items_drop_with_their_batch() {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        let mut queue = DropQueue::<u32>::new(64);
        queue.keep(Box::new(Flag(dropped.clone())), Stamp::New(3));
        assert_eq!(queue.len(), 0, "kept items are not slices");
        assert!(!queue.is_empty());
        assert_eq!(queue.reclaim(|stamp| Ok::<_, ()>(stamp < 3)), Ok(0));
        assert!(
            !dropped.load(Ordering::SeqCst),
            "kept while the device may use it"
        );
        assert_eq!(queue.reclaim(|_| Ok::<_, ()>(true)), Ok(0));
        assert!(dropped.load(Ordering::SeqCst));
        assert!(queue.is_empty());
    }
}
