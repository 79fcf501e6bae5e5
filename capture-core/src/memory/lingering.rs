//! Buffers whose last handle dropped while something still uses their
//! memory: a graph that replays into it, a free another stream queued, a
//! window that retained it. What is keyed by such a buffer (its claim, its
//! order across streams) lives as long as its memory, not as its handle:
//! a replay still reads and writes it, and must still be ordered and
//! refused by it.

use crate::ids::BufferId;
use crate::memory::pool::{SliceHandle, WeakSlice};

/// The list is swept when it reaches this length, or twice what the last
/// sweep left: sweeping then costs a constant per buffer.
const FIRST_SWEEP: usize = 32;

/// A device's dropped buffers whose memory is still in use.
#[derive(Debug)]
pub(crate) struct Lingering {
    buffers: Vec<(BufferId, WeakSlice)>,
    sweep_at: usize,
}

impl Default for Lingering {
    fn default() -> Self {
        Self {
            buffers: Vec::new(),
            sweep_at: FIRST_SWEEP,
        }
    }
}

impl Lingering {
    /// The last handle of `slice`'s buffer dropped, but its memory is held
    /// elsewhere: what is keyed by the buffer stays until it is released.
    pub fn linger(&mut self, slice: &SliceHandle) {
        self.buffers.push((slice.id(), slice.downgrade()));
    }

    /// [`Lingering::sweep`], once the list has grown enough since the last.
    pub fn sweep_if_due(&mut self, released: impl FnMut(BufferId)) {
        if self.buffers.len() >= self.sweep_at {
            self.sweep(released);
        }
    }

    /// Hand every buffer whose memory nobody uses any more to `released`,
    /// and forget it.
    pub fn sweep(&mut self, mut released: impl FnMut(BufferId)) {
        self.buffers.retain(|(id, slice)| {
            let gone = slice.is_released();
            if gone {
                released(*id);
            }
            !gone
        });
        self.sweep_at = (self.buffers.len() * 2).max(FIRST_SWEEP);
    }

    /// Buffers lingering.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::pool::Pool;
    use crate::phase::Phase;

    fn slice(pool: &mut Pool<u32>, id: u64) -> SliceHandle {
        pool.reserve(BufferId(id), 8, true, Phase::None, |_| Ok(0))
            .expect("test allocator never fails")
            .expect("growth allowed")
    }

    #[test]
    fn a_buffer_lingers_until_nobody_but_its_pool_holds_its_memory() {
        let mut pool = Pool::new(4096);
        let mut lingering = Lingering::default();
        let held = slice(&mut pool, 1);
        let graph = held.clone();
        lingering.linger(&held);
        drop(held);
        let mut released = Vec::new();
        lingering.sweep(|id| released.push(id));
        assert!(released.is_empty(), "a graph still holds it");
        assert_eq!(lingering.len(), 1);
        drop(graph);
        lingering.sweep(|id| released.push(id));
        assert_eq!((released, lingering.len()), (vec![BufferId(1)], 0));
    }

    #[test]
    fn sweeps_come_when_the_list_doubles() {
        let mut pool = Pool::new(1 << 20);
        let mut lingering = Lingering::default();
        let mut graphs: Vec<SliceHandle> = Vec::new();
        let mut swept = 0;
        for id in 1..=FIRST_SWEEP as u64 {
            let held = slice(&mut pool, id);
            lingering.linger(&held);
            graphs.push(held);
            lingering.sweep_if_due(|_| swept += 1);
        }
        assert_eq!(swept, 0, "all still held");
        assert_eq!(
            lingering.sweep_at,
            2 * FIRST_SWEEP,
            "swept once, at the first mark"
        );
        graphs.truncate(1);
        let held = slice(&mut pool, 999);
        lingering.linger(&held);
        lingering.sweep_if_due(|_| swept += 1);
        assert_eq!(swept, 0, "not due before the mark");
        for id in 1000..1000 + FIRST_SWEEP as u64 {
            let held = slice(&mut pool, id);
            lingering.linger(&held);
        }
        lingering.sweep_if_due(|_| swept += 1);
        assert_eq!(swept, 2 * FIRST_SWEEP - 1, "every one let go");
        assert_eq!(lingering.len(), 1 + 1, "one graph and `held`");
        assert_eq!(
            lingering.sweep_at, FIRST_SWEEP,
            "never below the first mark"
        );
    }
}
