//! Turning the runtime's integer codes into [`DriverError`]s that keep the
//! code's name, so a report says `hipErrorOutOfMemory` and not `2`.

use std::ffi::{CStr, c_char};

use capture_core::DriverError;

use crate::ffi::{self, HipError, RtcResult};
use crate::loader::{Api, Rtc};

/// The backend's name in every error it reports.
pub(crate) const BACKEND: &str = "hip";

/// A C string the runtime returned, if it returned one.
fn runtime_text(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: hipGetErrorName, hipGetErrorString and hiprtcGetErrorString
    // return pointers to static, NUL-terminated strings owned by the library,
    // which stays loaded for the life of the process; null was ruled out above.
    let text = unsafe { CStr::from_ptr(text) };
    Some(text.to_string_lossy().into_owned())
}

/// `<hipErrorName>: <description>` for `code`.
///
/// The backend's own table is preferred for the codes it names (ROCm 5.2's
/// `hipGetErrorString` answers with the bare name); the runtime is asked for
/// any other, since a newer runtime knows codes this crate does not.
pub(crate) fn describe(api: Option<&Api>, code: HipError) -> String {
    if let (Some(name), Some(text)) = (ffi::error_name(code), ffi::error_description(code)) {
        return format!("{name}: {text}");
    }
    let Some(api) = api else {
        return format!("hipError({code}): unknown error code");
    };
    // SAFETY: hipGetErrorName and hipGetErrorString accept any integer and
    // answer with a static string (hipErrorUnknown's for codes they do not know).
    let name = runtime_text(unsafe { (api.get_error_name)(code) });
    // SAFETY: as above.
    let text = runtime_text(unsafe { (api.get_error_string)(code) });
    match (name, text) {
        (Some(name), Some(text)) if name != text => format!("{name} ({code}): {text}"),
        (Some(name), _) => format!("{name} ({code}): no description"),
        (None, _) => format!("hipError({code}): unknown error code"),
    }
}

/// `Ok` for `hipSuccess`, else `op`'s failure in the driver's words.
pub(crate) fn check(api: &Api, op: &'static str, code: HipError) -> Result<(), DriverError> {
    if code == ffi::SUCCESS {
        Ok(())
    } else {
        Err(DriverError::new(BACKEND, op, describe(Some(api), code)))
    }
}

/// `<HIPRTC_NAME> (<code>): <description>` for a hiprtc result: the number is
/// always printed, since the name comes from this crate's table and a newer
/// hiprtc may answer with a code the table does not hold.
pub(crate) fn describe_rtc(rtc: &Rtc, code: RtcResult) -> String {
    // SAFETY: hiprtcGetErrorString accepts any integer and answers with a
    // static string.
    let text = runtime_text(unsafe { (rtc.get_error_string)(code) });
    match (ffi::rtc_result_name(code), text) {
        (Some(name), Some(text)) if name != text => format!("{name} ({code}): {text}"),
        (Some(name), _) => format!("{name} ({code})"),
        (None, Some(text)) => format!("hiprtcResult({code}): {text}"),
        (None, None) => format!("hiprtcResult({code})"),
    }
}

/// A failure that no code describes (a count that does not fit, a name with
/// a NUL in it), in the same shape as the driver's own.
pub(crate) fn other(op: &'static str, message: impl Into<String>) -> DriverError {
    DriverError::new(BACKEND, op, message)
}

/// A capture-core error as the driver error a [`Builtins`](capture_core::Builtins)
/// build returns, keeping the compiler's log and the driver's words.
pub(crate) fn into_driver(op: &'static str, error: capture_core::Error) -> DriverError {
    match error {
        capture_core::Error::Driver(error) => error,
        capture_core::Error::Compile { kernel, log } => DriverError::new(
            BACKEND,
            op,
            format!("kernel {kernel} could not be built: {log}"),
        ),
        other => DriverError::new(BACKEND, op, other.to_string()),
    }
}
