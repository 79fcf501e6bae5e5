//! The CPU reference backend.
//!
//! Real execution on host memory, asynchronous like a GPU: each stream runs
//! its work in order on a worker thread, so a missing fence gives a wrong
//! answer here as it would on a device. Its capture rules are the strictest
//! of any backend:
//!
//! - a page allocated while recording makes `instantiate` refuse, because a
//!   graph that allocates replays once and then fails on every driver that
//!   permits it;
//! - a signal or fence on a recording stream fails and invalidates the
//!   recording, as a host sync does on CUDA;
//! - recorded copies keep the pinned page and read it again on every replay;
//! - a replay that would touch a released page fails with an error naming
//!   the page, where a GPU would silently read freed memory.
//!
//! A kernel that fails as it runs (its closure returns an error or panics)
//! is a fault of its stream, reported by the next fence with the kernel's
//! name and sticky from then on, as a GPU's fault is (on CUDA and HIP, for
//! the whole context): every later fence of that stream fails with it.
//! Launches that do not match their kernel never get this far (the core
//! refuses them), so a fault means the kernel's own code failed. To go on,
//! destroy the stream and create another; other streams are not affected.
#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(unsafe_code)]

mod builtins;
mod device;
mod kernels;
mod level;
mod memory;
mod op;
mod program;
mod schedule;
mod worker;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use capture_core::{
    Bodies, Builtin, Builtins, Conditional, DeviceInfo, DeviceSlice, Driver, DriverError,
    GraphDriver, HostSlice, ImportRefusal, Launch, Order, Signature, Updated,
};

pub use device::Device;
pub use kernels::{Body, Group, Kernel, Reader, View};
pub use memory::{DevicePage, HostPage, Memory, PageKind, UNWRITTEN};

use kernels::Dispatch;
use memory::Range;
use op::Op;
use program::Program;
use worker::{Command, Worker};

/// The host backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Host;

/// Host devices the backend offers: more than one, so that a process
/// driving several devices (one client per device) is tested here too.
pub const DEVICES: usize = 2;

/// Env var that picks the host device [`Driver::open`] opens, by index.
pub const DEVICE_ENV: &str = "CAPTURE_HOST_DEVICE";

/// A recording: in progress on a stream, then closed and handed to the
/// core.
#[derive(Debug, Default)]
pub struct Recording {
    program: Program,
    /// Why the recording can no longer become a graph (a host sync).
    invalid: Option<String>,
    /// Pages allocated since `begin`.
    allocated: usize,
    /// Conditionals open, innermost last: while one is, `program` is its
    /// current body.
    open: Vec<OpenConditional>,
}

/// A conditional being recorded.
#[derive(Debug)]
struct OpenConditional {
    kind: Conditional,
    flag: Range,
    /// The program it was opened in.
    outer: Program,
    bodies: Vec<Program>,
}

/// A stream of the host backend: a worker thread and, while recording, the
/// work recorded instead of sent to it.
pub struct Stream {
    device: Arc<Device>,
    worker: Worker,
    next_signal: u64,
    recording: Option<Recording>,
    /// The size of the last recording, which the next reserves at once.
    last_recording: (usize, usize, usize),
}

/// A point on one host stream's worker that another's can wait for: the
/// worker's progress and the signal it passes there.
#[derive(Clone)]
pub struct Event {
    device: Arc<Device>,
    progress: worker::Shared,
    value: u64,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({})", self.value)
    }
}

/// An instantiated graph: the recorded work, replayed as one command.
#[derive(Debug)]
pub struct Executable {
    program: Arc<Program>,
}

impl Executable {
    /// Whether `ops` does the same kinds of work as this graph, in the same
    /// order, with the same kernels: what an update in place may change is
    /// only what the work runs on (buffers, grids, parameters, info).
    fn same_shape(&self, program: &Program) -> bool {
        self.program.same_shape(program)
    }

    /// Recorded operations.
    pub fn len(&self) -> usize {
        self.program.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.program.len() == 0
    }

    /// The first released page any recorded operation touches.
    fn released_page(&self) -> Option<String> {
        self.program.released().map(|range| range.memory.describe())
    }
}

/// What host device `index` is.
fn info(index: usize) -> DeviceInfo {
    DeviceInfo {
        // CUDA's grid limit: a grid the host runs is one a GPU runs.
        max_groups: [i32::MAX as u32, 65_535, 65_535],
        index,
        kind: "CPU".into(),
        ..DeviceInfo::new(
            format!("host reference {index} (worker thread per stream)"),
            env!("CARGO_PKG_VERSION"),
        )
    }
}

fn error(op: &'static str, message: impl Into<String>) -> DriverError {
    DriverError::new(Host::NAME, op, message)
}

impl Stream {
    /// Send `op` to the worker, or record it.
    fn issue(&mut self, op: Op, what: &'static str) -> Result<(), DriverError> {
        if let Some(recording) = &mut self.recording {
            recording.program.push(op);
            return Ok(());
        }
        if self.worker.send(Command::Op(op)) {
            Ok(())
        } else {
            Err(error(what, "the stream's worker thread has stopped"))
        }
    }

    /// A host sync on a recording stream: refused, and the recording can no
    /// longer become a graph.
    fn refuse_sync(&mut self, op: &'static str) -> Result<(), DriverError> {
        match &mut self.recording {
            Some(recording) => {
                let reason = format!("{op} is a host sync and was issued while recording");
                recording.invalid.get_or_insert(reason.clone());
                Err(error(op, reason))
            }
            None => Ok(()),
        }
    }

    fn allocated_page(&mut self) {
        self.device.live_pages.fetch_add(1, Ordering::Relaxed);
        if let Some(recording) = &mut self.recording {
            recording.allocated += 1;
        }
    }

    /// Whether the stream is recording.
    pub fn is_recording(&self) -> bool {
        self.recording.is_some()
    }
}

fn page(kind: PageKind, bytes: u64) -> Result<Arc<Memory>, DriverError> {
    usize::try_from(bytes)
        .ok()
        .and_then(|len| Memory::new(kind, len))
        .ok_or_else(|| {
            error(
                "allocate page",
                format!("{bytes} bytes do not fit in memory"),
            )
        })
}

impl Driver for Host {
    type Device = Device;
    type Stream = Stream;
    type DevicePage = DevicePage;
    type HostPage = HostPage;
    type Signal = u64;
    type Kernel = Kernel;
    type Event = Event;

    const NAME: &'static str = "host";

    fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
        Ok((0..DEVICES).map(info).collect())
    }

    fn open_index(index: usize) -> Result<Arc<Device>, DriverError> {
        if index >= DEVICES {
            return Err(error(
                "open",
                format!("host device {index} does not exist; there are {DEVICES}"),
            ));
        }
        Ok(Arc::new(Device {
            index,
            ..Device::default()
        }))
    }

    fn open() -> Result<Arc<Device>, DriverError> {
        match std::env::var(DEVICE_ENV) {
            Ok(wanted) if !wanted.trim().is_empty() => {
                let index = wanted.trim().parse().map_err(|_| {
                    error(
                        "open",
                        format!("{DEVICE_ENV}={wanted} is not a device index"),
                    )
                })?;
                Self::open_index(index)
            }
            _ => Self::open_index(0),
        }
    }

    fn device_info(device: &Device) -> DeviceInfo {
        info(device.index)
    }

    #[inline]
    fn signature(kernel: &Kernel) -> &Signature {
        kernel.signature()
    }

    fn is_stream_of(device: &Arc<Device>, stream: &Stream) -> bool {
        Arc::ptr_eq(device, &stream.device)
    }

    fn create_stream(device: &Arc<Device>) -> Result<Stream, DriverError> {
        let index = device.next_stream.fetch_add(1, Ordering::Relaxed);
        let worker = Worker::spawn(format!("host-stream-{index}"))
            .map_err(|err| error("create stream", err.to_string()))?;
        Ok(Stream {
            device: device.clone(),
            worker,
            next_signal: 0,
            recording: None,
            last_recording: (0, 0, 0),
        })
    }

    fn allocate_device_page(stream: &mut Stream, bytes: u64) -> Result<DevicePage, DriverError> {
        let page = DevicePage(page(PageKind::Device, bytes)?);
        stream.allocated_page();
        Ok(page)
    }

    fn release_device_page(stream: &mut Stream, page: DevicePage) {
        stream.device.live_pages.fetch_sub(1, Ordering::Relaxed);
        page.0.release();
    }

    fn imported_bytes(device: &Device, page: &DevicePage) -> Result<u64, ImportRefusal> {
        page.imported_bytes(device)
    }

    fn allocate_host_page(stream: &mut Stream, bytes: u64) -> Result<HostPage, DriverError> {
        let page = HostPage(page(PageKind::Host, bytes)?);
        stream.allocated_page();
        Ok(page)
    }

    fn release_host_page(stream: &mut Stream, page: HostPage) {
        stream.device.live_pages.fetch_sub(1, Ordering::Relaxed);
        page.0.release();
    }

    fn write_host(page: &HostPage, offset: u64, bytes: &[u8]) {
        Range::new(&page.0, offset, bytes.len() as u64).store(bytes);
    }

    fn read_host(page: &HostPage, offset: u64, out: &mut [u8]) {
        if let Some(data) = Range::new(&page.0, offset, out.len() as u64).load() {
            out.copy_from_slice(&data);
        }
    }

    fn copy_to_device(
        stream: &mut Stream,
        src: HostSlice<'_, Self>,
        dst: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        let op = Op::Copy {
            src: Range::new(&src.page.0, src.offset, src.len),
            dst: Range::new(&dst.page.0, dst.offset, dst.len),
        };
        stream.issue(op, "copy to device")
    }

    fn copy_to_host(
        stream: &mut Stream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        let op = Op::Copy {
            src: Range::new(&src.page.0, src.offset, src.len),
            dst: Range::new(&dst.page.0, dst.offset, dst.len),
        };
        stream.issue(op, "copy to host")
    }

    fn launch(stream: &mut Stream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
        let op = Op::Kernel(Dispatch {
            kernel: launch.kernel.clone(),
            groups: launch.groups,
            bindings: launch
                .bindings
                .iter()
                .map(|b| Range::new(&b.slice.page.0, b.slice.offset, b.slice.len))
                .collect(),
            info: launch
                .info
                .map(|info| Range::new(&info.page.0, info.offset, info.len)),
            params: launch.params.iter().copied().collect(),
        });
        stream.issue(op, "launch")
    }

    fn signal(stream: &mut Stream) -> Result<u64, DriverError> {
        stream.refuse_sync("signal")?;
        stream.next_signal += 1;
        if stream.worker.send(Command::Signal(stream.next_signal)) {
            Ok(stream.next_signal)
        } else {
            Err(error("signal", "the stream's worker thread has stopped"))
        }
    }

    fn fence(stream: &mut Stream, signal: u64) -> Result<(), DriverError> {
        stream.refuse_sync("fence")?;
        stream
            .worker
            .wait(signal)
            .map_err(|err| error("fence", err))
    }

    fn is_done(stream: &mut Stream, signal: u64) -> Result<bool, DriverError> {
        stream.refuse_sync("query a signal")?;
        stream
            .worker
            .passed(signal)
            .map_err(|err| error("query a signal", err))
    }

    fn record_event(stream: &mut Stream) -> Result<Event, DriverError> {
        const OP: &str = "record an event";
        if stream.recording.is_some() {
            return Err(error(OP, "the stream is recording"));
        }
        let value = Self::signal(stream).map_err(|err| error(OP, err.message))?;
        Ok(Event {
            device: stream.device.clone(),
            progress: stream.worker.progress.clone(),
            value,
        })
    }

    /// The worker waits; the caller does not.
    fn wait_event(stream: &mut Stream, event: &Event) -> Result<(), DriverError> {
        const OP: &str = "wait for an event";
        if stream.recording.is_some() {
            return Err(error(OP, "the stream is recording"));
        }
        if !Arc::ptr_eq(&event.device, &stream.device) {
            return Err(error(OP, "the event was recorded on another device"));
        }
        if Arc::ptr_eq(&event.progress, &stream.worker.progress) {
            return Err(error(OP, "the event was recorded on this stream"));
        }
        let command = Command::Wait(event.progress.clone(), event.value);
        if stream.worker.send(command) {
            Ok(())
        } else {
            Err(error(OP, "the stream's worker thread has stopped"))
        }
    }
}

impl GraphDriver for Host {
    type Recording = Recording;
    type Executable = Executable;

    fn begin(stream: &mut Stream) -> Result<(), DriverError> {
        if stream.recording.is_some() {
            return Err(error("begin capture", "the stream is already recording"));
        }
        stream.recording = Some(Recording {
            program: Program::sized_like(stream.last_recording),
            ..Recording::default()
        });
        Ok(())
    }

    fn end(stream: &mut Stream) -> Result<Recording, DriverError> {
        let mut recording = stream
            .recording
            .take()
            .ok_or_else(|| error("end capture", "the stream is not recording"))?;
        stream.last_recording = recording.program.size();
        recording.program.fit();
        Ok(recording)
    }

    fn instantiate(
        stream: &mut Stream,
        recording: Recording,
        order: Order<'_>,
    ) -> Result<Executable, DriverError> {
        check_recording(stream, &recording, "instantiate")?;
        let mut program = recording.program;
        keep(&mut program, order, "instantiate")?;
        Ok(Executable {
            program: Arc::new(program),
        })
    }

    fn update(
        stream: &mut Stream,
        exec: &mut Executable,
        recording: Recording,
        order: Order<'_>,
    ) -> Result<Updated<Recording>, DriverError> {
        check_recording(stream, &recording, "update")?;
        if !exec.same_shape(&recording.program) {
            return Ok(Updated::Topology(recording));
        }
        let mut program = recording.program;
        keep(&mut program, order, "update")?;
        // Replays already sent hold the old work's `Arc`: they finish with
        // it, as a GPU finishes the graph it launched. The worker drops it
        // after them.
        let old = std::mem::replace(&mut exec.program, Arc::new(program));
        stream.worker.send(Command::Release(old));
        Ok(Updated::InPlace)
    }

    fn conditionals(_stream: &Stream) -> Result<Bodies, String> {
        Ok(Bodies { copies: true })
    }

    fn open_conditional(
        stream: &mut Stream,
        kind: Conditional,
        flag: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        const OP: &str = "open conditional";
        let recording = stream
            .recording
            .as_mut()
            .ok_or_else(|| error(OP, "the stream is not recording"))?;
        if flag.len != 4 || !flag.offset.is_multiple_of(4) {
            return Err(error(OP, format!("the flag is not a u32: {flag:?}")));
        }
        let outer = std::mem::take(&mut recording.program);
        recording.open.push(OpenConditional {
            kind,
            flag: Range::new(&flag.page.0, flag.offset, flag.len),
            outer,
            bodies: Vec::new(),
        });
        Ok(())
    }

    fn next_body(stream: &mut Stream) -> Result<(), DriverError> {
        let recording = stream.recording.as_mut();
        let Some((open, program)) =
            recording.and_then(|r| r.open.last_mut().map(|open| (open, &mut r.program)))
        else {
            return Err(error("next body", "no conditional is open"));
        };
        if open.bodies.len() + 1 >= open.kind.bodies() {
            return Err(error(
                "next body",
                format!("the {} conditional has no more bodies", open.kind.name()),
            ));
        }
        open.bodies.push(std::mem::take(program));
        Ok(())
    }

    fn close_conditional(stream: &mut Stream, orders: &[Order<'_>]) -> Result<(), DriverError> {
        const OP: &str = "close conditional";
        let recording = stream
            .recording
            .as_mut()
            .ok_or_else(|| error(OP, "the stream is not recording"))?;
        let mut open = recording
            .open
            .pop()
            .ok_or_else(|| error(OP, "no conditional is open"))?;
        open.bodies
            .push(std::mem::replace(&mut recording.program, open.outer));
        if open.bodies.len() != open.kind.bodies() || orders.len() != open.bodies.len() {
            return Err(error(
                OP,
                format!(
                    "the {} conditional closed with {} body(ies) and {} order(s)",
                    open.kind.name(),
                    open.bodies.len(),
                    orders.len()
                ),
            ));
        }
        for (body, order) in open.bodies.iter_mut().zip(orders) {
            keep(body, *order, OP)?;
        }
        recording
            .program
            .push_conditional(open.kind, open.flag, open.bodies);
        Ok(())
    }

    fn upload(exec: &Executable, _stream: &mut Stream) -> Result<(), DriverError> {
        match exec.released_page() {
            Some(page) => Err(error(
                "upload",
                format!("the graph touches {page}, which was released"),
            )),
            None => Ok(()),
        }
    }

    fn replay(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
        if stream.recording.is_some() {
            return Err(error("replay", "the stream is recording"));
        }
        if let Some(page) = exec.released_page() {
            return Err(error(
                "replay",
                format!("the graph touches {page}, which was released"),
            ));
        }
        if stream.worker.send(Command::Replay(exec.program.clone())) {
            Ok(())
        } else {
            Err(error("replay", "the stream's worker thread has stopped"))
        }
    }
}

/// Make `program` keep `order`: a dependency graph is checked against the
/// ranges the program's steps touch before its steps may run side by side.
fn keep(program: &mut Program, order: Order<'_>, op: &'static str) -> Result<(), DriverError> {
    match order {
        Order::Chain => Ok(()),
        Order::Dependencies(dependencies) => program
            .keep_dependencies(dependencies)
            .map_err(|reason| error(op, format!("refused the dependency graph: {reason}"))),
    }
}

/// The tripwire a closed recording passes before it becomes work: the
/// refusals every other driver leaves to the core.
fn check_recording(
    stream: &Stream,
    recording: &Recording,
    op: &'static str,
) -> Result<(), DriverError> {
    if stream.recording.is_some() {
        return Err(error(op, "the stream is recording"));
    }
    if !recording.open.is_empty() {
        return Err(error(op, "a conditional was never closed"));
    }
    if let Some(reason) = &recording.invalid {
        return Err(error(
            op,
            format!("the recording was invalidated: {reason}"),
        ));
    }
    if recording.allocated > 0 {
        return Err(error(
            op,
            format!(
                "{} page(s) were allocated while recording; a graph that allocates \
                 replays once and then fails",
                recording.allocated
            ),
        ));
    }
    Ok(())
}

impl Builtins for Host {
    fn builtin(_device: &Arc<Device>, which: Builtin) -> Result<Kernel, DriverError> {
        builtins::build(which)
    }
}
