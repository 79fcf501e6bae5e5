//! Host-side cost of capture-core, measured on every backend compiled in.
//!
//! Four measurements, shared by the criterion benches (`cargo bench -p
//! benches`) and the plain-text summary (`cargo run --release -p benches
//! --bin summary`):
//!
//! - one replay through capture-core against the raw
//!   [`GraphDriver::replay`](graph_capture::GraphDriver::replay) of the same
//!   executable on the same stream ([`measure::replay_core`],
//!   [`measure::replay_raw`]);
//! - a graph of N `add` launches replayed against the same N launches issued
//!   eagerly, each sequence timed up to its final sync
//!   ([`measure::sequence_replay`], [`measure::sequence_eager`]);
//! - the cost of recording N launches into a graph ([`measure::capture`]);
//! - one eager launch through capture-core against the raw
//!   [`Driver::launch`](graph_capture::Driver::launch) ([`measure::eager_core`],
//!   [`measure::eager_raw`]);
//! - a pipeline that uploads on one stream while another computes, against
//!   the same work on one stream ([`pipeline`]);
//! - greedy generation with the transformer, one graph per batch size
//!   sharing their temporaries, against eager steps ([`generate`]).
//!
//! Every measurement checks its result once at the end: the `x` buffer of the
//! [`Fixture`] is read back and compared with the number of adds issued.
#![deny(unsafe_code)]

pub mod alloc_counter;
pub mod backends;
pub mod chain;
pub mod failure;
pub mod fixture;
pub mod generate;
pub mod looped;
pub mod measure;
pub mod pipeline;
pub mod raw;
pub mod sizes;
pub mod validation;
pub mod wide;

pub use backends::{Backend, Visit, availability, each_backend};
pub use failure::{Failure, Result};
pub use fixture::{AddGraph, Fixture};
pub use measure::{CaptureSample, Sample};
pub use raw::RawAdd;
pub use sizes::{CAPTURE_LENGTHS, ELEMENTS, SEQUENCE_LENGTHS, SYNC_EVERY};
