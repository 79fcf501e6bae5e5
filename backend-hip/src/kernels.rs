//! The builtin kernels: HIP C++ compiled by hiprtc at run time, and the
//! launch of any kernel on a stream.
//!
//! Compiling at run time is what lets the crate build with no ROCm toolchain
//! and still run on whatever GPU architecture the machine has: hiprtc targets
//! the current device when no architecture is named.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::ptr;
use std::sync::{Arc, Mutex, PoisonError};

use capture_core::builtin::WORKGROUP_SIZE;
use capture_core::{Builtin, DriverError, Launch};
use smallvec::SmallVec;

use crate::Hip;
use crate::device::HipDevice;
use crate::error::{self, describe_rtc, other};
use crate::ffi;
use crate::loader::{Api, Rtc};
use crate::stream::HipStream;

/// The kernels' source, embedded so that nothing is read from disk at run time.
const SOURCE: &str = include_str!("kernels.hip");

/// hiprtc's name for the program, seen only in its diagnostics.
const PROGRAM_NAME: &CStr = c"capture_builtins.hip";

/// The code object holding the four builtins, loaded on one device.
pub(crate) struct KernelModule {
    api: &'static Api,
    ordinal: i32,
    raw: ffi::Module,
}

// SAFETY: a loaded module is a runtime object usable from any thread; it is
// only read (function lookups) until Drop unloads it, once.
unsafe impl Send for KernelModule {}
// SAFETY: as above; shared references only look functions up.
unsafe impl Sync for KernelModule {}

impl Drop for KernelModule {
    fn drop(&mut self) {
        // SAFETY: a plain ordinal, validated when the device was opened.
        let code = unsafe { (self.api.set_device)(self.ordinal) };
        if let Err(error) = error::check(self.api, "unload kernels", code) {
            log::warn!("{error}");
        }
        // SAFETY: the module came from hipModuleLoadData and is unloaded once,
        // here; every kernel holds an Arc to it, so none outlives it.
        let code = unsafe { (self.api.module_unload)(self.raw) };
        if let Err(error) = error::check(self.api, "unload kernels", code) {
            log::warn!("{error}");
        }
    }
}

/// A kernel function, holding its module loaded for as long as it lives.
pub struct HipKernel {
    function: ffi::Function,
    module: Arc<KernelModule>,
    /// Threads per block, fixed by the kernel's source (`__launch_bounds__`).
    block: [u32; 3],
}

// SAFETY: a function handle is an immutable runtime object usable from any
// thread; the Arc keeps its module loaded.
unsafe impl Send for HipKernel {}
// SAFETY: as above; a launch only reads the handle.
unsafe impl Sync for HipKernel {}

/// A hiprtc program, destroyed on every path out of the compile.
struct Program<'a> {
    rtc: &'a Rtc,
    raw: ffi::RtcProgram,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: the program came from hiprtcCreateProgram and is destroyed
        // once, here.
        let code = unsafe { (self.rtc.destroy_program)(&mut self.raw) };
        if code != ffi::RTC_SUCCESS {
            log::warn!(
                "hip: destroying a hiprtc program failed: {}",
                describe_rtc(self.rtc, code)
            );
        }
    }
}

impl Program<'_> {
    /// hiprtc's compile log, or an empty string when it has none.
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: the program is live; the out-pointer is a live local.
        let code = unsafe { (self.rtc.get_program_log_size)(self.raw, &mut size) };
        if code != ffi::RTC_SUCCESS || size == 0 {
            return String::new();
        }
        let mut log = vec![0u8; size];
        // SAFETY: the buffer holds the `size` bytes hiprtc said the log needs.
        let code = unsafe { (self.rtc.get_program_log)(self.raw, log.as_mut_ptr().cast()) };
        if code != ffi::RTC_SUCCESS {
            return String::new();
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).trim().to_owned()
    }
}

/// Compile the builtins for the current device into a code object.
fn compile(device: &HipDevice) -> Result<Vec<u8>, DriverError> {
    const OP: &str = "compile builtin kernels";
    let rtc = device
        .api
        .rtc
        .as_ref()
        .map_err(|reason| other(OP, reason.clone()))?;
    // hiprtc compiles for the current device's architecture when no
    // `--offload-arch` is given, which is what makes the code object loadable
    // on whatever GPU this is.
    device.make_current(OP)?;
    compile_source(rtc, SOURCE, &[c"-O3"])
}

/// Compile `source` with `options` into a code object, with hiprtc's log in
/// the error when it does not compile.
///
/// Compiles are serialized process-wide: ROCm 5.2's hiprtc crashes the process
/// (SIGSEGV) when two programs compile at once on different threads, and two
/// devices, or a device and a test, may compile at the same time.
fn compile_source(rtc: &Rtc, source: &str, options: &[&CStr]) -> Result<Vec<u8>, DriverError> {
    const OP: &str = "compile builtin kernels";
    static COMPILING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = COMPILING.lock().unwrap_or_else(PoisonError::into_inner);
    let source = CString::new(source).map_err(|_| other(OP, "the kernel source holds a NUL"))?;
    let mut raw = ptr::null_mut();
    // SAFETY: both strings are NUL-terminated and live across the call; no
    // headers are passed, so both header arrays may be null.
    let code = unsafe {
        (rtc.create_program)(
            &mut raw,
            source.as_ptr(),
            PROGRAM_NAME.as_ptr(),
            0,
            ptr::null(),
            ptr::null(),
        )
    };
    if code != ffi::RTC_SUCCESS {
        return Err(other(OP, describe_rtc(rtc, code)));
    }
    let program = Program { rtc, raw };
    let options: SmallVec<[*const c_char; 4]> = options.iter().map(|o| o.as_ptr()).collect();
    let count = c_int::try_from(options.len()).map_err(|_| other(OP, "too many options"))?;
    // SAFETY: the program is live; the array holds `count` pointers to C
    // strings that outlive the call.
    let code = unsafe { (rtc.compile_program)(program.raw, count, options.as_ptr()) };
    if code != ffi::RTC_SUCCESS {
        let log = program.log();
        return Err(other(
            OP,
            format!("{}; hiprtc log: {log}", describe_rtc(rtc, code)),
        ));
    }
    let mut size = 0usize;
    // SAFETY: the program is live and compiled; the out-pointer is a live local.
    let code = unsafe { (rtc.get_code_size)(program.raw, &mut size) };
    if code != ffi::RTC_SUCCESS {
        return Err(other(OP, describe_rtc(rtc, code)));
    }
    if size == 0 {
        return Err(other(OP, "hiprtc produced an empty code object"));
    }
    let mut code_object = vec![0u8; size];
    // SAFETY: the buffer holds the `size` bytes hiprtc said the code needs.
    let code = unsafe { (rtc.get_code)(program.raw, code_object.as_mut_ptr().cast()) };
    if code != ffi::RTC_SUCCESS {
        return Err(other(OP, describe_rtc(rtc, code)));
    }
    Ok(code_object)
}

/// The device's builtin module, compiled and loaded on first use.
fn module(device: &HipDevice) -> Result<Arc<KernelModule>, DriverError> {
    const OP: &str = "load builtin kernels";
    // The lock is held across the compile so two streams asking at once
    // compile once; a poisoned lock still holds a consistent Option.
    let mut slot = device
        .kernels
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(module) = slot.as_ref() {
        return Ok(Arc::clone(module));
    }
    let code_object = compile(device)?;
    let api = device.api;
    device.make_current(OP)?;
    let mut raw = ptr::null_mut();
    // SAFETY: the image is a complete code object from hiprtc and lives
    // across the call (the runtime copies what it keeps).
    let code = unsafe { (api.module_load_data)(&mut raw, code_object.as_ptr().cast()) };
    error::check(api, OP, code)?;
    let module = Arc::new(KernelModule {
        api,
        ordinal: device.ordinal,
        raw,
    });
    *slot = Some(Arc::clone(&module));
    Ok(module)
}

pub(crate) fn builtin(device: &Arc<HipDevice>, which: Builtin) -> Result<HipKernel, DriverError> {
    const OP: &str = "load builtin kernel";
    let module = module(device)?;
    let api = device.api;
    device.make_current(OP)?;
    let name = CString::new(which.name()).map_err(|_| other(OP, "kernel name holds a NUL"))?;
    let mut function = ptr::null_mut();
    // SAFETY: the module is live (held by the Arc); the name is a live,
    // NUL-terminated string; the out-pointer is a live local.
    let code = unsafe { (api.module_get_function)(&mut function, module.raw, name.as_ptr()) };
    error::check(api, OP, code)?;
    Ok(HipKernel {
        function,
        module,
        block: [WORKGROUP_SIZE, 1, 1],
    })
}

pub(crate) fn launch(stream: &mut HipStream, launch: Launch<'_, Hip>) -> Result<(), DriverError> {
    const OP: &str = "launch";
    let kernel = launch.kernel;
    if kernel.module.ordinal != stream.device.ordinal {
        return Err(other(
            OP,
            format!(
                "the kernel was loaded on HIP device {} and the stream is on device {}",
                kernel.module.ordinal, stream.device.ordinal
            ),
        ));
    }
    // The kernel's parameters: each binding's device address, then the info
    // block's. hipModuleLaunchKernel takes an array of pointers to them; the
    // runtime copies the values at the call (and into the node when capturing).
    let mut args: SmallVec<[*mut c_void; 8]> = SmallVec::with_capacity(launch.bindings.len() + 1);
    for binding in launch.bindings {
        let slice = binding.slice;
        args.push(slice.page.address(OP, slice.offset, slice.len)?);
    }
    args.push(
        launch
            .info
            .page
            .address(OP, launch.info.offset, launch.info.len)?,
    );
    let mut params: SmallVec<[*mut c_void; 8]> = args
        .iter_mut()
        .map(|arg| ptr::from_mut(arg).cast())
        .collect();
    let api = stream.device.api;
    stream.device.make_current(OP)?;
    let [gx, gy, gz] = launch.groups;
    let [bx, by, bz] = kernel.block;
    // SAFETY: the function is live (its module is held by the kernel); every
    // entry of `params` points at a live local holding one pointer-sized
    // argument, matching the kernel's parameter list; `extra` is unused.
    let code = unsafe {
        (api.module_launch_kernel)(
            kernel.function,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            0,
            stream.raw(),
            params.as_mut_ptr(),
            ptr::null_mut(),
        )
    };
    error::check(api, OP, code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded source compiles with the installed hiprtc, for an
    /// architecture named explicitly since a machine without a GPU has no
    /// current device to default to. Skipped where no hiprtc is installed.
    #[test]
    fn source_compiles_with_hiprtc() {
        let rtc = match crate::loader::api().map(|api| api.rtc.as_ref().map_err(String::as_str)) {
            Ok(Ok(rtc)) => rtc,
            Ok(Err(reason)) | Err(reason) => {
                eprintln!("skipped: no hiprtc here ({reason})");
                return;
            }
        };
        let code = compile_source(rtc, SOURCE, &[c"-O3", c"--offload-arch=gfx90a"])
            .unwrap_or_else(|error| panic!("the builtin source does not compile: {error}"));
        assert!(code.starts_with(b"\x7fELF"), "not an ELF code object");
        for which in Builtin::ALL {
            let symbol = format!("{}.kd", which.name());
            assert!(
                code.windows(symbol.len()).any(|w| w == symbol.as_bytes()),
                "no kernel descriptor {symbol} in the code object"
            );
        }
    }

    /// hiprtc's log reaches the error when the source is bad.
    #[test]
    fn compile_failure_carries_the_log() {
        let Ok(Ok(rtc)) = crate::loader::api().map(|api| api.rtc.as_ref()) else {
            eprintln!("skipped: no hiprtc here");
            return;
        };
        let broken = "extern \"C\" __global__ void broken(float* x) { x[0] = undeclared; }";
        let error = compile_source(rtc, broken, &[c"--offload-arch=gfx90a"])
            .err()
            .unwrap_or_else(|| panic!("a source using an undeclared name compiled"));
        assert_eq!(error.backend, "hip");
        assert!(
            error.message.contains("HIPRTC_ERROR_COMPILATION"),
            "{error}"
        );
        assert!(
            error.message.contains("undeclared"),
            "the log is missing: {error}"
        );
    }
}
