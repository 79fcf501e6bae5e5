//! A capture window's work as a secondary command buffer of its own pool,
//! and the primary that executes it once it is replayed.

use std::sync::Arc;

use ash::vk;
use capture_core::{DriverError, Order};

use crate::barriers::device_barrier;
use crate::device::Device;
use crate::error::{error, vk_error};
use crate::recorder::Recorder;

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
            .field("commands", &self.recorder.commands())
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
