//! A stream: its command pool, its timeline semaphore, the eager batch it
//! is filling, and the capture window it records; beginning and ending a
//! window are the stream's own transitions.
//!
//! Submitting every launch on its own would make the host pay a queue
//! submission per launch, so eager work collects in a primary command buffer
//! that is submitted when a fence or a non-blocking check needs it, with a
//! replay, at a window's begin, or once it is full. Each submission signals
//! the next value of the stream's timeline, which is what a [`Signal`]
//! names; taking a signal submits nothing: it names the value the pending
//! batch will signal once submitted.
//!
//! A stream owns a fixed set of [`BATCHES`] eager command buffers, made with
//! it; when all are in flight the next batch waits for the oldest. With each
//! batch's room fixed too, eager work and replays never allocate.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ash::vk;
use capture_core::DriverError;

use crate::barriers::device_barrier;
use crate::conditional::predicate_kernel;
use crate::device::Device;
use crate::error::{error, vk_error};
use crate::kernels::KernelObjects;
use crate::memory::Buffer;
use crate::recorder::{Copy, Recorder};
use crate::recording::{Recording, allocate_command_buffer};

/// Eager command buffers each stream owns: one being filled while the
/// others run.
pub(crate) const BATCHES: usize = 4;

/// A point on a stream's timeline: the value its semaphore reaches once the
/// work issued up to the signal has completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Signal(pub(crate) u64);

/// A point on one stream's timeline that another stream's next submission
/// waits for on the device.
#[derive(Clone)]
pub struct Event {
    timeline: Arc<Timeline>,
    value: u64,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({})", self.value)
    }
}

/// A timeline semaphore, shared with the executables replayed on it so they
/// can wait for their last replay when they drop.
pub(crate) struct Timeline {
    device: Arc<Device>,
    semaphore: vk::Semaphore,
    /// Whether another stream's submission waited on it.
    waited_on: AtomicBool,
}

impl Timeline {
    /// The value the timeline has reached.
    pub(crate) fn reached(&self) -> Result<u64, vk::Result> {
        self.device.reached(self.semaphore)
    }

    /// Blocks until the timeline reaches `value`.
    pub(crate) fn wait(&self, value: u64) -> Result<(), vk::Result> {
        self.device.wait(self.semaphore, value)
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        if *self.waited_on.get_mut() {
            self.device.before_destroying_waited();
        }
        // SAFETY: every holder waited for the values it submitted before
        // letting go, so no pending submission signals the semaphore.
        unsafe { self.device.device.destroy_semaphore(self.semaphore, None) };
    }
}

/// The last value each timeline an executable was replayed on signals for
/// its latest replay there.
pub(crate) type Uses = Vec<(Arc<Timeline>, u64)>;

/// Blocks until the device is past every use in `uses`.
pub(crate) fn wait_past(uses: &Uses) {
    for (timeline, value) in uses {
        // A failure (device lost) means nothing will run any more either.
        if let Err(e) = timeline.wait(*value) {
            log::warn!("vulkan: waiting for a replay failed: {e:?}");
        }
    }
}

/// One in-order queue of work on a device.
pub struct Stream {
    device: Arc<Device>,
    pool: vk::CommandPool,
    timeline: Arc<Timeline>,
    /// The last value a successful submission will signal; a failed
    /// submission never advances it, so no fence waits for a value nothing
    /// will signal.
    last: u64,
    /// The eager batch being filled, if any.
    batch: Option<Recorder>,
    /// Submitted batches, oldest first, with the value that completes each.
    in_flight: VecDeque<(u64, Recorder)>,
    /// Batches whose work completed, ready to be filled again.
    idle: Vec<Recorder>,
    /// The capture window being recorded, if any.
    recording: Option<Recording>,
    /// The kernel that computes conditional predicates, built on first use.
    predicate: Option<Arc<KernelObjects>>,
    /// Other streams' points the next submission waits for.
    waits: Vec<(Arc<Timeline>, u64)>,
    /// Timelines a submission waits on, each kept alive until the value of
    /// this stream's timeline that completes that submission.
    waited: VecDeque<(u64, Arc<Timeline>)>,
    /// A batch that failed to submit: its work had already been accepted,
    /// so the failure is asynchronous and surfaces at the next signal,
    /// fence or check, as the contract says such failures do.
    lost: Option<DriverError>,
}

impl Stream {
    /// Creates a stream with its own command pool, timeline and eager
    /// command buffers.
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
            waited_on: AtomicBool::new(false),
        });
        let pool_info = vk::CommandPoolCreateInfo::default()
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER)
            .queue_family_index(device.queue_family);
        // SAFETY: the queue family exists on this device.
        let pool = unsafe { vk_device.create_command_pool(&pool_info, None) }
            .map_err(|e| vk_error(OP, e))?;
        let mut stream = Stream {
            device: Arc::clone(device),
            pool,
            timeline,
            last: 0,
            batch: None,
            in_flight: VecDeque::with_capacity(BATCHES),
            idle: Vec::with_capacity(BATCHES),
            recording: None,
            predicate: None,
            waits: Vec::new(),
            waited: VecDeque::new(),
            lost: None,
        };
        for _ in 0..BATCHES {
            // On an error the stream drops, destroying the pool and with it
            // the buffers made so far.
            let cmd = allocate_command_buffer(vk_device, pool, vk::CommandBufferLevel::PRIMARY)
                .map_err(|e| vk_error(OP, e))?;
            stream.idle.push(Recorder::eager(cmd));
        }
        Ok(stream)
    }

    /// The device the stream runs on.
    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The stream's timeline.
    pub(crate) fn timeline(&self) -> &Arc<Timeline> {
        &self.timeline
    }

    /// Releases what the device is done with, the timeline having reached
    /// `reached`: completed batches become idle.
    fn reclaim_to(&mut self, reached: u64) {
        while self
            .waited
            .front()
            .is_some_and(|(value, _)| *value <= reached)
        {
            self.waited.pop_front();
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

    /// As [`Stream::reclaim_to`], reading how far the timeline is.
    fn reclaim(&mut self) {
        if self.in_flight.is_empty() && self.waited.is_empty() {
            return;
        }
        match self.timeline.reached() {
            Ok(reached) => self.reclaim_to(reached),
            Err(e) => log::warn!("vulkan: reading a timeline failed: {e:?}"),
        }
    }

    /// A begun primary command buffer whose first command makes earlier
    /// submissions' writes visible; waits for the oldest batch in flight
    /// when every one is.
    fn start_batch(&mut self) -> Result<Recorder, DriverError> {
        const OP: &str = "begin command buffer";
        self.reclaim();
        if self.idle.is_empty()
            && let Some(&(oldest, _)) = self.in_flight.front()
        {
            self.timeline
                .wait(oldest)
                .map_err(|e| vk_error("wait for a batch", e))?;
            self.reclaim_to(oldest);
        }
        let Some(batch) = self.idle.pop() else {
            return Err(error(OP, "no eager command buffer is free"));
        };
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        let vk_device = &self.device.device;
        // SAFETY: the command buffer is not pending (it is new, or its batch
        // completed); its pool allows an implicit reset on begin.
        if let Err(e) = unsafe { vk_device.begin_command_buffer(batch.cmd, &begin) } {
            self.idle.push(batch);
            return Err(vk_error(OP, e));
        }
        device_barrier(vk_device, batch.cmd);
        Ok(batch)
    }

    /// Submits the eager batch; a failure is kept for the next signal,
    /// fence or check.
    fn submit_or_keep_failure(&mut self) {
        if let Err(e) = self.submit() {
            log::error!("vulkan: submitting an eager batch failed: {e}");
            self.lost.get_or_insert(e);
        }
    }

    /// Runs `record` on the capture window's recorder, or on the eager batch
    /// (started on demand, submitted once full).
    pub(crate) fn record(
        &mut self,
        record: impl FnOnce(&Arc<Device>, &mut Recorder) -> Result<(), DriverError>,
    ) -> Result<(), DriverError> {
        if let Some(recording) = &mut self.recording {
            return record(&self.device, recording.recorder());
        }
        if self.batch.as_ref().is_some_and(|b| !b.has_room()) {
            self.submit_or_keep_failure();
        }
        let mut batch = match self.batch.take() {
            Some(batch) => batch,
            None => self.start_batch()?,
        };
        let result = record(&self.device, &mut batch);
        let full = !batch.has_room();
        self.batch = Some(batch);
        result?;
        if full {
            self.submit_or_keep_failure();
        }
        Ok(())
    }

    /// Records `copy`.
    pub(crate) fn copy(&mut self, copy: &Copy<'_>) -> Result<(), DriverError> {
        self.record(|device, recorder| recorder.copy(device, copy))
    }

    /// Submits the eager batch, if it holds any command.
    fn submit(&mut self) -> Result<(), DriverError> {
        self.submit_with(None).map(|_| ())
    }

    /// Submits the eager batch, if it holds any command, then `extra` (a
    /// replay's primary), as one submission; returns the value that
    /// completes it (the last value, when there was nothing to submit).
    ///
    /// When `extra` fails to submit with eager work, the eager work's loss
    /// is also kept for the next fence.
    pub(crate) fn submit_with(
        &mut self,
        extra: Option<vk::CommandBuffer>,
    ) -> Result<u64, DriverError> {
        let vk_device = &self.device.device;
        let mut batch = match self.batch.take() {
            Some(batch) if batch.commands() > 0 => Some(batch),
            empty => {
                // A begun batch without commands stays to be filled.
                self.batch = empty;
                None
            }
        };
        let mut cmds = [vk::CommandBuffer::null(); 2];
        let mut count = 0;
        if let Some(mut ended) = batch.take() {
            if let Err(e) = ended.finish(vk_device) {
                ended.recycle(vk_device);
                self.idle.push(ended);
                if extra.is_some() {
                    self.lost.get_or_insert(e.clone());
                }
                return Err(e);
            }
            cmds[0] = ended.cmd;
            count = 1;
            batch = Some(ended);
        }
        if let Some(extra) = extra {
            cmds[count] = extra;
            count += 1;
        }
        let Some(cmds) = cmds.get(..count).filter(|cmds| !cmds.is_empty()) else {
            return Ok(self.last);
        };
        let value = self.last + 1;
        let waits: Vec<_> = self
            .waits
            .iter()
            .map(|(timeline, value)| {
                timeline.waited_on.store(true, Ordering::Relaxed);
                (timeline.semaphore, *value)
            })
            .collect();
        match self
            .device
            .submit(cmds, self.timeline.semaphore, value, &waits)
        {
            Ok(()) => {
                self.last = value;
                for (timeline, _) in self.waits.drain(..) {
                    self.waited.push_back((value, timeline));
                }
                if let Some(batch) = batch {
                    self.in_flight.push_back((value, batch));
                }
                Ok(value)
            }
            Err(e) => {
                if let Some(mut batch) = batch {
                    batch.recycle(vk_device);
                    self.idle.push(batch);
                    if extra.is_some() {
                        self.lost.get_or_insert(vk_error("submit eager work", e));
                    }
                }
                Err(vk_error("submit", e))
            }
        }
    }

    /// Fails with a batch's earlier submission failure, once.
    fn take_lost(&mut self) -> Result<(), DriverError> {
        self.lost.take().map_or(Ok(()), Err)
    }

    /// Marks the end of the work so far, submitting nothing: the value the
    /// pending batch will signal, or the last one submitted when no eager
    /// work is pending.
    pub(crate) fn signal(&mut self) -> Result<Signal, DriverError> {
        self.take_lost()?;
        let pending = self.batch.as_ref().is_some_and(|b| b.commands() > 0);
        Ok(Signal(self.last + u64::from(pending)))
    }

    /// Makes sure the work `signal` names was submitted, submitting the
    /// pending batch when it is that work.
    fn submitted(&mut self, op: &'static str, signal: Signal) -> Result<(), DriverError> {
        if signal.0 == self.last + 1 {
            self.submit()?;
        }
        if signal.0 > self.last {
            return Err(error(
                op,
                format!("{signal:?} was never submitted on this stream"),
            ));
        }
        Ok(())
    }

    /// Waits until the stream's timeline reaches `signal`.
    pub(crate) fn fence(&mut self, signal: Signal) -> Result<(), DriverError> {
        const OP: &str = "fence";
        self.take_lost()?;
        self.submitted(OP, signal)?;
        self.timeline.wait(signal.0).map_err(|e| vk_error(OP, e))?;
        self.reclaim_to(signal.0);
        Ok(())
    }

    /// Whether the stream's timeline has reached `signal`, without waiting.
    pub(crate) fn is_done(&mut self, signal: Signal) -> Result<bool, DriverError> {
        const OP: &str = "check a signal";
        self.take_lost()?;
        self.submitted(OP, signal)?;
        let reached = self.timeline.reached().map_err(|e| vk_error(OP, e))?;
        self.reclaim_to(reached);
        Ok(reached >= signal.0)
    }

    /// This stream's work so far, submitted, as a point another stream can
    /// wait for.
    pub(crate) fn record_event(&mut self) -> Result<Event, DriverError> {
        const OP: &str = "record an event";
        if self.recording.is_some() {
            return Err(error(OP, "the stream is recording"));
        }
        let signal = self.signal()?;
        self.submitted(OP, signal)?;
        Ok(Event {
            timeline: Arc::clone(&self.timeline),
            value: signal.0,
        })
    }

    /// Makes the work submitted from here wait for `event`. What is pending
    /// goes first, so only later work waits.
    pub(crate) fn wait_event(&mut self, event: &Event) -> Result<(), DriverError> {
        const OP: &str = "wait for an event";
        if self.recording.is_some() {
            return Err(error(OP, "the stream is recording"));
        }
        if !Arc::ptr_eq(&event.timeline.device, &self.device) {
            return Err(error(OP, "the event was recorded on another device"));
        }
        if Arc::ptr_eq(&event.timeline, &self.timeline) {
            return Err(error(OP, "the event was recorded on this stream"));
        }
        self.take_lost()?;
        self.submit()?;
        match self
            .waits
            .iter_mut()
            .find(|(timeline, _)| Arc::ptr_eq(timeline, &event.timeline))
        {
            Some((_, value)) => *value = (*value).max(event.value),
            None => self.waits.push((Arc::clone(&event.timeline), event.value)),
        }
        Ok(())
    }

    /// Starts recording a capture window: from here every copy and launch
    /// is kept prepared for the window's secondary command buffer.
    pub(crate) fn begin(&mut self) -> Result<(), DriverError> {
        // Eager work issued before the window need not wait for its end. It
        // was accepted already, so a failure to submit it is kept for the
        // next fence, as any asynchronous failure is.
        self.submit_or_keep_failure();
        self.recording = Some(Recording::begin(&self.device)?);
        Ok(())
    }

    /// Opens a conditional of `kind` on the `u32` at `flag` in the window
    /// being recorded.
    pub(crate) fn open_conditional(
        &mut self,
        kind: capture_core::Conditional,
        flag: (&Arc<Buffer>, u64),
    ) -> Result<(), DriverError> {
        if self.recording.is_none() {
            return Err(error("open conditional", "the stream is not recording"));
        }
        let kernel = match &self.predicate {
            Some(kernel) => Arc::clone(kernel),
            None => Arc::clone(self.predicate.insert(predicate_kernel(&self.device)?)),
        };
        match &mut self.recording {
            Some(recording) => {
                recording
                    .recorder()
                    .open_conditional(&self.device, &kernel, kind, flag)
            }
            None => Err(error("open conditional", "the stream is not recording")),
        }
    }

    /// Runs `f` on the window's recorder; refused when not recording.
    pub(crate) fn in_window(
        &mut self,
        op: &'static str,
        f: impl FnOnce(&mut Recorder) -> Result<(), DriverError>,
    ) -> Result<(), DriverError> {
        match &mut self.recording {
            Some(recording) => f(recording.recorder()),
            None => Err(error(op, "the stream is not recording")),
        }
    }

    /// Stops recording and hands the window's recording back, its commands
    /// prepared for instantiation to encode.
    pub(crate) fn end(&mut self) -> Result<Recording, DriverError> {
        self.recording
            .take()
            .ok_or_else(|| error("end capture", "the stream is not recording"))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let vk_device = &self.device.device;
        // A failure (device lost) means nothing will run any more either.
        if let Err(e) = self.timeline.wait(self.last) {
            log::warn!("vulkan: waiting for a dropped stream failed: {e:?}");
        }
        self.recording = None;
        let batches = self
            .batch
            .take()
            .into_iter()
            .chain(self.in_flight.drain(..).map(|(_, b)| b))
            .chain(self.idle.drain(..));
        for mut batch in batches {
            batch.destroy(vk_device);
        }
        // SAFETY: every command buffer of the pool has completed (waited for
        // above) or was never submitted; destroying the pool frees them.
        unsafe { vk_device.destroy_command_pool(self.pool, None) };
    }
}
