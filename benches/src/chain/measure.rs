//! Timing one side's passes: the caller's time to hand a pass over, and the
//! time until the device is done with it.

use std::time::{Duration, Instant};

/// Accumulated time for one path, split at the sync so that the caller's
/// share stays apart from the device work behind it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Measure {
    /// Time in the calls that issue the pass, before any wait.
    pub issue: Duration,
    /// `issue` plus the sync that follows it.
    pub total: Duration,
}

impl Measure {
    /// One round: `issue` the pass, then `sync` until the device is past it.
    pub fn round(&mut self, issue: impl FnOnce(), sync: impl FnOnce()) {
        let start = Instant::now();
        issue();
        self.issue += start.elapsed();
        sync();
        self.total += start.elapsed();
    }
}

/// Microseconds per item.
pub fn micros_per(elapsed: Duration, count: usize) -> f64 {
    elapsed.as_secs_f64() * 1e6 / count.max(1) as f64
}
