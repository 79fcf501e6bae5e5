//! Device and pinned host pages, and the copies between them.
//!
//! Host pages are `hipHostMalloc`'d so that copies are true DMA and stay
//! asynchronous: a pageable source would make the runtime stage it
//! synchronously, and a capture would record the staging buffer's address
//! instead of the page's.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use capture_core::{DeviceSlice, DriverError, HostSlice};

use crate::Hip;
use crate::device::HipDevice;
use crate::error::{self, other};
use crate::ffi;
use crate::stream::HipStream;

/// A `hipMalloc`'d range of device memory, freed (on its device) when it
/// drops.
///
/// Dropping is the only way a page is freed, so a page released through the
/// driver contract and one dropped without it (a pool torn down on an error
/// path) are each freed exactly once.
pub struct HipDevicePage {
    ptr: *mut c_void,
    bytes: u64,
    device: Arc<HipDevice>,
}

// SAFETY: the page is a device address, not host memory; the HIP runtime
// accepts it from any thread (the device is made current first), and it is
// freed only by Drop, once.
unsafe impl Send for HipDevicePage {}

impl Drop for HipDevicePage {
    fn drop(&mut self) {
        const OP: &str = "release device page";
        let api = self.device.api;
        let result = self.device.make_current(OP).and_then(|()| {
            // SAFETY: the pointer came from hipMalloc on this device and is
            // freed exactly once, here; capture-core gives a page back only
            // once no enqueued work can touch it, and a page dropped without
            // that promise is still safe to free: hipFree performs an
            // implicit hipDeviceSynchronize, as ROCm documents.
            let code = unsafe { (api.free)(self.ptr) };
            error::check(api, OP, code)
        });
        if let Err(error) = result {
            log::warn!("{error}; {} bytes of device memory may leak", self.bytes);
        }
    }
}

impl HipDevicePage {
    /// The device address `offset` bytes into the page, for a kernel
    /// parameter or a copy. Checked against the page's size so that a bad
    /// slice is an error, not a stray write on the device.
    pub(crate) fn address(
        &self,
        op: &'static str,
        offset: u64,
        len: u64,
    ) -> Result<*mut c_void, DriverError> {
        let end = offset.checked_add(len);
        if end.is_none_or(|end| end > self.bytes) {
            return Err(other(
                op,
                format!(
                    "range {offset}+{len} lies outside a device page of {} bytes",
                    self.bytes
                ),
            ));
        }
        let offset = usize::try_from(offset)
            .map_err(|_| other(op, format!("offset {offset} does not fit in an address")))?;
        Ok(self.ptr.wrapping_byte_add(offset))
    }
}

/// A `hipHostMalloc`'d range of pinned host memory, freed when it drops
/// (the only way it is freed, as for [`HipDevicePage`]).
pub struct HipHostPage {
    ptr: *mut u8,
    bytes: usize,
    device: Arc<HipDevice>,
}

// SAFETY: the page is plain pinned host memory with no thread affinity; it is
// freed only by Drop, once, and host-side accesses go through
// `write_host`/`read_host`, whose callers guarantee that no enqueued copy uses
// the range at the same time.
unsafe impl Send for HipHostPage {}

impl Drop for HipHostPage {
    fn drop(&mut self) {
        const OP: &str = "release host page";
        let api = self.device.api;
        let result = self.device.make_current(OP).and_then(|()| {
            // SAFETY: the pointer came from hipHostMalloc and is freed exactly
            // once, here; no enqueued copy still uses it (capture-core's
            // promise for a released page; hipHostFree performs an implicit
            // hipDeviceSynchronize in any case, as ROCm documents).
            let code = unsafe { (api.host_free)(self.ptr.cast()) };
            error::check(api, OP, code)
        });
        if let Err(error) = result {
            log::warn!("{error}; {} bytes of pinned memory may leak", self.bytes);
        }
    }
}

impl HipHostPage {
    /// A pointer to `len` bytes at `offset`, or `None` when they leave the page.
    fn range(&self, offset: u64, len: usize) -> Option<*mut u8> {
        let offset = usize::try_from(offset).ok()?;
        let end = offset.checked_add(len)?;
        (end <= self.bytes).then(|| self.ptr.wrapping_add(offset))
    }
}

fn to_usize(op: &'static str, bytes: u64) -> Result<usize, DriverError> {
    usize::try_from(bytes).map_err(|_| other(op, format!("{bytes} bytes do not fit in an address")))
}

pub(crate) fn allocate_device_page(
    stream: &mut HipStream,
    bytes: u64,
) -> Result<HipDevicePage, DriverError> {
    const OP: &str = "allocate device page";
    let api = stream.device.api;
    stream.device.make_current(OP)?;
    let size = to_usize(OP, bytes.max(1))?;
    let mut ptr = ptr::null_mut();
    // SAFETY: the out-pointer is a live local; the size is non-zero.
    let code = unsafe { (api.malloc)(&mut ptr, size) };
    error::check(api, OP, code)?;
    if ptr.is_null() {
        return Err(other(OP, "hipMalloc succeeded but returned a null pointer"));
    }
    Ok(HipDevicePage {
        ptr,
        bytes: bytes.max(1),
        device: Arc::clone(&stream.device),
    })
}

/// Give a page back: its Drop frees it, on the device it came from.
pub(crate) fn release_device_page(_stream: &mut HipStream, page: HipDevicePage) {
    drop(page);
}

pub(crate) fn allocate_host_page(
    stream: &mut HipStream,
    bytes: u64,
) -> Result<HipHostPage, DriverError> {
    const OP: &str = "allocate host page";
    let api = stream.device.api;
    stream.device.make_current(OP)?;
    let size = to_usize(OP, bytes.max(1))?;
    let mut ptr = ptr::null_mut();
    // SAFETY: the out-pointer is a live local; the size is non-zero.
    let code = unsafe { (api.host_malloc)(&mut ptr, size, ffi::HOST_MALLOC_DEFAULT) };
    error::check(api, OP, code)?;
    if ptr.is_null() {
        return Err(other(
            OP,
            "hipHostMalloc succeeded but returned a null pointer",
        ));
    }
    Ok(HipHostPage {
        ptr: ptr.cast(),
        bytes: size,
        device: Arc::clone(&stream.device),
    })
}

/// Give a page back: its Drop frees it.
pub(crate) fn release_host_page(_stream: &mut HipStream, page: HipHostPage) {
    drop(page);
}

pub(crate) fn write_host(page: &HipHostPage, offset: u64, bytes: &[u8]) {
    // capture-core never asks for a range outside the page; if a caller
    // ever did, copying nothing is safe and the log says why, where a panic
    // would poison the device's lock for every other stream.
    let Some(dst) = page.range(offset, bytes.len()) else {
        log::error!(
            "hip: write of {} bytes at {offset} leaves a host page of {} bytes; nothing copied",
            bytes.len(),
            page.bytes
        );
        return;
    };
    // SAFETY: `dst..dst + len` lies inside the live pinned allocation (checked
    // by `range`), `bytes` is a distinct Rust slice so they cannot overlap,
    // and the caller guarantees no enqueued copy reads the range meanwhile.
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
}

pub(crate) fn read_host(page: &HipHostPage, offset: u64, out: &mut [u8]) {
    let Some(src) = page.range(offset, out.len()) else {
        log::error!(
            "hip: read of {} bytes at {offset} leaves a host page of {} bytes; nothing copied",
            out.len(),
            page.bytes
        );
        return;
    };
    // SAFETY: `src..src + len` lies inside the live pinned allocation (checked
    // by `range`), `out` is a distinct Rust slice, and the caller fenced the
    // copy that filled the range, so the device no longer writes it.
    unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
}

pub(crate) fn copy_to_device(
    stream: &mut HipStream,
    src: HostSlice<'_, Hip>,
    dst: DeviceSlice<'_, Hip>,
) -> Result<(), DriverError> {
    const OP: &str = "copy to device";
    if src.len != dst.len {
        return Err(other(
            OP,
            format!("source has {} bytes, destination {}", src.len, dst.len),
        ));
    }
    let len = to_usize(OP, src.len)?;
    let host = src
        .page
        .range(src.offset, len)
        .ok_or_else(|| other(OP, "source range leaves its host page"))?;
    let device = dst.page.address(OP, dst.offset, dst.len)?;
    let api = stream.device.api;
    stream.device.make_current(OP)?;
    // SAFETY: both ranges were checked to lie inside live allocations (pinned
    // host and device), the stream is live, and the copy is asynchronous:
    // capture-core keeps both pages alive until a fence passes it.
    let code = unsafe { (api.memcpy_htod_async)(device, host.cast(), len, stream.raw()) };
    error::check(api, OP, code)
}

pub(crate) fn copy_to_host(
    stream: &mut HipStream,
    src: DeviceSlice<'_, Hip>,
    dst: HostSlice<'_, Hip>,
) -> Result<(), DriverError> {
    const OP: &str = "copy to host";
    if src.len != dst.len {
        return Err(other(
            OP,
            format!("source has {} bytes, destination {}", src.len, dst.len),
        ));
    }
    let len = to_usize(OP, src.len)?;
    let device = src.page.address(OP, src.offset, src.len)?;
    let host = dst
        .page
        .range(dst.offset, len)
        .ok_or_else(|| other(OP, "destination range leaves its host page"))?;
    let api = stream.device.api;
    stream.device.make_current(OP)?;
    // SAFETY: as for copy_to_device, in the other direction.
    let code = unsafe { (api.memcpy_dtoh_async)(host.cast(), device, len, stream.raw()) };
    error::check(api, OP, code)
}
