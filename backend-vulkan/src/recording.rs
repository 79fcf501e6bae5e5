//! Recording launches and copies for a command buffer, with the descriptor
//! sets, buffers and kernels they use kept alongside; and [`Recording`], a
//! capture window's secondary command buffer with all of that.
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

use crate::barriers::{Hazards, Range, device_barrier, host_barrier};
use crate::conditional::{Predicates, words};
use crate::device::Device;
use crate::error::{error, vk_error};
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

/// Descriptor sets each pool holds; a launch takes one set.
const SETS_PER_POOL: u32 = 64;
/// Storage-buffer descriptors each pool holds: enough for every set to
/// bind the most a kernel may (its buffers and its info), so a pool always
/// holds its full count of sets; a pool that runs short is followed by
/// another.
const DESCRIPTORS_PER_POOL: u32 = SETS_PER_POOL * KEEP_PER_COMMAND as u32;

/// Allocates one command buffer of `level` from `pool`, without the vector
/// ash's wrapper returns.
pub(crate) fn allocate_command_buffer(
    device: &ash::Device,
    pool: vk::CommandPool,
    level: vk::CommandBufferLevel,
) -> Result<vk::CommandBuffer, vk::Result> {
    let info = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(level)
        .command_buffer_count(1);
    let mut cmd = vk::CommandBuffer::null();
    // SAFETY: `info` asks for one command buffer and `cmd` has room for one;
    // the caller uses `pool` from one thread at a time.
    unsafe { (device.fp_v1_0().allocate_command_buffers)(device.handle(), &info, &mut cmd) }
        .result()?;
    Ok(cmd)
}

/// Descriptor pools that grow on demand and reset as a whole once the
/// commands that used their sets have completed.
#[derive(Debug, Default)]
pub(crate) struct DescriptorPools {
    pools: Vec<vk::DescriptorPool>,
    current: usize,
}

impl DescriptorPools {
    /// Pools with room for `pools` handles reserved.
    fn with_capacity(pools: usize) -> Self {
        Self {
            pools: Vec::with_capacity(pools),
            current: 0,
        }
    }

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
            let mut set = vk::DescriptorSet::null();
            // SAFETY: `pool` and `layout` are live objects of this device; a
            // pool is only used by the recorder that owns it; `info` asks for
            // one set and `set` has room for one.
            let result = unsafe {
                (device.fp_v1_0().allocate_descriptor_sets)(device.handle(), &info, &mut set)
            };
            match result {
                vk::Result::SUCCESS => return Ok(set),
                vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL
                    if !fresh =>
                {
                    self.current += 1;
                }
                e => return Err(vk_error("allocate descriptor set", e)),
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
    fn destroy(&mut self, device: &ash::Device) {
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
    fn window(cmd: vk::CommandBuffer) -> Self {
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
        self.add(vk_device, &command);
        for bound in launch.bound {
            self.keep(bound.buffer);
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
        self.add(&device.device, &command);
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
    fn add(&mut self, device: &ash::Device, command: &Command<'_>) {
        match &mut self.prepared {
            Some(prepared) => prepared.push(command, &self.scratch),
            None => {
                self.hazards.order(device, self.cmd, &self.scratch);
                encode(device, self.cmd, &mut self.bound, command);
            }
        }
    }

    /// Encodes a capture window's prepared commands in `order`; returns how
    /// many barriers it placed between them.
    fn encode_prepared(&mut self, device: &Device, order: Order<'_>) -> Result<usize, DriverError> {
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

/// A capture window's work: a secondary command buffer, with its own
/// command pool, its descriptor sets and every buffer and kernel its
/// commands use; and, once it is replayed, the primary that executes it.
///
/// Open on its stream while the window records, which keeps its commands
/// prepared; closed by [`GraphDriver::end`](capture_core::GraphDriver::end);
/// encoded into its secondary, in the order the graph keeps, when
/// [`GraphDriver::instantiate`](capture_core::GraphDriver::instantiate)
/// makes an executable of it. Its own pool lets an executable free it on
/// whatever thread drops it. Dropping it destroys all of it: whoever holds it drops
/// it only once no submission that executed it is pending (an executable
/// waits for that).
pub struct Recording {
    device: Arc<Device>,
    pool: vk::CommandPool,
    recorder: Recorder,
    /// The barriers encoded between commands; `None` until encoded.
    barriers: Option<usize>,
    primary: Option<vk::CommandBuffer>,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("commands", &self.recorder.commands)
            .field("barriers", &self.barriers)
            .finish_non_exhaustive()
    }
}

impl Recording {
    /// A new command pool with a begun secondary command buffer.
    pub(crate) fn begin(device: &Arc<Device>) -> Result<Recording, DriverError> {
        const OP: &str = "begin capture";
        let vk_device = &device.device;
        let pool_info =
            vk::CommandPoolCreateInfo::default().queue_family_index(device.queue_family);
        // SAFETY: the queue family exists on this device.
        let pool = unsafe { vk_device.create_command_pool(&pool_info, None) }
            .map_err(|e| vk_error(OP, e))?;
        let destroy_pool = || {
            // SAFETY: nothing of the pool was submitted; destroyed once.
            unsafe { vk_device.destroy_command_pool(pool, None) };
        };
        let cmd = match allocate_command_buffer(vk_device, pool, vk::CommandBufferLevel::SECONDARY)
        {
            Ok(cmd) => cmd,
            Err(e) => {
                destroy_pool();
                return Err(vk_error(OP, e));
            }
        };
        let inheritance = vk::CommandBufferInheritanceInfo::default();
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE)
            .inheritance_info(&inheritance);
        // SAFETY: `cmd` is a fresh secondary command buffer; no render pass
        // is inherited, so an empty inheritance info is valid.
        if let Err(e) = unsafe { vk_device.begin_command_buffer(cmd, &begin) } {
            destroy_pool();
            return Err(vk_error(OP, e));
        }
        Ok(Recording {
            device: Arc::clone(device),
            pool,
            recorder: Recorder::window(cmd),
            barriers: None,
            primary: None,
        })
    }

    /// The device the recording belongs to.
    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The recorder the window's work goes to.
    pub(crate) fn recorder(&mut self) -> &mut Recorder {
        &mut self.recorder
    }

    /// Diagnostics: the global memory barriers encoded between the
    /// recording's commands, 0 before it is instantiated. In issue order a
    /// barrier goes before each command that touches what an earlier one
    /// since the last barrier wrote (or writes what it read); in dependency
    /// order there is one between consecutive levels.
    pub fn barriers(&self) -> usize {
        self.barriers.unwrap_or(0)
    }

    /// Encodes the prepared commands into the secondary in `order` and ends
    /// it; once only.
    pub(crate) fn encode(&mut self, order: Order<'_>) -> Result<(), DriverError> {
        if self.barriers.is_some() {
            return Err(error(
                "instantiate",
                "the recording was instantiated already",
            ));
        }
        let vk_device = &self.device.device;
        let barriers = self.recorder.encode_prepared(&self.device, order)?;
        self.recorder.finish(vk_device)?;
        self.barriers = Some(barriers);
        Ok(())
    }

    /// The primary that executes the ended secondary, recorded on the first
    /// call. Simultaneous-use, like the secondary, so a replay may be
    /// submitted while an earlier one is pending.
    pub(crate) fn primary(&mut self) -> Result<vk::CommandBuffer, DriverError> {
        const OP: &str = "upload";
        if let Some(primary) = self.primary {
            return Ok(primary);
        }
        if self.barriers.is_none() {
            return Err(error(OP, "the recording was never instantiated"));
        }
        let vk_device = &self.device.device;
        let cmd = allocate_command_buffer(vk_device, self.pool, vk::CommandBufferLevel::PRIMARY)
            .map_err(|e| vk_error(OP, e))?;
        let free = || {
            // SAFETY: `cmd` was never submitted; freed once.
            unsafe { vk_device.free_command_buffers(self.pool, &[cmd]) };
        };
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
        // SAFETY: a fresh primary command buffer.
        if let Err(e) = unsafe { vk_device.begin_command_buffer(cmd, &begin) } {
            free();
            return Err(vk_error(OP, e));
        }
        device_barrier(vk_device, cmd);
        // SAFETY: the secondary is ended, simultaneous-use and recorded
        // without a render pass, as is this primary.
        unsafe { vk_device.cmd_execute_commands(cmd, &[self.recorder.cmd]) };
        // SAFETY: `cmd` is recording.
        if let Err(e) = unsafe { vk_device.end_command_buffer(cmd) } {
            free();
            return Err(vk_error(OP, e));
        }
        self.primary = Some(cmd);
        Ok(cmd)
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let vk_device = &self.device.device;
        self.recorder.destroy(vk_device);
        // SAFETY: no submission that executed the recording is pending (its
        // holders' promise, see the type's documentation); destroying the
        // pool frees the secondary and the primary.
        unsafe { vk_device.destroy_command_pool(self.pool, None) };
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
