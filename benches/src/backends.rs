//! The backends compiled into this build: conformance's list (the host
//! always, the others by Cargo feature: `vulkan`, `cuda`, `hip`, each
//! turning on conformance's feature of the same name).

use conformance::UserKernels;
use conformance::registry::AfterTrial;
use graph_capture::{Availability, DeviceInfo};

/// A backend the benches can run on: its builtins and the workload's user
/// kernels.
pub trait Backend: UserKernels {}

impl<D: UserKernels> Backend for D {}

/// Something done once per backend compiled in.
pub trait Visit {
    /// Do it for backend `D`.
    fn visit<D: Backend>(&mut self);
}

/// Hands conformance's visits on to a bench's visitor.
struct Relay<'a, V>(&'a mut V);

impl<V: Visit> conformance::registry::Visit for Relay<'_, V> {
    fn visit<D: AfterTrial>(&mut self) {
        self.0.visit::<D>();
    }
}

/// Call `visitor` for every backend compiled in, the host first, in
/// conformance's order.
pub fn each_backend(visitor: &mut impl Visit) {
    conformance::registry::each_backend(&mut Relay(visitor));
}

/// The device `D` runs on here, or why it cannot run.
pub fn availability<D: Backend>() -> Result<DeviceInfo, String> {
    match D::probe() {
        Availability::Available(info) => Ok(info),
        Availability::Unavailable(reason) => Err(reason),
    }
}
