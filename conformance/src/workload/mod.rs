//! User kernels every backend builds from its own sources, and the decode
//! step written with them.
//!
//! [`UserKernel`] names the kernels and gives each its one [`Signature`];
//! a backend implements [`UserKernels`] by compiling them from its own
//! language (Rust closures on the host, WGSL on Vulkan, the CUDA C++ source
//! in `kernels/workload.cu` through NVRTC on CUDA and hiprtc on HIP). The
//! scenarios and the decode example are then written once.
//!
//! Every kernel is 1-D over 64-thread workgroups (element
//! `i = (group.y * groups.x + group.x) * 64 + local.x`), binds its buffers
//! in the order listed, reads no info bytes and takes its by-value
//! parameters in the order listed:
//!
//! | kernel | bindings | parameters | computes |
//! |---|---|---|---|
//! | `rmsnorm` | x (read), w (read), out (write) | n: u32, eps: f32 | `out[i] = x[i] * (1 / sqrt(sum(x²)/n + eps)) * w[i]`, one workgroup |
//! | `matvec` | w (read), x (read), y (write) | rows: u32, cols: u32 | `y[r] = Σ_c w[r·cols + c] · x[c]`, in `c` order |
//! | `silu` | x (read-write) | n: u32 | `x[i] = x[i] / (1 + exp(-x[i]))` |
//! | `residual` | x (read-write), y (read) | n: u32 | `x[i] = x[i] + y[i]` |
//! | `scale` | x (read-write) | n: u32, a: f32, b: f32 | `x[i] = x[i] * a + b` |

pub mod decode;
mod host;
#[cfg(feature = "vulkan")]
mod vulkan;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "hip")]
mod hip;

use std::sync::Arc;

use capture_core::{Access, Builtins, Error, GraphDriver, Signature};

/// Threads per workgroup of every workload kernel.
pub const WORKGROUP: u32 = 64;

/// The CUDA C++ source of the workload, shared by CUDA (NVRTC) and HIP
/// (hiprtc).
pub const CUDA_SOURCE: &str = include_str!("../../kernels/workload.cu");

/// One of the workload's kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UserKernel {
    /// Root-mean-square normalisation, scaled by a weight vector.
    RmsNorm,
    /// Row-major matrix times vector.
    MatVec,
    /// The SiLU activation, in place.
    Silu,
    /// `x += y`.
    Residual,
    /// `x = x * a + b`, with `a` and `b` by value.
    Scale,
}

impl UserKernel {
    /// Every kernel, in a fixed order.
    pub const ALL: [UserKernel; 5] = [
        UserKernel::RmsNorm,
        UserKernel::MatVec,
        UserKernel::Silu,
        UserKernel::Residual,
        UserKernel::Scale,
    ];

    /// The entry point's name in every backend's sources.
    pub fn name(self) -> &'static str {
        match self {
            UserKernel::RmsNorm => "rmsnorm",
            UserKernel::MatVec => "matvec",
            UserKernel::Silu => "silu",
            UserKernel::Residual => "residual",
            UserKernel::Scale => "scale",
        }
    }

    /// The kernel's signature, the same on every backend.
    pub fn signature(self) -> Signature {
        use Access::{Read, ReadWrite, Write};
        let base = Signature::new(self.name()).workgroup([WORKGROUP, 1, 1]);
        match self {
            UserKernel::RmsNorm => base.bindings(&[Read, Read, Write]).param(4).param(4),
            UserKernel::MatVec => base.bindings(&[Read, Read, Write]).param(4).param(4),
            UserKernel::Silu => base.binding(ReadWrite).param(4),
            UserKernel::Residual => base.bindings(&[ReadWrite, Read]).param(4),
            UserKernel::Scale => base.binding(ReadWrite).param(4).param(4).param(4),
        }
    }
}

/// The grid of 64-thread workgroups that covers `n` elements.
pub fn grid(n: u32) -> [u32; 3] {
    [n.div_ceil(WORKGROUP).max(1), 1, 1]
}

/// A backend's build of the workload's kernels, from its own sources.
pub trait UserKernels: GraphDriver + Builtins {
    /// Build `which` for `device`, with [`UserKernel::signature`].
    fn user_kernel(device: &Arc<Self::Device>, which: UserKernel) -> Result<Self::Kernel, Error>;

    /// Try to build a kernel whose source does not compile (or, for a
    /// backend without a compiler, whose signature no device accepts)
    /// through the same path. The error must carry the compiler's log.
    fn broken_kernel(device: &Arc<Self::Device>) -> Result<Self::Kernel, Error>;

    /// Try to build a kernel whose code disagrees with the signature it is
    /// given (a binding too few), where the backend can tell; `None` where
    /// it cannot check (it then relies on the caller's promise).
    fn disagreeing_kernel(device: &Arc<Self::Device>) -> Option<Result<Self::Kernel, Error>>;
}
