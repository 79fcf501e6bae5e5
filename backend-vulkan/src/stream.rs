//! A stream: its command pool, its timeline semaphore and the eager batch
//! it is filling.
//!
//! Submitting every launch on its own would make the host pay a queue
//! submission per launch, so eager work collects in a primary command buffer
//! that is submitted at a signal, a fence, a capture's begin or a replay, or
//! when it holds [`BATCH_LIMIT`] commands. Each submission signals the next
//! value of the stream's timeline, which is what a [`Signal`] names.

use std::collections::VecDeque;
use std::sync::Arc;

use ash::vk;
use capture_core::DriverError;

use crate::barriers::device_barrier;
use crate::device::Device;
use crate::error::{error, vk_error};
use crate::graph::Recording;
use crate::recording::{Copy, Recorder};

/// Commands after which an eager batch is submitted without waiting for a
/// signal, so the GPU starts on long eager sequences early.
pub(crate) const BATCH_LIMIT: usize = 256;

/// A point on a stream's timeline: the value its semaphore reaches once the
/// work submitted up to the signal has completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Signal(pub(crate) u64);

/// A timeline semaphore, shared with the executables replayed on it so they
/// can wait for their last replay when they drop.
pub(crate) struct Timeline {
    device: Arc<Device>,
    pub(crate) semaphore: vk::Semaphore,
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: every holder waited for the values it submitted before
        // letting go, so no pending submission signals the semaphore.
        unsafe { self.device.device.destroy_semaphore(self.semaphore, None) };
    }
}

/// One in-order queue of work on a device.
pub struct Stream {
    pub(crate) device: Arc<Device>,
    pool: vk::CommandPool,
    pub(crate) timeline: Arc<Timeline>,
    /// The last value a successful submission will signal; a failed
    /// submission never advances it, so no fence waits for a value nothing
    /// will signal.
    pub(crate) last: u64,
    /// The eager batch being filled, if any.
    batch: Option<Recorder>,
    /// Submitted batches, oldest first, with the value that completes each.
    in_flight: VecDeque<(u64, Recorder)>,
    /// Batches whose work completed, ready to be filled again.
    idle: Vec<Recorder>,
    /// The capture window being recorded, if any.
    pub(crate) recording: Option<Recording>,
    /// A full batch that failed to submit: its launches had already been
    /// accepted, so the failure is asynchronous and surfaces at the next
    /// signal or fence, as the contract says such failures do.
    lost: Option<DriverError>,
}

impl Stream {
    /// Creates a stream with its own command pool and timeline.
    pub(crate) fn new(device: &Arc<Device>) -> Result<Stream, DriverError> {
        const OP: &str = "create stream";
        let vk_device = &device.device;
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: timeline semaphores were enabled when the device was created.
        let semaphore =
            unsafe { vk_device.create_semaphore(&info, None) }.map_err(|e| vk_error(OP, e))?;
        let timeline = Arc::new(Timeline {
            device: Arc::clone(device),
            semaphore,
        });
        let pool_info = vk::CommandPoolCreateInfo::default()
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER)
            .queue_family_index(device.queue_family);
        // SAFETY: the queue family exists on this device.
        let pool = unsafe { vk_device.create_command_pool(&pool_info, None) }
            .map_err(|e| vk_error(OP, e))?;
        Ok(Stream {
            device: Arc::clone(device),
            pool,
            timeline,
            last: 0,
            batch: None,
            in_flight: VecDeque::new(),
            idle: Vec::new(),
            recording: None,
            lost: None,
        })
    }

    /// Moves completed batches to the idle list.
    fn reclaim(&mut self) {
        let Some(&(oldest, _)) = self.in_flight.front() else {
            return;
        };
        let reached = match self.device.reached(self.timeline.semaphore) {
            Ok(value) => value,
            Err(e) => {
                log::warn!("vulkan: reading a timeline failed: {e:?}");
                return;
            }
        };
        if oldest > reached {
            return;
        }
        while let Some((value, _)) = self.in_flight.front() {
            if *value > reached {
                break;
            }
            if let Some((_, mut batch)) = self.in_flight.pop_front() {
                batch.recycle(&self.device.device);
                self.idle.push(batch);
            }
        }
    }

    /// A begun primary command buffer whose first command makes earlier
    /// submissions' writes visible.
    fn start_batch(&mut self) -> Result<Recorder, DriverError> {
        const OP: &str = "begin command buffer";
        self.reclaim();
        let vk_device = &self.device.device;
        let batch = match self.idle.pop() {
            Some(batch) => batch,
            None => {
                let info = vk::CommandBufferAllocateInfo::default()
                    .command_pool(self.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: the pool belongs to this stream, which `&mut self`
                // makes the only user.
                let cmds = unsafe { vk_device.allocate_command_buffers(&info) }
                    .map_err(|e| vk_error(OP, e))?;
                let cmd = cmds
                    .into_iter()
                    .next()
                    .ok_or_else(|| error(OP, "no command buffer returned"))?;
                Recorder::new(cmd)
            }
        };
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer is not pending (it is new, or its batch
        // completed); its pool allows an implicit reset on begin.
        if let Err(e) = unsafe { vk_device.begin_command_buffer(batch.cmd, &begin) } {
            self.idle.push(batch);
            return Err(vk_error(OP, e));
        }
        device_barrier(vk_device, batch.cmd);
        Ok(batch)
    }

    /// Runs `record` on the capture window's recorder, or on the eager batch
    /// (started on demand, submitted once full).
    pub(crate) fn record(
        &mut self,
        record: impl FnOnce(&Arc<Device>, &mut Recorder) -> Result<(), DriverError>,
    ) -> Result<(), DriverError> {
        if let Some(recording) = &mut self.recording {
            return record(&self.device, &mut recording.recorder);
        }
        let mut batch = match self.batch.take() {
            Some(batch) => batch,
            None => self.start_batch()?,
        };
        let result = record(&self.device, &mut batch);
        let full = batch.commands >= BATCH_LIMIT;
        self.batch = Some(batch);
        result?;
        if full && let Err(e) = self.submit() {
            log::error!("vulkan: submitting a full batch failed: {e}");
            self.lost.get_or_insert(e);
        }
        Ok(())
    }

    /// Records `copy`.
    pub(crate) fn copy(&mut self, copy: &Copy<'_>) -> Result<(), DriverError> {
        self.record(|device, recorder| recorder.copy(device, copy))
    }

    /// Submits the eager batch, if there is one.
    pub(crate) fn submit(&mut self) -> Result<(), DriverError> {
        let Some(mut batch) = self.batch.take() else {
            return Ok(());
        };
        let vk_device = &self.device.device;
        if let Err(e) = batch.finish(vk_device) {
            batch.recycle(vk_device);
            self.idle.push(batch);
            return Err(e);
        }
        let value = self.last + 1;
        match self
            .device
            .submit(batch.cmd, self.timeline.semaphore, value)
        {
            Ok(()) => {
                self.last = value;
                self.in_flight.push_back((value, batch));
                Ok(())
            }
            Err(e) => {
                batch.recycle(vk_device);
                self.idle.push(batch);
                Err(vk_error("submit", e))
            }
        }
    }

    /// Marks the end of the work so far. While a window records nothing is
    /// submitted (its work runs only when replayed), so the signal names the
    /// eager work before `begin`.
    pub(crate) fn signal(&mut self) -> Result<Signal, DriverError> {
        if let Some(lost) = self.lost.take() {
            return Err(lost);
        }
        if self.recording.is_none() {
            self.submit()?;
        }
        Ok(Signal(self.last))
    }

    /// Waits until the stream's timeline reaches `signal`.
    pub(crate) fn fence(&mut self, signal: Signal) -> Result<(), DriverError> {
        if let Some(lost) = self.lost.take() {
            return Err(lost);
        }
        if self.recording.is_none() {
            self.submit()?;
        }
        if signal.0 > self.last {
            return Err(error(
                "fence",
                format!("{signal:?} was never submitted on this stream"),
            ));
        }
        self.device
            .wait(self.timeline.semaphore, signal.0)
            .map_err(|e| vk_error("fence", e))?;
        self.reclaim();
        Ok(())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let vk_device = &self.device.device;
        // A failure (device lost) means nothing will run any more either.
        if let Err(e) = self.device.wait(self.timeline.semaphore, self.last) {
            log::warn!("vulkan: waiting for a dropped stream failed: {e:?}");
        }
        if let Some(recording) = self.recording.take() {
            recording.destroy(&self.device);
        }
        let batches = self
            .batch
            .take()
            .into_iter()
            .chain(self.in_flight.drain(..).map(|(_, b)| b))
            .chain(self.idle.drain(..));
        for mut batch in batches {
            batch.descriptors.destroy(vk_device);
        }
        // SAFETY: every command buffer of the pool has completed (waited for
        // above) or was never submitted; destroying the pool frees them.
        unsafe { vk_device.destroy_command_pool(self.pool, None) };
    }
}
