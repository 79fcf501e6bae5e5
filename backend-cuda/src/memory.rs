//! Device pages and pinned host pages, and the range checks every use of
//! them passes through.
//!
//! A page frees itself when dropped, with its device's context current, so
//! capture-core's "release" is a drop and a page lost on an error path still
//! goes back to the driver. Each holds an `Arc` of its device, which keeps
//! the context alive for as long as memory in it exists.

use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use capture_core::DriverError;
use cudarc::driver::sys::{self, CUdeviceptr};

use crate::device::CudaDevice;
use crate::error::{check, refuse};

/// A block of device memory from `cuMemAlloc`.
///
/// Plain `cuMemAlloc` rather than the stream-ordered allocator: an
/// allocation is never recorded into a graph this way, and capture-core
/// already orders every free behind a fence.
pub struct CudaDevicePage {
    pointer: CUdeviceptr,
    len: u64,
    device: Arc<CudaDevice>,
}

/// A block of page-locked host memory from `cuMemHostAlloc`.
///
/// Pinned, so the driver's asynchronous copies really are asynchronous and
/// may be recorded into a graph, which reads the same host bytes on every
/// replay.
pub struct CudaHostPage {
    pointer: NonNull<u8>,
    len: usize,
    device: Arc<CudaDevice>,
}

// SAFETY: the page owns its allocation; the raw pointer is only dereferenced
// by `read`/`write`, under capture-core's promise that no two users touch the
// same bytes at once, and freed once, in Drop.
unsafe impl Send for CudaHostPage {}

impl std::fmt::Debug for CudaDevicePage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevicePage({:#x}, {} bytes)", self.pointer, self.len)
    }
}

impl std::fmt::Debug for CudaHostPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaHostPage({:p}, {} bytes)", self.pointer, self.len)
    }
}

impl CudaDevicePage {
    /// Allocate at least `bytes` (at least one) on `device`.
    pub(crate) fn allocate(device: &Arc<CudaDevice>, bytes: u64) -> Result<Self, DriverError> {
        const OP: &str = "allocate device page";
        let len = bytes.max(1);
        let size = usize::try_from(len).map_err(|_| {
            refuse(
                OP,
                format!("{len} bytes do not fit this host's address size"),
            )
        })?;
        device.bind()?;
        let mut pointer: CUdeviceptr = 0;
        // SAFETY: `pointer` is a valid place for the address; the context is
        // current.
        check(OP, unsafe { sys::cuMemAlloc_v2(&mut pointer, size) })?;
        Ok(Self {
            pointer,
            len,
            device: Arc::clone(device),
        })
    }

    /// The device address of `len` bytes at `offset`, or an error when the
    /// range leaves the page or the page belongs to another device.
    pub(crate) fn address(
        &self,
        device: &Arc<CudaDevice>,
        offset: u64,
        len: u64,
        op: &'static str,
    ) -> Result<CUdeviceptr, DriverError> {
        if !Arc::ptr_eq(&self.device, device) {
            return Err(refuse(op, "the device page belongs to another device"));
        }
        in_range(offset, len, self.len)
            .then(|| self.pointer + offset)
            .ok_or_else(|| refuse(op, out_of_range("device", offset, len, self.len)))
    }
}

impl Drop for CudaDevicePage {
    fn drop(&mut self) {
        if let Err(e) = self.device.bind() {
            log::warn!("leaking a device page: {e}");
            return;
        }
        // SAFETY: the address came from cuMemAlloc and is freed exactly once;
        // capture-core releases a page only once no enqueued work uses it.
        let freed = unsafe { sys::cuMemFree_v2(self.pointer) };
        if let Err(e) = check("free device page", freed) {
            log::warn!("{e}");
        }
    }
}

impl CudaHostPage {
    /// Allocate at least `bytes` (at least one) of pinned memory.
    pub(crate) fn allocate(device: &Arc<CudaDevice>, bytes: u64) -> Result<Self, DriverError> {
        const OP: &str = "allocate host page";
        let len = usize::try_from(bytes.max(1)).map_err(|_| {
            refuse(
                OP,
                format!("{bytes} bytes do not fit this host's address size"),
            )
        })?;
        device.bind()?;
        let mut raw: *mut c_void = ptr::null_mut();
        // SAFETY: `raw` is a valid place for the pointer; PORTABLE makes the
        // memory pinned for every context, so it stays valid whichever
        // context a later copy runs in.
        check(OP, unsafe {
            sys::cuMemHostAlloc(&mut raw, len, sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        let pointer = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| refuse(OP, "the driver returned a null host pointer"))?;
        Ok(Self {
            pointer,
            len,
            device: Arc::clone(device),
        })
    }

    /// The host address of `len` bytes at `offset`, or an error when the
    /// range leaves the page or the page belongs to another device.
    pub(crate) fn address(
        &self,
        device: &Arc<CudaDevice>,
        offset: u64,
        len: u64,
        op: &'static str,
    ) -> Result<*mut c_void, DriverError> {
        if !Arc::ptr_eq(&self.device, device) {
            return Err(refuse(op, "the host page belongs to another device"));
        }
        self.offset_of(offset, len)
            .map(|at| self.pointer.as_ptr().wrapping_add(at).cast::<c_void>())
            .ok_or_else(|| refuse(op, out_of_range("host", offset, len, self.len as u64)))
    }

    /// Copy `bytes` into the page at `offset`; a range outside the page is
    /// logged and ignored, since the contract gives no way to report it.
    pub(crate) fn write(&self, offset: u64, bytes: &[u8]) {
        let Some(at) = self.offset_of(offset, bytes.len() as u64) else {
            log::error!(
                "{}",
                out_of_range("host", offset, bytes.len() as u64, self.len as u64)
            );
            return;
        };
        // SAFETY: `at + bytes.len()` lies within the allocation (checked just
        // above); the page is driver memory, never a Rust reference, so it
        // cannot overlap `bytes`; capture-core only writes bytes no enqueued
        // copy still reads.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.pointer.as_ptr().add(at), bytes.len());
        }
    }

    /// Copy from the page at `offset` into `out`; a range outside the page
    /// is logged and leaves `out` as it was.
    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) {
        let Some(at) = self.offset_of(offset, out.len() as u64) else {
            log::error!(
                "{}",
                out_of_range("host", offset, out.len() as u64, self.len as u64)
            );
            return;
        };
        // SAFETY: `at + out.len()` lies within the allocation (checked just
        // above); `out` is a distinct Rust buffer; capture-core reads only
        // after a fence on the copy that filled these bytes.
        unsafe {
            ptr::copy_nonoverlapping(self.pointer.as_ptr().add(at), out.as_mut_ptr(), out.len());
        }
    }

    fn offset_of(&self, offset: u64, len: u64) -> Option<usize> {
        if in_range(offset, len, self.len as u64) {
            usize::try_from(offset).ok()
        } else {
            None
        }
    }
}

impl Drop for CudaHostPage {
    fn drop(&mut self) {
        if let Err(e) = self.device.bind() {
            log::warn!("leaking a host page: {e}");
            return;
        }
        // SAFETY: the pointer came from cuMemHostAlloc and is freed exactly
        // once; capture-core releases a page only once no copy uses it.
        let freed = unsafe { sys::cuMemFreeHost(self.pointer.as_ptr().cast::<c_void>()) };
        if let Err(e) = check("free host page", freed) {
            log::warn!("{e}");
        }
    }
}

/// Whether `offset..offset + len` lies within a page of `page_len` bytes,
/// without overflowing.
pub(crate) fn in_range(offset: u64, len: u64, page_len: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= page_len)
}

fn out_of_range(kind: &str, offset: u64, len: u64, page_len: u64) -> String {
    format!("{kind} range at {offset} of {len} bytes lies outside its {page_len}-byte page")
}

#[cfg(test)]
mod tests {
    use super::in_range;

    #[test]
    fn ranges_stay_inside_their_page() {
        assert!(in_range(0, 16, 16));
        assert!(in_range(16, 0, 16));
        assert!(!in_range(8, 16, 16));
        assert!(!in_range(17, 0, 16));
        assert!(!in_range(u64::MAX, 2, u64::MAX));
    }
}
