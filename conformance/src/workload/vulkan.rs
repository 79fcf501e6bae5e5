//! The workload's kernels on Vulkan: the WGSL in `kernels/workload.wgsl`,
//! compiled by naga with bounds-checked accesses, so building them takes no
//! promise about what a launch passes.
#![allow(unsafe_code)]

use std::sync::Arc;

use graph_capture::vulkan::ash::{self, vk};
use graph_capture::vulkan::{Device, DevicePage, Kernel, Vulkan};
use graph_capture::{Access, DriverError, Error, Signature};

use super::foreign::{DELIBERATE, FOREIGN_FAILURE, ForeignWork};
use super::{UserKernel, UserKernels};

/// The WGSL source of the workload: a shared prelude, then one section per
/// kernel, each starting at a `// kernel: NAME` line.
const SOURCE: &str = include_str!("../../kernels/workload.wgsl");

/// The line that opens a kernel's section in [`SOURCE`].
const SECTION: &str = "// kernel: ";

/// The module of kernel `name`: the prelude and its own section, with every
/// other section's lines left blank so naga's line numbers are the file's.
/// `None` when the file has no section for `name`.
fn module_source(name: &str) -> Option<String> {
    let mut out = String::with_capacity(SOURCE.len());
    let mut section: Option<&str> = None;
    let mut found = false;
    for line in SOURCE.lines() {
        if let Some(opened) = line.strip_prefix(SECTION) {
            let opened = opened.trim();
            found |= opened == name;
            section = Some(opened);
        }
        if section.is_none_or(|s| s == name) {
            out.push_str(line);
        }
        out.push('\n');
    }
    found.then_some(out)
}

/// A buffer made as a runtime that owns its memory makes one, handed over
/// with its ownership: destroyed when the library drops it.
struct ForeignBuffer {
    device: ash::Device,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    _keep_alive: Arc<()>,
}

impl Drop for ForeignBuffer {
    fn drop(&mut self) {
        // SAFETY: the library drops the keep-alive only once the device is
        // past the page's last use, before it lets go of the device.
        unsafe {
            self.device.destroy_buffer(self.buffer, None);
            self.device.free_memory(self.memory, None);
        }
    }
}

/// A host-visible buffer of `guard + bytes.len() + guard` bytes on
/// `device`, made with `ash`, holding `bytes` at `guard`.
fn foreign_buffer(
    device: &Device,
    bytes: &[u8],
    guard: u64,
    keep_alive: Arc<()>,
) -> Result<ForeignBuffer, String> {
    let raw = device.raw();
    let len = bytes.len() as u64;
    let info = vk::BufferCreateInfo::default()
        .size(guard + len + guard)
        .usage(
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST,
        )
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: a valid create info on a live device.
    let buffer = unsafe { raw.create_buffer(&info, None) }.map_err(|e| format!("{e:?}"))?;
    // SAFETY: a live buffer of the device.
    let needs = unsafe { raw.get_buffer_memory_requirements(buffer) };
    let props = device.memory_properties();
    let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
    let index = (0..props.memory_type_count).find(|&i| {
        needs.memory_type_bits & (1 << i) != 0
            && props.memory_types[i as usize]
                .property_flags
                .contains(wanted)
    });
    let allocated = index
        .ok_or_else(|| "no host-visible memory".to_owned())
        .and_then(|index| {
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(needs.size)
                .memory_type_index(index);
            // SAFETY: a memory type of the device.
            unsafe { raw.allocate_memory(&alloc, None) }.map_err(|e| format!("{e:?}"))
        });
    let memory = match allocated {
        Ok(memory) => memory,
        Err(e) => {
            // SAFETY: unused, destroyed once.
            unsafe { raw.destroy_buffer(buffer, None) };
            return Err(e);
        }
    };
    let foreign = ForeignBuffer {
        device: raw.clone(),
        buffer,
        memory,
        _keep_alive: keep_alive,
    };
    // SAFETY: neither is bound yet, and the memory meets the requirements;
    // the memory is host-visible and mapped only here, over `len` bytes
    // from `guard`, which lie inside it.
    unsafe {
        raw.bind_buffer_memory(buffer, memory, 0)
            .map_err(|e| format!("{e:?}"))?;
        if bytes.is_empty() {
            return Ok(foreign);
        }
        let mapped = raw
            .map_memory(memory, guard, len, vk::MemoryMapFlags::empty())
            .map_err(|e| format!("{e:?}"))?;
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), mapped.cast::<u8>(), bytes.len());
        raw.unmap_memory(memory);
    }
    Ok(foreign)
}

impl UserKernels for Vulkan {
    const FOREIGN_FAILS_WHILE_RECORDING: bool = true;
    const FOREIGN_RUNS_AT_INSTANTIATE: bool = true;
    const FOREIGN_IN_BODIES: bool = false;

    /// Transfer commands of the caller's own, as a library that keeps its
    /// own pipelines records them: `vkCmdCopyBuffer`, `vkCmdFillBuffer`,
    /// `vkCmdUpdateBuffer`.
    fn foreign_op(device: &Arc<Device>, work: &ForeignWork) -> Option<Result<Kernel, Error>> {
        if matches!(work, ForeignWork::MatMul { .. }) {
            // A GEMM would be a pipeline of the caller's own: not here.
            return None;
        }
        let work = work.clone();
        let name = work.name();
        let accesses = work.accesses();
        let op = move |c: &graph_capture::vulkan::ForeignCommands<'_>| {
            let (device, cmd) = (c.device, c.command_buffer);
            match (&work, c.buffers) {
                (ForeignWork::Copy, [src, dst]) => {
                    let region = vk::BufferCopy::default()
                        .src_offset(src.offset)
                        .dst_offset(dst.offset)
                        .size(src.len.min(dst.len) / 4 * 4);
                    // SAFETY: both ranges are the declared ones, whose
                    // buffers the library made with the transfer usages.
                    unsafe { device.cmd_copy_buffer(cmd, src.buffer, dst.buffer, &[region]) };
                }
                (ForeignWork::Fill(value), [dst]) => {
                    // SAFETY: the declared range, 4-aligned (a storage
                    // binding's offset), its length rounded down to 4.
                    unsafe {
                        device.cmd_fill_buffer(
                            cmd,
                            dst.buffer,
                            dst.offset,
                            dst.len / 4 * 4,
                            value.to_bits(),
                        )
                    };
                }
                (ForeignWork::Update(values), [dst]) => {
                    let n = values.len().min((dst.len / 4) as usize);
                    let bytes: Vec<u8> = values[..n].iter().flat_map(|v| v.to_le_bytes()).collect();
                    // vkCmdUpdateBuffer takes at most 65,536 bytes at once.
                    for (i, chunk) in bytes.chunks(65_536).enumerate() {
                        let at = dst.offset + (i * 65_536) as u64;
                        // SAFETY: inside the declared range, 4-aligned, a
                        // multiple of 4 bytes and at most 65,536 of them.
                        unsafe { device.cmd_update_buffer(cmd, dst.buffer, at, chunk) };
                    }
                }
                (ForeignWork::Fail, _) => return Err(FOREIGN_FAILURE.to_string()),
                (ForeignWork::Panic, _) => {
                    panic!("{DELIBERATE} in a foreign operation")
                }
                (work, buffers) => {
                    return Err(format!("{} given {} buffers", work.name(), buffers.len()));
                }
            }
            Ok(())
        };
        // SAFETY: each command above touches only the declared ranges as
        // declared, records into the command buffer it is given and names
        // no object of its own.
        Some(unsafe { Kernel::foreign(device, name, accesses, op) })
    }

    /// A range inside a buffer the run makes itself with `ash`, starting
    /// past a guard of 256 bytes, handed over with its ownership.
    fn foreign_page(
        device: &Arc<Device>,
        bytes: &[u8],
        keep_alive: Arc<()>,
    ) -> Option<Result<DevicePage, Error>> {
        const GUARD: u64 = 256;
        let refused =
            |message: String| Error::Driver(DriverError::new("vulkan", "foreign buffer", message));
        let made = foreign_buffer(device, bytes, GUARD, keep_alive).map_err(refused);
        Some(made.and_then(|foreign| {
            let buffer = foreign.buffer;
            // SAFETY: the buffer is the device's, made with storage and
            // transfer usage, exclusive, bound and holding the range; the
            // run touches it no more, and `foreign` destroys it only when
            // the library drops it.
            unsafe { DevicePage::from_raw(device, buffer, GUARD, bytes.len() as u64, foreign) }
                .map_err(Error::from)
        }))
    }

    unsafe fn user_kernel(device: &Arc<Device>, which: UserKernel) -> Result<Kernel, Error> {
        let signature = which.signature();
        let Some(source) = module_source(which.name()) else {
            return Err(Error::Compile {
                kernel: which.name().to_owned(),
                log: format!(
                    "kernels/workload.wgsl has no `{SECTION}{}` section",
                    which.name()
                ),
            });
        };
        Kernel::from_wgsl_checked(device, &source, which.name(), signature)
    }

    fn broken_kernel(device: &Arc<Device>) -> Result<Kernel, Error> {
        // An unclosed parameter list: naga's parser refuses it.
        let source = "@compute @workgroup_size(64)\nfn broken(i: u32 {\n}\n";
        Kernel::from_wgsl_checked(device, source, "broken", Signature::new("broken"))
    }

    fn disagreeing_kernel(device: &Arc<Device>) -> Option<Result<Kernel, Error>> {
        // `residual` binds x and y; this signature declares x alone, so the
        // module's binding 1 has no buffer behind it.
        let which = UserKernel::Residual;
        let signature = Signature::new(which.name())
            .workgroup([super::WORKGROUP, 1, 1])
            .binding(Access::ReadWrite)
            .param(4);
        let built = match module_source(which.name()) {
            Some(source) => Kernel::from_wgsl_checked(device, &source, which.name(), signature),
            None => Err(Error::Compile {
                kernel: which.name().to_owned(),
                log: format!(
                    "kernels/workload.wgsl has no `{SECTION}{}` section",
                    which.name()
                ),
            }),
        };
        Some(built)
    }
}
