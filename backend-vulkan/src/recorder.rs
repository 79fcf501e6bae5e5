//! Recording launches and copies for a command buffer, with the descriptor
//! sets, buffers and kernels they use kept alongside.
//!
//! The same recorder serves an eager batch (a primary command buffer
//! submitted at the next fence), which encodes each command with the
//! barriers it needs as it comes, and a capture window (a secondary command
//! buffer an executable replays), which keeps its commands prepared and
//! encodes them at instantiation in the order the graph keeps (see
//! [`crate::prepared`]).
//!
//! An eager recorder has a fixed room, reserved when it is made: the commands,
//! kept buffers, kernels and descriptor pools of one batch. The stream
//! submits a batch once it has no room for another command, so recording
//! eager work never allocates.

use std::sync::Arc;

use ash::vk;
use capture_core::{Access, DriverError, Order};
use capture_core::{MAX_BINDINGS, MAX_PARAM_BYTES};

use crate::barriers::{Hazards, Range, host_barrier};
use crate::conditional::{Predicates, words};
use crate::descriptors::{DescriptorPools, SETS_PER_POOL};
use crate::device::Device;
use crate::error::{error, vk_error};
use crate::foreign::{Foreign, ForeignBuffer};
use crate::kernels::KernelObjects;
use crate::memory::Buffer;
use crate::prepared::{Command, Node, Prepared, Scope, encode};

/// Commands after which an eager batch is submitted without waiting for a
/// fence, so the GPU starts on long eager sequences early.
pub(crate) const BATCH_LIMIT: usize = 256;

/// Buffers one command references at most: a launch's bindings and its info.
const KEEP_PER_COMMAND: usize = MAX_BINDINGS + 1;

/// Buffers an eager batch keeps at most. Consecutive commands on the same
/// pages keep them once, so a batch is nearly always full of commands first.
const KEEP_PER_BATCH: usize = 1024;

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

/// One buffer range bound to a launch, with how the kernel uses it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound<'a> {
    pub(crate) buffer: &'a Arc<Buffer>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
}

/// One kernel launch, as the recorder takes it.
pub(crate) struct Dispatch<'a, I> {
    /// The kernel's pipeline and layouts.
    pub(crate) kernel: &'a Arc<KernelObjects>,
    /// Workgroups in x, y and z.
    pub(crate) groups: [u32; 3],
    /// The buffers in binding order, then the info slice if any.
    pub(crate) bound: I,
    /// The by-value parameter bytes.
    pub(crate) params: &'a [u8],
}

/// A command buffer being recorded and what its commands need kept.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) cmd: vk::CommandBuffer,
    hazards: Hazards,
    /// A capture window's commands, kept until instantiation encodes them;
    /// `None` for an eager batch, which encodes each as it comes.
    prepared: Option<Prepared>,
    descriptors: DescriptorPools,
    /// Every buffer a command references, so none is destroyed while the
    /// command buffer may still run.
    keep: Vec<Arc<Buffer>>,
    /// Every kernel a command runs, for the same reason.
    kernels: Vec<Arc<KernelObjects>>,
    /// The pipeline bound last in this command buffer, null before any.
    bound: vk::Pipeline,
    /// A copy to host memory was recorded since the last host barrier.
    reads_back: bool,
    /// Commands recorded so far.
    commands: usize,
    /// The ranges the command being recorded touches; kept to reuse.
    scratch: Vec<(Range, Access)>,
    /// The descriptors of the launch being recorded; kept to reuse.
    infos: Vec<vk::DescriptorBufferInfo>,
    /// The declared buffers of the foreign operation being recorded; kept
    /// to reuse.
    foreign: Vec<ForeignBuffer>,
    /// Conditionals open in a capture window, innermost last: while one
    /// is, `prepared` is its current body.
    open: Vec<OpenNode>,
}

/// A conditional being recorded.
#[derive(Debug)]
struct OpenNode {
    predicates: Predicates,
    /// The list it was opened in.
    outer: Prepared,
    bodies: Vec<Prepared>,
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
            start: buffer.base + offset,
            end: buffer.base + end,
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
    /// A recorder for `cmd`, which the caller has begun, with room for
    /// `keep` buffers, `kernels` kernels and `pools` descriptor pools before
    /// any of them grows.
    fn with_room(
        cmd: vk::CommandBuffer,
        prepared: Option<Prepared>,
        keep: usize,
        kernels: usize,
        pools: usize,
    ) -> Self {
        Self {
            cmd,
            hazards: Hazards::default(),
            prepared,
            descriptors: DescriptorPools::with_capacity(pools),
            keep: Vec::with_capacity(keep),
            kernels: Vec::with_capacity(kernels),
            bound: vk::Pipeline::null(),
            reads_back: false,
            commands: 0,
            scratch: Vec::with_capacity(KEEP_PER_COMMAND),
            infos: Vec::with_capacity(KEEP_PER_COMMAND),
            foreign: Vec::new(),
            open: Vec::new(),
        }
    }

    /// A recorder for an eager batch in `cmd`, with a full batch's room.
    pub(crate) fn eager(cmd: vk::CommandBuffer) -> Self {
        let pools = BATCH_LIMIT.div_ceil(SETS_PER_POOL as usize);
        Self::with_room(cmd, None, KEEP_PER_BATCH, BATCH_LIMIT, pools)
    }

    /// A recorder for a capture window in `cmd`, which grows as it must
    /// and keeps its commands prepared.
    pub(crate) fn window(cmd: vk::CommandBuffer) -> Self {
        Self::with_room(cmd, Some(Prepared::default()), 0, 0, 0)
    }

    /// Commands recorded so far.
    pub(crate) fn commands(&self) -> usize {
        self.commands
    }

    /// Whether an eager batch has room for one more command of any kind
    /// without growing anything.
    pub(crate) fn has_room(&self) -> bool {
        self.commands < BATCH_LIMIT
            && self.keep.len() + KEEP_PER_COMMAND <= self.keep.capacity()
            && self.kernels.len() < self.kernels.capacity()
    }

    /// Keeps `buffer` alive with this command buffer, once: a buffer among
    /// the last few kept is not kept again.
    fn keep(&mut self, buffer: &Arc<Buffer>) {
        let recent = self.keep.len().saturating_sub(KEEP_PER_COMMAND);
        let kept = self
            .keep
            .get(recent..)
            .is_some_and(|tail| tail.iter().any(|b| Arc::ptr_eq(b, buffer)));
        if !kept {
            self.keep.push(Arc::clone(buffer));
        }
    }

    /// Records `launch`, which matches its kernel's signature (the core's
    /// guarantee): each binding's access is the signature's, the info is
    /// present exactly when the kernel reads info, the parameters are
    /// exactly its parameter bytes and the grid is within the device's
    /// limits.
    pub(crate) fn launch<'a, I>(
        &mut self,
        device: &Arc<Device>,
        launch: Dispatch<'a, I>,
    ) -> Result<(), DriverError>
    where
        I: Iterator<Item = Bound<'a>> + Clone,
    {
        const OP: &str = "launch";
        let objects = launch.kernel;
        if !Arc::ptr_eq(&objects.device, device) {
            return Err(error(OP, "the kernel was built for another device"));
        }
        let alignment = device.limits.min_storage_buffer_offset_alignment.max(1);

        self.scratch.clear();
        self.infos.clear();
        for Bound {
            buffer,
            offset,
            len,
            access,
        } in launch.bound.clone()
        {
            if len == 0 {
                return Err(error(OP, "an empty binding"));
            }
            let range = range_in(buffer, offset, len, OP)?;
            if !range.start.is_multiple_of(alignment) {
                return Err(error(
                    OP,
                    format!(
                        "binding offset {} is not a multiple of {alignment}",
                        range.start
                    ),
                ));
            }
            self.scratch.push((range, access));
            self.infos.push(
                vk::DescriptorBufferInfo::default()
                    .buffer(buffer.buffer)
                    .offset(range.start)
                    .range(len),
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

        // Parameters padded to a multiple of 4, for launches whose
        // parameters are not.
        let mut padded = [0; PADDED_PARAMS];
        let command = Command::Dispatch {
            pipeline: objects.pipeline,
            layout: objects.layout,
            set,
            push: push_bytes(launch.params, &mut padded)?,
            groups: launch.groups,
        };
        // The recorder keeps the kernel's objects and owns the set's pool,
        // so they outlive the command buffer.
        self.add(vk_device, &command)?;
        for bound in launch.bound {
            self.keep(bound.buffer);
        }
        if !self.kernels.last().is_some_and(|k| Arc::ptr_eq(k, objects)) {
            self.kernels.push(Arc::clone(objects));
        }
        self.commands += 1;
        Ok(())
    }

    /// Records foreign operation `op` over `bound`, its declared buffers.
    pub(crate) fn foreign<'a>(
        &mut self,
        device: &Arc<Device>,
        op: &Arc<Foreign>,
        bound: impl Iterator<Item = Bound<'a>> + Clone,
    ) -> Result<(), DriverError> {
        const OP: &str = "foreign operation";
        if !Arc::ptr_eq(&op.device, device) {
            return Err(error(OP, "it was made for another device"));
        }
        if !self.open.is_empty() {
            return Err(error(
                OP,
                "refused inside a conditional body: conditional rendering predicates \
                 dispatches, not the transfer commands a foreign operation may record",
            ));
        }
        self.scratch.clear();
        let mut buffers = std::mem::take(&mut self.foreign);
        buffers.clear();
        for Bound {
            buffer,
            offset,
            len,
            access,
        } in bound.clone()
        {
            let range = match range_in(buffer, offset, len, OP) {
                Ok(range) => range,
                Err(err) => {
                    self.foreign = buffers;
                    return Err(err);
                }
            };
            self.scratch.push((range, access));
            buffers.push(ForeignBuffer {
                buffer: buffer.buffer,
                offset: range.start,
                len,
                access,
            });
        }
        let command = Command::Foreign {
            op,
            buffers: &buffers,
        };
        let added = self.add(&device.device, &command);
        self.foreign = buffers;
        added?;
        for bound in bound {
            self.keep(bound.buffer);
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
            // Still an operation the core numbers, though nothing runs.
            if let Some(prepared) = &mut self.prepared {
                prepared.push_empty();
            }
            return Ok(());
        }
        self.scratch.clear();
        self.scratch.push((read, Access::Read));
        self.scratch.push((written, Access::Write));
        let command = Command::Copy {
            src: src.buffer,
            dst: dst.buffer,
            region: vk::BufferCopy::default()
                .src_offset(read.start)
                .dst_offset(written.start)
                .size(len),
            to_host,
        };
        // Both buffers are kept below, and both ranges were checked above.
        self.add(&device.device, &command)?;
        self.reads_back |= to_host;
        self.keep(src);
        self.keep(dst);
        self.commands += 1;
        Ok(())
    }

    /// Opens a conditional of `kind` on the `u32` at `offset` of `flag`:
    /// what is recorded from here goes into its first body.
    pub(crate) fn open_conditional(
        &mut self,
        device: &Arc<Device>,
        kernel: &Arc<KernelObjects>,
        kind: capture_core::Conditional,
        (flag, offset): (&Arc<Buffer>, u64),
    ) -> Result<(), DriverError> {
        const OP: &str = "open conditional";
        if self.prepared.is_none() {
            return Err(error(OP, "an eager batch holds no conditional"));
        }
        let flag_range = range_in(flag, offset, 4, OP)?;
        let alignment = device.limits.min_storage_buffer_offset_alignment.max(1);
        if !flag_range.start.is_multiple_of(alignment) {
            return Err(error(
                OP,
                format!(
                    "the flag's offset {} is not a multiple of {alignment}",
                    flag_range.start
                ),
            ));
        }
        let buffer = crate::memory::predicates(device, words(kind)?)?;
        // The enclosing conditional's predicates, or (unread) the flag.
        let enclosing = match self.open.last() {
            Some(open) => (open.predicates.buffer.buffer, 0, vk::WHOLE_SIZE),
            None => (flag.buffer, flag_range.start, 4),
        };
        let vk_device = &device.device;
        let set = self.descriptors.allocate(vk_device, kernel.set_layout)?;
        let infos = [
            (flag.buffer, flag_range.start, 4),
            enclosing,
            (buffer.buffer, 0, vk::WHOLE_SIZE),
        ]
        .map(|(buffer, offset, range)| {
            vk::DescriptorBufferInfo::default()
                .buffer(buffer)
                .offset(offset)
                .range(range)
        });
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&infos);
        // SAFETY: `set` is fresh and unused; its layout has three storage
        // buffers from binding 0; every buffer is live and kept by this
        // recorder, and the ranges lie inside them.
        unsafe { vk_device.update_descriptor_sets(std::slice::from_ref(&write), &[]) };
        self.keep(flag);
        self.keep(&buffer);
        if !self.kernels.iter().any(|k| Arc::ptr_eq(k, kernel)) {
            self.kernels.push(Arc::clone(kernel));
        }
        let outer = self
            .prepared
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        self.open.push(OpenNode {
            predicates: Predicates {
                kind,
                buffer,
                set,
                pipeline: kernel.pipeline,
                layout: kernel.layout,
            },
            outer,
            bodies: Vec::with_capacity(kind.bodies()),
        });
        Ok(())
    }

    /// The open conditional's body is recorded: what comes next goes into
    /// its next body.
    pub(crate) fn next_body(&mut self) -> Result<(), DriverError> {
        let (Some(open), Some(prepared)) = (self.open.last_mut(), &mut self.prepared) else {
            return Err(error("next body", "no conditional is open"));
        };
        open.bodies.push(std::mem::take(prepared));
        Ok(())
    }

    /// Closes the innermost open conditional, whose bodies keep `orders`:
    /// it becomes one operation of the list it was opened in.
    pub(crate) fn close_conditional(&mut self, orders: &[Order<'_>]) -> Result<(), DriverError> {
        const OP: &str = "close conditional";
        let (Some(mut open), Some(prepared)) = (self.open.pop(), &mut self.prepared) else {
            return Err(error(OP, "no conditional is open"));
        };
        open.bodies.push(std::mem::replace(prepared, open.outer));
        if open.bodies.len() != orders.len() || orders.len() != open.predicates.kind.bodies() {
            return Err(error(
                OP,
                format!("{} bodies and {} orders", open.bodies.len(), orders.len()),
            ));
        }
        let bodies = open
            .bodies
            .into_iter()
            .zip(orders)
            .map(|(body, order)| match order {
                Order::Chain => (body, None),
                Order::Dependencies(dependencies) => (body, Some((*dependencies).clone())),
            })
            .collect();
        prepared.push_node(Node {
            predicates: open.predicates,
            bodies,
        });
        self.commands += 1;
        Ok(())
    }

    /// Encodes `command`, touching the scratch ranges, after a barrier if
    /// it conflicts with earlier ones; or, in a capture window, keeps it for
    /// instantiation.
    fn add(&mut self, device: &ash::Device, command: &Command<'_>) -> Result<(), DriverError> {
        match &mut self.prepared {
            Some(prepared) => {
                prepared.push(command, &self.scratch);
                Ok(())
            }
            None => {
                self.hazards.order(device, self.cmd, &self.scratch);
                encode(device, self.cmd, &mut self.bound, command)
            }
        }
    }

    /// Encodes a capture window's prepared commands in `order`; returns how
    /// many barriers it placed between them.
    pub(crate) fn encode_prepared(
        &mut self,
        device: &Device,
        order: Order<'_>,
    ) -> Result<usize, DriverError> {
        if !self.open.is_empty() {
            return Err(error("instantiate", "a conditional was never closed"));
        }
        let scope = Scope::top(device.rendering.as_ref());
        match &self.prepared {
            Some(prepared) => prepared.encode(&device.device, self.cmd, order, scope),
            None => Err(error("instantiate", "an eager batch has nothing prepared")),
        }
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
    /// never submitted, so its sets and buffers may go. Capacity is kept.
    pub(crate) fn recycle(&mut self, device: &ash::Device) {
        self.descriptors.reset(device);
        self.hazards.clear();
        self.keep.clear();
        self.kernels.clear();
        self.bound = vk::Pipeline::null();
        self.reads_back = false;
        self.commands = 0;
    }

    /// Destroys the descriptor pools; the command buffer has completed or
    /// was never submitted, and is freed with its command pool.
    pub(crate) fn destroy(&mut self, device: &ash::Device) {
        self.descriptors.destroy(device);
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
