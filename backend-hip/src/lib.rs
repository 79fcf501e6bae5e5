//! HIP backend for capture-core: AMD GPUs through the HIP runtime, with HIP
//! graphs as the native replayable graph.
//!
//! The runtime (`libamdhip64.so`) and hiprtc are loaded at run time, so this crate builds and links
//! on any machine; a machine without ROCm, or without an AMD GPU, gets an
//! [`Availability::Unavailable`](capture_core::Availability) reason from
//! `Hip::probe`, never a panic.
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
//! - `CAPTURE_HIP_DEVICE` ([`DEVICE_ENV`]): index of the device `Hip::open`
//!   opens (default 0); `Hip::devices` lists them all and `Hip::open_index`
//!   opens any.
//! - `CAPTURE_HIP_LIBRARY` ([`LIBRARY_ENV`]): the one runtime library to load, instead of the
//!   search through `$ROCM_PATH/lib` and `$HIP_PATH/lib` (or `/opt/rocm/lib`
//!   when neither is set), then the system paths (`libamdhip64.so`, `.so.7`,
//!   `.so.6`, `.so.5` in each). hiprtc is looked for as `libhiprtc.so` (and
//!   `.so.7`, ...) beside it (ROCm 6 on), else inside the runtime (ROCm 5).
//!   Where none is there, `Hip::probe` says only `libamdhip64 not found`;
//!   [`library_search`] lists every path tried and what each answered.
//!
//! # Threads and capture
//!
//! Every entry makes the device current on the calling thread for the
//! length of the call and then makes the caller's device current again, so a
//! program that also uses HIP directly keeps its own current device. The
//! thread is likewise put in relaxed capture mode for the call and back in
//! its own mode after it (`hipThreadExchangeStreamCaptureMode`, skipped on a
//! runtime without it), so that another library capturing in the default
//! global mode, on any thread of the process, neither has its capture
//! invalidated by the backend's allocations, frees, module loads and syncs
//! nor makes ROCm refuse them. Captures run in relaxed mode so that `begin`
//! and `end` may come from different threads; relaxed mode allows
//! allocations while recording. On ROCm a
//! synchronous `hipMemcpy` or `hipMemset` anywhere in the process
//! invalidates every capture in progress, so a capture whose end fails and
//! leaves its stream capturing gets a fresh stream in its place. A page
//! freed or a module unloaded while any stream of the GPU records (through
//! any `Device` opened on it) is released once the last recording ends (see
//! [`Device`]).
//!
//! Graphs need ROCm 5.3 or later: before it a kernel launched on a capturing
//! stream runs at once and is missing from the graph, so `begin` refuses on
//! older runtimes (eager work runs on them as usual). A recording whose
//! graph holds other than one node per launch and copy is refused at
//! `instantiate` and `update`.
//!
//! # Conditionals
//!
//! HIP graphs have no conditional nodes: no ROCm release offers what CUDA's
//! `cudaGraphConditionalHandleCreate` and conditional nodes do. So a
//! conditional or loop (`Client::if_flag`, `if_else_flag`, `while_flag`)
//! issued while a stream records is refused with
//! `Error::NoConditionals`, naming HIP, and the window is refused with it;
//! the stream can record again at once. Outside a capture, and in a
//! capture's warmup, a conditional runs eagerly on the host's word, as on
//! every backend: each check of the flag reads it back (a host sync) and
//! the body's calls are made as often as it runs.
//!
//! # What other libraries made
//!
//! Device memory allocated elsewhere ([`DevicePage::from_raw`], for
//! `Client::import`), a stream made elsewhere ([`Stream::from_raw`], for
//! `Client::adopt_stream`) and a function loaded elsewhere
//! ([`Kernel::from_raw`]) are brought in by `unsafe` constructors, each
//! with a keep-alive the library drops once it is past its last use of the
//! handle; the library never frees, destroys or unloads what it did not
//! make, and ownership is handed over by passing a keep-alive whose drop
//! does. HIP has no contexts of a library's own: [`Device::from_ordinal`]
//! opens a device over the runtime's primary context, which every library
//! of the process shares.
//!
//! # Allocations
//!
//! An eager launch, a copy and a replay allocate nothing on the heap: the
//! kernel's arguments are packed in stack arrays bounded by capture-core's
//! limits. A launch or copy recorded into a graph notes one entry in the
//! recording.
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

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use capture_core::{
    Bodies, Builtin, Builtins, DeviceInfo, DeviceSlice, Driver, DriverError, GraphDriver,
    HostSlice, ImportRefusal, Launch, Order, Signature, Updated,
};

mod device;
mod error;
pub mod ffi;
mod foreign;
mod graph;
mod image;
mod kernels;
mod loader;
mod memory;
mod metadata;
mod rtc;
mod stream;

pub use device::{DEVICE_ENV, Device};
pub use foreign::{ForeignBuffer, ForeignStream};
pub use graph::{Executable, IN_PLACE_UPDATES_PER_INSTANCE};
pub use kernels::{Kernel, check_code_object};
pub use loader::{Attempt, LIBRARY_ENV, library_search};
pub use memory::{DevicePage, HostPage};
pub use rtc::hiprtc_compile;
pub use stream::{Event, Recording, Signal, Stream};

/// The HIP backend, as a marker type: all its state lives in the device,
/// stream and page types capture-core holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hip;

/// The host and device addresses of a copy, checked against their pages.
fn copy_ranges(
    op: &'static str,
    host: HostSlice<'_, Hip>,
    device: DeviceSlice<'_, Hip>,
) -> Result<(*mut u8, *mut c_void, usize), DriverError> {
    if host.len != device.len {
        return Err(error::other(
            op,
            format!(
                "the host range has {} bytes, the device range {}",
                host.len, device.len
            ),
        ));
    }
    let len = usize::try_from(host.len)
        .map_err(|_| error::other(op, "the copy does not fit in an address"))?;
    let host_ptr = host.page.address(op, host.offset, host.len)?;
    let device_ptr = device.page.address(op, device.offset, device.len)?;
    Ok((host_ptr, device_ptr, len))
}

impl Driver for Hip {
    type Device = Device;
    type Stream = Stream;
    type DevicePage = DevicePage;
    type HostPage = HostPage;
    type Signal = Signal;
    type Kernel = Kernel;
    type Event = Event;

    const NAME: &'static str = "hip";

    fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
        device::devices()
    }

    fn open_index(index: usize) -> Result<Arc<Device>, DriverError> {
        device::open_index(index).map(Arc::new)
    }

    fn open() -> Result<Arc<Device>, DriverError> {
        device::open().map(Arc::new)
    }

    fn device_info(device: &Device) -> DeviceInfo {
        device.info()
    }

    #[inline]
    fn signature(kernel: &Kernel) -> &Signature {
        kernel.signature()
    }

    fn is_stream_of(device: &Arc<Device>, stream: &Stream) -> bool {
        Arc::ptr_eq(device, &stream.device)
    }

    fn create_stream(device: &Arc<Device>) -> Result<Stream, DriverError> {
        Stream::create(device)
    }

    fn allocate_device_page(stream: &mut Stream, bytes: u64) -> Result<DevicePage, DriverError> {
        DevicePage::allocate(&stream.device, bytes)
    }

    /// Dropping the page frees it (see [`DevicePage`]).
    fn release_device_page(_stream: &mut Stream, page: DevicePage) {
        drop(page);
    }

    /// The length of a page [`DevicePage::from_raw`] made for `device`'s
    /// GPU.
    fn imported_bytes(device: &Device, page: &DevicePage) -> Result<u64, ImportRefusal> {
        page.imported_bytes(device)
    }

    fn allocate_host_page(stream: &mut Stream, bytes: u64) -> Result<HostPage, DriverError> {
        HostPage::allocate(&stream.device, bytes)
    }

    /// Dropping the page frees it (see [`HostPage`]).
    fn release_host_page(_stream: &mut Stream, page: HostPage) {
        drop(page);
    }

    fn write_host(page: &HostPage, offset: u64, bytes: &[u8]) {
        page.write(offset, bytes);
    }

    fn read_host(page: &HostPage, offset: u64, out: &mut [u8]) {
        page.read(offset, out);
    }

    fn copy_to_device(
        stream: &mut Stream,
        src: HostSlice<'_, Self>,
        dst: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        let (host, device, len) = copy_ranges("copy to device", src, dst)?;
        stream.copy_to_device(host, device, len)
    }

    fn copy_to_host(
        stream: &mut Stream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        let (host, device, len) = copy_ranges("copy to host", dst, src)?;
        stream.copy_to_host(device, host, len)
    }

    fn launch(stream: &mut Stream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
        const OP: &str = "launch";
        if let Some(foreign) = launch.kernel.foreign_code() {
            let mut buffers = [ForeignBuffer::NONE; capture_core::MAX_BINDINGS];
            let count = launch.bindings.len();
            if count > buffers.len() {
                return Err(error::other(
                    OP,
                    format!("more than {} buffers", buffers.len()),
                ));
            }
            for (buffer, binding) in buffers.iter_mut().zip(launch.bindings) {
                let slice = binding.slice;
                *buffer = ForeignBuffer {
                    address: slice.page.address(OP, slice.offset, slice.len)?,
                    len: slice.len,
                    access: binding.access,
                };
            }
            return stream.foreign(foreign, &buffers[..count]);
        }
        let mut pointers = [ptr::null_mut::<c_void>(); kernels::MAX_POINTERS];
        let mut count = 0;
        let slices = launch
            .bindings
            .iter()
            .map(|binding| binding.slice)
            .chain(launch.info);
        for (slot, slice) in pointers.iter_mut().zip(slices) {
            *slot = slice.page.address(OP, slice.offset, slice.len)?;
            count += 1;
        }
        stream.launch(
            launch.kernel,
            launch.groups,
            &pointers[..count],
            launch.params,
        )
    }

    fn signal(stream: &mut Stream) -> Result<Signal, DriverError> {
        stream.signal()
    }

    fn fence(stream: &mut Stream, signal: Signal) -> Result<(), DriverError> {
        stream.fence(signal)
    }

    fn is_done(stream: &mut Stream, signal: Signal) -> Result<bool, DriverError> {
        stream.is_done(signal)
    }

    /// A fresh event (`hipEventCreateWithFlags`, timing disabled) recorded
    /// on the stream with `hipEventRecord`; `hipEventDestroy` when it drops.
    fn record_event(stream: &mut Stream) -> Result<Event, DriverError> {
        stream.record_event()
    }

    /// `hipStreamWaitEvent`; an event of another device is refused before
    /// the runtime sees it.
    fn wait_event(stream: &mut Stream, event: &Event) -> Result<(), DriverError> {
        stream.wait_event(event)
    }
}

impl GraphDriver for Hip {
    type Recording = Recording;
    type Executable = Executable;

    fn begin(stream: &mut Stream) -> Result<(), DriverError> {
        stream.begin()
    }

    fn end(stream: &mut Stream) -> Result<Recording, DriverError> {
        stream.end()
    }

    /// Never: HIP graphs have no conditional nodes (see the crate's
    /// [conditionals](crate#conditionals)).
    fn conditionals(_stream: &Stream) -> Result<Bodies, String> {
        Err(
            "HIP graphs have no conditional nodes (no ROCm release has them); a conditional \
             runs eagerly, on the host's word, outside a capture"
                .to_owned(),
        )
    }

    /// `hipGraphInstantiate`, the captured chain's edges first replaced by
    /// the dependencies' for [`Order::Dependencies`]
    /// (`hipGraphRemoveDependencies`, `hipGraphAddDependencies`); a runtime
    /// without those keeps the chain, which says so once in the log.
    fn instantiate(
        stream: &mut Stream,
        recording: Recording,
        order: Order<'_>,
    ) -> Result<Executable, DriverError> {
        graph::instantiate(stream, recording, order)
    }

    /// `hipGraphExecUpdate` of the recording with its edges made `order`'s,
    /// where its work and edges match the executable's.
    fn update(
        stream: &mut Stream,
        exec: &mut Executable,
        recording: Recording,
        order: Order<'_>,
    ) -> Result<Updated<Recording>, DriverError> {
        graph::update(stream, exec, recording, order)
    }

    fn upload(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
        graph::upload(exec, stream)
    }

    fn replay(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
        graph::replay(exec, stream)
    }
}

impl Builtins for Hip {
    fn builtin(device: &Arc<Device>, which: Builtin) -> Result<Kernel, DriverError> {
        kernels::builtin(device, which)
    }
}
