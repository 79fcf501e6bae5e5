//! Streams: one stream's state (its pools, drop queue, info cache and
//! capture phase), the capture state machine every window step goes
//! through, the streams joined to a recording one, and the order of
//! streams around the buffers they share.
//!
//! Uses memory, failures, recorded and kernels; capture, the server and
//! the client use it.

pub(crate) mod capturing;
pub(crate) mod join;
pub(crate) mod order;
pub(crate) mod state;

pub use order::{Point, StreamOrder, Wait};
pub use state::{Config, ReplayOrder, StreamUsage};
