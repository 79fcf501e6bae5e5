//! The CUDA backend of capture-core: the NVIDIA driver API, loaded at run
//! time, with CUDA graphs made by stream capture as the native graph.
//!
//! Nothing is linked at build time and no CUDA toolkit is needed to build or
//! run: `libcuda.so.1` is opened on first use, every driver function called
//! is declared here with an integer result (so a code newer than the
//! declarations is a number, not undefined behaviour) and looked up before
//! any is called, and the builtin kernels are PTX text the driver compiles
//! for the GPU it finds. A machine without the driver, with only the
//! toolkit's stub library, or without a device gets
//! [`Availability::Unavailable`](capture_core::Availability) with the
//! reason, never a panic.
//!
//! User kernels are built with [`Kernel::from_ptx`], [`Kernel::from_image`]
//! (cubin or fatbin) or [`Kernel::from_cuda`] (CUDA C++ compiled by NVRTC,
//! which is loaded at run time like the driver: see [`NVRTC_ENV`]), each
//! with the [`Signature`] every launch is checked against; the
//! [kernel ABI](Kernel#kernel-abi) says what the entry point takes.
//!
//! Every entry point pushes the device's primary context on the calling
//! thread and pops it on return, so a caller's own current context is left
//! as it was. It likewise puts the thread in relaxed stream-capture mode for
//! the call and back in its own mode after it, so that another library
//! capturing in the default global mode, on any thread of the process, does
//! not make the driver refuse the backend's allocations, frees and module
//! loads. Captures run in `CU_STREAM_CAPTURE_MODE_RELAXED`: capture-core
//! drives a device from whichever thread calls, so a capture may begin on
//! one thread and end on another, which the global and thread-local modes
//! refuse. What those modes guard against, an implicitly synchronizing call
//! while a capture is open, is kept out otherwise: capture-core runs no host
//! sync and releases no page on a recording stream, and a page or module
//! another stream of the device drops meanwhile is freed only once the last
//! recording on the device has ended.
//!
//! A context-wide synchronization while a window records is forbidden to
//! the caller: `cuCtxSynchronize`, cudarc's `CudaContext::synchronize`, and
//! cudarc's first `CudaContext::new_stream` on a context (which
//! synchronizes it) invalidate every capture of the context, the window's
//! too. The window is then refused; where the invalidated capture was a
//! conditional's body, the driver has freed the body graph and would crash
//! ending the stream's capture (NVBUG 6805256), so that capture is
//! abandoned instead: the stream is replaced by a fresh one, and the old
//! one, left capturing, is never used, ended or destroyed again (an adopted
//! one stays the caller's, who must not end its capture either).
//!
//! [`CAPTURE_CUDA_DEVICE`](DEVICE_ENV) selects the device [`Cuda::open`]
//! opens, by index (default 0).
//!
//! # Conditionals
//!
//! A conditional or loop recorded in a capture (`Client::if_flag`,
//! `if_else_flag`, `while_flag`) becomes a native conditional node, which
//! reads the flag on the device at each replay. That needs driver 12.4 or
//! newer, whose stream captures can hold conditional nodes; its functions
//! for them are looked up as optional, so an older driver loads the library
//! and refuses such a recording with `Error::NoConditionals` saying which
//! version or function is missing, while conditionals outside a capture run
//! on the host's word there as everywhere. Older drivers get no bounded
//! unroll as on Vulkan: without conditional nodes a CUDA graph has no way
//! to skip a kernel node on a value in device memory.
//!
//! A setter kernel, hand-written PTX calling `cudaGraphSetConditional`
//! (which the driver links in when it loads the module), copies the flag
//! into the node's handle just before the node; it lives in a module of its
//! own, loaded before the device's first capture, so a driver that cannot
//! link it refuses conditionals alone. A loop's setter runs again at the
//! end of each iteration and counts the iterations in a trip counter of
//! the stream's device memory (a page allocated at its first loop): once
//! `bound` iterations ran it clears the handle and leaves the caller's
//! flag as the body left it, so a flag still set says the bound stopped the
//! loop. Each body is captured on a side stream into the body graph the
//! driver made with the node, so conditionals nest to any depth, and keeps
//! the order capture-core hands over for it. An if/else is one node of two
//! bodies from driver 12.8 on, and two `if` nodes over one setter before
//! it; an empty body gets a one-thread no-op kernel of the setter module
//! before 12.8, whose drivers hang on a body without a kernel (an empty
//! node does not help; XLA's fix for that hang does the same). Bodies may hold copies (memcpy nodes, between device
//! memory and the pinned host pages, which unified addressing maps for the
//! device). A graph holding a conditional node is instantiated anew rather
//! than updated in place, and no recording is ever embedded in another
//! graph as a child graph, which the driver refuses for a conditional.
//!
//! # What other libraries made
//!
//! A device over a context made elsewhere ([`Device::from_raw_context`],
//! or [`Device::from_primary`] for the primary context the runtime and
//! cudarc use), device memory allocated elsewhere ([`DevicePage::from_raw`],
//! for `Client::import`), a stream made elsewhere ([`Stream::from_raw`],
//! for `Client::adopt_stream`) and a function loaded elsewhere
//! ([`Kernel::from_raw`]) are brought in by `unsafe` constructors, each
//! with a keep-alive the library drops once it is past its last use of the
//! handle. A refusal drops nothing: it hands the keep-alive back untouched
//! in a [`Rejected`](capture_core::Rejected), which `?` turns into the
//! error alone. The library never frees, destroys or unloads what it did not
//! make; ownership is handed over by passing a keep-alive whose drop does.
//! With the `cudarc` feature, the `cudarc` module converts
//! cudarc 0.19's contexts, streams, slices and functions.
#![deny(unsafe_op_in_unsafe_fn)]

mod conditional;
#[cfg(feature = "cudarc")]
pub mod cudarc;
mod device;
mod error;
mod event;
mod foreign;
mod graph;
mod image;
mod kernels;
mod loader;
mod memory;
mod nvrtc;
mod setter;
mod stream;
mod sys;

use std::sync::Arc;

use capture_core::{
    Bodies, Builtin, Builtins, Conditional, DeviceInfo, DeviceSlice, Driver, DriverError,
    GraphDriver, HostSlice, ImportRefusal, Launch, Order, Signature, Updated,
};

pub use device::{DEVICE_ENV, Device};
pub use event::Event;
pub use foreign::{ForeignBuffer, ForeignStream};
pub use graph::{Executable, Recording};
pub use kernels::{Kernel, builtin_ptx_variants};
pub use memory::{DevicePage, HostPage};
pub use nvrtc::{
    NVRTC_ENV, NvrtcInfo, NvrtcOutput, nvrtc_compile_for, nvrtc_compile_ptx, nvrtc_info,
};
#[doc(hidden)]
pub use setter::{setter_entries, setter_ptx_variants};
pub use stream::{Signal, Stream};
pub use sys::{CUcontext, CUdeviceptr, CUfunction, CUstream};

/// The CUDA backend, named in generic code as `D = Cuda`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cuda;

impl Driver for Cuda {
    type Device = Device;
    type Stream = Stream;
    type DevicePage = DevicePage;
    type HostPage = HostPage;
    type Signal = Signal;
    type Kernel = Kernel;
    type Event = Event;

    const NAME: &'static str = "cuda";

    /// Every CUDA device, by ordinal, whether or not it can be opened: its
    /// name and compute capability, the driver's version, its grid limit
    /// and its memory. Lists without creating any context.
    fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
        Device::list()
    }

    /// Opens device `index`, retaining its primary context (once per
    /// process, see [`Device`]): a device the driver lists may still refuse
    /// a context, in prohibited compute mode or taken by another process in
    /// exclusive mode.
    fn open_index(index: usize) -> Result<Arc<Device>, DriverError> {
        Device::open_index(index)
    }

    /// Opens the device [`DEVICE_ENV`] names, the first one when unset.
    fn open() -> Result<Arc<Device>, DriverError> {
        Device::open()
    }

    fn device_info(device: &Device) -> DeviceInfo {
        device.info().clone()
    }

    #[inline]
    fn signature(kernel: &Kernel) -> &Signature {
        kernel.signature()
    }

    fn is_stream_of(device: &Arc<Device>, stream: &Stream) -> bool {
        Arc::ptr_eq(device, stream.device())
    }

    fn create_stream(device: &Arc<Device>) -> Result<Stream, DriverError> {
        Stream::create(device)
    }

    fn allocate_device_page(stream: &mut Stream, bytes: u64) -> Result<DevicePage, DriverError> {
        DevicePage::allocate(stream.device(), bytes)
    }

    /// Dropping the page frees it (see [`DevicePage`]).
    fn release_device_page(_stream: &mut Stream, page: DevicePage) {
        drop(page);
    }

    /// The length of a page [`DevicePage::from_raw`] made for a device of
    /// `device`'s context.
    fn imported_bytes(device: &Device, page: &DevicePage) -> Result<u64, ImportRefusal> {
        page.imported_bytes(device)
    }

    fn allocate_host_page(stream: &mut Stream, bytes: u64) -> Result<HostPage, DriverError> {
        HostPage::allocate(stream.device(), bytes)
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
        stream.copy_to_device(src, dst)
    }

    fn copy_to_host(
        stream: &mut Stream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.copy_to_host(src, dst)
    }

    fn launch(stream: &mut Stream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
        stream.launch(launch)
    }

    /// An event recorded at the stream's end, recycled from the stream's
    /// own; no event at all when nothing was enqueued since the last signal.
    fn signal(stream: &mut Stream) -> Result<Signal, DriverError> {
        stream.signal()
    }

    fn fence(stream: &mut Stream, signal: Signal) -> Result<(), DriverError> {
        stream.fence(signal)
    }

    /// `cuEventQuery` on the signal's event.
    fn is_done(stream: &mut Stream, signal: Signal) -> Result<bool, DriverError> {
        stream.is_done(signal)
    }

    /// A fresh event (`cuEventCreate`, timing disabled) recorded on the
    /// stream with `cuEventRecord`; `cuEventDestroy` when it drops.
    fn record_event(stream: &mut Stream) -> Result<Event, DriverError> {
        stream.record_event()
    }

    /// `cuStreamWaitEvent`; an event of another device (context) is refused
    /// before the driver sees it.
    fn wait_event(stream: &mut Stream, event: &Event) -> Result<(), DriverError> {
        stream.wait_event(event)
    }
}

impl GraphDriver for Cuda {
    type Recording = Recording;
    type Executable = Executable;

    fn begin(stream: &mut Stream) -> Result<(), DriverError> {
        stream.begin()
    }

    fn end(stream: &mut Stream) -> Result<Recording, DriverError> {
        stream.end()
    }

    /// `cuGraphInstantiate`, refusing a graph whose nodes are not exactly
    /// the launches, copies and conditionals the stream recorded. For
    /// [`Order::Dependencies`] the captured chain's edges are first replaced
    /// by the dependencies' (`cuGraphRemoveDependencies_v2`,
    /// `cuGraphAddDependencies_v2`, or on drivers 12.0 to 12.2 their 10.0
    /// spellings without edge data); a driver with neither keeps the chain,
    /// which says so once in the log.
    fn instantiate(
        _stream: &mut Stream,
        recording: Recording,
        order: Order<'_>,
    ) -> Result<Executable, DriverError> {
        Executable::instantiate(recording, order)
    }

    /// `cuGraphExecUpdate` of the recording with its edges made `order`'s:
    /// in place where the shapes and edges match; handed back for
    /// instantiation where the edges differ or the driver says the shapes
    /// do, where either graph holds a conditional node (each capture makes
    /// handles of its own), and always on a driver older than 12.0.
    fn update(
        _stream: &mut Stream,
        exec: &mut Executable,
        recording: Recording,
        order: Order<'_>,
    ) -> Result<Updated<Recording>, DriverError> {
        exec.update(recording, order)
    }

    /// Conditional nodes need driver 12.4 or newer with its conditional
    /// functions, and the setter kernels loaded (before the device's first
    /// capture); otherwise the reason names what is missing. Bodies may
    /// hold copies: a body graph holds memcpy nodes.
    fn conditionals(stream: &Stream) -> Result<Bodies, String> {
        stream.conditionals()
    }

    /// The setter kernel and the conditional node (or, for an if/else on a
    /// driver before 12.8, two `if` nodes) go in the graph being captured;
    /// the stream's work from here is captured into the first body, on a
    /// side stream.
    fn open_conditional(
        stream: &mut Stream,
        kind: Conditional,
        flag: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.open_conditional(kind, flag)
    }

    fn next_body(stream: &mut Stream) -> Result<(), DriverError> {
        stream.next_body()
    }

    /// Each body is checked to hold what the stream issued into it and
    /// given its order's edges, as `instantiate` does the recording's; an
    /// empty body gets an empty node on a driver before 12.8, which would
    /// hang on it.
    fn close_conditional(stream: &mut Stream, orders: &[Order<'_>]) -> Result<(), DriverError> {
        stream.close_conditional(orders)
    }

    fn upload(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
        stream.upload(exec)
    }

    fn replay(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
        stream.replay(exec)
    }
}

impl Builtins for Cuda {
    /// Builds `which` from the builtins' cubin for the device's target,
    /// which the driver's JIT compiles from the shipped PTX once per process.
    fn builtin(device: &Arc<Device>, which: Builtin) -> Result<Kernel, DriverError> {
        kernels::builtin(device, which)
    }
}

/// What a module image is (`cubin`, `fatbin` or `PTX text`) when every byte
/// the driver would read of it lies in the slice; the check
/// [`Kernel::from_image`] makes first, for the offline tests.
#[doc(hidden)]
pub fn check_module_image(image: &[u8]) -> Result<&'static str, String> {
    image::classify(image).map(image::ImageKind::name)
}

/// The declarations the ABI test compares with `cuda.h` and `nvrtc.h`.
#[doc(hidden)]
pub mod abi {
    pub use crate::error::result_names;
    pub use crate::nvrtc::{NVRTC_PROTOTYPES, NvrtcPrototype};
    pub use crate::sys::{AbiFact, PROTOTYPES, Prototype, abi_facts};
}

/// Directory holding the stub `libcuda.so.1` (its `cuInit` answers
/// `CUDA_ERROR_NO_DEVICE`, or what `CUDA_STUB_INIT_RESULT` says) built for
/// tests of the no-device path, when a C compiler was found at build time.
#[doc(hidden)]
pub const TEST_STUB_DIR: Option<&str> = option_env!("CUDA_STUB_DIR");

/// Directory holding the stub built with every symbol the backend resolves,
/// whose devices can be listed but not opened.
#[doc(hidden)]
pub const TEST_FULL_STUB_DIR: Option<&str> = option_env!("CUDA_FULL_STUB_DIR");

/// Directory holding the stub whose streams, events, captures and memory
/// work on host memory, for tests of the recording bookkeeping.
#[doc(hidden)]
pub const TEST_RUNS_STUB_DIR: Option<&str> = option_env!("CUDA_RUNS_STUB_DIR");
