//! A host "device": what every stream on it shares.

use std::sync::atomic::{AtomicU64, Ordering};

/// A host "device": shared by every stream on it, counting what it hands
/// out. Each is independent of the others.
#[derive(Debug, Default)]
pub struct Device {
    pub(crate) index: usize,
    pub(crate) next_stream: AtomicU64,
    pub(crate) live_pages: AtomicU64,
}

impl Device {
    /// Pages allocated and not yet released, device and host together.
    pub fn live_pages(&self) -> u64 {
        self.live_pages.load(Ordering::Relaxed)
    }
}
