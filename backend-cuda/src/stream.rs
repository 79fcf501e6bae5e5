//! One capture-core stream: a non-blocking CUDA stream, its signals, and the
//! copies and launches enqueued on it.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use capture_core::signature::{MAX_BINDINGS, MAX_PARAM_BYTES};
use capture_core::{DeviceSlice, DriverError, HostSlice, Launch};
use cudarc::driver::sys::{self, CUstream};

use crate::Cuda;
use crate::device::CudaDevice;
use crate::error::{check, refuse};
use crate::event::EventRing;

/// Bytes of one kernel parameter's slot: the largest parameter a
/// signature declares, and a device pointer.
const SLOT_BYTES: usize = 8;

/// Most parameters one launch passes: every buffer, the info pointer, and
/// the most by-value parameters (all of one byte) a signature may declare.
const MAX_ARGS: usize = MAX_BINDINGS + 1 + MAX_PARAM_BYTES as usize;

/// One kernel parameter's bytes, aligned as a device pointer.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Slot([u8; SLOT_BYTES]);

impl Slot {
    const ZERO: Slot = Slot([0; SLOT_BYTES]);
}

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

    /// Enqueue `launch`, whose shape capture-core has matched to its
    /// kernel's signature (binding count, info and parameter sizes, grid).
    pub(crate) fn launch(&mut self, launch: Launch<'_, Cuda>) -> Result<(), DriverError> {
        const OP: &str = "launch";
        let kernel = launch.kernel;
        if !Arc::ptr_eq(&kernel.module.device, &self.device) {
            return Err(refuse(OP, "the kernel was compiled for another device"));
        }
        let signature = kernel.signature();
        // Every kernel parameter gets a slot of its own, in the kernel ABI's
        // order: the buffer pointers, the info pointer, then each by-value
        // parameter's bytes. The driver copies each from the slot its entry
        // in `args` points at, reading as many bytes as the kernel's image
        // says the parameter has; an 8-byte slot holds any parameter a
        // signature can declare. Slots past the last are zero and `args`
        // points at them too, so even an entry taking more than its
        // signature says reads zeros here rather than the stack around.
        let mut slots = [Slot::ZERO; MAX_ARGS];
        let mut used = 0usize;
        let mut push = |bytes: &[u8]| -> Result<(), DriverError> {
            let slot = slots
                .get_mut(used)
                .and_then(|slot| slot.0.get_mut(..bytes.len()))
                .ok_or_else(|| {
                    refuse(
                        OP,
                        format!("the kernel takes more than {MAX_ARGS} parameters"),
                    )
                })?;
            slot.copy_from_slice(bytes);
            used += 1;
            Ok(())
        };
        for binding in launch.bindings {
            let slice = binding.slice;
            let address = slice
                .page
                .address(&self.device, slice.offset, slice.len, OP)?;
            push(&address.to_ne_bytes())?;
        }
        if let Some(info) = launch.info {
            let address = info.page.address(&self.device, info.offset, info.len, OP)?;
            push(&address.to_ne_bytes())?;
        }
        let mut at = 0usize;
        for &size in signature.param_sizes() {
            let size = size as usize;
            // Sizes are 1, 2, 4 or 8 bytes (the signature was validated) and
            // capture-core passes exactly their sum, so this always holds.
            let bytes = at
                .checked_add(size)
                .and_then(|end| launch.params.get(at..end))
                .ok_or_else(|| {
                    refuse(
                        OP,
                        format!(
                            "{} parameter bytes passed, the signature {signature} takes {}",
                            launch.params.len(),
                            signature.param_bytes()
                        ),
                    )
                })?;
            push(bytes)?;
            at += size;
        }
        let mut args = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        for (arg, slot) in args.iter_mut().zip(slots.iter_mut()) {
            *arg = slot.0.as_mut_ptr().cast::<c_void>();
        }
        let [x, y, z] = launch.groups;
        let [bx, by, bz] = signature.workgroup_size();
        self.device.bind()?;
        // SAFETY: the function is live (the kernel holds its module, which
        // holds the device and so the context); `args` has an entry for
        // every parameter the kernel takes (its constructor's contract, and
        // where the driver can tell, its check), each pointing at an 8-byte
        // slot that outlives the call, which copies them; every buffer
        // address was checked to lie in a live page of this device.
        check(OP, unsafe {
            sys::cuLaunchKernel(
                kernel.function,
                x,
                y,
                z,
                bx,
                by,
                bz,
                0,
                self.raw,
                args.as_mut_ptr(),
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
