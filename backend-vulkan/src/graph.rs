//! Capture windows and executables: a window records into a secondary
//! command buffer, and an executable replays it from a primary that
//! executes it.
//!
//! Both command buffers are simultaneous-use, so a replay may be submitted
//! while an earlier one is still pending. Each window has its own command
//! pool: an executable frees its command buffers when it drops, on whatever
//! thread that happens, and a pool must not be used from two threads at
//! once.

use std::sync::{Arc, Mutex};

use ash::vk;
use capture_core::{DriverError, Error};

use crate::barriers::device_barrier;
use crate::device::Device;
use crate::error::{error, vk_error};
use crate::recording::Recorder;
use crate::stream::{Stream, Timeline};

/// A capture window being recorded.
#[derive(Debug)]
pub(crate) struct Recording {
    pool: vk::CommandPool,
    pub(crate) recorder: Recorder,
    /// A page was allocated on the stream while the window recorded.
    pub(crate) allocated: bool,
}

impl Recording {
    /// Destroys a window that will never be replayed.
    pub(crate) fn destroy(mut self, device: &Device) {
        self.recorder.descriptors.destroy(&device.device);
        // SAFETY: the window's command buffer was never submitted, so
        // nothing of the pool is pending; destroying it frees the buffer.
        unsafe { device.device.destroy_command_pool(self.pool, None) };
    }
}

/// Puts `stream` into recording mode.
pub(crate) fn begin(stream: &mut Stream) -> Result<(), DriverError> {
    const OP: &str = "begin capture";
    if stream.recording.is_some() {
        return Err(error(OP, "the stream is already recording"));
    }
    // Eager work issued before the window must not wait for a replay.
    stream.submit()?;
    let device = Arc::clone(&stream.device);
    let vk_device = &device.device;
    let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(device.queue_family);
    // SAFETY: the queue family exists on this device.
    let pool =
        unsafe { vk_device.create_command_pool(&pool_info, None) }.map_err(|e| vk_error(OP, e))?;
    let destroy_pool = || {
        // SAFETY: nothing of the pool was submitted; destroyed once.
        unsafe { vk_device.destroy_command_pool(pool, None) };
    };
    let info = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::SECONDARY)
        .command_buffer_count(1);
    // SAFETY: `pool` is live and used by this thread only.
    let cmd = match unsafe { vk_device.allocate_command_buffers(&info) } {
        Ok(cmds) => cmds.into_iter().next(),
        Err(e) => {
            destroy_pool();
            return Err(vk_error(OP, e));
        }
    };
    let Some(cmd) = cmd else {
        destroy_pool();
        return Err(error(OP, "no command buffer returned"));
    };
    let inheritance = vk::CommandBufferInheritanceInfo::default();
    let begin = vk::CommandBufferBeginInfo::default()
        .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE)
        .inheritance_info(&inheritance);
    // SAFETY: `cmd` is a fresh secondary command buffer; no render pass is
    // inherited, so an empty inheritance info is valid.
    if let Err(e) = unsafe { vk_device.begin_command_buffer(cmd, &begin) } {
        destroy_pool();
        return Err(vk_error(OP, e));
    }
    stream.recording = Some(Recording {
        pool,
        recorder: Recorder::new(cmd),
        allocated: false,
    });
    Ok(())
}

/// Closes the window on `stream` and, unless it must be refused, turns it
/// into an executable.
pub(crate) fn instantiate(stream: &mut Stream, doomed: Option<Error>) -> Result<Executable, Error> {
    const OP: &str = "instantiate";
    // Taking the recording is what leaves recording mode; every path below
    // starts from here.
    let Some(mut recording) = stream.recording.take() else {
        return Err(doomed.unwrap_or_else(|| error(OP, "the stream is not recording").into()));
    };
    let device = Arc::clone(&stream.device);
    let ended = recording.recorder.finish(&device.device);
    if let Some(doomed) = doomed {
        recording.destroy(&device);
        return Err(doomed);
    }
    if let Err(e) = ended {
        recording.destroy(&device);
        return Err(e.into());
    }
    if recording.allocated {
        recording.destroy(&device);
        return Err(error(OP, "a page was allocated while recording").into());
    }
    let Recording { pool, recorder, .. } = recording;
    Ok(Executable {
        device,
        pool,
        secondary: recorder.cmd,
        recorder,
        state: Mutex::new(ExecState {
            primary: None,
            uses: Vec::new(),
        }),
    })
}

/// What replays change: the primary, recorded on first need, and the last
/// timeline value each stream's replay of it will signal.
#[derive(Default)]
struct ExecState {
    primary: Option<vk::CommandBuffer>,
    uses: Vec<(Arc<Timeline>, u64)>,
}

/// A recorded window, replayable any number of times.
///
/// Owns its command pool, descriptor sets and every buffer and kernel its
/// commands reference; dropping it waits for its last replay before freeing
/// them.
pub struct Executable {
    device: Arc<Device>,
    pool: vk::CommandPool,
    secondary: vk::CommandBuffer,
    recorder: Recorder,
    state: Mutex<ExecState>,
}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executable")
            .field("commands", &self.recorder.commands)
            .finish_non_exhaustive()
    }
}

impl Executable {
    fn state(&self) -> std::sync::MutexGuard<'_, ExecState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The primary that executes the window, recorded on first need.
    fn primary(&self, state: &mut ExecState) -> Result<vk::CommandBuffer, DriverError> {
        const OP: &str = "upload";
        if let Some(primary) = state.primary {
            return Ok(primary);
        }
        let vk_device = &self.device.device;
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is this executable's own, used under its lock.
        let cmd = unsafe { vk_device.allocate_command_buffers(&info) }
            .map_err(|e| vk_error(OP, e))?
            .into_iter()
            .next()
            .ok_or_else(|| error(OP, "no command buffer returned"))?;
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
        // SAFETY: the secondary is executable and simultaneous-use, recorded
        // without a render pass, as is this primary.
        unsafe { vk_device.cmd_execute_commands(cmd, &[self.secondary]) };
        // SAFETY: `cmd` is recording.
        if let Err(e) = unsafe { vk_device.end_command_buffer(cmd) } {
            free();
            return Err(vk_error(OP, e));
        }
        state.primary = Some(cmd);
        Ok(cmd)
    }

    /// Records the primary now so the first replay does not.
    pub(crate) fn upload(&self, stream: &Stream) -> Result<(), DriverError> {
        if !Arc::ptr_eq(&self.device, &stream.device) {
            return Err(error("upload", "the executable belongs to another device"));
        }
        let mut state = self.state();
        self.primary(&mut state).map(|_| ())
    }

    /// Submits a replay on `stream`, after its pending eager work.
    pub(crate) fn replay(&self, stream: &mut Stream) -> Result<(), DriverError> {
        const OP: &str = "replay";
        if !Arc::ptr_eq(&self.device, &stream.device) {
            return Err(error(OP, "the executable belongs to another device"));
        }
        if stream.recording.is_some() {
            return Err(error(OP, "the stream is recording a window"));
        }
        stream.submit()?;
        let mut state = self.state();
        let primary = self.primary(&mut state)?;
        let value = stream.last + 1;
        self.device
            .submit(primary, stream.timeline.semaphore, value)
            .map_err(|e| vk_error(OP, e))?;
        stream.last = value;
        match state
            .uses
            .iter_mut()
            .find(|(timeline, _)| Arc::ptr_eq(timeline, &stream.timeline))
        {
            Some((_, last)) => *last = value,
            None => state.uses.push((Arc::clone(&stream.timeline), value)),
        }
        Ok(())
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for (timeline, value) in &state.uses {
            // A failure (device lost) means nothing will run any more either.
            if let Err(e) = self.device.wait(timeline.semaphore, *value) {
                log::warn!("vulkan: waiting for an executable's last replay failed: {e:?}");
            }
        }
        state.uses.clear();
        self.recorder.descriptors.destroy(&self.device.device);
        // SAFETY: no replay is pending (waited for above); destroying the
        // pool frees the primary and the secondary.
        unsafe { self.device.device.destroy_command_pool(self.pool, None) };
    }
}
