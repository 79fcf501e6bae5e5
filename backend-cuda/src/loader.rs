//! Finding and initialising the CUDA driver library at run time, once per
//! process.
//!
//! The library is opened with libloading and every function this crate
//! calls is looked up by name (see [`Api`]) before any is called, so a
//! missing library, the toolkit's stub, a driver without a device, one too
//! old or one lacking a symbol are all reasons, never a panic.

use std::ffi::{CStr, c_char, c_int, c_uint};
use std::fmt;
use std::ptr;
use std::sync::OnceLock;

use capture_core::DriverError;

use crate::error::{BACKEND, describe, refuse};
use crate::sys::{self, Api, CUresult};

/// The reason given when no library is found, in the form every backend uses.
pub(crate) const NOT_FOUND: &str = "no CUDA driver: libcuda.so not found";

/// The operation name of every failure to find or initialise the driver.
pub(crate) const LOAD_OP: &str = "load the driver";

/// The names tried, in order: the driver installs `libcuda.so.1`; the
/// unversioned name is often only a development link or the toolkit's
/// stub, so it comes second.
const NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// The oldest driver with everything required here: graph upload and the
/// stream-capture calls used arrived by 11.4. In-place update
/// (`cuGraphExecUpdate_v2`) needs 12.0; rewriting a graph's edges uses
/// `cuGraphAddDependencies_v2` and kin (12.3), else the 10.0 spellings;
/// each is used where present.
const OLDEST_DRIVER: c_int = 11040;

/// The driver's version as `cuDriverGetVersion` encodes it (`12040`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DriverVersion(pub(crate) c_int);

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0 / 1000, (self.0 % 1000) / 10)
    }
}

/// The loaded, initialised driver.
pub(crate) struct Loaded {
    /// Kept loaded for the life of the process: `api` points into it.
    _library: libloading::Library,
    /// Every function this crate calls.
    pub(crate) api: Api,
    /// The driver's version.
    pub(crate) version: DriverVersion,
}

/// Load and initialise the driver, once per process.
///
/// The answer is kept because both halves are process-wide anyway: the
/// library stays loaded, and the driver remembers a failed `cuInit`.
pub(crate) fn load() -> Result<&'static Loaded, DriverError> {
    static LOADED: OnceLock<Result<Loaded, String>> = OnceLock::new();
    LOADED
        .get_or_init(load_uncached)
        .as_ref()
        .map_err(|reason| refuse(LOAD_OP, reason.clone()))
}

type Init = unsafe extern "C" fn(c_uint) -> CUresult;
type Version = unsafe extern "C" fn(*mut c_int) -> CUresult;
type ErrorString = unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult;

fn load_uncached() -> Result<Loaded, String> {
    let (library, name) = open_library()?;
    let incomplete =
        |e: String| format!("the CUDA driver library {name} is incomplete or not NVIDIA's: {e}");
    let init: Init = symbol(&library, "cuInit").map_err(incomplete)?;
    let version_of: Version = symbol(&library, "cuDriverGetVersion").map_err(incomplete)?;
    let error_string: ErrorString = symbol(&library, "cuGetErrorString").map_err(incomplete)?;

    // SAFETY: cuInit takes flags by value, which must be 0.
    let code = unsafe { init(0) };
    if code == sys::CUDA_ERROR_STUB_LIBRARY {
        return Err(format!(
            "the libcuda.so found is the toolkit's stub, not the driver: {name} answered \
             {} to cuInit; take the toolkit's stubs directory off the library path \
             (LD_LIBRARY_PATH) so that the NVIDIA driver's libcuda.so.1 is found, or install \
             the driver",
            describe(code, None)
        ));
    }
    if code != sys::CUDA_SUCCESS {
        return Err(format!(
            "CUDA driver failed to initialise: {}",
            describe(code, text_of(error_string, code).as_deref())
        ));
    }
    let mut raw: c_int = 0;
    // SAFETY: `raw` is a valid place for the driver to write an int.
    let code = unsafe { version_of(&mut raw) };
    if code != sys::CUDA_SUCCESS {
        return Err(format!(
            "CUDA driver cannot report its version: {}",
            describe(code, text_of(error_string, code).as_deref())
        ));
    }
    let version = DriverVersion(raw);
    if raw < OLDEST_DRIVER {
        return Err(format!(
            "CUDA driver {version} is too old: CUDA graphs as used here need {} or newer",
            DriverVersion(OLDEST_DRIVER)
        ));
    }
    let api = Api::resolve(&library)
        .map_err(|missing| format!("CUDA driver {version} is too old or incomplete: {missing}"))?;
    Ok(Loaded {
        _library: library,
        api,
        version,
    })
}

/// The first library of [`NAMES`] the dynamic loader opens, and its name.
fn open_library() -> Result<(libloading::Library, &'static str), String> {
    let mut refused = Vec::new();
    for &name in NAMES {
        // SAFETY: opening the NVIDIA driver runs its own initialisers, which
        // is what using it at all requires.
        match unsafe { libloading::Library::new(name) } {
            Ok(library) => return Ok((library, name)),
            Err(e) => refused.push(format!("{name}: {e}")),
        }
    }
    // A library that exists but cannot be loaded (a wrong architecture, a
    // missing dependency) is worth its own words; one not found is the
    // standard reason.
    let found_but_refused: Vec<&String> = refused
        .iter()
        .filter(|why| !why.contains("No such file") && !why.contains("cannot open shared object"))
        .collect();
    if found_but_refused.is_empty() {
        Err(NOT_FOUND.to_owned())
    } else {
        Err(format!(
            "no CUDA driver: libcuda.so cannot be loaded ({})",
            found_but_refused
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ))
    }
}

fn symbol<T: Copy>(library: &libloading::Library, name: &str) -> Result<T, String> {
    let mut bytes = Vec::with_capacity(name.len() + 1);
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(0);
    // SAFETY: each `T` this is called with is the prototype cuda.h declares
    // for `name`, with an integer for its result (the ABI test compares the
    // same prototypes in `Api`).
    let found = unsafe { library.get::<T>(&bytes) };
    found
        .map(|f| *f)
        .map_err(|e| format!("missing symbol {name} ({e})"))
}

/// The driver's description of `code`, where it has one.
fn text_of(error_string: ErrorString, code: CUresult) -> Option<String> {
    let mut text: *const c_char = ptr::null();
    // SAFETY: `text` is a valid place for the driver to store a pointer;
    // the function answers any code, with an error for one it lacks.
    let answer = unsafe { error_string(code, &mut text) };
    if answer != sys::CUDA_SUCCESS || text.is_null() {
        return None;
    }
    // SAFETY: on success the driver points `text` at a static,
    // NUL-terminated string of the library, which stays loaded for the
    // whole process.
    let text = unsafe { CStr::from_ptr(text) };
    Some(text.to_string_lossy().into_owned())
}

impl Api {
    /// `Ok` for `CUDA_SUCCESS`, otherwise a [`DriverError`] for `op` naming
    /// the code and, where the driver has one, its description.
    pub(crate) fn check(&self, op: &'static str, code: CUresult) -> Result<(), DriverError> {
        if code == sys::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(DriverError::new(BACKEND, op, self.describe(code)))
        }
    }

    /// `CUDA_ERROR_NAME (code): description`, as far as the table and the
    /// driver know the code.
    pub(crate) fn describe(&self, code: CUresult) -> String {
        describe(code, text_of(self.get_error_string, code).as_deref())
    }
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
}
