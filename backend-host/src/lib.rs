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
#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(unsafe_code)]

mod builtins;
mod kernels;
mod memory;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use capture_core::{
    Availability, Builtin, Builtins, DeviceInfo, DeviceSlice, Driver, DriverError, Error,
    GraphDriver, HostSlice, Launch, Signature,
};

pub use kernels::{Body, Group, Kernel, Reader, View};
pub use memory::{DevicePage, HostPage, Memory, PageKind, UNWRITTEN};

use kernels::Dispatch;
use memory::Range;
use worker::{Command, Op, Worker};

/// The host backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Host;

/// The host "device": shared by every stream, counting what it hands out.
#[derive(Debug, Default)]
pub struct HostDevice {
    next_stream: AtomicU64,
    live_pages: AtomicU64,
}

impl HostDevice {
    /// Pages allocated and not yet released, device and host together.
    pub fn live_pages(&self) -> u64 {
        self.live_pages.load(Ordering::Relaxed)
    }
}

/// A recording in progress.
#[derive(Debug, Default)]
struct Recording {
    ops: Vec<Op>,
    /// Why the recording can no longer become a graph (a host sync).
    invalid: Option<String>,
    /// Pages allocated since `begin`.
    allocated: usize,
}

/// A stream of the host backend: a worker thread and, while recording, the
/// work recorded instead of sent to it.
pub struct HostStream {
    device: Arc<HostDevice>,
    worker: Worker,
    next_signal: u64,
    recording: Option<Recording>,
}

/// An instantiated graph: the recorded work, replayed as one command.
#[derive(Debug)]
pub struct HostGraph {
    ops: Arc<[Op]>,
}

impl HostGraph {
    /// Recorded operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The first released page any recorded operation touches.
    fn released_page(&self) -> Option<String> {
        self.ops
            .iter()
            .find_map(Op::released)
            .map(|range| range.memory.describe())
    }
}

fn error(op: &'static str, message: impl Into<String>) -> DriverError {
    DriverError::new(Host::NAME, op, message)
}

impl HostStream {
    /// Send `op` to the worker, or record it.
    fn issue(&mut self, op: Op, what: &'static str) -> Result<(), DriverError> {
        if let Some(recording) = &mut self.recording {
            recording.ops.push(op);
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
    type Device = HostDevice;
    type Stream = HostStream;
    type DevicePage = DevicePage;
    type HostPage = HostPage;
    type Signal = u64;
    type Kernel = Kernel;

    const NAME: &'static str = "host";

    fn probe() -> Availability {
        Availability::Available(Self::device_info(&HostDevice::default()))
    }

    fn open() -> Result<Arc<HostDevice>, DriverError> {
        Ok(Arc::new(HostDevice::default()))
    }

    fn device_info(_device: &HostDevice) -> DeviceInfo {
        DeviceInfo {
            // CUDA's grid limit: a grid the host runs is one a GPU runs.
            max_groups: [i32::MAX as u32, 65_535, 65_535],
            ..DeviceInfo::new(
                "host reference (worker thread per stream)",
                env!("CARGO_PKG_VERSION"),
            )
        }
    }

    fn signature(kernel: &Kernel) -> &Signature {
        kernel.signature()
    }

    fn create_stream(device: &Arc<HostDevice>) -> Result<HostStream, DriverError> {
        let index = device.next_stream.fetch_add(1, Ordering::Relaxed);
        let worker = Worker::spawn(format!("host-stream-{index}"))
            .map_err(|err| error("create stream", err.to_string()))?;
        Ok(HostStream {
            device: device.clone(),
            worker,
            next_signal: 0,
            recording: None,
        })
    }

    fn allocate_device_page(
        stream: &mut HostStream,
        bytes: u64,
    ) -> Result<DevicePage, DriverError> {
        let page = DevicePage(page(PageKind::Device, bytes)?);
        stream.allocated_page();
        Ok(page)
    }

    fn release_device_page(stream: &mut HostStream, page: DevicePage) {
        stream.device.live_pages.fetch_sub(1, Ordering::Relaxed);
        page.0.release();
    }

    fn allocate_host_page(stream: &mut HostStream, bytes: u64) -> Result<HostPage, DriverError> {
        let page = HostPage(page(PageKind::Host, bytes)?);
        stream.allocated_page();
        Ok(page)
    }

    fn release_host_page(stream: &mut HostStream, page: HostPage) {
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
        stream: &mut HostStream,
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
        stream: &mut HostStream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        let op = Op::Copy {
            src: Range::new(&src.page.0, src.offset, src.len),
            dst: Range::new(&dst.page.0, dst.offset, dst.len),
        };
        stream.issue(op, "copy to host")
    }

    fn launch(stream: &mut HostStream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
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

    fn signal(stream: &mut HostStream) -> Result<u64, DriverError> {
        stream.refuse_sync("signal")?;
        stream.next_signal += 1;
        if stream.worker.send(Command::Signal(stream.next_signal)) {
            Ok(stream.next_signal)
        } else {
            Err(error("signal", "the stream's worker thread has stopped"))
        }
    }

    fn fence(stream: &mut HostStream, signal: u64) -> Result<(), DriverError> {
        stream.refuse_sync("fence")?;
        stream
            .worker
            .wait(signal)
            .map_err(|err| error("fence", err))
    }
}

impl GraphDriver for Host {
    type Executable = HostGraph;

    fn begin(stream: &mut HostStream) -> Result<(), DriverError> {
        if stream.recording.is_some() {
            return Err(error("begin capture", "the stream is already recording"));
        }
        stream.recording = Some(Recording::default());
        Ok(())
    }

    fn instantiate(stream: &mut HostStream, doomed: Option<Error>) -> Result<HostGraph, Error> {
        // Leave recording mode before anything else can fail.
        let recording = stream
            .recording
            .take()
            .ok_or_else(|| error("instantiate", "the stream is not recording"))?;
        if let Some(doomed) = doomed {
            return Err(doomed);
        }
        if let Some(reason) = recording.invalid {
            return Err(error(
                "instantiate",
                format!("the recording was invalidated: {reason}"),
            )
            .into());
        }
        if recording.allocated > 0 {
            return Err(error(
                "instantiate",
                format!(
                    "{} page(s) were allocated while recording; a graph that allocates \
                     replays once and then fails",
                    recording.allocated
                ),
            )
            .into());
        }
        Ok(HostGraph {
            ops: recording.ops.into(),
        })
    }

    fn upload(exec: &HostGraph, _stream: &mut HostStream) -> Result<(), DriverError> {
        match exec.released_page() {
            Some(page) => Err(error(
                "upload",
                format!("the graph touches {page}, which was released"),
            )),
            None => Ok(()),
        }
    }

    fn replay(exec: &HostGraph, stream: &mut HostStream) -> Result<(), DriverError> {
        if stream.recording.is_some() {
            return Err(error("replay", "the stream is recording"));
        }
        if let Some(page) = exec.released_page() {
            return Err(error(
                "replay",
                format!("the graph touches {page}, which was released"),
            ));
        }
        if stream.worker.send(Command::Replay(exec.ops.clone())) {
            Ok(())
        } else {
            Err(error("replay", "the stream's worker thread has stopped"))
        }
    }
}

impl Builtins for Host {
    fn builtin(_device: &Arc<HostDevice>, which: Builtin) -> Result<Kernel, DriverError> {
        builtins::build(which)
    }
}
