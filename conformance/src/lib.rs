//! One conformance suite for every backend.
//!
//! [`scenarios()`] lists every scenario, each generic over
//! `D: UserKernels`; the binary and the `conformance` test target
//! run each on every backend compiled in, as a trial named
//! `backend::scenario`. A backend that is compiled in but has no device has
//! its trials ignored with the reason; `CONFORMANCE_REQUIRE=host,vulkan`
//! makes that a failure instead.
//!
//! # Running the suite on a backend outside this workspace
//!
//! Implement [`graph_capture::GraphDriver`] and [`graph_capture::Builtins`],
//! then [`AfterTrial`] (its default checks nothing), and call [`run_all`]:
//!
//! ```
//! use conformance::{AfterTrial, run_all};
//!
//! // A third-party backend would be its own type; the host backend stands in.
//! struct Mine;
//! # type Backend = graph_capture::host::Host;
//! impl Mine {
//!     fn check() -> Result<(), String> {
//!         let results = run_all::<Backend>()?;
//!         let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
//!         assert!(failed.is_empty(), "{failed:?}");
//!         Ok(())
//!     }
//! }
//! # Mine::check().unwrap();
//! ```
//!
//! Fault injection wraps any backend: [`Faulty<D>`](Faulty) fails the k-th
//! call of a chosen [`Primitive`], so the rules about refusals are proven on
//! real drivers too.
// The GPU backends' kernel constructors are `unsafe` (only the caller can
// promise what GPU code does): the workload's modules build them, each call
// with its promise; nothing else here uses `unsafe`.
#![deny(unsafe_code)]

pub mod faulty;
pub mod model;
pub mod registry;
pub mod runner;
pub mod scenarios;
pub mod session;
pub mod stress;
pub mod support;
pub mod workload;

pub use faulty::{FaultPlan, Faulty, FaultyDevice, Primitive};
pub use registry::{AfterTrial, Backend, Validation, backends};
pub use runner::{run_all, trials};
pub use scenarios::{Scenario, scenarios};
pub use session::Session;
pub use workload::{UserKernel, UserKernels};

/// Run the scenario named `name` on `D`; for tests that name one rule each.
pub fn run_named<D: AfterTrial>(name: &str) -> Result<(), String> {
    let scenario = scenarios::<D>()
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("no scenario named {name}"))?;
    let device = D::open().map_err(|err| err.to_string())?;
    let session = Session::<D>::new(device.clone());
    (scenario.run)(&session)?;
    drop(session);
    D::after_trial(&device)
}
