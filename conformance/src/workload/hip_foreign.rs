//! The workload's foreign operations on HIP, as a caller of its own makes
//! them: the runtime's own device copies and memsets, looked up in the
//! runtime library the backend loaded (no BLAS: a foreign GEMM is left out).
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use graph_capture::hip::{Device, ForeignStream, Kernel};
use graph_capture::{DriverError, Error};

use super::foreign::{DELIBERATE, FOREIGN_FAILURE, ForeignWork, answered, equal_runs};

type CopyFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void) -> c_int;
type MemsetFn = unsafe extern "C" fn(*mut c_void, c_int, usize, *mut c_void) -> c_int;

/// The runtime calls the operations make.
struct Runtime {
    copy: CopyFn,
    memset: MemsetFn,
    _library: libloading::Library,
}

fn runtime() -> Result<&'static Runtime, String> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let path = graph_capture::hip::library_search()
                .iter()
                .rev()
                .find(|attempt| attempt.error.is_none())
                .map(|attempt| attempt.path.clone())
                .ok_or("the backend loaded no HIP runtime")?;
            // SAFETY: the runtime the backend loaded (opening it again runs
            // no initializer); each symbol is looked up with its prototype in
            // hip_runtime_api.h (`hipDeviceptr_t` is `void*`).
            unsafe {
                let library = libloading::Library::new(&path).map_err(|e| e.to_string())?;
                let copy = *library
                    .get::<CopyFn>(b"hipMemcpyDtoDAsync\0")
                    .map_err(|e| e.to_string())?;
                let memset = *library
                    .get::<MemsetFn>(b"hipMemsetD32Async\0")
                    .map_err(|e| e.to_string())?;
                Ok(Runtime {
                    copy,
                    memset,
                    _library: library,
                })
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// `work` as a HIP foreign operation; `None` for a matmul.
pub(super) fn foreign_op(
    device: &Arc<Device>,
    work: &ForeignWork,
) -> Option<Result<Kernel, Error>> {
    if matches!(work, ForeignWork::MatMul { .. }) {
        return None;
    }
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(why) => {
            return Some(Err(Error::Driver(DriverError::new(
                "hip",
                "foreign operation",
                why,
            ))));
        }
    };
    let work = work.clone();
    let (name, accesses) = (work.name(), work.accesses());
    let op = move |s: &ForeignStream<'_>| -> Result<(), String> {
        let memset = |at: *mut c_void, bits: u32, count: usize| {
            // SAFETY: `count` words from `at` lie in the declared range
            // (each caller below bounds them), on the stream handed over.
            let code = unsafe { (runtime.memset)(at, bits as c_int, count, s.stream) };
            answered("hipMemsetD32Async", code)
        };
        match (&work, s.buffers) {
            (ForeignWork::Copy, [src, dst]) => {
                let bytes = (src.len.min(dst.len) / 4 * 4) as usize;
                // SAFETY: both declared ranges hold `bytes`; the stream is
                // the one handed over.
                let code = unsafe { (runtime.copy)(dst.address, src.address, bytes, s.stream) };
                answered("hipMemcpyDtoDAsync", code)
            }
            (ForeignWork::Fill(value), [dst]) => {
                memset(dst.address, value.to_bits(), (dst.len / 4) as usize)
            }
            (ForeignWork::Update(values), [dst]) => {
                for (at, run, bits) in equal_runs(values, (dst.len / 4) as usize) {
                    memset(dst.address.wrapping_byte_add(at * 4), bits, run)?;
                }
                Ok(())
            }
            (ForeignWork::Fail, _) => Err(FOREIGN_FAILURE.to_string()),
            (ForeignWork::Panic, _) => panic!("{DELIBERATE} in a foreign operation"),
            (work, buffers) => Err(format!("{} given {} buffers", work.name(), buffers.len())),
        }
    };
    // SAFETY: each call above enqueues on the stream it is given, touches
    // only the declared ranges as declared, and allocates nothing.
    Some(unsafe { Kernel::foreign(device, name, accesses, op) })
}
