//! Device and pinned host pages.
//!
//! Host pages are `hipHostMalloc`'d so that copies are true DMA and stay
//! asynchronous: a pageable source would make the runtime stage it
//! synchronously, and a capture would record the staging buffer's address
//! instead of the page's.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use capture_core::{DriverError, ImportRefusal};

use crate::device::{Device, Memory};
use crate::error::{self, describe, other};
use crate::ffi;
use capture_core::{KeepAlive, Rejected};

/// A `hipMalloc`'d range of device memory, freed (on its device) when it
/// drops.
///
/// Dropping is the only way a page is freed, so a page released through the
/// driver contract and one dropped without it (a pool torn down on an error
/// path) are each freed exactly once. While a stream of the device records,
/// the free waits for the recording to end (see [`Device`]).
///
/// A page made by [`DevicePage::from_raw`] over memory allocated elsewhere
/// is never freed here: dropping it drops the keep-alive it was given, as
/// late as a free would be.
pub struct DevicePage {
    ptr: *mut c_void,
    bytes: u64,
    device: Arc<Device>,
    /// What keeps imported memory alive; `None` for a page of the pools.
    imported: Option<KeepAlive>,
}

// SAFETY: the page is a device address, not host memory; the HIP runtime
// accepts it from any thread (the device is made current first), and it is
// freed only by Drop, once.
unsafe impl Send for DevicePage {}

impl Drop for DevicePage {
    fn drop(&mut self) {
        match self.imported.take() {
            Some(keep_alive) => self.device.let_go(keep_alive),
            None => self.device.free(Memory::Device, self.ptr, self.bytes),
        }
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
            imported: None,
        })
    }

    /// A page over `len` bytes of device memory from `ptr`, allocated
    /// elsewhere (`hipMalloc` by another library of this process), for
    /// `Client::import` on a client of `device`: tracked like the pools'
    /// pages, never freed by this library.
    ///
    /// `keep_alive` is dropped once the last buffer, view, graph and queued
    /// use of the memory is done and no stream of the GPU records (its drop
    /// may free): pass the allocation's owner to hand the memory over, or
    /// `()` to keep it. Refused, it is handed back untouched in the
    /// [`Rejected`].
    ///
    /// The range is checked where the runtime can tell: the address must be
    /// memory it knows, of this device (`hipPointerGetAttributes`), and the
    /// range must end within its allocation (`hipMemGetAddressRange`).
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
    /// A null pointer, an empty range, an address the runtime does not
    /// know, memory of another device, or a range past the end of its
    /// allocation; nothing is changed and `keep_alive` is handed back.
    pub unsafe fn from_raw<K: Send + 'static>(
        device: &Arc<Device>,
        ptr: *mut c_void,
        len: u64,
        keep_alive: K,
    ) -> Result<Self, Rejected<K>> {
        if let Err(e) = check_import(device, ptr, len) {
            return Err(Rejected::new(e, keep_alive));
        }
        Ok(Self {
            ptr,
            bytes: len,
            device: Arc::clone(device),
            imported: Some(KeepAlive::new(keep_alive)),
        })
    }

    /// The page's device address.
    pub fn device_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// The page's length in bytes.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether the page holds no bytes (never: pages hold at least one).
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// What `Driver::imported_bytes` answers: the length of memory imported
    /// for `device`'s GPU.
    pub(crate) fn imported_bytes(&self, device: &Device) -> Result<u64, ImportRefusal> {
        match &self.imported {
            None => Err(ImportRefusal::NotImported),
            Some(_) if self.device.ordinal != device.ordinal => Err(ImportRefusal::OtherDevice),
            Some(_) => Ok(self.bytes),
        }
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

/// Whether `len` bytes from `ptr` may be imported on `device`: not null,
/// not empty, and, as far as the runtime can tell, memory of the device
/// within one allocation.
fn check_import(device: &Device, ptr: *mut c_void, len: u64) -> Result<(), DriverError> {
    const OP: &str = "import device memory";
    if ptr.is_null() {
        return Err(other(OP, "the device pointer is null"));
    }
    if len == 0 {
        return Err(other(OP, "the range is empty"));
    }
    let start = ptr as usize as u64;
    let end = start
        .checked_add(len)
        .filter(|_| usize::try_from(len).is_ok())
        .ok_or_else(|| {
            other(
                OP,
                format!("{len} bytes from {ptr:p} leave the address space"),
            )
        })?;
    let api = device.api;
    let _current = device.enter(OP)?;
    if let Some(get_attributes) = api.pointer_get_attributes {
        let mut attributes = ffi::PointerAttributes {
            memory_type: 0,
            device: -1,
            device_pointer: ptr::null_mut(),
            host_pointer: ptr::null_mut(),
            is_managed: 0,
            allocation_flags: 0,
        };
        // SAFETY: `attributes` is a live local laid out as the runtime's
        // struct (the abi-check feature's test compares them).
        let code = unsafe { get_attributes(&mut attributes, ptr) };
        if code != ffi::SUCCESS {
            return Err(other(
                OP,
                format!(
                    "the runtime knows no device memory at {ptr:p}: {}",
                    describe(Some(api), code)
                ),
            ));
        }
        if attributes.device != device.ordinal {
            return Err(other(
                OP,
                format!(
                    "the memory at {ptr:p} belongs to device {}, not device {}",
                    attributes.device, device.ordinal
                ),
            ));
        }
    }
    if let Some(address_range) = api.mem_get_address_range {
        let (mut base, mut size) = (ptr::null_mut(), 0usize);
        // SAFETY: both out-pointers are live locals of the declared types.
        let code = unsafe { address_range(&mut base, &mut size, ptr) };
        error::check(api, OP, code)?;
        let limit = (base as usize as u64).saturating_add(size as u64);
        if end > limit {
            return Err(other(
                OP,
                format!(
                    "{len} bytes from {ptr:p} run past the end of their allocation ({size} \
                     bytes from {base:p})"
                ),
            ));
        }
    }
    Ok(())
}

fn to_usize(op: &'static str, bytes: u64) -> Result<usize, DriverError> {
    usize::try_from(bytes).map_err(|_| other(op, format!("{bytes} bytes do not fit in an address")))
}
