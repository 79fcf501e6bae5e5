//! Conversions between this crate and cudarc 0.19's driver types (feature
//! `cudarc`): cudarc's context as a [`Device`], its stream as a [`Stream`],
//! a `CudaSlice` as an imported [`DevicePage`], a `CudaFunction` as a
//! [`Kernel`], and a buffer's device address for cudarc's own launches.
//!
//! Supported: cudarc 0.19 (`0.19.x`), with its `driver` feature; this crate
//! asks for `driver`, `dynamic-loading` and `cuda-12080`, so nothing here
//! needs a CUDA toolkit to build, and both libraries load the same
//! `libcuda` at run time. cudarc's handle types are its own bindings'; they
//! become this crate's by pointer casts in this module alone.
//!
//! cudarc's `CudaContext::new(ordinal)` retains the primary context, the
//! one [`Device::from_primary`] uses too, so memory, streams and kernels of
//! either are usable on a device of the other.

use std::sync::Arc;

use ::cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtrMut};
use capture_core::{Buffer, Client, Error, KeepAlive, Rejected, Signature};

use crate::error::refuse;
use crate::memory::check_import;
use crate::sys::{CUcontext, CUdeviceptr, CUfunction, CUstream};
use crate::{Cuda, Device, DevicePage, Kernel, Stream};

/// cudarc's context handle as this crate's.
fn context_of(context: &CudaContext) -> CUcontext {
    context.cu_ctx().cast()
}

/// cudarc's stream handle as this crate's.
fn stream_of(stream: &CudaStream) -> CUstream {
    stream.cu_stream().cast()
}

/// cudarc's function handle as this crate's.
fn function_of(function: &CudaFunction) -> CUfunction {
    function.cu_function().cast()
}

/// A device over cudarc's context (the device's primary context, for a
/// context from `CudaContext::new`), which keeps the context alive: the
/// `Arc` is held until the device and everything of it is gone.
///
/// # Errors
///
/// As for [`Device::from_raw_context`], handing back the clone of
/// `context` it was given.
pub fn device(context: &Arc<CudaContext>) -> Result<Arc<Device>, Rejected<Arc<CudaContext>>> {
    // SAFETY: the context stays alive while the `Arc` handed over as the
    // keep-alive does; cudarc releases it only when its last one drops.
    unsafe { Device::from_raw_context(context_of(context), Arc::clone(context)) }
}

/// A stream over cudarc's stream, for `Client::adopt_stream`, which keeps
/// the stream alive (and so cudarc's context, which it holds). cudarc's
/// default stream, the legacy one, is refused: make one with
/// `CudaContext::new_stream`.
///
/// # Safety
///
/// As for [`Stream::from_raw`] on the caller's own work: what cudarc
/// launches or copies on this stream while a window records becomes part
/// of the graph and runs on every replay, so the memory it touches must
/// outlive the graph; what it does on other streams with memory the library
/// uses is ordered by the caller.
///
/// # Errors
///
/// As for [`Stream::from_raw`], handing back the clone of `stream` it was
/// given: the default stream, one of another context, or one capturing
/// already.
pub unsafe fn stream(
    device: &Arc<Device>,
    stream: &Arc<CudaStream>,
) -> Result<Stream, Rejected<Arc<CudaStream>>> {
    // SAFETY: the stream stays alive while the `Arc` handed over as the
    // keep-alive does; the caller promises the rest.
    unsafe { Stream::from_raw(device, stream_of(stream), Arc::clone(stream)) }
}

/// A page over cudarc's slice, for `Client::import`: the slice is moved in
/// and dropped (which frees it, on its stream) once the library is past its
/// last use of the memory.
///
/// The slice is taken as cudarc takes one to be written: its stream first
/// waits for every read and write cudarc has recorded on it, from any
/// stream, and is then synchronized, so everything cudarc enqueued on the
/// memory has run before the library writes it. The slice being moved in,
/// cudarc issues nothing on it afterwards.
///
/// Not while a window records on the slice's stream, nor on any stream of
/// its context: the synchronization would invalidate the capture. Import
/// before the window.
///
/// # Errors
///
/// The slice handed back with why: an empty slice, memory of another
/// device or context than `device`'s, or a failed synchronization.
pub fn import<T: Send + 'static>(
    device: &Arc<Device>,
    mut slice: CudaSlice<T>,
) -> Result<DevicePage, Rejected<CudaSlice<T>>> {
    const OP: &str = "import a cudarc slice";
    let len = slice.num_bytes() as u64;
    let stream = Arc::clone(slice.stream());
    let pointer = {
        // As for a write: the stream waits for cudarc's readers as well as
        // its writers, which the plain `device_ptr` would not.
        let (pointer, _written) = slice.device_ptr_mut(&stream);
        pointer
    };
    if let Err(e) = stream.synchronize() {
        return Err(Rejected::new(
            refuse(OP, format!("cudarc's stream: {e}")),
            slice,
        ));
    }
    match check_import(device, pointer, len) {
        Ok(()) => Ok(DevicePage::imported(
            device,
            pointer,
            len,
            KeepAlive::new(slice),
        )),
        Err(e) => Err(Rejected::new(e, slice)),
    }
}

/// A kernel over cudarc's function, which keeps its module loaded: a clone
/// of the function is held until the kernel, and every graph that recorded
/// it, is gone.
///
/// # Safety
///
/// As for [`Kernel::from_raw`]: the function takes exactly the parameters
/// the [kernel ABI](Kernel#kernel-abi) derives from `signature`, and stays
/// inside its bound buffers for every launch it is given.
///
/// # Errors
///
/// As for [`Kernel::from_raw`], handing back the clone of `function` it
/// was given.
pub unsafe fn kernel(
    device: &Arc<Device>,
    function: &CudaFunction,
    signature: Signature,
) -> Result<Kernel, Rejected<CudaFunction>> {
    // SAFETY: the module stays loaded while the clone handed over as the
    // keep-alive lives; the caller promises the rest.
    unsafe { Kernel::from_raw(device, function_of(function), signature, function.clone()) }
}

/// The device address of `buffer`'s first byte (a view's, for a view), for
/// cudarc's own launches and copies on it.
///
/// The address stays valid while `buffer` (or a view or graph holding it)
/// lives. The library does not see what cudarc does there: work cudarc
/// issues on it is to be ordered with the library's by the caller, by
/// launching on a stream adopted with [`stream`] or by syncing.
///
/// # Errors
///
/// A buffer of another client, or of a stream that is gone.
pub fn buffer_ptr(client: &Client<Cuda>, buffer: &Buffer) -> Result<CUdeviceptr, Error> {
    client.with_device_slice(buffer, |slice| {
        slice.page.device_ptr().wrapping_add(slice.offset)
    })
}
