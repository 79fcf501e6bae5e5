//! Native CUDA graphs: what a stream capture recorded, its edges rewritten
//! to the order a graph keeps, its instantiation, and updating an
//! instantiated graph in place. Conditional nodes' bodies are checked and
//! given their order here too, when the conditional closes.
//!
//! A recording holding a conditional node is never embedded in another
//! graph as a child graph node (the driver refuses a conditional inside
//! one); this backend replays each recording as a graph of its own.

mod edges;
mod executable;
mod level;
mod recording;

pub use executable::Executable;
pub(crate) use level::Level;
pub use recording::Recording;
pub(crate) use recording::{count_nodes, finish_body};
