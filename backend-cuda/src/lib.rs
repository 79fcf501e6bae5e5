//! The CUDA backend of capture-core: the NVIDIA driver API, loaded at run
//! time, with CUDA graphs made by stream capture as the native graph.
//!
//! Nothing is linked at build time and no CUDA toolkit is needed to build or
//! run: `libcuda.so` is opened when first probed, and the builtin kernels are
//! PTX text the driver compiles for the GPU it finds. A machine without the
//! driver or a device gets [`Availability::Unavailable`] with the reason,
//! never a panic.
//!
//! User kernels are built with [`Kernel::from_ptx`], [`Kernel::from_image`]
//! (cubin or fatbin) or [`Kernel::from_cuda`] (CUDA C++ compiled by NVRTC,
//! which is loaded at run time like the driver: see [`NVRTC_ENV`]), each
//! with the [`Signature`] every launch is checked
//! against; the [kernel ABI](Kernel#kernel-abi) says what the entry point
//! takes.
//!
//! Only cudarc's raw `sys` layer is used. capture-core owns memory lifetimes
//! and ordering; the event tracking of cudarc's safe layer would add driver
//! work to every launch, and to every recording.
//!
//! Every entry point makes the device's primary context current, and
//! captures run in `CU_STREAM_CAPTURE_MODE_RELAXED`: capture-core drives a
//! device from whichever thread calls, so a capture may begin on one thread
//! and end on another, which the global and thread-local modes refuse. That
//! gives up no protection, since what those modes guard against (an
//! allocation or a host sync while recording) capture-core refuses itself.
//!
//! [`CAPTURE_CUDA_DEVICE`](DEVICE_ENV) selects the device by index (default
//! 0).
#![deny(unsafe_op_in_unsafe_fn)]

mod device;
mod error;
mod event;
mod graph;
mod image;
mod kernels;
mod loader;
mod memory;
mod nvrtc;
mod stream;

use std::sync::{Arc, OnceLock};

use capture_core::{
    Availability, Builtin, Builtins, DeviceInfo, DeviceSlice, Driver, DriverError, Error,
    GraphDriver, HostSlice, Launch, Signature,
};

pub use device::{CudaDevice, DEVICE_ENV};
pub use graph::CudaExecutable;
pub use kernels::{Kernel, builtin_ptx_variants};
pub use memory::{CudaDevicePage, CudaHostPage};
pub use nvrtc::{NVRTC_ENV, NvrtcInfo, nvrtc_compile_ptx, nvrtc_info};
pub use stream::{CudaSignal, CudaStream};

/// The CUDA backend, named in generic code as `D = Cuda`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cuda;

impl Driver for Cuda {
    type Device = CudaDevice;
    type Stream = CudaStream;
    type DevicePage = CudaDevicePage;
    type HostPage = CudaHostPage;
    type Signal = CudaSignal;
    type Kernel = Kernel;

    const NAME: &'static str = "cuda";

    /// Opens the device for real (retaining its primary context and
    /// releasing it again), because a device the driver lists may still
    /// refuse a context: one in prohibited compute mode, or one taken by
    /// another process in exclusive mode.
    ///
    /// The answer is kept for the life of the process: a harness may probe
    /// before every trial, and creating a primary context costs a GPU far
    /// more than a lookup.
    fn probe() -> Availability {
        static PROBED: OnceLock<Availability> = OnceLock::new();
        PROBED
            .get_or_init(|| match CudaDevice::open() {
                Ok(device) => Availability::Available(device.info().clone()),
                Err(e) if e.op == device::LOAD_OP => Availability::Unavailable(e.message),
                Err(e) => Availability::Unavailable(format!("{}: {}", e.op, e.message)),
            })
            .clone()
    }

    fn open() -> Result<Arc<CudaDevice>, DriverError> {
        CudaDevice::open()
    }

    fn device_info(device: &CudaDevice) -> DeviceInfo {
        device.info().clone()
    }

    fn signature(kernel: &Kernel) -> &Signature {
        kernel.signature()
    }

    fn create_stream(device: &Arc<CudaDevice>) -> Result<CudaStream, DriverError> {
        CudaStream::create(device)
    }

    fn allocate_device_page(
        stream: &mut CudaStream,
        bytes: u64,
    ) -> Result<CudaDevicePage, DriverError> {
        CudaDevicePage::allocate(&stream.device, bytes)
    }

    /// Dropping the page frees it (see [`CudaDevicePage`]).
    fn release_device_page(_stream: &mut CudaStream, page: CudaDevicePage) {
        drop(page);
    }

    fn allocate_host_page(
        stream: &mut CudaStream,
        bytes: u64,
    ) -> Result<CudaHostPage, DriverError> {
        CudaHostPage::allocate(&stream.device, bytes)
    }

    /// Dropping the page frees it (see [`CudaHostPage`]).
    fn release_host_page(_stream: &mut CudaStream, page: CudaHostPage) {
        drop(page);
    }

    fn write_host(page: &CudaHostPage, offset: u64, bytes: &[u8]) {
        page.write(offset, bytes);
    }

    fn read_host(page: &CudaHostPage, offset: u64, out: &mut [u8]) {
        page.read(offset, out);
    }

    fn copy_to_device(
        stream: &mut CudaStream,
        src: HostSlice<'_, Self>,
        dst: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.copy_to_device(src, dst)
    }

    fn copy_to_host(
        stream: &mut CudaStream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.copy_to_host(src, dst)
    }

    fn launch(stream: &mut CudaStream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
        stream.launch(launch)
    }

    fn signal(stream: &mut CudaStream) -> Result<CudaSignal, DriverError> {
        stream.signal()
    }

    fn fence(stream: &mut CudaStream, signal: CudaSignal) -> Result<(), DriverError> {
        stream.fence(signal)
    }
}

impl GraphDriver for Cuda {
    type Executable = CudaExecutable;

    fn begin(stream: &mut CudaStream) -> Result<(), DriverError> {
        graph::begin(stream)
    }

    fn instantiate(
        stream: &mut CudaStream,
        doomed: Option<Error>,
    ) -> Result<CudaExecutable, Error> {
        graph::instantiate(stream, doomed)
    }

    fn upload(exec: &CudaExecutable, stream: &mut CudaStream) -> Result<(), DriverError> {
        graph::upload(exec, stream)
    }

    fn replay(exec: &CudaExecutable, stream: &mut CudaStream) -> Result<(), DriverError> {
        graph::replay(exec, stream)
    }
}

impl Builtins for Cuda {
    /// Builds `which` from the shipped PTX through [`Kernel::from_ptx`];
    /// the driver's JIT caches the compiled code, so a second client's
    /// build costs little.
    fn builtin(device: &Arc<CudaDevice>, which: Builtin) -> Result<Kernel, DriverError> {
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

/// Directory holding the stub `libcuda.so.1` (its `cuInit` answers
/// `CUDA_ERROR_NO_DEVICE`) built for tests of the no-device path, when a C
/// compiler was found at build time.
#[doc(hidden)]
pub const TEST_STUB_DIR: Option<&str> = option_env!("CUDA_STUB_DIR");
