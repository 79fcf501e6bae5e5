//! Record a GPU stream's kernel launches once, replay them many times, on
//! CUDA, HIP and Vulkan, and on a CPU reference backend, with the
//! bookkeeping that makes replay safe.
//!
//! One dependency line brings the core and the backends its features name:
//! the host backend is always there, `vulkan`, `cuda` and `hip` add the GPU
//! backends. Every backend builds without its SDK and says at run time why
//! it is unavailable.
//!
//! ```
//! use graph_capture::{Builtin, Client, Error, Host};
//!
//! fn main() -> Result<(), Error> {
//!     let client = Client::<Host>::open()?;
//!     let stream = client.create_stream()?;
//!     let x = client.create_f32(stream, &[0.0; 256])?;
//!     let one = client.create_f32(stream, &[1.0; 256])?;
//!     // The body runs once for real (warming the pools), then is recorded.
//!     let (graph, ()) = client.capture(stream, |_pass| {
//!         client.run_builtin(stream, Builtin::Add, &[&x, &one], 256, 0.0)
//!     })?;
//!     for _ in 0..1000 {
//!         graph.replay()?;
//!     }
//!     // The warmup added one, the replays a thousand.
//!     assert_eq!(client.read_f32(&x)?, vec![1001.0; 256]);
//!     Ok(())
//! }
//! ```
//!
//! The [`guide`] walks through the rest, each section with examples that
//! run as tests.
#![forbid(unsafe_code)]

pub use capture_core::*;

/// The CPU reference backend, always compiled in: real asynchronous
/// execution on host memory, with the strictest capture rules of any
/// backend.
pub use backend_host as host;
pub use backend_host::Host;

/// The Vulkan backend: a graph is a secondary command buffer a primary
/// executes.
#[cfg(feature = "vulkan")]
pub use backend_vulkan as vulkan;
#[cfg(feature = "vulkan")]
pub use backend_vulkan::Vulkan;

/// The CUDA backend: the driver API loaded at run time; a graph is a CUDA
/// graph.
#[cfg(feature = "cuda")]
pub use backend_cuda as cuda;
#[cfg(feature = "cuda")]
pub use backend_cuda::Cuda;

/// The HIP backend: the HIP runtime loaded at run time; a graph is a HIP
/// graph.
#[cfg(feature = "hip")]
pub use backend_hip as hip;
#[cfg(feature = "hip")]
pub use backend_hip::Hip;

pub mod guide;

/// The README's examples, run as this crate's documentation tests; they use
/// the Vulkan backend and cudarc, so they run under those features.
#[cfg(all(doctest, feature = "vulkan", feature = "cudarc"))]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;
