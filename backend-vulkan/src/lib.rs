//! The Vulkan backend of capture-core.
//!
//! A capture window keeps its launches and copies prepared; instantiation
//! encodes them into a secondary command buffer in the order the graph
//! keeps (the issue order, or the dependency graph level by level with one
//! barrier between levels), and an executable replays it from a primary
//! that executes it, so a replay costs one queue submission however many
//! launches the window held. Eager work is batched into primary command
//! buffers for the same reason.
//!
//! Kernels are SPIR-V or WGSL ([`Kernel`]); naga checks each module's
//! interface against the kernel's signature before the driver sees it. The
//! builtins are WGSL that `build.rs` compiles to SPIR-V, built through the
//! same path.
//!
//! libvulkan is loaded at run time, so the crate builds and runs anywhere
//! and reports a machine without Vulkan as unavailable.
//! [`Driver::devices`] lists every physical device, including those that
//! cannot run the backend (their [`DeviceInfo::kind`] says what they lack);
//! [`DEVICE_ENV`] picks the one [`Driver::open`] opens. [`VALIDATION_ENV`]
//! and [`SYNC_VALIDATION_ENV`] control the validation layer, whose findings
//! [`validation_counts`] reports.
//!
//! An eager launch and a replay allocate nothing on the heap: each stream
//! owns a fixed set of eager command buffers with fixed room, and a replay
//! is one submission of a recorded primary.
#![deny(unsafe_op_in_unsafe_fn)]

mod barriers;
mod conditional;
mod descriptors;
mod device;
mod error;
mod foreign;
mod graph;
mod instance;
mod kernels;
mod memory;
mod prepared;
mod raw;
mod recorder;
mod recording;
mod rendering;
mod shader;
mod stream;
mod validation;

use std::sync::Arc;

use capture_core::{
    Bodies, Builtin, Builtins, Conditional, DeviceInfo, DeviceSlice, Driver, DriverError,
    GraphDriver, HostSlice, ImportRefusal, Launch, Order, Signature, Updated,
};

/// The `ash` this backend is built with, whose handles [`Device::from_raw`],
/// [`DevicePage::from_raw`] and [`Kernel::from_raw`] take.
pub use ash;
pub use device::{DEVICE_ENV, Device, NO_CONDITIONAL_RENDERING_ENV};
pub use foreign::{ForeignBuffer, ForeignCommands};
pub use graph::Executable;
pub use instance::{SYNC_VALIDATION_ENV, VALIDATION_ENV};
pub use kernels::Kernel;
pub use memory::{DevicePage, HostPage};
pub use raw::RawDevice;
pub use recording::Recording;
pub use stream::{Event, Signal, Stream};
pub use validation::ValidationCounts;

use crate::error::error;
use crate::kernels::Code;
use crate::memory::Buffer;
use crate::recorder::{Bound, Copy, Dispatch, Recorder};

/// The Vulkan driver: a marker type naming the backend in generic code.
#[derive(Debug, Clone, Copy, Default)]
pub struct Vulkan;

/// What the validation layer reported on `device` so far.
///
/// A test opens its own device and checks this afterwards: Vulkan misuse is
/// undefined behaviour that most drivers tolerate silently, so zero errors
/// (with [`ValidationCounts::enabled`] true) is the only evidence of correct
/// use.
pub fn validation_counts(device: &<Vulkan as Driver>::Device) -> ValidationCounts {
    device.validation()
}

impl Driver for Vulkan {
    type Device = Device;
    type Stream = Stream;
    type DevicePage = DevicePage;
    type HostPage = HostPage;
    type Signal = Signal;
    type Kernel = Kernel;
    type Event = Event;

    const NAME: &'static str = "vulkan";

    /// Every physical device, in the driver's enumeration order, including
    /// those that cannot run the backend: their `kind` names what they lack
    /// (`CPU (no timeline semaphores)`). Lists without the validation layer.
    fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
        device::devices()
    }

    fn open_index(index: usize) -> Result<Arc<Device>, DriverError> {
        Device::open_index(index)
    }

    /// Opens the device [`DEVICE_ENV`] names (an index or a name
    /// substring), else the most capable one: a discrete GPU before an
    /// integrated, virtual or CPU device.
    fn open() -> Result<Arc<Device>, DriverError> {
        Device::open()
    }

    fn device_info(device: &Device) -> DeviceInfo {
        device.info.clone()
    }

    #[inline]
    fn signature(kernel: &Kernel) -> &Signature {
        kernel.signature()
    }

    fn is_stream_of(device: &Arc<Device>, stream: &Stream) -> bool {
        Arc::ptr_eq(device, stream.device())
    }

    fn create_stream(device: &Arc<Device>) -> Result<Stream, DriverError> {
        Stream::new(device)
    }

    fn allocate_device_page(stream: &mut Stream, bytes: u64) -> Result<DevicePage, DriverError> {
        memory::device_page(stream.device(), bytes)
    }

    fn release_device_page(_stream: &mut Stream, page: DevicePage) {
        drop(page);
    }

    fn imported_bytes(device: &Device, page: &DevicePage) -> Result<u64, ImportRefusal> {
        page.imported_bytes(device)
    }

    fn allocate_host_page(stream: &mut Stream, bytes: u64) -> Result<HostPage, DriverError> {
        memory::host_page(stream.device(), bytes)
    }

    fn release_host_page(_stream: &mut Stream, page: HostPage) {
        drop(page);
    }

    fn write_host(page: &HostPage, offset: u64, bytes: &[u8]) {
        page.0.write(offset, bytes);
    }

    fn read_host(page: &HostPage, offset: u64, out: &mut [u8]) {
        page.0.read(offset, out);
    }

    fn copy_to_device(
        stream: &mut Stream,
        src: HostSlice<'_, Self>,
        dst: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        copy(
            stream,
            "copy to device",
            (&src.page.0, src.offset, src.len),
            (&dst.page.0, dst.offset, dst.len),
            false,
        )
    }

    fn copy_to_host(
        stream: &mut Stream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        copy(
            stream,
            "copy to host",
            (&src.page.0, src.offset, src.len),
            (&dst.page.0, dst.offset, dst.len),
            true,
        )
    }

    fn launch(stream: &mut Stream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
        let bindings = launch.bindings.iter().map(|b| Bound {
            buffer: &b.slice.page.0,
            offset: b.slice.offset,
            len: b.slice.len,
            access: b.access,
        });
        let info = launch.info.map(|slice| Bound {
            buffer: &slice.page.0,
            offset: slice.offset,
            len: slice.len,
            access: capture_core::Access::Read,
        });
        match &launch.kernel.code {
            Code::Pipeline(objects) => {
                let dispatch = Dispatch {
                    kernel: objects,
                    groups: launch.groups,
                    bound: bindings.chain(info),
                    params: launch.params,
                };
                stream.record(|device, recorder| recorder.launch(device, dispatch))
            }
            Code::Foreign(op) => {
                stream.record(|device, recorder| recorder.foreign(device, op, bindings))
            }
        }
    }

    /// Names the value the pending eager batch will signal, submitting
    /// nothing; [`Driver::fence`] and [`Driver::is_done`] submit it when
    /// they need it.
    fn signal(stream: &mut Stream) -> Result<Signal, DriverError> {
        stream.signal()
    }

    fn fence(stream: &mut Stream, signal: Signal) -> Result<(), DriverError> {
        stream.fence(signal)
    }

    /// Reads the timeline with `vkGetSemaphoreCounterValue`, after
    /// submitting the pending batch when `signal` names it.
    fn is_done(stream: &mut Stream, signal: Signal) -> Result<bool, DriverError> {
        stream.is_done(signal)
    }

    /// Submits the stream's pending work, whose timeline value the event
    /// names.
    fn record_event(stream: &mut Stream) -> Result<Event, DriverError> {
        stream.record_event()
    }

    /// The stream's next submission waits for the event's timeline value.
    fn wait_event(stream: &mut Stream, event: &Event) -> Result<(), DriverError> {
        stream.wait_event(event)
    }
}

impl GraphDriver for Vulkan {
    type Recording = Recording;
    type Executable = Executable;

    fn begin(stream: &mut Stream) -> Result<(), DriverError> {
        stream.begin()
    }

    fn end(stream: &mut Stream) -> Result<Recording, DriverError> {
        stream.end()
    }

    /// Encodes the recording's prepared commands in `order`: under
    /// [`Order::Chain`] in issue order with a barrier before each command
    /// that conflicts with those since the last one; under
    /// [`Order::Dependencies`] level by level with one barrier between
    /// levels. [`Executable::barriers`] says how many that placed.
    fn instantiate(
        stream: &mut Stream,
        mut recording: Recording,
        order: Order<'_>,
    ) -> Result<Executable, DriverError> {
        if !Arc::ptr_eq(recording.device(), stream.device()) {
            return Err(error(
                "instantiate",
                "the recording belongs to another device",
            ));
        }
        recording.encode(order)?;
        Ok(Executable::new(recording))
    }

    /// Never in place: a closed recording is encoded into its own command
    /// buffer at instantiation, so an executable made over it costs less
    /// than moving it into the old one. The core swaps the new executable
    /// in behind the same graph and keeps the old one until the device is
    /// past its replays.
    fn update(
        _stream: &mut Stream,
        _exec: &mut Executable,
        recording: Recording,
        _order: Order<'_>,
    ) -> Result<Updated<Recording>, DriverError> {
        Ok(Updated::Topology(recording))
    }

    /// Where the device enabled `VK_EXT_conditional_rendering`: each body
    /// is encoded once per run it may make (a loop's up to its bound), on a
    /// predicate computed just before it. A copy in a body would run
    /// whether the body does or not, so the core refuses the caller's.
    fn conditionals(stream: &Stream) -> Result<Bodies, String> {
        match stream.device().rendering {
            Some(_) => Ok(Bodies { copies: false }),
            None if stream.device().is_adopted() => Err(
                "the device was adopted without RawDevice::conditional_rendering: \
                 VK_EXT_conditional_rendering is not known to be enabled on it"
                    .into(),
            ),
            None => Err("the device has no VK_EXT_conditional_rendering".into()),
        }
    }

    fn open_conditional(
        stream: &mut Stream,
        kind: Conditional,
        flag: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.open_conditional(kind, (&flag.page.0, flag.offset))
    }

    fn next_body(stream: &mut Stream) -> Result<(), DriverError> {
        stream.in_window("next body", Recorder::next_body)
    }

    fn close_conditional(stream: &mut Stream, orders: &[Order<'_>]) -> Result<(), DriverError> {
        stream.in_window("close conditional", |recorder| {
            recorder.close_conditional(orders)
        })
    }

    fn upload(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
        exec.upload(stream)
    }

    fn replay(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
        exec.replay(stream)
    }
}

impl Builtins for Vulkan {
    fn builtin(device: &Arc<Device>, which: Builtin) -> Result<Kernel, DriverError> {
        kernels::builtin(device, which)
    }
}

/// A page range as a copy sees it: buffer, offset, length.
type Span<'a> = (&'a Arc<Buffer>, u64, u64);

/// Record or enqueue a copy between equally long ranges; either direction.
fn copy(
    stream: &mut Stream,
    op: &'static str,
    (src, src_offset, src_len): Span<'_>,
    (dst, dst_offset, dst_len): Span<'_>,
    to_host: bool,
) -> Result<(), DriverError> {
    if src_len != dst_len {
        return Err(error(op, "source and destination lengths differ"));
    }
    stream.copy(&Copy {
        src,
        src_offset,
        dst,
        dst_offset,
        len: src_len,
        to_host,
    })
}
