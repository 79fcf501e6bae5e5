//! The Vulkan backend of capture-core.
//!
//! A capture window records into a secondary command buffer; an executable
//! replays it from a primary that executes it, so a replay costs one queue
//! submission however many launches the window held. Eager work is batched
//! into primary command buffers for the same reason.
//!
//! Kernels are SPIR-V or WGSL ([`Kernel`]); naga checks each module's
//! interface against the kernel's signature before the driver sees it. The
//! builtins are WGSL that `build.rs` compiles to SPIR-V, built through the
//! same path.
//!
//! libvulkan is loaded at run time, so the crate builds and runs anywhere
//! and reports a machine without Vulkan as unavailable. [`DEVICE_ENV`] picks
//! the device; [`VALIDATION_ENV`] and [`SYNC_VALIDATION_ENV`] control the
//! validation layer, whose findings [`validation_counts`] reports.
#![deny(unsafe_op_in_unsafe_fn)]

mod barriers;
mod device;
mod error;
mod graph;
mod instance;
mod kernels;
mod memory;
mod recording;
mod shader;
mod stream;
mod validation;

use std::sync::Arc;

use capture_core::{
    Availability, Builtin, Builtins, DeviceInfo, DeviceSlice, Driver, DriverError, Error,
    GraphDriver, HostSlice, Launch, Signature,
};

pub use device::{DEVICE_ENV, Device};
pub use graph::Executable;
pub use instance::{SYNC_VALIDATION_ENV, VALIDATION_ENV};
pub use kernels::Kernel;
pub use memory::{DevicePage, HostPage};
pub use stream::{Signal, Stream};
pub use validation::ValidationCounts;

use crate::error::error;
use crate::memory::Buffer;
use crate::recording::Copy;

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

    const NAME: &'static str = "vulkan";

    fn probe() -> Availability {
        match std::panic::catch_unwind(Device::open) {
            Ok(Ok(device)) => Availability::Available(device.info.clone()),
            Ok(Err(e)) => Availability::Unavailable(e.message),
            Err(_) => Availability::Unavailable("the Vulkan driver panicked while opening".into()),
        }
    }

    fn open() -> Result<Arc<Device>, DriverError> {
        Device::open()
    }

    fn device_info(device: &Device) -> DeviceInfo {
        device.info.clone()
    }

    fn signature(kernel: &Kernel) -> &Signature {
        kernel.signature()
    }

    fn create_stream(device: &Arc<Device>) -> Result<Stream, DriverError> {
        Stream::new(device)
    }

    fn allocate_device_page(stream: &mut Stream, bytes: u64) -> Result<DevicePage, DriverError> {
        if let Some(recording) = &mut stream.recording {
            recording.allocated = true;
        }
        memory::device_page(&stream.device, bytes)
    }

    fn release_device_page(_stream: &mut Stream, page: DevicePage) {
        drop(page);
    }

    fn allocate_host_page(stream: &mut Stream, bytes: u64) -> Result<HostPage, DriverError> {
        if let Some(recording) = &mut stream.recording {
            recording.allocated = true;
        }
        memory::host_page(&stream.device, bytes)
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
        stream.record(|device, recorder| recorder.launch(device, &launch))
    }

    fn signal(stream: &mut Stream) -> Result<Signal, DriverError> {
        stream.signal()
    }

    fn fence(stream: &mut Stream, signal: Signal) -> Result<(), DriverError> {
        stream.fence(signal)
    }
}

impl GraphDriver for Vulkan {
    type Executable = Executable;

    fn begin(stream: &mut Stream) -> Result<(), DriverError> {
        graph::begin(stream)
    }

    fn instantiate(stream: &mut Stream, doomed: Option<Error>) -> Result<Executable, Error> {
        graph::instantiate(stream, doomed)
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
