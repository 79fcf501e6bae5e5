//! The sizes every measurement shares: buffers, sync interval, sequence
//! and capture lengths.

/// Elements of the buffers every measured `add` launch covers.
pub const ELEMENTS: u32 = 256;

/// Replays (or eager launches) issued between two syncs of the stream in the
/// per-call measurements, so that the queue stays bounded. The sync itself is
/// left out of the time and the allocation count, on both sides alike.
pub const SYNC_EVERY: u64 = 256;

/// Launch counts of the replay-against-eager comparison.
pub const SEQUENCE_LENGTHS: [usize; 4] = [1, 10, 100, 1000];

/// Launch counts of the capture-cost measurement.
pub const CAPTURE_LENGTHS: [usize; 4] = [10, 100, 1000, 10_000];
