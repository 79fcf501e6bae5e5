//! The opened GPU: its primary context, shared by every stream, page and
//! graph made on it.

use std::ffi::{CStr, c_char, c_int};
use std::sync::Arc;

use capture_core::{DeviceInfo, DriverError};
use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdevice_attribute};

use crate::error::{check, refuse};
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
    limits: BlockLimits,
    info: DeviceInfo,
}

/// The largest block the device runs, which every kernel's signature is
/// checked against when it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockLimits {
    /// Most threads in x, y and z.
    pub(crate) max_block: [u32; 3],
    /// Most threads in one block.
    pub(crate) max_threads_per_block: u32,
}

// SAFETY: a CUcontext is a process-wide handle that any thread may make
// current; every use of it here goes through `bind`, and the driver itself
// synchronises access to context state. Nothing else in the struct changes
// after `open`.
unsafe impl Send for CudaDevice {}
// SAFETY: as for Send; no method mutates the struct.
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
        use CUdevice_attribute::*;
        let compute = (
            attribute(raw, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(raw, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let max_groups = [
            limit(raw, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            limit(raw, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            limit(raw, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ];
        let limits = BlockLimits {
            max_block: [
                limit(raw, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                limit(raw, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                limit(raw, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_threads_per_block: limit(raw, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        };
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
            limits,
            info: DeviceInfo {
                name: format!("{name} (sm_{}{})", compute.0, compute.1),
                driver_version: version.to_string(),
                max_groups,
            },
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

    /// Whether building a kernel checks its entry point's parameters against
    /// its signature: the driver can list them from 12.4 on
    /// (`cuFuncGetParamInfo`); older ones leave it to the constructor's
    /// promise.
    pub fn checks_kernel_parameters(&self) -> bool {
        loader::param_info().is_some()
    }

    /// The largest block the device runs.
    pub(crate) fn limits(&self) -> BlockLimits {
        self.limits
    }

    /// What a person needs to know about the device, and its grid limit.
    pub(crate) fn info(&self) -> &DeviceInfo {
        &self.info
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Everything made on the device (pages, streams, modules) held an
        // Arc of it and has released what it owned, so nothing else still
        // uses the context. Errors cannot be handed to anyone here.
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

/// A limit attribute, which the driver reports as a positive int.
fn limit(raw: CUdevice, which: CUdevice_attribute) -> Result<u32, DriverError> {
    let value = attribute(raw, which)?;
    u32::try_from(value)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| refuse("get device attribute", format!("{which:?} is {value}")))
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
