//! The one record of where a stream is in a capture window's life. The
//! stream's capture state holds it; the pools and the info cache read it.

use crate::ids::WindowId;

/// Where the stream is in a capture window's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No window.
    None,
    /// Pools armed, warmup running; the driver is not recording.
    Prepared(WindowId),
    /// The driver records every launch and copy issued on the stream.
    Recording(WindowId),
}
