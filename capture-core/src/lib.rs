//! Backend-neutral bookkeeping for recording a GPU stream's launches once and
//! replaying them many times.
//!
//! A backend implements [`Driver`] and [`GraphDriver`]: a handful of
//! primitives. Everything that makes replay safe is here, written once, in
//! parts that each use only the parts below them:
//!
//! - the contract: [`Driver`], [`GraphDriver`], [`Builtins`], [`Error`];
//! - [`kernels`]: signatures every launch is checked against;
//! - [`recorded`]: what a window recorded, and the graph drawn from it;
//! - [`memory`]: pools, frees that wait for the device, the info cache,
//!   temporaries;
//! - [`failures`]: buffers claimed by the operations that failed to write
//!   them;
//! - [`streams`]: each stream's state and capture phase, and the order of
//!   streams around shared buffers;
//! - [`capture`]: windows and the graphs they make;
//! - [`server`]: the device's state, one lock per stream;
//! - [`client`]: what users call.
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
pub mod capture;
pub mod client;
mod driver;
mod error;
pub mod failures;
mod hashing;
mod ids;
mod interleave;
pub mod kernels;
pub mod memory;
mod phase;
pub mod recorded;
pub mod server;
pub mod streams;
#[cfg(test)]
mod test_driver;

pub use builtin::{Builtin, BuiltinInfo, Builtins, MAX_GROUPS_PER_DIM, WORKGROUP_SIZE, groups_for};
pub use capture::{Refused, Update};
pub use client::{
    Buffer, CacheStats, Client, GraphCache, GraphHandle, Kernel, Pass, Placement, Served,
};
pub use driver::{
    Access, Availability, Binding, Bodies, Conditional, DeviceInfo, DeviceSlice, Driver,
    DriverError, GraphDriver, HostSlice, ImportRefusal, Launch, Order, Updated,
};
pub use error::{Error, Result};
pub use ids::{BufferId, GraphId, StreamId, WindowId};
pub use kernels::{
    MAX_BINDINGS, MAX_INFO_BYTES, MAX_PARAM_BYTES, MAX_WORKGROUP_THREADS, Params, Signature, Span,
    panic_message, run_foreign_code,
};
pub use memory::{KeepAlive, PoolUsage, Rejected, SLICE_ALIGN};
pub use phase::Phase;
pub use recorded::{Dependencies, GraphInfo, MAX_REDUCED, Ran, edges};
pub use streams::{Config, Point, ReplayOrder, StreamOrder, StreamUsage, Wait};
