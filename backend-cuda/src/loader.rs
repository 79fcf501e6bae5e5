//! Finding and initialising the CUDA driver library at run time.
//!
//! cudarc resolves each driver symbol lazily, on its first call, and panics
//! when the library or the symbol is missing. A probe must never panic, so
//! everything that could reach such a panic is checked here first, once per
//! process: the library is looked for without loading it for good, then every
//! symbol this crate calls is looked up by name. Only once all are present
//! does any other module call into the driver. The whole sequence also runs
//! under [`std::panic::catch_unwind`] as a second line, for a failure mode
//! cudarc might add later; with `panic = "abort"` that second line is gone,
//! and the name checks alone carry the promise.

use std::ffi::c_int;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUresult};

use crate::error::describe;

/// The reason given when no library is found, in the form every backend uses.
pub(crate) const NOT_FOUND: &str = "no CUDA driver: libcuda.so not found";

/// The oldest driver with everything used here: `cuGraphInstantiateWithFlags`
/// and memory-node types arrived in 11.4.
const OLDEST_DRIVER: c_int = 11040;

/// Symbols needed before `cuInit` can even be reported on.
const CORE_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDriverGetVersion",
];

/// Every other symbol this crate calls, under the exact names cudarc's
/// `sys` layer resolves (hence the `_v2` suffixes). A unit test keeps this
/// list in step with the sources.
pub(crate) const SYMBOLS: &[&str] = &[
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuStreamDestroy_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuModuleLoadDataEx",
    "cuModuleGetFunction",
    "cuFuncGetAttribute",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphGetNodes",
    "cuGraphNodeGetType",
    "cuGraphInstantiateWithFlags",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuGraphUpload",
    "cuGraphLaunch",
];

/// `cuFuncGetParamInfo`, declared here with the `int` result of C rather
/// than cudarc's enum, so that an answer newer than its bindings is just a
/// number.
pub(crate) type ParamInfo =
    unsafe extern "C" fn(sys::CUfunction, usize, *mut usize, *mut usize) -> c_int;

/// `CUDA_SUCCESS`, as a plain int.
pub(crate) const CUDA_SUCCESS: c_int = 0;
/// `CUDA_ERROR_INVALID_VALUE`, as a plain int: what `cuFuncGetParamInfo`
/// answers for an index past the last parameter.
pub(crate) const CUDA_ERROR_INVALID_VALUE: c_int = 1;

/// `cuFuncGetParamInfo` where the driver has it (12.4 and newer), looked up
/// once. Only called once [`load`] succeeded, so the library is present.
pub(crate) fn param_info() -> Option<ParamInfo> {
    static FOUND: OnceLock<Option<ParamInfo>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        load().ok()?;
        // SAFETY: `load` succeeded, so cudarc holds the library and `culib`
        // returns it without panicking.
        let lib = unsafe { sys::culib() };
        // SAFETY: the symbol is looked up with the signature the driver's
        // header declares for it, with its enum result as an int.
        let found = unsafe { lib.get::<ParamInfo>(b"cuFuncGetParamInfo") };
        found.ok().map(|f| *f)
    })
}

/// The driver's version as `cuDriverGetVersion` encodes it (`12040`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DriverVersion(pub(crate) c_int);

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, (self.0 % 1000) / 10)
    }
}

/// Load and initialise the driver, once per process.
///
/// The answer is cached because both halves are process-wide anyway: cudarc
/// keeps the library in a static, and the driver remembers a failed `cuInit`.
pub(crate) fn load() -> Result<DriverVersion, &'static str> {
    static LOADED: OnceLock<Result<DriverVersion, String>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        panic::catch_unwind(AssertUnwindSafe(load_uncached)).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("unknown failure");
            Err(format!("the CUDA driver library cannot be used: {what}"))
        })
    });
    match loaded {
        Ok(version) => Ok(*version),
        Err(reason) => Err(reason.as_str()),
    }
}

fn load_uncached() -> Result<DriverVersion, String> {
    // SAFETY: only tries to open each candidate library name, keeping none;
    // opening the NVIDIA driver runs its own initialisers, which is what
    // using it at all requires.
    if !unsafe { sys::is_culib_present() } {
        return Err(NOT_FOUND.to_owned());
    }
    if let Some(missing) = first_missing(CORE_SYMBOLS) {
        return Err(format!(
            "the CUDA driver library is incomplete or not NVIDIA's: {missing}"
        ));
    }
    // SAFETY: cuInit takes flags by value and must be 0; the symbol exists.
    let init = unsafe { sys::cuInit(0) };
    if init != CUresult::CUDA_SUCCESS {
        return Err(format!(
            "CUDA driver failed to initialise: {}",
            describe(init)
        ));
    }
    let mut raw: c_int = 0;
    // SAFETY: `raw` is a valid place for the driver to write an int.
    let answer = unsafe { sys::cuDriverGetVersion(&mut raw) };
    if answer != CUresult::CUDA_SUCCESS {
        return Err(format!(
            "CUDA driver cannot report its version: {}",
            describe(answer)
        ));
    }
    let version = DriverVersion(raw);
    if raw < OLDEST_DRIVER {
        return Err(format!(
            "CUDA driver {version} is too old: CUDA graphs as used here need {} or newer",
            DriverVersion(OLDEST_DRIVER)
        ));
    }
    if let Some(missing) = first_missing(SYMBOLS) {
        return Err(format!(
            "CUDA driver {version} is too old or incomplete: {missing}"
        ));
    }
    Ok(version)
}

/// The first of `names` the loaded library lacks, as a sentence.
fn first_missing(names: &[&str]) -> Option<String> {
    // SAFETY: `is_culib_present` just found a loadable library, so cudarc's
    // own load of the same candidates succeeds instead of panicking (and
    // were it to panic, `load` catches it).
    let lib = unsafe { sys::culib() };
    names.iter().find_map(|name| {
        // SAFETY: the symbol is only looked up, never called through this
        // type; cudarc calls it later with its real signature.
        let found = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) };
        found.err().map(|e| format!("missing symbol {name} ({e})"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_the_toolkit_names_them() {
        assert_eq!(DriverVersion(12040).to_string(), "12.4");
        assert_eq!(DriverVersion(11040).to_string(), "11.4");
        assert_eq!(DriverVersion(13000).to_string(), "13.0");
    }

    /// Every driver function the sources call must be in one of the lists, or
    /// a driver lacking it would make cudarc panic instead of the probe
    /// reporting it.
    #[test]
    fn every_called_symbol_is_checked() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).expect("src is readable") {
            let path = entry.expect("entry is readable").path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source is readable");
            for (at, _) in text.match_indices("sys::cu") {
                let rest = &text[at + "sys::".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                // Driver functions are `cu` then a capital (`cuInit`); types
                // (`CUresult`) and cudarc's own `culib` are not calls into it.
                let is_driver_function = name.starts_with("cu")
                    && name.as_bytes().get(2).is_some_and(u8::is_ascii_uppercase);
                if !is_driver_function {
                    continue;
                }
                assert!(
                    CORE_SYMBOLS.contains(&name) || SYMBOLS.contains(&name),
                    "{} calls {name}, which the loader does not check",
                    path.display()
                );
                checked += 1;
            }
        }
        assert!(checked > 20, "the scan found only {checked} calls");
    }
}
