//! What a user calls: a cheap, clonable handle to one device, and a cache
//! of graphs keyed by what they compute.
//!
//! Uses the server and every part below it; no part of the crate uses it.
//!
//! A client may be used from any number of threads at once. Each call locks
//! only the stream it works on (see [`server`](crate::server) for the lock
//! order), so streams driven from different threads run independently, and
//! a driver must not depend on the calling thread.
//!
//! # What may cross threads
//!
//! - Any call, from any thread, on any stream that is not recording.
//! - While a stream records a capture window, only the recording thread
//!   (the one that called [`Client::begin`], or the one that took the
//!   window over with [`Client::adopt`]) may issue work on it: a launch, a
//!   write or an allocation from any other thread is refused with
//!   [`Error::NotRecorder`](crate::Error::NotRecorder) and never recorded.
//!   Any thread holding the window's token may close it with
//!   [`Client::instantiate`].
//! - Buffers and graph handles may be dropped anywhere: the memory returns
//!   to its stream's pool through the drop queue, and a graph is destroyed
//!   after its stream is synced.

pub(crate) mod buffer;
pub(crate) mod cache;
pub(crate) mod calls;
pub(crate) mod conditional;
pub(crate) mod graph_handle;
pub(crate) mod kernel;
pub(crate) mod shared;

pub use buffer::{Buffer, Placement};
pub use cache::{CacheStats, GraphCache, Served};
pub use calls::{Client, Pass};
pub use graph_handle::GraphHandle;
pub use kernel::Kernel;
