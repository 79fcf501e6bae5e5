//! A compiled kernel as the user holds it.

use std::sync::Arc;

use crate::driver::Driver;
use crate::kernels::signature::Signature;

/// A compiled kernel and its [`Signature`]. Cheap to clone.
///
/// Made from a kernel the backend built: each backend has its own
/// constructors (a Rust closure on the host backend, SPIR-V or WGSL on
/// Vulkan, PTX or CUDA C++ on CUDA, a code object or HIP C++ on HIP), those
/// for GPU code `unsafe`, since only the caller can promise what the code
/// does.
pub struct Kernel<D: Driver>(pub(crate) Arc<D::Kernel>);

impl<D: Driver> Kernel<D> {
    /// Wrap a kernel the backend built.
    pub fn new(kernel: D::Kernel) -> Self {
        Self(Arc::new(kernel))
    }

    /// The backend's kernel, for calling the driver directly.
    pub fn raw(&self) -> &D::Kernel {
        &self.0
    }

    /// What every launch of the kernel must match.
    pub fn signature(&self) -> &Signature {
        D::signature(&self.0)
    }
}

impl<D: Driver> std::fmt::Debug for Kernel<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({})", self.signature())
    }
}

impl<D: Driver> Clone for Kernel<D> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}
