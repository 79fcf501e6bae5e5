//! HIP backend for capture-core: AMD GPUs through the HIP runtime, with HIP
//! graphs as the native replayable graph.
//!
//! The runtime (`libamdhip64.so`) and hiprtc are loaded at run time, so this crate builds and links
//! on any machine; a machine without ROCm, or without an AMD GPU, gets an
//! [`Availability::Unavailable`] reason from [`Hip::probe`], never a panic.
//! Declarations are hand-written in [`ffi`], with every code the runtime
//! returns kept as an integer, so that a newer runtime's unknown code is a
//! value to report rather than undefined behaviour.
//!
//! # Kernels
//!
//! A [`Kernel`] is built from a code object ([`Kernel::from_code_object`])
//! or from HIP C++ compiled by hiprtc for the device's architecture
//! ([`Kernel::from_hip`]); both are `unsafe`, since only the caller can
//! promise what the GPU code does. Its parameters are one pointer per bound
//! buffer, a pointer to the info block when the signature reads info bytes,
//! then the by-value parameters, the convention the CUDA backend shares. The
//! builtins are built the same way from an embedded source.
//! [`hiprtc_compile`] and [`check_code_object`] do the compile and the
//! interface check with no device, for checking sources ahead of time.
//!
//! # Environment
//!
//! - `CAPTURE_HIP_DEVICE`: index of the device to open (default 0).
//! - `CAPTURE_HIP_LIBRARY`: the one runtime library to load, instead of the
//!   search through `$ROCM_PATH/lib` and `$HIP_PATH/lib` (or `/opt/rocm/lib`
//!   when neither is set), then the system paths (`libamdhip64.so`, `.so.7`,
//!   `.so.6`, `.so.5` in each). hiprtc is looked for as `libhiprtc.so` (and
//!   `.so.7`, ...) beside it (ROCm 6 on), else inside the runtime (ROCm 5).
//!
//! # Threads and capture
//!
//! Every entry makes the device current on the calling thread, and captures
//! run in relaxed mode so that `begin` and `instantiate` may come from
//! different threads. That gives up no protection: what the stricter modes
//! guard against, an allocation or a host sync while recording, capture-core
//! refuses itself.
//!
//! # The `abi-check` feature
//!
//! Adds `hip-sys` and the test `tests/abi.rs`, which asserts that every
//! constant [`ffi`] declares equals the value in hip-sys's bindings (generated
//! from ROCm's headers). hip-sys links `libamdhip64` at build time and needs
//! `$HIP_PATH/include/hip/hip_runtime_api.h`, so the feature is for machines
//! with ROCm's development files (on Debian: `libamdhip64-dev`, with
//! `HIP_PATH=/usr`); it is never on by default.
#![deny(unsafe_op_in_unsafe_fn)]

use std::sync::Arc;

use capture_core::{
    Availability, Builtin, Builtins, DeviceInfo, DeviceSlice, Driver, DriverError, Error,
    GraphDriver, HostSlice, Launch, Signature,
};

mod device;
mod error;
pub mod ffi;
mod graph;
mod kernels;
mod loader;
mod memory;
mod metadata;
mod rtc;
mod stream;

pub use device::{DEVICE_VAR, HipDevice};
pub use graph::HipGraph;
pub use kernels::{Kernel, check_code_object};
pub use loader::LIBRARY_VAR;
pub use memory::{HipDevicePage, HipHostPage};
pub use rtc::hiprtc_compile;
pub use stream::{HipSignal, HipStream};

/// The HIP backend, as a marker type: all its state lives in the device,
/// stream and page types capture-core holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hip;

impl Driver for Hip {
    type Device = HipDevice;
    type Stream = HipStream;
    type DevicePage = HipDevicePage;
    type HostPage = HipHostPage;
    type Signal = HipSignal;
    type Kernel = Kernel;

    const NAME: &'static str = "hip";

    fn probe() -> Availability {
        match device::open() {
            Ok(device) => Availability::Available(device.info()),
            Err(reason) => Availability::Unavailable(reason),
        }
    }

    fn open() -> Result<Arc<HipDevice>, DriverError> {
        device::open().map(Arc::new).map_err(device::open_error)
    }

    fn device_info(device: &HipDevice) -> DeviceInfo {
        device.info()
    }

    fn signature(kernel: &Kernel) -> &Signature {
        kernel.signature()
    }

    fn create_stream(device: &Arc<HipDevice>) -> Result<HipStream, DriverError> {
        HipStream::create(device)
    }

    fn allocate_device_page(
        stream: &mut HipStream,
        bytes: u64,
    ) -> Result<HipDevicePage, DriverError> {
        memory::allocate_device_page(stream, bytes)
    }

    fn release_device_page(stream: &mut HipStream, page: HipDevicePage) {
        memory::release_device_page(stream, page);
    }

    fn allocate_host_page(stream: &mut HipStream, bytes: u64) -> Result<HipHostPage, DriverError> {
        memory::allocate_host_page(stream, bytes)
    }

    fn release_host_page(stream: &mut HipStream, page: HipHostPage) {
        memory::release_host_page(stream, page);
    }

    fn write_host(page: &HipHostPage, offset: u64, bytes: &[u8]) {
        memory::write_host(page, offset, bytes);
    }

    fn read_host(page: &HipHostPage, offset: u64, out: &mut [u8]) {
        memory::read_host(page, offset, out);
    }

    fn copy_to_device(
        stream: &mut HipStream,
        src: HostSlice<'_, Self>,
        dst: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        memory::copy_to_device(stream, src, dst)
    }

    fn copy_to_host(
        stream: &mut HipStream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        memory::copy_to_host(stream, src, dst)
    }

    fn launch(stream: &mut HipStream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
        kernels::launch(stream, launch)
    }

    fn signal(stream: &mut HipStream) -> Result<HipSignal, DriverError> {
        stream.signal()
    }

    fn fence(stream: &mut HipStream, signal: HipSignal) -> Result<(), DriverError> {
        stream.fence(signal)
    }
}

impl GraphDriver for Hip {
    type Executable = HipGraph;

    fn begin(stream: &mut HipStream) -> Result<(), DriverError> {
        graph::begin(stream)
    }

    fn instantiate(stream: &mut HipStream, doomed: Option<Error>) -> Result<HipGraph, Error> {
        graph::instantiate(stream, doomed)
    }

    fn upload(exec: &HipGraph, stream: &mut HipStream) -> Result<(), DriverError> {
        graph::upload(exec, stream)
    }

    fn replay(exec: &HipGraph, stream: &mut HipStream) -> Result<(), DriverError> {
        graph::replay(exec, stream)
    }
}

impl Builtins for Hip {
    fn builtin(device: &Arc<HipDevice>, which: Builtin) -> Result<Kernel, DriverError> {
        kernels::builtin(device, which)
    }
}
