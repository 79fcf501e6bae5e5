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

use crate::memory::pool::SliceHandle;

/// The slices one stream's buffers left behind.
#[derive(Debug, Default)]
pub struct Graveyard {
    pending: AtomicBool,
    dead: Mutex<Dead>,
}

#[derive(Debug, Default)]
struct Dead {
    slices: Vec<SliceHandle>,
    /// Set when the stream is destroyed: nothing will collect again, so a
    /// later drop lets its slice go at once. Under the lock, so that no
    /// burial racing the close is left behind.
    closed: bool,
}

impl Graveyard {
    fn dead(&self) -> std::sync::MutexGuard<'_, Dead> {
        self.dead
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A buffer holding `slice` was dropped.
    pub fn bury(&self, slice: SliceHandle) {
        let mut dead = self.dead();
        if dead.closed {
            return;
        }
        dead.slices.push(slice);
        self.pending.store(true, Ordering::Release);
    }

    /// The stream is gone: let go of what waits and of every later burial.
    pub fn close(&self) {
        let mut dead = self.dead();
        dead.closed = true;
        drop(std::mem::take(&mut dead.slices));
        self.pending.store(false, Ordering::Relaxed);
    }

    /// How many slices wait to be collected.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.dead().slices.len()
    }

    /// Everything buried since the last call, handed to `collect`.
    #[inline]
    pub fn exhume(&self, collect: impl FnMut(SliceHandle)) {
        // A plain load first: the common case writes nothing to the flag.
        if self.pending.load(Ordering::Relaxed) {
            self.exhume_pending(collect);
        }
    }

    #[cold]
    fn exhume_pending(&self, mut collect: impl FnMut(SliceHandle)) {
        if !self.pending.swap(false, Ordering::Acquire) {
            return;
        }
        let dead = std::mem::take(&mut self.dead().slices);
        dead.into_iter().for_each(&mut collect);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BufferId;
    use crate::memory::pool::Pool;
    use crate::phase::Phase;

    fn reserve(pool: &mut Pool<u32>, id: u64) -> SliceHandle {
        pool.reserve(BufferId(id), 16, true, Phase::None, |_| Ok(1))
            .expect("test allocator never fails")
            .expect("growth allowed")
    }

    #[test]
    fn burials_wait_for_their_stream_until_it_closes() {
        let mut pool = Pool::new(4096);
        let graveyard = Graveyard::default();
        graveyard.bury(reserve(&mut pool, 1));
        graveyard.bury(reserve(&mut pool, 2));
        assert_eq!(graveyard.waiting(), 2);
        assert_eq!(
            pool.usage().slices,
            2,
            "a buried slice is held till collected"
        );
        let mut collected = Vec::new();
        graveyard.exhume(|slice| collected.push(slice.id()));
        assert_eq!(collected, [BufferId(1), BufferId(2)]);
        graveyard.exhume(|slice| collected.push(slice.id()));
        assert_eq!(collected.len(), 2, "each burial is collected once");

        graveyard.bury(reserve(&mut pool, 3));
        graveyard.close();
        assert_eq!(graveyard.waiting(), 0, "closing lets go of what waited");
        graveyard.bury(reserve(&mut pool, 4));
        assert_eq!(
            graveyard.waiting(),
            0,
            "a burial after closing lets go at once"
        );
        graveyard.exhume(|slice| collected.push(slice.id()));
        assert_eq!(
            collected.len(),
            2,
            "nothing is collected from a closed graveyard"
        );
        assert_eq!(pool.usage().slices, 0);
    }

    #[test]
    fn no_burial_racing_the_close_is_left_behind() {
        for _ in 0..200 {
            let mut pool = Pool::new(1 << 16);
            let slices: Vec<SliceHandle> = (1..=64).map(|id| reserve(&mut pool, id)).collect();
            let graveyard = Graveyard::default();
            let start = std::sync::Barrier::new(3);
            std::thread::scope(|scope| {
                let mut slices = slices.into_iter();
                for _ in 0..2 {
                    let batch: Vec<SliceHandle> = slices.by_ref().take(32).collect();
                    let (graveyard, start) = (&graveyard, &start);
                    scope.spawn(move || {
                        start.wait();
                        batch.into_iter().for_each(|slice| graveyard.bury(slice));
                    });
                }
                start.wait();
                graveyard.close();
            });
            assert_eq!(graveyard.waiting(), 0, "a burial racing the close stayed");
            assert_eq!(pool.usage().slices, 0, "every slice was let go");
        }
    }
}
