//! Memory: pages from the driver cut into slices and reused ([`pool`]),
//! frees that wait for the device (`drop_queue`), what a stream's dropped
//! buffers leave for it to collect (`graveyard`) or keep (`lingering`), info
//! bytes cached by content (`info_cache`), and the arena a stream's graphs
//! cut their temporaries from (`temporaries`).
//!
//! Uses the driver contract, kernels and recorded; streams and everything
//! above them use it.
//!
//! [`pool`]: PoolUsage

pub(crate) mod drop_queue;
pub(crate) mod graveyard;
pub(crate) mod info_cache;
pub(crate) mod keep_alive;
pub(crate) mod lingering;
pub(crate) mod pool;
pub(crate) mod temporaries;

pub use keep_alive::{KeepAlive, Rejected};
pub use pool::{PoolUsage, SLICE_ALIGN};
