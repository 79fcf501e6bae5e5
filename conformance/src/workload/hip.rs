//! The workload's kernels on HIP: the CUDA C++ source the CUDA backend
//! compiles with NVRTC, compiled here by hiprtc for the device's
//! architecture (hiprtc provides the HIP built-ins, so the source needs no
//! includes).
#![allow(unsafe_code)]

use std::sync::Arc;

use graph_capture::hip::{Device, Hip, Kernel};
use graph_capture::{Access, Error, Signature};

use super::foreign::ForeignWork;
use super::{CUDA_SOURCE, UserKernel, UserKernels, hip_foreign};

impl UserKernels for Hip {
    /// The runtime's own device copies and memsets, each captured into a
    /// child graph node; no foreign GEMM.
    fn foreign_op(device: &Arc<Device>, work: &ForeignWork) -> Option<Result<Kernel, Error>> {
        hip_foreign::foreign_op(device, work)
    }

    unsafe fn user_kernel(device: &Arc<Device>, which: UserKernel) -> Result<Kernel, Error> {
        // SAFETY: every workload kernel touches element i of a buffer only
        // below the count it is given (`n`, or `rows` and `cols` for matvec,
        // whose matrix is rows x cols) and writes only the bindings its
        // signature declares written; this function's caller promises that
        // every launch passes counts that fit the buffers it binds.
        unsafe { Kernel::from_hip(device, CUDA_SOURCE, which.name(), which.signature()) }
    }

    /// A source using a name it never declares: hiprtc refuses it, and its
    /// log says where and why.
    fn broken_kernel(device: &Arc<Device>) -> Result<Kernel, Error> {
        const BROKEN: &str =
            "extern \"C\" __global__ void broken(float* x) { x[threadIdx.x] = undeclared_value; }";
        let signature = Signature::new("broken").binding(Access::Write);
        // SAFETY: the source does not compile, so no kernel is built and
        // nothing is launched.
        unsafe { Kernel::from_hip(device, BROKEN, "broken", signature) }
    }

    /// `residual` declared with one binding where its code takes two: the
    /// code object's metadata lists each kernel's arguments, and the build
    /// refuses the signature it contradicts.
    fn disagreeing_kernel(device: &Arc<Device>) -> Option<Result<Kernel, Error>> {
        let signature = Signature::new("residual")
            .binding(Access::ReadWrite)
            .param(4)
            .workgroup([super::WORKGROUP, 1, 1]);
        // SAFETY: the build is refused (the code takes a second pointer the
        // signature does not declare), so nothing is launched.
        Some(unsafe { Kernel::from_hip(device, CUDA_SOURCE, "residual", signature) })
    }
}
