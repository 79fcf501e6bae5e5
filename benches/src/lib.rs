//! Host-side cost of capture-core, measured on every backend compiled in.
//!
//! Four measurements, shared by the criterion benches (`cargo bench -p
//! benches`) and the plain-text summary (`cargo run --release -p benches
//! --bin summary`):
//!
//! - one replay through capture-core against the raw
//!   [`GraphDriver::replay`](capture_core::GraphDriver::replay) of the same
//!   executable on the same stream ([`measure::replay_core`],
//!   [`measure::replay_raw`]);
//! - a graph of N `add` launches replayed against the same N launches issued
//!   eagerly, each sequence timed up to its final sync
//!   ([`measure::sequence_replay`], [`measure::sequence_eager`]);
//! - the cost of recording N launches into a graph ([`measure::capture`]);
//! - one eager launch through capture-core against the raw
//!   [`Driver::launch`](capture_core::Driver::launch) ([`measure::eager_core`],
//!   [`measure::eager_raw`]).
//!
//! Every measurement checks its result once at the end: the `x` buffer of the
//! [`Fixture`] is read back and compared with the number of adds issued.
#![deny(unsafe_code)]

pub mod alloc_counter;
pub mod backends;
pub mod failure;
pub mod fixture;
pub mod measure;
pub mod raw;
pub mod validation;

pub use backends::{Backend, Visit, availability, each_backend};
pub use failure::{Failure, Result};
pub use fixture::{AddGraph, Fixture};
pub use measure::{CaptureSample, Sample};
pub use raw::RawAdd;

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
