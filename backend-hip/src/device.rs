//! Opening a HIP device: every reason it can be missing, said once, in the
//! order a person would fix them (runtime, device, compiler).

use std::env;
use std::ffi::{CStr, OsString, c_int};
use std::sync::{Mutex, OnceLock, Weak};

use capture_core::{DeviceInfo, DriverError};

use crate::error::{self, BACKEND, describe};
use crate::ffi;
use crate::kernels::Module;
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
    /// Most threads per block in x, y and z.
    pub(crate) max_block: [u32; 3],
    /// Most threads in one block.
    pub(crate) max_threads: u32,
    /// `gcnArchName`, when the runtime could say.
    arch: Option<String>,
    /// Modules compiled from HIP C++ here, by their source, while a kernel
    /// holds them: every kernel of one source (the four builtins, a user's
    /// five) shares one compile, which takes hiprtc a second or more.
    pub(crate) compiled: Mutex<Vec<(String, Weak<Module>)>>,
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

    /// The device's architecture as the runtime names it (`gcnArchName`,
    /// such as `gfx90a:sramecc+:xnack-`): what
    /// [`Kernel::from_hip`](crate::Kernel::from_hip) compiles for, and what
    /// a code object for
    /// [`Kernel::from_code_object`](crate::Kernel::from_code_object) must
    /// target. `None` when the runtime has no properties getter this crate
    /// reads; hiprtc then targets the current device itself.
    pub fn arch(&self) -> Option<&str> {
        self.arch.as_deref()
    }

    /// Most threads per workgroup in x, y and z, and in all.
    pub fn max_workgroup(&self) -> ([u32; 3], u32) {
        (self.max_block, self.max_threads)
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

    let attribute = |attribute, what| device_attribute(api, ordinal, attribute, what);
    let max_block = [
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "block size in x")?,
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, "block size in y")?,
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, "block size in z")?,
    ];
    let max_grid = [
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "grid size in x")?,
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "grid size in y")?,
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "grid size in z")?,
    ];
    let max_threads = attribute(
        ffi::DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        "threads per block",
    )?;
    let arch = arch_name(api, ordinal);
    if arch.is_none() {
        log::warn!(
            "hip: device {ordinal} did not report its architecture; hiprtc targets the current \
             device itself"
        );
    }

    let mut driver: c_int = 0;
    // SAFETY: the pointer is to a live local int.
    let driver_code = unsafe { (api.driver_get_version)(&mut driver) };
    let driver = if driver_code == ffi::SUCCESS {
        version_text(driver)
    } else {
        format!("unknown ({})", describe(Some(api), driver_code))
    };

    let name = match &arch {
        Some(arch) => format!("{name} ({arch})"),
        None => name,
    };
    let mut info = DeviceInfo::new(name, format!("driver {driver}, HIP runtime {runtime}"));
    info.max_groups = max_groups(max_grid, max_block);
    Ok(HipDevice {
        api,
        ordinal,
        info,
        max_block,
        max_threads,
        arch,
        compiled: Mutex::new(Vec::new()),
    })
}

/// Most blocks per grid dimension whatever the block size: the runtime's
/// own limit, and no more than fit 2^32 - 1 threads at the largest block,
/// since the runtime counts a dimension's threads in 32 bits and refuses
/// (in x) or truncates (in y and z) a grid past that.
fn max_groups(grid: [u32; 3], block: [u32; 3]) -> [u32; 3] {
    std::array::from_fn(|d| grid[d].min(u32::MAX / block[d].max(1)))
}

/// A positive device limit, or why the device cannot be used.
fn device_attribute(
    api: &Api,
    ordinal: c_int,
    attribute: ffi::DeviceAttribute,
    what: &str,
) -> Result<u32, String> {
    let mut value: c_int = 0;
    // SAFETY: the out-pointer is a live local; the attribute is one of the
    // documented values and the ordinal was validated.
    let code = unsafe { (api.device_get_attribute)(&mut value, attribute, ordinal) };
    if code != ffi::SUCCESS {
        return Err(format!(
            "HIP device {ordinal} cannot report its largest {what}: {}",
            describe(Some(api), code)
        ));
    }
    u32::try_from(value)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("HIP device {ordinal} reports a largest {what} of {value}"))
}

/// The device's `gcnArchName`, read from the one struct field this crate
/// reads (see [`ffi::PropsLayout`]), or `None` when the runtime cannot say.
fn arch_name(api: &Api, ordinal: c_int) -> Option<String> {
    let (getter, layout) = api.get_device_properties?;
    // Larger than either layout, and 8-byte aligned as the struct is.
    let mut buffer = [0u64; 512];
    let bytes = size_of_val(&buffer);
    if layout.size > bytes || layout.gcn_arch_name + ffi::GCN_ARCH_NAME_LEN > layout.size {
        return None;
    }
    // SAFETY: the runtime writes `layout.size` bytes, the size of the struct
    // the symbol fills, into a zeroed, aligned buffer of `bytes` >= that many
    // bytes that lives across the call; the ordinal was validated.
    let code = unsafe { getter(buffer.as_mut_ptr().cast(), ordinal) };
    if code != ffi::SUCCESS {
        log::warn!(
            "hip: {} for device {ordinal} answered {}",
            layout.symbol,
            describe(Some(api), code)
        );
        return None;
    }
    let all: Vec<u8> = buffer.iter().flat_map(|word| word.to_ne_bytes()).collect();
    let field = all.get(layout.gcn_arch_name..layout.gcn_arch_name + ffi::GCN_ARCH_NAME_LEN)?;
    let name = CStr::from_bytes_until_nul(field)
        .ok()?
        .to_str()
        .ok()?
        .trim();
    // An architecture name is `gfx` and target features; anything else means
    // the layout was not the one assumed, and is not passed to hiprtc.
    let plausible = name.starts_with("gfx")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'+' | b'-' | b'_'));
    if !plausible {
        log::warn!(
            "hip: {} gave an unexpected architecture name {name:?}",
            layout.symbol
        );
    }
    plausible.then(|| name.to_owned())
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
    fn grid_limits_keep_every_dimension_within_32_bits_of_threads() {
        let rocm = max_groups([i32::MAX as u32, 65_535, 65_535], [1024, 1024, 1024]);
        assert_eq!(rocm, [4_194_303, 65_535, 65_535]);
        assert_eq!(max_groups([100, 100, 100], [1, 1, 1]), [100, 100, 100]);
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
