//! Backend-neutral bookkeeping for recording a GPU stream's launches once and
//! replaying them many times.
//!
//! A backend implements [`Driver`] and [`GraphDriver`]: a handful of
//! primitives. Everything that makes replay safe is here, written once:
//! memory pools that warm before a window and pin what a graph uses
//! (`pool`), frees that wait for the device (`drop_queue`), launch info
//! cached by content (`info_cache`), buffers claimed by failures
//! (`failure`), the per-stream capture state (`capture_state`) and the
//! window that drives it (`window`). `ARCHITECTURE.md` at the repository's
//! root maps them.
//!
//! Users call a [`Client`], the same way on every backend:
//!
//! ```
//! use capture_core::{Builtin, Builtins, Client, Error, GraphDriver};
//!
//! fn count_a_thousand_replays<D: GraphDriver + Builtins>(client: &Client<D>) -> Result<Vec<f32>, Error> {
//!     let stream = client.create_stream()?;
//!     let x = client.create_f32(stream, &[0.0; 256])?;
//!     let one = client.create_f32(stream, &[1.0; 256])?;
//!     // Runs the body once for real (warming the pools), then records it.
//!     let (graph, ()) = client.capture(stream, |_pass| {
//!         client.run_builtin(stream, Builtin::Add, &[&x, &one], 256, 0.0)
//!     })?;
//!     for _ in 0..1000 {
//!         client.replay(&graph)?;
//!     }
//!     client.read_f32(&x)
//! }
//!
//! // On the host backend; a GPU backend's client is opened the same way.
//! let client = Client::<backend_host::Host>::open()?;
//! assert_eq!(count_a_thousand_replays(&client)?, vec![1001.0; 256]);
//! # Ok::<(), Error>(())
//! ```
#![forbid(unsafe_code)]

mod builtin;
mod capture_state;
mod client;
mod dependencies;
mod driver;
mod drop_queue;
pub mod edges;
mod error;
mod failure;
mod graph;
mod graph_cache;
mod graph_dot;
mod graph_log;
mod graveyard;
mod hashing;
mod ids;
mod info_cache;
mod interleave;
mod lingering;
mod ordering;
mod phase;
mod pool;
mod server;
mod signature;
mod span;
mod stream;
mod temporaries;
#[cfg(test)]
mod test_driver;
mod window;

pub use builtin::{Builtin, BuiltinInfo, Builtins, MAX_GROUPS_PER_DIM, WORKGROUP_SIZE, groups_for};
pub use client::{Buffer, Client, GraphHandle, Kernel, Pass, Placement};
pub use dependencies::{Dependencies, MAX_REDUCED};
pub use driver::{
    Access, Availability, Binding, DeviceInfo, DeviceSlice, Driver, DriverError, GraphDriver,
    HostSlice, Launch, Order, Updated,
};
pub use error::{Error, Result};
pub use graph::Refused;
pub use graph_cache::{CacheStats, GraphCache, Served};
pub use graph_log::GraphInfo;
pub use ids::{BufferId, GraphId, StreamId, WindowId};
pub use ordering::{Point, StreamOrder, Wait};
pub use phase::Phase;
pub use pool::{PoolUsage, SLICE_ALIGN};
pub use signature::{
    MAX_BINDINGS, MAX_INFO_BYTES, MAX_PARAM_BYTES, MAX_WORKGROUP_THREADS, Params, Signature,
};
pub use span::Span;
pub use stream::{Config, ReplayOrder, StreamUsage};
pub use window::Update;
