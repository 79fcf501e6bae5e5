//! Capture: the window that arms a stream's pools, opens the driver's
//! recording and closes it into a graph, and the graphs it makes, with
//! everything each one pins for its lifetime.
//!
//! Uses streams and every part below them; the server and the client use
//! it.

pub(crate) mod graph;
pub(crate) mod window;

pub use graph::Refused;
pub use window::Update;
