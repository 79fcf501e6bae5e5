//! The backends compiled into this build: the host always, the others by
//! Cargo feature (`vulkan`, `cuda`, `hip`).

use capture_core::{Availability, DeviceInfo};
use conformance::UserKernels;

/// A backend the benches can run on: its builtins and the workload's user
/// kernels.
pub trait Backend: UserKernels {}

impl<D: UserKernels> Backend for D {}

/// Something done once per backend compiled in.
pub trait Visit {
    /// Do it for backend `D`.
    fn visit<D: Backend>(&mut self);
}

/// Call `visitor` for every backend compiled in, the host first.
pub fn each_backend(visitor: &mut impl Visit) {
    visitor.visit::<backend_host::Host>();
    #[cfg(feature = "vulkan")]
    visitor.visit::<backend_vulkan::Vulkan>();
    #[cfg(feature = "cuda")]
    visitor.visit::<backend_cuda::Cuda>();
    #[cfg(feature = "hip")]
    visitor.visit::<backend_hip::Hip>();
}

/// The device `D` runs on here, or why it cannot run.
pub fn availability<D: Backend>() -> Result<DeviceInfo, String> {
    match D::probe() {
        Availability::Available(info) => Ok(info),
        Availability::Unavailable(reason) => Err(reason),
    }
}
