//! Recording launches and copies into a command buffer, with the barriers
//! they need and the descriptor sets, buffers and kernels they use kept
//! alongside.
//!
//! The same recorder serves an eager batch (a primary command buffer
//! submitted at the next signal) and a capture window (a secondary command
//! buffer an executable replays), so both follow one set of barrier rules.

use std::sync::Arc;

use ash::vk;
use capture_core::signature::{MAX_BINDINGS, MAX_PARAM_BYTES};
use capture_core::{Access, DeviceSlice, DriverError, Launch};

use crate::Vulkan;
use crate::barriers::{Hazards, Range, device_barrier, host_barrier};
use crate::device::Device;
use crate::error::{error, vk_error};
use crate::kernels::KernelObjects;
use crate::memory::Buffer;

/// Descriptor sets each pool holds; a launch takes one set.
const SETS_PER_POOL: u32 = 64;
/// Storage-buffer descriptors each pool holds: enough for every set to
/// bind the most a kernel may (its buffers and its info), so a fresh pool
/// always fits one more set; a pool that runs short is followed by another.
const DESCRIPTORS_PER_POOL: u32 = SETS_PER_POOL * (MAX_BINDINGS as u32 + 1);

/// Descriptor pools that grow on demand and reset as a whole once the
/// commands that used their sets have completed.
#[derive(Debug, Default)]
pub(crate) struct DescriptorPools {
    pools: Vec<vk::DescriptorPool>,
    current: usize,
}

impl DescriptorPools {
    fn create_pool(device: &ash::Device) -> Result<vk::DescriptorPool, DriverError> {
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(DESCRIPTORS_PER_POOL)];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(SETS_PER_POOL)
            .pool_sizes(&sizes);
        // SAFETY: a valid create info whose pointers outlive the call.
        unsafe { device.create_descriptor_pool(&info, None) }
            .map_err(|e| vk_error("allocate descriptor set", e))
    }

    /// One set of `layout`.
    fn allocate(
        &mut self,
        device: &ash::Device,
        layout: vk::DescriptorSetLayout,
    ) -> Result<vk::DescriptorSet, DriverError> {
        let layouts = [layout];
        loop {
            let fresh = self.current >= self.pools.len();
            if fresh {
                let pool = Self::create_pool(device)?;
                self.pools.push(pool);
                self.current = self.pools.len() - 1;
            }
            let Some(&pool) = self.pools.get(self.current) else {
                return Err(error("allocate descriptor set", "no descriptor pool"));
            };
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(pool)
                .set_layouts(&layouts);
            // SAFETY: `pool` and `layout` are live objects of this device; a
            // pool is only used by the recorder that owns it.
            match unsafe { device.allocate_descriptor_sets(&info) } {
                Ok(sets) => {
                    return sets
                        .into_iter()
                        .next()
                        .ok_or_else(|| error("allocate descriptor set", "no set returned"));
                }
                Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL)
                    if !fresh =>
                {
                    self.current += 1;
                }
                Err(e) => return Err(vk_error("allocate descriptor set", e)),
            }
        }
    }

    /// Frees every set; the commands that used them have completed.
    fn reset(&mut self, device: &ash::Device) {
        for &pool in &self.pools {
            // SAFETY: no pending command buffer uses a set of this pool
            // (the caller waited for its timeline value).
            let reset = unsafe {
                device.reset_descriptor_pool(pool, vk::DescriptorPoolResetFlags::empty())
            };
            if let Err(e) = reset {
                log::warn!("vulkan: resetting a descriptor pool failed: {e:?}");
            }
        }
        self.current = 0;
    }

    /// Destroys every pool; the commands that used them have completed.
    pub(crate) fn destroy(&mut self, device: &ash::Device) {
        for pool in self.pools.drain(..) {
            // SAFETY: as for `reset`; each pool is destroyed once.
            unsafe { device.destroy_descriptor_pool(pool, None) };
        }
        self.current = 0;
    }
}

/// One buffer-to-buffer copy, between a host and a device page.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Copy<'a> {
    pub(crate) src: &'a Arc<Buffer>,
    pub(crate) src_offset: u64,
    pub(crate) dst: &'a Arc<Buffer>,
    pub(crate) dst_offset: u64,
    pub(crate) len: u64,
    /// The host reads `dst` back afterwards, so it needs a host barrier.
    pub(crate) to_host: bool,
}

/// A command buffer being recorded and what its commands need kept.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) cmd: vk::CommandBuffer,
    hazards: Hazards,
    pub(crate) descriptors: DescriptorPools,
    /// Every buffer a command references, so none is destroyed while the
    /// command buffer may still run.
    pub(crate) keep: Vec<Arc<Buffer>>,
    /// Every kernel a command runs, for the same reason.
    kernels: Vec<Arc<KernelObjects>>,
    /// The pipeline bound last in this command buffer, null before any.
    bound: vk::Pipeline,
    /// A copy to host memory was recorded since the last host barrier.
    reads_back: bool,
    /// Commands recorded so far.
    pub(crate) commands: usize,
    /// The ranges the command being recorded touches; kept to reuse.
    scratch: Vec<(Range, Access)>,
    /// The descriptors of the launch being recorded; kept to reuse.
    infos: Vec<vk::DescriptorBufferInfo>,
    /// Parameter bytes padded to a multiple of 4, for launches whose
    /// parameters are not.
    padded: [u8; PADDED_PARAMS],
}

/// Room for the most parameter bytes a kernel may take, rounded up to 4.
const PADDED_PARAMS: usize = (MAX_PARAM_BYTES as usize).next_multiple_of(4);

/// The bytes to push for `params`: the bytes themselves, or a copy padded
/// with zeros to the multiple of 4 that `vkCmdPushConstants` requires.
fn push_bytes<'a>(
    params: &'a [u8],
    padded: &'a mut [u8; PADDED_PARAMS],
) -> Result<&'a [u8], DriverError> {
    if params.len().is_multiple_of(4) {
        return Ok(params);
    }
    let Some(out) = padded.get_mut(..params.len().next_multiple_of(4)) else {
        return Err(error(
            "launch",
            format!(
                "{} parameter bytes are more than a kernel may take",
                params.len()
            ),
        ));
    };
    let (head, tail) = out.split_at_mut(params.len());
    head.copy_from_slice(params);
    tail.fill(0);
    Ok(out)
}

/// The range `offset..offset + len` of `buffer`, if it lies inside it.
fn range_in(
    buffer: &Buffer,
    offset: u64,
    len: u64,
    op: &'static str,
) -> Result<Range, DriverError> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer.size => Ok(Range {
            buffer: buffer.buffer,
            start: offset,
            end,
        }),
        _ => Err(error(
            op,
            format!(
                "range {offset}+{len} outside a page of {} bytes",
                buffer.size
            ),
        )),
    }
}

impl Recorder {
    /// A recorder for `cmd`, which the caller has begun.
    pub(crate) fn new(cmd: vk::CommandBuffer) -> Self {
        Self {
            cmd,
            hazards: Hazards::default(),
            descriptors: DescriptorPools::default(),
            keep: Vec::new(),
            reads_back: false,
            commands: 0,
            scratch: Vec::new(),
            kernels: Vec::new(),
            bound: vk::Pipeline::null(),
            infos: Vec::new(),
            padded: [0; PADDED_PARAMS],
        }
    }

    /// Records a barrier first if the scratch accesses conflict with
    /// earlier commands, then notes them.
    fn order(&mut self, device: &ash::Device) {
        if self.hazards.conflicts(&self.scratch) {
            device_barrier(device, self.cmd);
            self.hazards.clear();
        }
        self.hazards.add(&self.scratch);
    }

    /// Records `launch`, which matches its kernel's signature (the core's
    /// guarantee): each binding's access is the signature's, `info` is
    /// present exactly when the kernel reads info, `params` holds exactly
    /// its parameter bytes and the grid is within the device's limits.
    pub(crate) fn launch(
        &mut self,
        device: &Arc<Device>,
        launch: &Launch<'_, Vulkan>,
    ) -> Result<(), DriverError> {
        const OP: &str = "launch";
        let objects = &launch.kernel.objects;
        if !Arc::ptr_eq(&objects.device, device) {
            return Err(error(OP, "the kernel was built for another device"));
        }
        let alignment = device.limits.min_storage_buffer_offset_alignment.max(1);
        let info = launch.info.map(|slice| (slice, Access::Read));
        let slices = launch
            .bindings
            .iter()
            .map(|b| (b.slice, b.access))
            .chain(info);

        self.scratch.clear();
        self.infos.clear();
        for (slice, access) in slices {
            let DeviceSlice { page, offset, len } = slice;
            if offset % alignment != 0 {
                return Err(error(
                    OP,
                    format!("binding offset {offset} is not a multiple of {alignment}"),
                ));
            }
            self.scratch
                .push((range_in(&page.0, offset, len, OP)?, access));
            self.infos.push(
                vk::DescriptorBufferInfo::default()
                    .buffer(page.0.buffer)
                    .offset(offset)
                    .range(if len == 0 { vk::WHOLE_SIZE } else { len }),
            );
        }

        let vk_device = &device.device;
        let set = if self.infos.is_empty() {
            None
        } else {
            let set = self.descriptors.allocate(vk_device, objects.set_layout)?;
            // One write fills every binding: they are consecutive from 0,
            // all storage buffers of one descriptor each for the compute
            // stage, so the write rolls over from each into the next.
            let write = vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&self.infos);
            // SAFETY: `set` is freshly allocated and unused; its layout has
            // one storage-buffer binding per info, numbered from 0; every
            // buffer in `infos` is live and its range was checked above.
            unsafe { vk_device.update_descriptor_sets(std::slice::from_ref(&write), &[]) };
            Some(set)
        };

        self.order(vk_device);
        let push = push_bytes(launch.params, &mut self.padded)?;
        let [x, y, z] = launch.groups;
        // SAFETY: `self.cmd` is recording outside a render pass; the
        // pipeline, layout and set belong to this device and outlive the
        // command buffer (the recorder keeps the kernel's objects and owns
        // the set's pool); the pushed bytes lie inside the layout's range,
        // which is the parameter bytes rounded up to a multiple of 4.
        unsafe {
            if self.bound != objects.pipeline {
                vk_device.cmd_bind_pipeline(
                    self.cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    objects.pipeline,
                );
                self.bound = objects.pipeline;
            }
            if let Some(set) = set {
                vk_device.cmd_bind_descriptor_sets(
                    self.cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    objects.layout,
                    0,
                    &[set],
                    &[],
                );
            }
            if !push.is_empty() {
                vk_device.cmd_push_constants(
                    self.cmd,
                    objects.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    push,
                );
            }
            vk_device.cmd_dispatch(self.cmd, x, y, z);
        }
        self.keep
            .extend(launch.bindings.iter().map(|b| Arc::clone(&b.slice.page.0)));
        if let Some(info) = launch.info {
            self.keep.push(Arc::clone(&info.page.0));
        }
        if !self.kernels.last().is_some_and(|k| Arc::ptr_eq(k, objects)) {
            self.kernels.push(Arc::clone(objects));
        }
        self.commands += 1;
        Ok(())
    }

    /// Records `copy`.
    pub(crate) fn copy(&mut self, device: &Device, copy: &Copy<'_>) -> Result<(), DriverError> {
        let Copy {
            src,
            src_offset,
            dst,
            dst_offset,
            len,
            to_host,
        } = *copy;
        let op = if to_host {
            "copy to host"
        } else {
            "copy to device"
        };
        let read = range_in(src, src_offset, len, op)?;
        let written = range_in(dst, dst_offset, len, op)?;
        if len == 0 {
            return Ok(());
        }
        self.scratch.clear();
        self.scratch.push((read, Access::Read));
        self.scratch.push((written, Access::Write));
        self.order(&device.device);
        let region = vk::BufferCopy::default()
            .src_offset(src_offset)
            .dst_offset(dst_offset)
            .size(len);
        // SAFETY: `self.cmd` is recording outside a render pass; both buffers
        // are live, were created with the transfer usages, and the ranges
        // were checked above.
        unsafe {
            device.device.cmd_copy_buffer(
                self.cmd,
                src.buffer,
                dst.buffer,
                std::slice::from_ref(&region),
            );
        }
        self.reads_back |= to_host;
        self.keep.push(Arc::clone(src));
        self.keep.push(Arc::clone(dst));
        self.commands += 1;
        Ok(())
    }

    /// Ends the command buffer, after a host barrier when the host will read
    /// what it copied back.
    pub(crate) fn finish(&mut self, device: &ash::Device) -> Result<(), DriverError> {
        if self.reads_back {
            host_barrier(device, self.cmd);
            self.reads_back = false;
        }
        // SAFETY: `self.cmd` is in the recording state.
        unsafe { device.end_command_buffer(self.cmd) }
            .map_err(|e| vk_error("end command buffer", e))
    }

    /// Forgets everything recorded; the command buffer has completed or was
    /// never submitted, so its sets and buffers may go.
    pub(crate) fn recycle(&mut self, device: &ash::Device) {
        self.descriptors.reset(device);
        self.hazards.clear();
        self.keep.clear();
        self.kernels.clear();
        self.bound = vk::Pipeline::null();
        self.reads_back = false;
        self.commands = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_pushed_in_whole_words() {
        let mut padded = [0xff; PADDED_PARAMS];
        let aligned = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(push_bytes(&aligned, &mut padded), Ok(&aligned[..]));
        // A u32 and a u16: padded with zeros to 8 bytes.
        let short = [1, 2, 3, 4, 5, 6];
        assert_eq!(
            push_bytes(&short, &mut padded),
            Ok(&[1, 2, 3, 4, 5, 6, 0, 0][..])
        );
        assert_eq!(push_bytes(&[], &mut padded), Ok(&[][..]));
        let too_many = [0; PADDED_PARAMS + 1];
        assert!(push_bytes(&too_many, &mut padded).is_err());
    }
}
