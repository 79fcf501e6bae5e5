//! Device pages and pinned host pages, and the range checks every use of
//! them passes through.
//!
//! A page frees itself when dropped, so capture-core's "release" is a drop
//! and a page lost on an error path still goes back to the driver. Each
//! holds an `Arc` of its device, which keeps the context alive for as long
//! as memory in it exists.

use std::ffi::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use capture_core::{DriverError, ImportRefusal, Rejected};

use crate::device::{Device, Release};
use crate::error::refuse;
use crate::sys::{self, CUcontext, CUdeviceptr};
use capture_core::KeepAlive;

/// A block of device memory from `cuMemAlloc`, freed when dropped.
///
/// Plain `cuMemAlloc` rather than the stream-ordered allocator: an
/// allocation is never recorded into a graph this way, and capture-core
/// already orders every free behind the device's progress.
///
/// `cuMemFree` may synchronize the device, which would invalidate a capture
/// another stream of the device has open; a page dropped while any stream
/// of its device records is therefore freed only once the last of those
/// recordings has ended.
///
/// A page made by [`DevicePage::from_raw`] over memory allocated elsewhere
/// is never freed here: dropping it drops the keep-alive it was given, as
/// late as a free would be.
pub struct DevicePage {
    pointer: CUdeviceptr,
    len: u64,
    device: Arc<Device>,
    /// What keeps imported memory alive; `None` for a page of the pools.
    imported: Option<KeepAlive>,
}

/// A block of page-locked host memory from `cuMemHostAlloc`, freed when
/// dropped.
///
/// Pinned, so the driver's asynchronous copies really are asynchronous and
/// may be recorded into a graph, which reads the same host bytes on every
/// replay. Like a [`DevicePage`], one dropped while a stream of its device
/// records is freed once the last recording has ended (`cuMemFreeHost`
/// may synchronize too).
pub struct HostPage {
    pointer: NonNull<u8>,
    len: usize,
    device: Arc<Device>,
}

// SAFETY: the page owns its allocation; the raw pointer is only dereferenced
// by `read`/`write`, under capture-core's promise that no two users touch the
// same bytes at once, and freed once, in Drop.
unsafe impl Send for HostPage {}

impl std::fmt::Debug for DevicePage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevicePage({:#x}, {} bytes)", self.pointer, self.len)
    }
}

impl std::fmt::Debug for HostPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostPage({:p}, {} bytes)", self.pointer, self.len)
    }
}

impl DevicePage {
    /// Allocate at least `bytes` (at least one) on `device`.
    pub(crate) fn allocate(device: &Arc<Device>, bytes: u64) -> Result<Self, DriverError> {
        const OP: &str = "allocate device page";
        let len = bytes.max(1);
        let size = usize::try_from(len).map_err(|_| {
            refuse(
                OP,
                format!("{len} bytes do not fit this host's address size"),
            )
        })?;
        let api = device.api();
        let _current = device.enter()?;
        let mut pointer: CUdeviceptr = 0;
        // SAFETY: `pointer` is a valid place for the address; the context is
        // current.
        api.check(OP, unsafe { (api.mem_alloc)(&mut pointer, size) })?;
        Ok(Self {
            pointer,
            len,
            device: Arc::clone(device),
            imported: None,
        })
    }

    /// A page over `len` bytes of device memory from `pointer`, allocated
    /// elsewhere (by cudarc, the runtime, `cuMemAlloc`), for
    /// `Client::import` on a client of `device`: tracked like the pools'
    /// pages, never freed by this library.
    ///
    /// `keep_alive` is dropped once the last buffer, view, graph and queued
    /// use of the memory is done and no stream of the GPU records (its drop
    /// may free): pass the allocation's owner to hand the memory over, or
    /// `()` to keep it. Refused, it is handed back untouched in the
    /// [`Rejected`].
    ///
    /// The range is checked where the driver can tell: the address must be
    /// memory it knows (`cuPointerGetAttribute`), of this device and
    /// context, and the range must end within its allocation
    /// (`cuMemGetAddressRange`).
    ///
    /// # Safety
    ///
    /// The memory stays allocated, and at least `len` bytes long, until
    /// `keep_alive` is dropped. Work other code issues on it is ordered with
    /// this library's by the caller: launched on a stream adopted with
    /// [`Stream::from_raw`](crate::Stream::from_raw), or waited for before
    /// the library's next use and after its last.
    ///
    /// # Errors
    ///
    /// A null pointer, an empty range, an address the driver does not know,
    /// memory of another device or context, or a range past the end of its
    /// allocation; nothing is changed and `keep_alive` is handed back.
    pub unsafe fn from_raw<K: Send + 'static>(
        device: &Arc<Device>,
        pointer: CUdeviceptr,
        len: u64,
        keep_alive: K,
    ) -> Result<Self, Rejected<K>> {
        match check_import(device, pointer, len) {
            Ok(()) => Ok(Self::imported(
                device,
                pointer,
                len,
                KeepAlive::new(keep_alive),
            )),
            Err(e) => Err(Rejected::new(e, keep_alive)),
        }
    }

    /// A page over memory [`check_import`] accepted.
    pub(crate) fn imported(
        device: &Arc<Device>,
        pointer: CUdeviceptr,
        len: u64,
        keep_alive: KeepAlive,
    ) -> Self {
        Self {
            pointer,
            len,
            device: Arc::clone(device),
            imported: Some(keep_alive),
        }
    }

    /// The page's device address.
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.pointer
    }

    /// The page's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the page holds no bytes (never: pages hold at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What `Driver::imported_bytes` answers: the length of memory imported
    /// for `device`'s context.
    pub(crate) fn imported_bytes(&self, device: &Device) -> Result<u64, ImportRefusal> {
        match &self.imported {
            None => Err(ImportRefusal::NotImported),
            Some(_) if !self.device.same_context(device) => Err(ImportRefusal::OtherDevice),
            Some(_) => Ok(self.len),
        }
    }

    /// The device address of `len` bytes at `offset`, or an error when the
    /// range leaves the page or the page belongs to another device.
    pub(crate) fn address(
        &self,
        device: &Device,
        offset: u64,
        len: u64,
        op: &'static str,
    ) -> Result<CUdeviceptr, DriverError> {
        if !self.device.same_context(device) {
            return Err(refuse(op, "the device page belongs to another device"));
        }
        in_range(offset, len, self.len)
            .then(|| self.pointer + offset)
            .ok_or_else(|| refuse(op, out_of_range("device", offset, len, self.len)))
    }
}

impl Drop for DevicePage {
    fn drop(&mut self) {
        let release = match self.imported.take() {
            Some(keep_alive) => Release::KeepAlive(keep_alive),
            None => Release::DevicePage(self.pointer),
        };
        self.device.release(release);
    }
}

/// Whether `len` bytes from `pointer` may be imported on `device`: not
/// null, not empty, memory the driver knows, of the device's GPU and
/// context, within one allocation.
pub(crate) fn check_import(
    device: &Device,
    pointer: CUdeviceptr,
    len: u64,
) -> Result<(), DriverError> {
    const OP: &str = "import device memory";
    if pointer == 0 {
        return Err(refuse(OP, "the device pointer is null"));
    }
    if len == 0 {
        return Err(refuse(OP, "the range is empty"));
    }
    let end = pointer
        .checked_add(len)
        .filter(|_| usize::try_from(len).is_ok())
        .ok_or_else(|| {
            refuse(
                OP,
                format!("{len} bytes from {pointer:#x} leave the address space"),
            )
        })?;
    let api = device.api();
    let _current = device.enter()?;
    let mut ordinal: c_int = -1;
    // SAFETY: the attribute is an int, written to a live local of that type.
    let code = unsafe {
        (api.pointer_get_attribute)(
            ptr::from_mut(&mut ordinal).cast::<c_void>(),
            sys::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            pointer,
        )
    };
    if code != sys::CUDA_SUCCESS {
        return Err(refuse(
            OP,
            format!(
                "the driver knows no device memory at {pointer:#x}: {}",
                api.describe(code)
            ),
        ));
    }
    let own = device.ordinal();
    if usize::try_from(ordinal).ok() != Some(own) {
        return Err(refuse(
            OP,
            format!("the memory at {pointer:#x} belongs to device {ordinal}, not device {own}"),
        ));
    }
    let mut context: CUcontext = ptr::null_mut();
    // SAFETY: the attribute is a context handle, written to a live local of
    // that type.
    let code = unsafe {
        (api.pointer_get_attribute)(
            ptr::from_mut(&mut context).cast::<c_void>(),
            sys::CU_POINTER_ATTRIBUTE_CONTEXT,
            pointer,
        )
    };
    // Memory of a stream-ordered pool belongs to no context (null).
    if code == sys::CUDA_SUCCESS && !context.is_null() && context != device.raw_context() {
        return Err(refuse(
            OP,
            format!("the memory at {pointer:#x} belongs to another context than the device's"),
        ));
    }
    let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
    // SAFETY: both out-pointers are live locals of the declared types.
    let code = unsafe { (api.mem_get_address_range)(&mut base, &mut size, pointer) };
    api.check(OP, code)?;
    let limit = base.saturating_add(size as u64);
    if end > limit {
        return Err(refuse(
            OP,
            format!(
                "{len} bytes from {pointer:#x} run past the end of their allocation \
                 ({size} bytes from {base:#x})"
            ),
        ));
    }
    Ok(())
}

impl HostPage {
    /// Allocate at least `bytes` (at least one) of pinned memory.
    pub(crate) fn allocate(device: &Arc<Device>, bytes: u64) -> Result<Self, DriverError> {
        const OP: &str = "allocate host page";
        let len = usize::try_from(bytes.max(1)).map_err(|_| {
            refuse(
                OP,
                format!("{bytes} bytes do not fit this host's address size"),
            )
        })?;
        let api = device.api();
        let _current = device.enter()?;
        let mut raw: *mut c_void = ptr::null_mut();
        // SAFETY: `raw` is a valid place for the pointer; PORTABLE makes the
        // memory pinned for every context, so it stays valid whichever
        // context a later copy runs in.
        api.check(OP, unsafe {
            (api.mem_host_alloc)(&mut raw, len, sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        let Some(pointer) = NonNull::new(raw.cast::<u8>()) else {
            return Err(refuse(OP, "the driver returned a null host pointer"));
        };
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
        device: &Device,
        offset: u64,
        len: u64,
        op: &'static str,
    ) -> Result<*mut c_void, DriverError> {
        if !self.device.same_context(device) {
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

impl Drop for HostPage {
    fn drop(&mut self) {
        self.device
            .release(Release::HostPage(self.pointer.as_ptr().cast::<c_void>()));
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
