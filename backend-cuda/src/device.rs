//! The opened GPU: its primary context, shared by every stream, page and
//! graph made on it.

use std::ffi::{CStr, c_char, c_int};
use std::sync::{Arc, Mutex};

use capture_core::{DeviceInfo, DriverError};
use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdevice_attribute};

use crate::error::{check, refuse};
use crate::kernels::Module;
use crate::loader;

/// The variable that picks a device by index when a machine has several.
pub const DEVICE_ENV: &str = "CAPTURE_CUDA_DEVICE";

/// The operation name of every failure to find or initialise the driver,
/// so that `probe` can hand its reason on unchanged.
pub(crate) const LOAD_OP: &str = "load the driver";

/// One GPU with its primary context retained.
///
/// The primary context is the one the CUDA runtime and other libraries in the
/// same process use too, so memory and graphs made here stay usable by them
/// and no second context competes for the device. Everything made on the
/// device holds an `Arc` of it, so the context outlives all of it.
pub struct CudaDevice {
    ordinal: c_int,
    raw: CUdevice,
    context: CUcontext,
    /// Compute capability, which picks the PTX target.
    compute: (c_int, c_int),
    info: DeviceInfo,
    /// The builtin kernels, compiled on first use and kept for the device's
    /// lifetime.
    pub(crate) kernels: Mutex<Option<Module>>,
}

// SAFETY: a CUcontext is a process-wide handle that any thread may make
// current; every use of it here goes through `bind`, and the driver itself
// synchronises access to context state. The module cache is behind a mutex.
unsafe impl Send for CudaDevice {}
// SAFETY: as for Send; no method mutates the struct except through the mutex.
unsafe impl Sync for CudaDevice {}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ordinal)
            .field("name", &self.info.name)
            .field("driver_version", &self.info.driver_version)
            .finish()
    }
}

impl CudaDevice {
    /// Open the device [`DEVICE_ENV`] names (the first one when unset).
    pub(crate) fn open() -> Result<Arc<Self>, DriverError> {
        let version = loader::load().map_err(|reason| refuse(LOAD_OP, reason))?;
        let ordinal = select()?;
        let mut raw: CUdevice = 0;
        // SAFETY: `raw` is a valid place for the handle; the ordinal was
        // checked against the device count.
        check("get device", unsafe { sys::cuDeviceGet(&mut raw, ordinal) })?;
        let name = device_name(raw)?;
        let compute = (
            attribute(
                raw,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            )?,
            attribute(
                raw,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )?,
        );
        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: `raw` came from cuDeviceGet; `context` is a valid place
        // for the handle. Released in Drop, the only other owner path.
        check("retain primary context", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut context, raw)
        })?;
        let device = Arc::new(Self {
            ordinal,
            raw,
            context,
            compute,
            info: DeviceInfo {
                name: format!("{name} (sm_{}{})", compute.0, compute.1),
                driver_version: version.to_string(),
            },
            kernels: Mutex::new(None),
        });
        device.bind()?;
        Ok(device)
    }

    /// Make this device's context current on the calling thread.
    ///
    /// Called on every entry point: capture-core may drive a device from any
    /// thread, and a context is current per thread, so no call may assume the
    /// previous one ran on the same thread.
    pub(crate) fn bind(&self) -> Result<(), DriverError> {
        // SAFETY: the context is retained for as long as `self` lives.
        check("make context current", unsafe {
            sys::cuCtxSetCurrent(self.context)
        })
    }

    /// The device's compute capability, major and minor.
    pub(crate) fn compute_capability(&self) -> (c_int, c_int) {
        self.compute
    }

    /// What a person needs to know about the device.
    pub(crate) fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Everything made on the device held an Arc of it, so nothing else
        // still uses the context. Errors cannot be handed to anyone here.
        let bound = self.bind();
        let module = match self.kernels.get_mut() {
            Ok(slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(module) = module
            && bound.is_ok()
        {
            module.unload();
        }
        // SAFETY: this retained the primary context once, in `open`, and
        // releases it exactly once.
        let released = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.raw) };
        if let Err(e) = check("release primary context", released) {
            log::warn!("{e}");
        }
    }
}

/// The ordinal [`DEVICE_ENV`] selects, checked against what the driver sees.
fn select() -> Result<c_int, DriverError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid place for the driver to write an int.
    check("count devices", unsafe {
        sys::cuDeviceGetCount(&mut count)
    })?;
    if count <= 0 {
        return Err(refuse(
            "count devices",
            "no CUDA device: the driver is installed but reports no device",
        ));
    }
    let ordinal = match std::env::var(DEVICE_ENV) {
        Err(_) => 0,
        Ok(text) => text.trim().parse::<c_int>().map_err(|_| {
            refuse(
                "select device",
                format!("{DEVICE_ENV}={text:?} is not a device index"),
            )
        })?,
    };
    if ordinal < 0 || ordinal >= count {
        return Err(refuse(
            "select device",
            format!("{DEVICE_ENV}={ordinal}, but the driver reports {count} device(s)"),
        ));
    }
    Ok(ordinal)
}

fn attribute(raw: CUdevice, which: CUdevice_attribute) -> Result<c_int, DriverError> {
    let mut value: c_int = 0;
    // SAFETY: `value` is a valid place for the answer; `raw` came from
    // cuDeviceGet.
    check("get device attribute", unsafe {
        sys::cuDeviceGetAttribute(&mut value, which, raw)
    })?;
    Ok(value)
}

fn device_name(raw: CUdevice) -> Result<String, DriverError> {
    let mut buffer = [0u8; 256];
    let len = c_int::try_from(buffer.len()).unwrap_or(c_int::MAX);
    // SAFETY: the driver writes at most `len` bytes, NUL included, into a
    // buffer of exactly that size.
    check("get device name", unsafe {
        sys::cuDeviceGetName(buffer.as_mut_ptr().cast::<c_char>(), len, raw)
    })?;
    // A driver that filled the buffer without a NUL still yields a name.
    let name = match CStr::from_bytes_until_nul(&buffer) {
        Ok(name) => name.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&buffer).into_owned(),
    };
    Ok(name)
}
