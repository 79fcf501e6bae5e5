//! HIP C++ to a code object through hiprtc, loaded at run time like the
//! runtime itself.

use std::ffi::{CStr, CString, c_char, c_int};
use std::ptr;
use std::sync::{Mutex, PoisonError};

use capture_core::{DriverError, Error};
use smallvec::SmallVec;

use crate::error::{BACKEND, describe_rtc};
use crate::ffi;
use crate::loader::{self, Rtc};

/// What every kernel is compiled with besides its architecture: full
/// optimisation, and no contraction of `a * b + c` into a fused multiply-add,
/// so that a kernel computes the same bits here as the CUDA backend (which
/// compiles unfused too) and as a plain CPU reference.
const FLAGS: [&CStr; 2] = [c"-O3", c"-ffp-contract=off"];

/// Compile HIP C++ `source` into a code object for `arch` (a `gcnArchName`
/// such as `gfx90a` or `gfx90a:sramecc+:xnack-`), with no device: what
/// [`Kernel::from_hip`](crate::Kernel::from_hip) does for the device's own
/// architecture, for checking sources ahead of time or building images for
/// [`Kernel::from_code_object`](crate::Kernel::from_code_object).
///
/// The source is compiled as a program called `name` (the name
/// [`Error::Compile`] carries), with `-O3 -ffp-contract=off`.
///
/// ```no_run
/// let image = backend_hip::hiprtc_compile(
///     r#"extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }"#,
///     "twice.hip",
///     "gfx90a",
/// )?;
/// assert!(image.starts_with(b"\x7fELF"));
/// # Ok::<(), capture_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Compile`] with hiprtc's log when the source does not compile;
/// [`Error::Driver`] saying `hiprtc unavailable: ...` with every path tried
/// when no hiprtc could be loaded.
pub fn hiprtc_compile(source: &str, name: &str, arch: &str) -> Result<Vec<u8>, Error> {
    compile(rtc()?, source, name, Some(arch))
}

/// The loaded hiprtc, or why there is none.
pub(crate) fn rtc() -> Result<&'static Rtc, Error> {
    let unavailable = |reason: &str| {
        Error::Driver(DriverError::new(
            BACKEND,
            "compile kernel",
            format!("hiprtc unavailable: {reason}"),
        ))
    };
    let api = loader::api().map_err(|reason| unavailable(&format!("no HIP runtime: {reason}")))?;
    api.rtc.as_ref().map_err(|reason| unavailable(reason))
}

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

/// Compile `source` as program `name` for `arch` (`None`: hiprtc's own
/// choice, the current device's architecture), with [`FLAGS`].
///
/// Compiles are serialized process-wide: ROCm 5.2's hiprtc crashes the process
/// (SIGSEGV) when two programs compile at once on different threads, and two
/// devices, or a device and a test, may compile at the same time.
pub(crate) fn compile(
    rtc: &Rtc,
    source: &str,
    name: &str,
    arch: Option<&str>,
) -> Result<Vec<u8>, Error> {
    static COMPILING: Mutex<()> = Mutex::new(());
    let failed = |log: String| Error::Compile {
        kernel: name.to_owned(),
        log,
    };
    let source =
        CString::new(source).map_err(|_| failed("the kernel source holds a NUL byte".into()))?;
    let program_name =
        CString::new(name).map_err(|_| failed("the program name holds a NUL byte".into()))?;
    let arch_option = arch
        .map(|arch| CString::new(format!("--offload-arch={arch}")))
        .transpose()
        .map_err(|_| failed("the architecture name holds a NUL byte".into()))?;
    let mut options: SmallVec<[*const c_char; 4]> = FLAGS.iter().map(|o| o.as_ptr()).collect();
    if let Some(arch) = &arch_option {
        options.push(arch.as_ptr());
    }
    let count = c_int::try_from(options.len()).map_err(|_| failed("too many options".into()))?;

    let _one_at_a_time = COMPILING.lock().unwrap_or_else(PoisonError::into_inner);
    let mut raw = ptr::null_mut();
    // SAFETY: both strings are NUL-terminated and live across the call; no
    // headers are passed, so both header arrays may be null.
    let code = unsafe {
        (rtc.create_program)(
            &mut raw,
            source.as_ptr(),
            program_name.as_ptr(),
            0,
            ptr::null(),
            ptr::null(),
        )
    };
    if code != ffi::RTC_SUCCESS {
        return Err(failed(format!(
            "hiprtcCreateProgram answered {}",
            describe_rtc(rtc, code)
        )));
    }
    let program = Program { rtc, raw };
    // SAFETY: the program is live; the array holds `count` pointers to C
    // strings that outlive the call.
    let code = unsafe { (rtc.compile_program)(program.raw, count, options.as_ptr()) };
    if code != ffi::RTC_SUCCESS {
        let log = program.log();
        let answer = describe_rtc(rtc, code);
        return Err(failed(if log.is_empty() {
            format!("hiprtcCompileProgram answered {answer} and left no log")
        } else {
            format!("hiprtcCompileProgram answered {answer}:\n{log}")
        }));
    }
    let mut size = 0usize;
    // SAFETY: the program is live and compiled; the out-pointer is a live local.
    let code = unsafe { (rtc.get_code_size)(program.raw, &mut size) };
    if code != ffi::RTC_SUCCESS {
        return Err(failed(format!(
            "hiprtcGetCodeSize answered {}",
            describe_rtc(rtc, code)
        )));
    }
    if size == 0 {
        return Err(failed("hiprtc produced an empty code object".into()));
    }
    let mut image = vec![0u8; size];
    // SAFETY: the buffer holds the `size` bytes hiprtc said the code needs.
    let code = unsafe { (rtc.get_code)(program.raw, image.as_mut_ptr().cast()) };
    if code != ffi::RTC_SUCCESS {
        return Err(failed(format!(
            "hiprtcGetCode answered {}",
            describe_rtc(rtc, code)
        )));
    }
    Ok(image)
}
