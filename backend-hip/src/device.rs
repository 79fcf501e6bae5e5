//! Opening a HIP device: every reason it can be missing, said once, in the
//! order a person would fix them (runtime, device, compiler).

use std::env;
use std::ffi::{CStr, OsString, c_int};
use std::sync::{Arc, Mutex, OnceLock};

use capture_core::{DeviceInfo, DriverError};

use crate::error::{self, BACKEND, describe};
use crate::ffi;
use crate::kernels::KernelModule;
use crate::loader::{self, Api};

/// Environment variable holding the index of the device to open (default 0),
/// as the runtime numbers them (after `HIP_VISIBLE_DEVICES` and
/// `ROCR_VISIBLE_DEVICES` have filtered them).
pub const DEVICE_VAR: &str = "CAPTURE_HIP_DEVICE";

/// An opened HIP device, shared by its streams.
///
/// The runtime keeps one primary context per device per process, so nothing
/// here is created or destroyed: the device is only made current on every
/// entry, since the runtime's notion of "current" is per thread and the
/// calls may come from any thread.
pub struct HipDevice {
    pub(crate) api: &'static Api,
    pub(crate) ordinal: c_int,
    info: DeviceInfo,
    /// The builtin kernels, compiled on first use and kept for the device's
    /// life: hiprtc takes seconds, a lookup takes nothing.
    pub(crate) kernels: Mutex<Option<Arc<KernelModule>>>,
}

impl HipDevice {
    /// Make this device current on the calling thread.
    pub(crate) fn make_current(&self, op: &'static str) -> Result<(), DriverError> {
        // SAFETY: hipSetDevice takes a plain ordinal, validated when the
        // device was opened.
        let code = unsafe { (self.api.set_device)(self.ordinal) };
        error::check(self.api, op, code)
    }

    /// What `Driver::device_info` reports.
    pub(crate) fn info(&self) -> DeviceInfo {
        self.info.clone()
    }
}

/// `hipInit`'s answer, asked once: the runtime initialises itself once per
/// process and says the same thing on every later call.
fn init(api: &Api) -> ffi::HipError {
    static INIT: OnceLock<ffi::HipError> = OnceLock::new();
    // SAFETY: hipInit takes flags, which must be 0.
    *INIT.get_or_init(|| unsafe { (api.init)(0) })
}

/// ROCm's `major * 10_000_000 + minor * 100_000 + patch` as `major.minor.patch`.
fn version_text(version: c_int) -> String {
    if version >= 10_000_000 {
        format!(
            "{}.{}.{}",
            version / 10_000_000,
            version / 100_000 % 100,
            version % 100_000
        )
    } else {
        version.to_string()
    }
}

/// The device index `CAPTURE_HIP_DEVICE` (its value `raw`) selects among
/// `count` devices.
fn selected(raw: Option<OsString>, count: c_int) -> Result<c_int, String> {
    let Some(raw) = raw.filter(|v| !v.is_empty()) else {
        return Ok(0);
    };
    let text = raw.to_string_lossy();
    match text.trim().parse::<c_int>() {
        Ok(index) if (0..count).contains(&index) => Ok(index),
        Ok(index) => Err(format!(
            "{DEVICE_VAR}={index} selects no device: the HIP runtime sees {count} device(s), \
             numbered from 0"
        )),
        Err(_) => Err(format!(
            "{DEVICE_VAR}={text:?} is not a device index (expected 0 to {})",
            count - 1
        )),
    }
}

/// Open the selected device, or say why there is none.
pub(crate) fn open() -> Result<HipDevice, String> {
    let api = loader::api().map_err(|reason| format!("no HIP runtime: {reason}"))?;
    let init_code = init(api);
    let runtime = {
        let mut version: c_int = 0;
        // SAFETY: the pointer is to a live local int.
        let code = unsafe { (api.runtime_get_version)(&mut version) };
        if code == ffi::SUCCESS {
            version_text(version)
        } else {
            format!("unknown ({})", describe(Some(api), code))
        }
    };

    let mut count: c_int = 0;
    // SAFETY: the pointer is to a live local int.
    let count_code = unsafe { (api.get_device_count)(&mut count) };
    let init_note = if init_code == ffi::SUCCESS {
        String::new()
    } else {
        format!("; hipInit answered {}", describe(Some(api), init_code))
    };
    if count_code == ffi::ERROR_NO_DEVICE || (count_code == ffi::SUCCESS && count <= 0) {
        return Err(format!(
            "no HIP device: hipGetDeviceCount answered {} (runtime {runtime} from {}{init_note})",
            describe(Some(api), ffi::ERROR_NO_DEVICE),
            api.path
        ));
    }
    if count_code != ffi::SUCCESS {
        return Err(format!(
            "HIP runtime {runtime} from {} cannot count devices: {}{init_note}",
            api.path,
            describe(Some(api), count_code)
        ));
    }
    if init_code != ffi::SUCCESS {
        return Err(format!(
            "HIP runtime {runtime} from {} failed to initialise: hipInit answered {}",
            api.path,
            describe(Some(api), init_code)
        ));
    }

    let ordinal = selected(env::var_os(DEVICE_VAR), count)?;
    // SAFETY: the ordinal is within the count the runtime reported.
    let code = unsafe { (api.set_device)(ordinal) };
    if code != ffi::SUCCESS {
        return Err(format!(
            "HIP device {ordinal} cannot be made current: {}",
            describe(Some(api), code)
        ));
    }
    let name = device_name(api, ordinal);

    let rtc = api.rtc.as_ref().map_err(|reason| {
        format!("HIP runtime found, but hiprtc is missing, so the builtin kernels cannot be built: {reason}")
    })?;
    log::debug!("hip: runtime {}, hiprtc {}", api.path, rtc.path);

    let mut driver: c_int = 0;
    // SAFETY: the pointer is to a live local int.
    let driver_code = unsafe { (api.driver_get_version)(&mut driver) };
    let driver = if driver_code == ffi::SUCCESS {
        version_text(driver)
    } else {
        format!("unknown ({})", describe(Some(api), driver_code))
    };

    Ok(HipDevice {
        api,
        ordinal,
        info: DeviceInfo {
            name,
            driver_version: format!("driver {driver}, HIP runtime {runtime}"),
        },
        kernels: Mutex::new(None),
    })
}

/// The device's marketing name, or a placeholder saying why there is none
/// (a name is for people; its absence is no reason to refuse the device).
fn device_name(api: &Api, ordinal: c_int) -> String {
    let mut device: ffi::Device = 0;
    // SAFETY: the pointer is to a live local; the ordinal was validated.
    let code = unsafe { (api.device_get)(&mut device, ordinal) };
    if code != ffi::SUCCESS {
        return format!(
            "HIP device {ordinal} (no name: {})",
            describe(Some(api), code)
        );
    }
    let mut buffer = [0u8; 256];
    let len = c_int::try_from(buffer.len()).unwrap_or(c_int::MAX);
    // SAFETY: the runtime writes at most `len` bytes, NUL included, into the
    // buffer, which is exactly `len` bytes long and lives across the call.
    let code = unsafe { (api.device_get_name)(buffer.as_mut_ptr().cast(), len, device) };
    if code != ffi::SUCCESS {
        return format!(
            "HIP device {ordinal} (no name: {})",
            describe(Some(api), code)
        );
    }
    match CStr::from_bytes_until_nul(&buffer) {
        Ok(name) if !name.is_empty() => name.to_string_lossy().into_owned(),
        _ => format!("HIP device {ordinal}"),
    }
}

/// `open`'s failure as the driver error `Driver::open` returns.
pub(crate) fn open_error(reason: String) -> DriverError {
    DriverError::new(BACKEND, "open device", reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_rocm_writes_them() {
        assert_eq!(version_text(50_221_153), "5.2.21153");
        assert_eq!(version_text(60_443_483), "6.4.43483");
        assert_eq!(version_text(42), "42");
    }

    #[test]
    fn device_selection() {
        assert_eq!(selected(None, 2), Ok(0));
        assert_eq!(selected(Some("".into()), 2), Ok(0));
        assert_eq!(selected(Some(" 1 ".into()), 2), Ok(1));
        let too_big = selected(Some("2".into()), 2).unwrap_err();
        assert!(too_big.contains("CAPTURE_HIP_DEVICE=2") && too_big.contains("2 device(s)"));
        let negative = selected(Some("-1".into()), 2).unwrap_err();
        assert!(negative.contains("selects no device"), "{negative}");
        let junk = selected(Some("gpu0".into()), 2).unwrap_err();
        assert!(junk.contains("is not a device index"), "{junk}");
    }
}
