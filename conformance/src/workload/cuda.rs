//! The workload's kernels on CUDA: the CUDA C++ source shared with HIP,
//! compiled by NVRTC for the device's compute capability and loaded by the
//! driver (NVRTC provides the CUDA built-ins, so the source needs no
//! includes).
#![allow(unsafe_code)]

use std::sync::Arc;

use graph_capture::cuda::{Cuda, Device, Kernel};
use graph_capture::{Access, Error, Signature};

use super::foreign::ForeignWork;
use super::{CUDA_SOURCE, UserKernel, UserKernels, cuda_foreign};

impl UserKernels for Cuda {
    /// The driver's copies and memsets, and cuBLAS's SGEMM, each captured
    /// into a child graph node.
    fn foreign_op(device: &Arc<Device>, work: &ForeignWork) -> Option<Result<Kernel, Error>> {
        cuda_foreign::foreign_op(device, work)
    }

    unsafe fn user_kernel(device: &Arc<Device>, which: UserKernel) -> Result<Kernel, Error> {
        // SAFETY: the caller launches it only with counts that fit its
        // buffers (this function's contract). Every workload kernel touches element i of a buffer only
        // below the count it is given (`n`, or `rows` and `cols` for matvec,
        // whose matrix is rows x cols), and writes only the bindings its
        // signature declares written; its entry takes one pointer per
        // binding and then its by-value parameters, as the signature says.
        // The workload and the scenarios pass counts that fit the buffers
        // they bind.
        unsafe { Kernel::from_cuda(device, CUDA_SOURCE, which.name(), which.signature()) }
    }

    /// A source using a name it never declares: NVRTC refuses it, and its
    /// log says where and why.
    fn broken_kernel(device: &Arc<Device>) -> Result<Kernel, Error> {
        const BROKEN: &str =
            "extern \"C\" __global__ void broken(float* x) { x[threadIdx.x] = undeclared_value; }";
        let signature = Signature::new("broken").binding(Access::Write);
        // SAFETY: the source does not compile, so no kernel is built and
        // nothing is launched.
        unsafe { Kernel::from_cuda(device, BROKEN, "broken", signature) }
    }

    /// `silu` declared with a second binding its code does not take: where
    /// the driver lists an entry's parameters (12.4 and newer), the build
    /// refuses the signature it contradicts; an older driver cannot tell.
    fn disagreeing_kernel(device: &Arc<Device>) -> Option<Result<Kernel, Error>> {
        if !device.checks_kernel_parameters() {
            return None;
        }
        let signature = Signature::new("silu")
            .bindings(&[Access::ReadWrite, Access::Read])
            .param(4)
            .workgroup([super::WORKGROUP, 1, 1]);
        // SAFETY: the build is refused (the entry takes two parameters where
        // the signature makes a launch pass three), so nothing is launched.
        Some(unsafe { Kernel::from_cuda(device, CUDA_SOURCE, "silu", signature) })
    }
}
