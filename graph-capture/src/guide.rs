//! How to use the library, one page per topic. Every example runs as a
//! test on the host backend, but for the [`interop`] page's, which run
//! under the features `vulkan` and `cudarc`; a GPU backend's client is
//! opened the same way.
//!
//! - [`kernels`]: your own kernels, and the checks every launch passes.
//! - [`capturing`]: how a capture runs, the three-step form, what a window
//!   refuses.
//! - [`streams`]: threads, and streams that share buffers.
//! - [`fork_join`]: captures that span streams.
//! - [`recapture`]: graphs that follow a changing workload; a cache of
//!   graphs by key.
//! - [`temporaries`]: the graphs of one stream share their scratch memory.
//! - [`dependencies`]: a graph runs at the same time what no hazard orders.
//! - [`views`]: buffers over part of one allocation.
//! - [`conditionals`]: ifs and loops inside a graph, decided on the device.
//! - [`foreign`]: other libraries' work inside a graph, with the same
//!   bookkeeping.
//! - [`decode`]: the decode example.
//! - [`generate`]: the generate example, a transformer replayed token by
//!   token.
//! - [`interop`]: using it from an existing runtime: its device, streams,
//!   memory and kernels handed in; cudarc and ash.
//! - [`environment`]: devices and environment variables.
//! - [`benchmarks`]: what is measured, how, and the figures.
//! - [`testing`]: the conformance run, the tests, and CI.
//!
//! Each page is a markdown file in `graph-capture/docs/`, included here so
//! that its examples run as doctests.

#[doc = include_str!("../docs/kernels.md")]
pub mod kernels {}

#[doc = include_str!("../docs/capturing.md")]
pub mod capturing {}

#[doc = include_str!("../docs/streams.md")]
pub mod streams {}

#[doc = include_str!("../docs/fork_join.md")]
pub mod fork_join {}

#[doc = include_str!("../docs/recapture.md")]
pub mod recapture {}

#[doc = include_str!("../docs/temporaries.md")]
pub mod temporaries {}

#[doc = include_str!("../docs/dependencies.md")]
pub mod dependencies {}

#[doc = include_str!("../docs/views.md")]
pub mod views {}

#[doc = include_str!("../docs/conditionals.md")]
pub mod conditionals {}

#[doc = include_str!("../docs/foreign.md")]
pub mod foreign {}

#[doc = include_str!("../docs/decode.md")]
pub mod decode {}

#[doc = include_str!("../docs/generate.md")]
pub mod generate {}

// Its examples need the Vulkan backend and cudarc, so as doctests they are
// collected only under those features; the documentation always shows the
// whole page.
#[cfg_attr(
    any(not(doctest), all(feature = "vulkan", feature = "cudarc")),
    doc = include_str!("../docs/interop.md")
)]
#[cfg_attr(
    all(doctest, not(all(feature = "vulkan", feature = "cudarc"))),
    doc = "Using it from an existing runtime (its examples need the features `vulkan` and `cudarc`)."
)]
pub mod interop {}

#[doc = include_str!("../docs/environment.md")]
pub mod environment {}

#[doc = include_str!("../docs/benchmarks.md")]
pub mod benchmarks {}

#[doc = include_str!("../docs/testing.md")]
pub mod testing {}
