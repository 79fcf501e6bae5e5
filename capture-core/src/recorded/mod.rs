//! What a capture window recorded, as data: the log of its launches and
//! copies, the dependency graph their declared accesses imply, the edges a
//! backend's native graph keeps, and a DOT picture of it.
//!
//! Uses kernels; the driver contract and everything above it may use it.

pub mod conditional;
pub(crate) mod dependencies;
pub(crate) mod dot;
pub mod edges;
pub(crate) mod entries;

pub use conditional::{Conditional, Ran};
pub use dependencies::{Dependencies, MAX_REDUCED};
pub use entries::GraphInfo;
