//! Device and pinned host pages.
//!
//! Host pages are `hipHostMalloc`'d so that copies are true DMA and stay
//! asynchronous: a pageable source would make the runtime stage it
//! synchronously, and a capture would record the staging buffer's address
//! instead of the page's.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use capture_core::DriverError;

use crate::device::{Device, Memory};
use crate::error::{self, other};
use crate::ffi;

/// A `hipMalloc`'d range of device memory, freed (on its device) when it
/// drops.
///
/// Dropping is the only way a page is freed, so a page released through the
/// driver contract and one dropped without it (a pool torn down on an error
/// path) are each freed exactly once. While a stream of the device records,
/// the free waits for the recording to end (see [`Device`]).
pub struct DevicePage {
    ptr: *mut c_void,
    bytes: u64,
    device: Arc<Device>,
}

// SAFETY: the page is a device address, not host memory; the HIP runtime
// accepts it from any thread (the device is made current first), and it is
// freed only by Drop, once.
unsafe impl Send for DevicePage {}

impl Drop for DevicePage {
    fn drop(&mut self) {
        self.device.free(Memory::Device, self.ptr, self.bytes);
    }
}

impl DevicePage {
    /// Allocate at least `bytes` bytes on `device`.
    pub(crate) fn allocate(device: &Arc<Device>, bytes: u64) -> Result<Self, DriverError> {
        const OP: &str = "allocate device page";
        let api = device.api;
        let bytes = bytes.max(1);
        let size = to_usize(OP, bytes)?;
        let _current = device.enter(OP)?;
        let mut ptr = ptr::null_mut();
        // SAFETY: the out-pointer is a live local; the size is non-zero.
        let code = unsafe { (api.malloc)(&mut ptr, size) };
        error::check(api, OP, code)?;
        if ptr.is_null() {
            return Err(other(OP, "hipMalloc succeeded but returned a null pointer"));
        }
        Ok(Self {
            ptr,
            bytes,
            device: Arc::clone(device),
        })
    }

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
/// (the only way it is freed, as for [`DevicePage`]).
pub struct HostPage {
    ptr: *mut u8,
    bytes: usize,
    device: Arc<Device>,
}

// SAFETY: the page is plain pinned host memory with no thread affinity; it is
// freed only by Drop, once, and host-side accesses go through `write`/`read`,
// whose callers guarantee that no enqueued copy uses the range at the same
// time.
unsafe impl Send for HostPage {}

impl Drop for HostPage {
    fn drop(&mut self) {
        self.device
            .free(Memory::Host, self.ptr.cast(), self.bytes as u64);
    }
}

impl HostPage {
    /// Allocate at least `bytes` bytes of pinned memory for `device`.
    pub(crate) fn allocate(device: &Arc<Device>, bytes: u64) -> Result<Self, DriverError> {
        const OP: &str = "allocate host page";
        let api = device.api;
        let size = to_usize(OP, bytes.max(1))?;
        let _current = device.enter(OP)?;
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
        Ok(Self {
            ptr: ptr.cast(),
            bytes: size,
            device: Arc::clone(device),
        })
    }

    /// A pointer to `len` bytes at `offset`, or `None` when they leave the page.
    pub(crate) fn range(&self, offset: u64, len: usize) -> Option<*mut u8> {
        let offset = usize::try_from(offset).ok()?;
        let end = offset.checked_add(len)?;
        (end <= self.bytes).then(|| self.ptr.wrapping_add(offset))
    }

    /// A pointer to `len` bytes at `offset`, or `op`'s error when they leave
    /// the page.
    pub(crate) fn address(
        &self,
        op: &'static str,
        offset: u64,
        len: u64,
    ) -> Result<*mut u8, DriverError> {
        usize::try_from(len)
            .ok()
            .and_then(|len| self.range(offset, len))
            .ok_or_else(|| {
                other(
                    op,
                    format!(
                        "range {offset}+{len} lies outside a host page of {} bytes",
                        self.bytes
                    ),
                )
            })
    }

    /// Copy `bytes` into the page at `offset`, now.
    pub(crate) fn write(&self, offset: u64, bytes: &[u8]) {
        // capture-core never asks for a range outside the page; if a caller
        // ever did, copying nothing is safe and the log says why, where a
        // panic would poison the device's lock for every other stream.
        let Some(dst) = self.range(offset, bytes.len()) else {
            log::error!(
                "hip: write of {} bytes at {offset} leaves a host page of {} bytes; nothing \
                 copied",
                bytes.len(),
                self.bytes
            );
            return;
        };
        // SAFETY: `dst..dst + len` lies inside the live pinned allocation
        // (checked by `range`), `bytes` is a distinct Rust slice so they
        // cannot overlap, and the caller guarantees no enqueued copy reads the
        // range meanwhile.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
    }

    /// Copy from the page at `offset` into `out`, now.
    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) {
        let Some(src) = self.range(offset, out.len()) else {
            log::error!(
                "hip: read of {} bytes at {offset} leaves a host page of {} bytes; nothing \
                 copied",
                out.len(),
                self.bytes
            );
            return;
        };
        // SAFETY: `src..src + len` lies inside the live pinned allocation
        // (checked by `range`), `out` is a distinct Rust slice, and the caller
        // fenced the copy that filled the range, so the device no longer
        // writes it.
        unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
    }
}

fn to_usize(op: &'static str, bytes: u64) -> Result<usize, DriverError> {
    usize::try_from(bytes).map_err(|_| other(op, format!("{bytes} bytes do not fit in an address")))
}
