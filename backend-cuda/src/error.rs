//! CUDA result codes turned into capture-core's [`DriverError`], keeping the
//! driver's own name and words for the code so a person reading a failure
//! can look it up.

use std::ffi::{CStr, c_char};
use std::ptr;

use capture_core::DriverError;
use cudarc::driver::sys::{self, CUresult};

/// The backend name every error carries.
pub(crate) const BACKEND: &str = "cuda";

/// `Ok` for `CUDA_SUCCESS`, otherwise a [`DriverError`] for `op` naming the
/// code.
pub(crate) fn check(op: &'static str, code: CUresult) -> Result<(), DriverError> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DriverError::new(BACKEND, op, describe(code)))
    }
}

/// A failure this backend found itself, before asking the driver.
pub(crate) fn refuse(op: &'static str, message: impl Into<String>) -> DriverError {
    DriverError::new(BACKEND, op, message)
}

/// `CUDA_ERROR_NAME: description`, in the driver's words where it has them.
///
/// Only called once the loader has seen `cuGetErrorName` and
/// `cuGetErrorString` in the library, so neither lookup can fail to resolve.
pub(crate) fn describe(code: CUresult) -> String {
    // The enum's own variant name is the fallback: it is the same identifier
    // the driver would give, from the headers cudarc was generated from.
    let name = driver_text(code, sys::cuGetErrorName).unwrap_or_else(|| format!("{code:?}"));
    match driver_text(code, sys::cuGetErrorString) {
        Some(text) => format!("{name}: {text}"),
        None => name,
    }
}

type TextLookup = unsafe fn(CUresult, *mut *const c_char) -> CUresult;

fn driver_text(code: CUresult, lookup: TextLookup) -> Option<String> {
    let mut text: *const c_char = ptr::null();
    // SAFETY: `text` is a valid place for the driver to store a pointer; the
    // loader checked that the symbol exists before any call reaches here.
    let answer = unsafe { lookup(code, &mut text) };
    if answer != CUresult::CUDA_SUCCESS || text.is_null() {
        return None;
    }
    // SAFETY: on success the driver points `text` at a static, NUL-terminated
    // string that lives as long as the library stays loaded, which is the
    // whole process (cudarc never unloads it).
    let text = unsafe { CStr::from_ptr(text) };
    Some(text.to_string_lossy().into_owned())
}
