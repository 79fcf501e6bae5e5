//! One capture-core stream: a non-blocking CUDA stream, its signals, and the
//! copies and launches enqueued on it.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use capture_core::builtin::WORKGROUP_SIZE;
use capture_core::{DeviceSlice, DriverError, HostSlice, Launch};
use cudarc::driver::sys::{self, CUdeviceptr, CUstream};
use smallvec::SmallVec;

use crate::Cuda;
use crate::device::CudaDevice;
use crate::error::{check, refuse};
use crate::event::EventRing;

/// A point in one stream's work that [`crate::Cuda`]'s fence can wait for.
///
/// A number rather than an event handle, because a signal is `Copy` and may
/// be dropped without a fence; the stream owns the events and recycles them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaSignal {
    stream: u64,
    number: u64,
}

/// A non-blocking CUDA stream and the state recording it needs.
///
/// Non-blocking, so it never waits on (or is waited on by) the legacy
/// default stream other code in the process may use; a capture on it is then
/// not invalidated by such code either.
pub struct CudaStream {
    pub(crate) device: Arc<CudaDevice>,
    pub(crate) raw: CUstream,
    id: u64,
    events: EventRing,
    /// Whether a capture begun here has not been ended yet.
    pub(crate) capturing: bool,
    /// The signal recorded just before the capture began.
    ///
    /// Work issued while recording never runs by itself, so the latest point
    /// that will ever complete is the end of the work before `begin`; a
    /// signal asked for while recording stands for that point instead of
    /// recording an event into the capture, which a fence could not wait on.
    pub(crate) before_capture: Option<u64>,
}

// SAFETY: the stream and its events are process-wide driver handles any
// thread may use once the context is current, which every method ensures.
// capture-core hands out `&mut` access only, so no two threads use one at once.
unsafe impl Send for CudaStream {}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStream")
            .field("id", &self.id)
            .field("capturing", &self.capturing)
            .finish_non_exhaustive()
    }
}

impl CudaStream {
    pub(crate) fn create(device: &Arc<CudaDevice>) -> Result<Self, DriverError> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        device.bind()?;
        let mut raw: CUstream = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place for the handle; the context is
        // current.
        check("create stream", unsafe {
            sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        Ok(Self {
            device: Arc::clone(device),
            raw,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            events: EventRing::new(),
            capturing: false,
            before_capture: None,
        })
    }

    /// Record a signal outside any capture, for `begin` to stand on.
    pub(crate) fn record_signal(&mut self) -> Result<u64, DriverError> {
        self.events.record(self.raw)
    }

    pub(crate) fn copy_to_device(
        &mut self,
        src: HostSlice<'_, Cuda>,
        dst: DeviceSlice<'_, Cuda>,
    ) -> Result<(), DriverError> {
        const OP: &str = "copy to device";
        let len = same_len(OP, src.len, dst.len)?;
        let from = src.page.address(&self.device, src.offset, src.len, OP)?;
        let to = dst.page.address(&self.device, dst.offset, dst.len, OP)?;
        if len == 0 {
            return Ok(());
        }
        self.device.bind()?;
        // SAFETY: both ranges were checked to lie in live pages of this
        // device; the host page is pinned, and capture-core keeps it (and,
        // while recording, the bytes) alive until the copy has run.
        check(OP, unsafe {
            sys::cuMemcpyHtoDAsync_v2(to, from.cast_const(), len, self.raw)
        })
    }

    pub(crate) fn copy_to_host(
        &mut self,
        src: DeviceSlice<'_, Cuda>,
        dst: HostSlice<'_, Cuda>,
    ) -> Result<(), DriverError> {
        const OP: &str = "copy to host";
        let len = same_len(OP, src.len, dst.len)?;
        let from = src.page.address(&self.device, src.offset, src.len, OP)?;
        let to = dst.page.address(&self.device, dst.offset, dst.len, OP)?;
        if len == 0 {
            return Ok(());
        }
        self.device.bind()?;
        // SAFETY: both ranges were checked to lie in live pages of this
        // device; capture-core reads the host bytes only after a fence.
        check(OP, unsafe {
            sys::cuMemcpyDtoHAsync_v2(to, from, len, self.raw)
        })
    }

    pub(crate) fn launch(&mut self, launch: Launch<'_, Cuda>) -> Result<(), DriverError> {
        const OP: &str = "launch";
        let kernel = launch.kernel;
        if !Arc::ptr_eq(&kernel.device, &self.device) {
            return Err(refuse(OP, "the kernel was compiled for another device"));
        }
        // Kernel parameters: one device pointer per binding, then the info
        // pointer, each passed by the address of a local holding it.
        let mut pointers: SmallVec<[CUdeviceptr; 8]> = SmallVec::new();
        for binding in launch.bindings {
            let slice = binding.slice;
            pointers.push(aligned(slice.page.address(
                &self.device,
                slice.offset,
                slice.len,
                OP,
            )?)?);
        }
        let info = launch.info;
        pointers.push(aligned(info.page.address(
            &self.device,
            info.offset,
            info.len,
            OP,
        )?)?);
        let mut params: SmallVec<[*mut c_void; 8]> = pointers
            .iter_mut()
            .map(|p| (p as *mut CUdeviceptr).cast::<c_void>())
            .collect();
        let [x, y, z] = launch.groups;
        self.device.bind()?;
        // SAFETY: the function is live (the kernel holds its device, which
        // holds the module); `params` has one entry per kernel parameter
        // (bindings then info, the order the PTX declares), each pointing at
        // a u64 that outlives the call, which copies them; every address was
        // checked to lie in a live page of this device.
        check(OP, unsafe {
            sys::cuLaunchKernel(
                kernel.function,
                x,
                y,
                z,
                WORKGROUP_SIZE,
                1,
                1,
                0,
                self.raw,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    pub(crate) fn signal(&mut self) -> Result<CudaSignal, DriverError> {
        let number = match (self.capturing, self.before_capture) {
            (true, Some(number)) => number,
            _ => {
                self.device.bind()?;
                self.events.record(self.raw)?
            }
        };
        Ok(CudaSignal {
            stream: self.id,
            number,
        })
    }

    pub(crate) fn fence(&mut self, signal: CudaSignal) -> Result<(), DriverError> {
        if signal.stream != self.id {
            return Err(refuse("fence", "the signal was given by another stream"));
        }
        self.device.bind()?;
        self.events.wait(signal.number)
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        if let Err(e) = self.device.bind() {
            log::warn!("leaking a stream: {e}");
            return;
        }
        if self.capturing {
            // A stream cannot be waited on while it records; close the
            // recording and throw it away first.
            drop(crate::graph::end_capture(self));
        }
        // SAFETY: the stream is live; waiting makes sure no event or page
        // is still in use by its work when they go.
        let waited = unsafe { sys::cuStreamSynchronize(self.raw) };
        if let Err(e) = check("wait for stream", waited) {
            log::warn!("{e}");
        }
        self.events.destroy_all();
        // SAFETY: the stream is owned here and destroyed once.
        let destroyed = unsafe { sys::cuStreamDestroy_v2(self.raw) };
        if let Err(e) = check("destroy stream", destroyed) {
            log::warn!("{e}");
        }
    }
}

fn same_len(op: &'static str, src: u64, dst: u64) -> Result<usize, DriverError> {
    if src != dst {
        return Err(refuse(
            op,
            format!("source holds {src} bytes, destination {dst}"),
        ));
    }
    usize::try_from(src).map_err(|_| refuse(op, format!("{src} bytes do not fit this host")))
}

/// Every builtin reads and writes `f32`s, so a pointer that is not 4-byte
/// aligned would fault on the device, which poisons the whole context; it is
/// refused here instead.
fn aligned(pointer: CUdeviceptr) -> Result<CUdeviceptr, DriverError> {
    if pointer.is_multiple_of(4) {
        Ok(pointer)
    } else {
        Err(refuse(
            "launch",
            format!("buffer address {pointer:#x} is not 4-byte aligned"),
        ))
    }
}
