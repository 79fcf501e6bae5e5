//! Device and host pages: one `VkBuffer` bound to its own `VkDeviceMemory`.
//!
//! capture-core cuts pages into slices itself, so a page is one allocation
//! and one buffer, nothing finer. Pages are reference-counted inside so that
//! a submitted batch or an executable that recorded a page keeps it alive
//! even if its owner lets it go early.

use std::ptr::NonNull;
use std::sync::Arc;

use ash::vk;
use capture_core::{DriverError, ImportRefusal, KeepAlive, Rejected};

use crate::device::Device;
use crate::error::{error, vk_error};

/// The start of a host page's persistent mapping.
struct Mapping(NonNull<u8>);

// SAFETY: the mapping is plain memory owned by its `Buffer`; every access
// goes through `write`/`read`, which copy bytes and never hand out
// references, and capture-core never writes a range the device or another
// thread still uses (its drop queue orders that).
unsafe impl Send for Mapping {}
// SAFETY: as above; shared access only copies bytes out or in.
unsafe impl Sync for Mapping {}

/// One buffer and its memory, destroyed with the last reference, or a range
/// of a buffer made elsewhere, let go of with the last reference.
pub(crate) struct Buffer {
    /// Dropped before `device`: a keep-alive may destroy the buffer, which
    /// needs the device.
    owner: Owner,
    device: Arc<Device>,
    pub(crate) buffer: vk::Buffer,
    /// Where the page starts in `buffer`: 0 but for imported memory.
    pub(crate) base: u64,
    /// Bytes usable through the buffer, from `base`.
    pub(crate) size: u64,
    mapping: Option<Mapping>,
}

/// Who destroys a page's buffer.
enum Owner {
    /// The backend: the buffer and its memory are destroyed with the page.
    Backend(vk::DeviceMemory),
    /// The caller, who imported it: dropping the keep-alive tells them.
    Caller { _keep_alive: KeepAlive },
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({:?}, {} bytes)", self.buffer, self.size)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Owner::Backend(memory) = self.owner {
            // SAFETY: no submitted work uses the buffer any more: every batch
            // and executable that recorded it holds a reference until it
            // completed. Freeing mapped memory unmaps it.
            unsafe {
                self.device.device.destroy_buffer(self.buffer, None);
                self.device.device.free_memory(memory, None);
            }
        }
    }
}

/// A page of device-local memory, or a range of a buffer made elsewhere
/// ([`DevicePage::from_raw`]).
#[derive(Debug)]
pub struct DevicePage(pub(crate) Arc<Buffer>);

impl DevicePage {
    /// Bytes `offset..offset + len` of `buffer`, a buffer the caller made on
    /// `device`, as a page for [`Client::import`](capture_core::Client::import).
    /// The library never destroys the buffer: it drops `keep_alive` once
    /// the page is done with, after the device is past its last use.
    ///
    /// Refused, with nothing made and `keep_alive` handed back untouched in
    /// the [`Rejected`]: a null buffer, zero length, an offset
    /// that is not a multiple of the device's
    /// `minStorageBufferOffsetAlignment`, and a range past the end of the
    /// memory the buffer needs.
    ///
    /// # Safety
    ///
    /// Until `keep_alive` is dropped:
    /// - `buffer` is a live buffer of `device`'s `VkDevice`, created with
    ///   `STORAGE_BUFFER | TRANSFER_SRC | TRANSFER_DST` usage,
    ///   `SharingMode::EXCLUSIVE` (or concurrent including the device's
    ///   queue family), at least `offset + len` bytes, and bound to memory;
    /// - no other page and no work of the caller's writes the range, or
    ///   reads it while the device may write it, unless the caller orders
    ///   that work with the client's (it waits for the stream's work, as
    ///   `Client::sync` does, before its own submissions, and the
    ///   stream's work starts after its submissions completed).
    pub unsafe fn from_raw<K: Send + 'static>(
        device: &Arc<Device>,
        buffer: vk::Buffer,
        offset: u64,
        len: u64,
        keep_alive: K,
    ) -> Result<DevicePage, Rejected<K>> {
        const OP: &str = "import buffer";
        // The checks run apart so that every refusal hands `keep_alive` back.
        let checked = || -> Result<(), DriverError> {
            if buffer == vk::Buffer::null() {
                return Err(error(OP, "a null VkBuffer"));
            }
            if len == 0 {
                return Err(error(OP, "an empty range"));
            }
            let alignment = device.limits.min_storage_buffer_offset_alignment.max(1);
            if !offset.is_multiple_of(alignment) {
                return Err(error(
                    OP,
                    format!(
                        "offset {offset} is not a multiple of {alignment}, the device's storage buffer offset alignment"
                    ),
                ));
            }
            // SAFETY: `buffer` is a live buffer of this device (the caller's
            // promise); the query has no other precondition.
            let needs = unsafe { device.device.get_buffer_memory_requirements(buffer) };
            match offset.checked_add(len) {
                Some(end) if end <= needs.size => {}
                _ => {
                    return Err(error(
                        OP,
                        format!(
                            "{len} bytes at {offset} end past the buffer, which needs {} bytes of memory",
                            needs.size
                        ),
                    ));
                }
            }
            Ok(())
        };
        if let Err(err) = checked() {
            return Err(Rejected::new(err, keep_alive));
        }
        Ok(DevicePage(Arc::new(Buffer {
            device: Arc::clone(device),
            buffer,
            base: offset,
            owner: Owner::Caller {
                _keep_alive: KeepAlive::new(keep_alive),
            },
            size: len,
            mapping: None,
        })))
    }

    /// The bytes it holds, if it was imported for `device`.
    pub(crate) fn imported_bytes(&self, device: &Device) -> Result<u64, ImportRefusal> {
        match self.0.owner {
            Owner::Backend(_) => Err(ImportRefusal::NotImported),
            Owner::Caller { .. } if !std::ptr::eq(Arc::as_ptr(&self.0.device), device) => {
                Err(ImportRefusal::OtherDevice)
            }
            Owner::Caller { .. } => Ok(self.0.size),
        }
    }
}

/// A page of host-visible, coherent memory, mapped for its whole life so a
/// host copy is a `memcpy`.
pub struct HostPage(pub(crate) Arc<Buffer>);

/// The memory type for `bits` that has `required`, preferring `preferred`.
fn memory_type(
    props: &vk::PhysicalDeviceMemoryProperties,
    bits: u32,
    required: vk::MemoryPropertyFlags,
    preferred: vk::MemoryPropertyFlags,
) -> Option<u32> {
    let count = usize::try_from(props.memory_type_count).unwrap_or(0);
    let types = props
        .memory_types
        .get(..count)
        .unwrap_or(&props.memory_types);
    let candidates = || {
        types.iter().enumerate().filter_map(move |(i, t)| {
            let i = u32::try_from(i).ok()?;
            (bits & (1 << i) != 0 && t.property_flags.contains(required)).then_some((i, t))
        })
    };
    candidates()
        .find(|(_, t)| t.property_flags.contains(preferred))
        .or_else(|| candidates().next())
        .map(|(i, _)| i)
}

/// Creates a buffer of `bytes` bytes in memory of the wanted kind.
fn create(
    device: &Arc<Device>,
    bytes: u64,
    usage: vk::BufferUsageFlags,
    required: vk::MemoryPropertyFlags,
    preferred: vk::MemoryPropertyFlags,
    op: &'static str,
) -> Result<Buffer, DriverError> {
    let size = bytes.max(4);
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    let vk_device = &device.device;
    // SAFETY: a valid create info with a nonzero size.
    let buffer = unsafe { vk_device.create_buffer(&info, None) }.map_err(|e| vk_error(op, e))?;
    // SAFETY: `buffer` was just created on this device.
    let requirements = unsafe { vk_device.get_buffer_memory_requirements(buffer) };
    let Some(type_index) = memory_type(
        &device.memory,
        requirements.memory_type_bits,
        required,
        preferred,
    ) else {
        // SAFETY: `buffer` is unused and destroyed once.
        unsafe { vk_device.destroy_buffer(buffer, None) };
        return Err(error(op, format!("no memory type with {required:?}")));
    };
    let alloc = vk::MemoryAllocateInfo::default()
        .allocation_size(requirements.size)
        .memory_type_index(type_index);
    // SAFETY: a valid allocate info for a memory type of this device.
    let memory = match unsafe { vk_device.allocate_memory(&alloc, None) } {
        Ok(memory) => memory,
        Err(e) => {
            // SAFETY: `buffer` is unused and destroyed once.
            unsafe { vk_device.destroy_buffer(buffer, None) };
            return Err(vk_error(op, e));
        }
    };
    let mut out = Buffer {
        owner: Owner::Backend(memory),
        device: Arc::clone(device),
        buffer,
        base: 0,
        size,
        mapping: None,
    };
    // SAFETY: the memory satisfies the buffer's requirements and neither is
    // bound yet.
    unsafe { vk_device.bind_buffer_memory(buffer, memory, 0) }.map_err(|e| vk_error(op, e))?;
    if required.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) {
        // SAFETY: the memory is host-visible and not mapped yet.
        let ptr =
            unsafe { vk_device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
                .map_err(|e| vk_error(op, e))?;
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| error(op, "vkMapMemory returned null"))?;
        out.mapping = Some(Mapping(ptr));
    }
    Ok(out)
}

/// A page of device memory, usable as a storage buffer and copy source and
/// destination.
pub(crate) fn device_page(device: &Arc<Device>, bytes: u64) -> Result<DevicePage, DriverError> {
    create(
        device,
        bytes,
        vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST,
        vk::MemoryPropertyFlags::empty(),
        vk::MemoryPropertyFlags::DEVICE_LOCAL,
        "allocate device page",
    )
    .map(|b| DevicePage(Arc::new(b)))
}

/// Device memory for `words` conditional-rendering predicates, which a
/// fill zeroes, a kernel writes and conditional rendering reads.
pub(crate) fn predicates(device: &Arc<Device>, words: u64) -> Result<Arc<Buffer>, DriverError> {
    create(
        device,
        words * 4,
        vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::CONDITIONAL_RENDERING_EXT,
        vk::MemoryPropertyFlags::empty(),
        vk::MemoryPropertyFlags::DEVICE_LOCAL,
        "open conditional",
    )
    .map(Arc::new)
}

/// A page of mapped host memory, a copy source and destination. Cached
/// memory is preferred because the host reads results back from it.
pub(crate) fn host_page(device: &Arc<Device>, bytes: u64) -> Result<HostPage, DriverError> {
    create(
        device,
        bytes,
        vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
        vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
        vk::MemoryPropertyFlags::HOST_CACHED,
        "allocate host page",
    )
    .map(|b| HostPage(Arc::new(b)))
}

impl Buffer {
    /// The mapped bytes `offset..offset + len`, if the page is mapped and
    /// the range lies inside it.
    fn mapped(&self, offset: u64, len: usize) -> Option<NonNull<u8>> {
        let mapping = self.mapping.as_ref()?;
        let end = offset.checked_add(u64::try_from(len).ok()?)?;
        if end > self.size {
            return None;
        }
        let offset = usize::try_from(offset).ok()?;
        // SAFETY: `offset + len <= size`, and the mapping covers the whole
        // allocation, which is at least `size` bytes.
        Some(unsafe { mapping.0.add(offset) })
    }

    /// Copies `bytes` into the mapping at `offset`.
    pub(crate) fn write(&self, offset: u64, bytes: &[u8]) {
        let Some(dst) = self.mapped(offset, bytes.len()) else {
            log::error!(
                "vulkan: host write of {} bytes at {offset} outside the page",
                bytes.len()
            );
            return;
        };
        // SAFETY: `dst` is valid for `bytes.len()` bytes (checked by
        // `mapped`), and device memory never overlaps a Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.as_ptr(), bytes.len()) };
    }

    /// Copies from the mapping at `offset` into `out`.
    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) {
        let Some(src) = self.mapped(offset, out.len()) else {
            log::error!(
                "vulkan: host read of {} bytes at {offset} outside the page",
                out.len()
            );
            return;
        };
        // SAFETY: `src` is valid for `out.len()` bytes (checked by `mapped`),
        // and device memory never overlaps a Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr(), out.len()) };
    }
}
