//! Opening a HIP device: every reason it can be missing, said once, in the
//! order a person would fix them (runtime, device, compiler); listing the
//! devices; making one current for a call and putting the caller's back; and
//! the frees and unloads a recording on the GPU holds back.

use std::env;
use std::ffi::{CStr, OsString, c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use capture_core::{DeviceInfo, DriverError};

use crate::error::{self, BACKEND, describe};
use crate::ffi;
use crate::loader::{self, Api};
use capture_core::KeepAlive;

/// Environment variable holding the index of the device [`Hip::open`]
/// opens (default 0), as the runtime numbers them (after
/// `HIP_VISIBLE_DEVICES` and `ROCR_VISIBLE_DEVICES` have filtered them).
///
/// [`Hip::open`]: capture_core::Driver::open
pub const DEVICE_ENV: &str = "CAPTURE_HIP_DEVICE";

/// The first runtime whose `hipModuleLaunchKernel` is recorded by a stream
/// capture: ROCm 5.3 (`HIP_VERSION` 50300000). Before it a launch issued on
/// a capturing stream runs at once and the graph holds no node for it.
const FIRST_CAPTURING_RUNTIME: c_int = 50_300_000;

/// An opened HIP device, shared by its streams.
///
/// The runtime keeps one primary context per device per process, so nothing
/// here is created or destroyed: the device is made current for the length
/// of every call and the caller's current device put back after it, since
/// the runtime's notion of "current" is per thread and the calls may come
/// from any thread.
///
/// # Frees while a stream records
///
/// `hipFree`, `hipHostFree` and `hipModuleUnload` may synchronize the whole
/// device, which a stream capture forbids: on some releases the capture is
/// invalidated, on others the free waits for work that cannot finish. So
/// the streams recording on the GPU are counted, and while any is, a page
/// or module released on any stream of the GPU is queued instead of freed;
/// the stream whose recording ends last frees the queue. The count and the
/// queue belong to the GPU's ordinal, shared by every `Device` opened on it,
/// since they all share its primary context. A page or module is only
/// released once no enqueued work uses it, so holding it longer is always
/// safe.
///
/// The queue is freed outside the lock: `hipFree` waits for every stream of
/// the device to drain, and other threads' begins and releases must not
/// wait for that. A recording that begins meanwhile sends what is still
/// queued back for its own end; one that begins while a free is under way
/// may be invalidated by it, and fails at its end like any invalidated
/// capture.
pub struct Device {
    pub(crate) api: &'static Api,
    pub(crate) ordinal: c_int,
    info: DeviceInfo,
    /// Most threads per block in x, y and z.
    pub(crate) max_block: [u32; 3],
    /// Most threads in one block.
    pub(crate) max_threads: u32,
    /// `gcnArchName`, when the runtime could say.
    arch: Option<String>,
    /// Why a capture cannot record on this runtime, when it cannot.
    pub(crate) capture_refusal: Option<String>,
    /// Shared by every `Device` opened on this ordinal (see [`recorders_of`]).
    recorders: Arc<Mutex<Recorders>>,
}

/// Which allocator a page came from, and so which free it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memory {
    /// `hipMalloc`, freed by `hipFree`.
    Device,
    /// `hipHostMalloc`, freed by `hipHostFree`.
    Host,
}

/// A page or module whose release waits for the GPU's recordings to end.
enum Deferred {
    Page {
        ptr: *mut c_void,
        bytes: u64,
        memory: Memory,
    },
    Module(ffi::Module),
    /// What the caller handed over with memory, a stream or a kernel made
    /// elsewhere, whose drop may free or unload what it owns.
    KeepAlive(KeepAlive),
}

// SAFETY: a device or pinned host address, or a loaded module, with no
// thread affinity, or a keep-alive, which is Send; it is released once, by
// whichever thread drains the queue.
unsafe impl Send for Deferred {}

/// The GPU's recording streams and the releases they hold back.
#[derive(Default)]
struct Recorders {
    streams: usize,
    deferred: Vec<Deferred>,
}

/// The recording state of GPU `ordinal`, one per process.
fn recorders_of(ordinal: c_int) -> Arc<Mutex<Recorders>> {
    static ALL: Mutex<Vec<(c_int, Arc<Mutex<Recorders>>)>> = Mutex::new(Vec::new());
    let mut all = ALL.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, found)) = all.iter().find(|(o, _)| *o == ordinal) {
        return Arc::clone(found);
    }
    let fresh = Arc::new(Mutex::new(Recorders::default()));
    all.push((ordinal, Arc::clone(&fresh)));
    fresh
}

/// The device made current on the calling thread for the length of one
/// call, with the thread in relaxed capture mode; dropping it makes the
/// caller's device current again and puts the thread's mode back, so that a
/// program using HIP directly keeps its own device and mode.
pub(crate) struct Current {
    api: &'static Api,
    /// The caller's device, when it was another one.
    restore: Option<c_int>,
    /// The thread's capture mode before the call, when the runtime could
    /// exchange it.
    mode: Option<ffi::CaptureMode>,
}

impl Current {
    fn enter(api: &'static Api, ordinal: c_int, op: &'static str) -> Result<Self, DriverError> {
        // Dropped on any failure below, which puts the mode back.
        let mut current = Self {
            api,
            restore: None,
            mode: relax(api)?,
        };
        let mut previous: c_int = -1;
        // SAFETY: the out-pointer is a live local int.
        let known = unsafe { (api.get_device)(&mut previous) } == ffi::SUCCESS;
        if known && previous == ordinal {
            return Ok(current);
        }
        // SAFETY: a plain ordinal, within the count the runtime reported.
        let code = unsafe { (api.set_device)(ordinal) };
        error::check(api, op, code)?;
        current.restore = known.then_some(previous);
        Ok(current)
    }
}

/// Put the calling thread in relaxed capture mode, returning the mode it had
/// (`None` when the runtime cannot exchange it).
///
/// In the default global mode, a capture another library of the process
/// runs on any thread makes ROCm refuse this thread's allocations, frees,
/// module loads and syncs, and invalidates that capture; in relaxed mode
/// they go ahead.
fn relax(api: &Api) -> Result<Option<ffi::CaptureMode>, DriverError> {
    let Some(exchange) = api.thread_exchange_stream_capture_mode else {
        return Ok(None);
    };
    let mut mode = ffi::CAPTURE_MODE_RELAXED;
    // SAFETY: `mode` is a live local holding a valid mode, which the runtime
    // swaps with the calling thread's.
    let code = unsafe { exchange(&mut mode) };
    error::check(api, "relax the thread's stream-capture mode", code)?;
    Ok(Some(mode))
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(previous) = self.restore {
            // SAFETY: the ordinal is the one the runtime reported current.
            let code = unsafe { (self.api.set_device)(previous) };
            if let Err(error) = error::check(self.api, "restore the current device", code) {
                log::warn!("{error}");
            }
        }
        if let (Some(mut mode), Some(exchange)) =
            (self.mode, self.api.thread_exchange_stream_capture_mode)
        {
            // SAFETY: `mode` is a live local holding the mode the runtime
            // handed back on entry, on this same thread.
            let code = unsafe { exchange(&mut mode) };
            if let Err(error) =
                error::check(self.api, "restore the thread's stream-capture mode", code)
            {
                log::warn!("{error}");
            }
        }
    }
}

impl Device {
    /// The device at `ordinal`, as the runtime numbers devices, over the
    /// runtime's primary context for it: HIP has no contexts of a library's
    /// own, so memory, streams and kernels another library made on that
    /// device (through the HIP runtime of this process) are usable here.
    /// Nothing is created or destroyed; the same as
    /// [`Driver::open_index`](capture_core::Driver::open_index).
    ///
    /// # Errors
    ///
    /// As for opening: no runtime, no such device, or no hiprtc.
    pub fn from_ordinal(ordinal: usize) -> Result<Arc<Self>, DriverError> {
        open_index(ordinal).map(Arc::new)
    }

    /// The device's ordinal, as the runtime numbers devices.
    pub fn ordinal(&self) -> usize {
        usize::try_from(self.ordinal).unwrap_or(0)
    }

    /// Make this device current on the calling thread, in relaxed capture
    /// mode, until the guard drops.
    pub(crate) fn enter(&self, op: &'static str) -> Result<Current, DriverError> {
        Current::enter(self.api, self.ordinal, op)
    }

    /// What `Driver::device_info` reports.
    pub(crate) fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    /// The device's architecture as the runtime names it (`gcnArchName`,
    /// such as `gfx90a:sramecc+:xnack-`): what
    /// [`Kernel::from_hip`](crate::Kernel::from_hip) compiles for, and what
    /// a code object for
    /// [`Kernel::from_code_object`](crate::Kernel::from_code_object) must
    /// target. `None` when the runtime has no properties getter this crate
    /// reads; hiprtc then targets the current device itself.
    pub fn arch(&self) -> Option<&str> {
        self.arch.as_deref()
    }

    /// Most threads per workgroup in x, y and z, and in all.
    pub fn max_workgroup(&self) -> ([u32; 3], u32) {
        (self.max_block, self.max_threads)
    }

    fn recorders(&self) -> MutexGuard<'_, Recorders> {
        // A poisoned lock still holds a consistent count and queue: every
        // change to them is a single push, pop or increment.
        self.recorders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Free a page now, or once the GPU's recordings have ended (see
    /// [`Device`]).
    pub(crate) fn free(&self, memory: Memory, ptr: *mut c_void, bytes: u64) {
        self.release(Deferred::Page { ptr, bytes, memory });
    }

    /// Unload a module now, or once the GPU's recordings have ended.
    pub(crate) fn unload(&self, module: ffi::Module) {
        self.release(Deferred::Module(module));
    }

    /// Drop what the caller handed over with a handle made elsewhere, now
    /// or once the GPU's recordings have ended, since its drop may free.
    pub(crate) fn let_go(&self, keep_alive: KeepAlive) {
        self.release(Deferred::KeepAlive(keep_alive));
    }

    /// The lock is held across a free or unload, so no recording can begin
    /// while one runs; a keep-alive is dropped outside it, since its drop
    /// runs the caller's code, which may call this library.
    fn release(&self, release: Deferred) {
        let mut recorders = self.recorders();
        if recorders.streams > 0 {
            recorders.deferred.push(release);
            return;
        }
        if let Deferred::KeepAlive(keep_alive) = release {
            drop(recorders);
            drop(keep_alive);
            return;
        }
        self.free_now(release);
    }

    /// A stream of this device is about to record.
    pub(crate) fn recording_starts(&self) {
        self.recorders().streams += 1;
    }

    /// A stream of this device stopped recording: the last one to stop frees
    /// what the recordings held back.
    pub(crate) fn recording_ends(&self) {
        let deferred = {
            let mut recorders = self.recorders();
            recorders.streams = recorders.streams.saturating_sub(1);
            if recorders.streams > 0 {
                return;
            }
            std::mem::take(&mut recorders.deferred)
        };
        self.free_deferred(deferred);
    }

    /// Free what was taken off the queue, without holding the lock, one at
    /// a time; once a recording has begun, the rest goes back to the queue.
    fn free_deferred(&self, deferred: Vec<Deferred>) {
        let mut left = deferred.into_iter();
        while let Some(release) = left.next() {
            {
                let mut recorders = self.recorders();
                if recorders.streams > 0 {
                    recorders.deferred.push(release);
                    recorders.deferred.extend(left);
                    return;
                }
            }
            self.free_now(release);
        }
    }

    fn free_now(&self, release: Deferred) {
        let (op, bytes, result) = match release {
            Deferred::Page { ptr, bytes, memory } => {
                let (op, free) = match memory {
                    Memory::Device => ("release device page", self.api.free),
                    Memory::Host => ("release host page", self.api.host_free),
                };
                let result = self.enter(op).and_then(|_current| {
                    // SAFETY: the pointer came from hipMalloc (or
                    // hipHostMalloc) on this GPU and reaches here once, from
                    // its page's Drop: no enqueued work touches it any more
                    // (capture-core's promise for a released page; a page
                    // dropped without that promise is still safe to free,
                    // since the free synchronizes the device, as ROCm
                    // documents).
                    let code = unsafe { free(ptr) };
                    error::check(self.api, op, code)
                });
                (op, Some(bytes), result)
            }
            Deferred::Module(module) => {
                const OP: &str = "unload kernels";
                let result = self.enter(OP).and_then(|_current| {
                    // SAFETY: the module came from hipModuleLoadData on this
                    // GPU and reaches here once, from its Drop; every kernel
                    // and recording of it held an Arc to it, so no launch or
                    // graph outlives it.
                    let code = unsafe { (self.api.module_unload)(module) };
                    error::check(self.api, OP, code)
                });
                (OP, None, result)
            }
            Deferred::KeepAlive(keep_alive) => {
                drop(keep_alive);
                return;
            }
        };
        if let Err(error) = result {
            match bytes {
                Some(bytes) => log::warn!("{error}; {bytes} bytes may leak"),
                None => log::warn!("{error}; {op}: the module may stay loaded"),
            }
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // A stream of another `Device` on this GPU may still be recording,
        // and releases what waits when it ends.
        let deferred = {
            let mut recorders = self.recorders();
            if recorders.streams > 0 {
                return;
            }
            std::mem::take(&mut recorders.deferred)
        };
        self.free_deferred(deferred);
    }
}

/// `hipInit`'s answer, asked once: the runtime initialises itself once per
/// process and says the same thing on every later call.
fn init(api: &Api) -> ffi::HipError {
    static INIT: OnceLock<ffi::HipError> = OnceLock::new();
    // SAFETY: hipInit takes flags, which must be 0.
    *INIT.get_or_init(|| unsafe { (api.init)(0) })
}

/// ROCm's `major * 10_000_000 + minor * 100_000 + patch` as `major.minor.patch`.
fn version_text(version: c_int) -> String {
    if version >= 10_000_000 {
        format!(
            "{}.{}.{}",
            version / 10_000_000,
            version / 100_000 % 100,
            version % 100_000
        )
    } else {
        version.to_string()
    }
}

/// Why captures cannot record on a runtime of `version`, or `None` when
/// they can.
fn capture_refusal(version: Option<c_int>) -> Option<String> {
    match version {
        Some(version) if version >= FIRST_CAPTURING_RUNTIME => None,
        Some(version) => Some(format!(
            "HIP runtime {} is older than ROCm 5.3, whose hipModuleLaunchKernel has no \
             stream-capture path: a launch issued while recording would run at once and be \
             missing from the graph; graphs need ROCm 5.3 or later (eager work runs as it is)",
            version_text(version)
        )),
        None => Some(
            "the HIP runtime did not say its version, so whether a capture records kernel \
             launches (ROCm 5.3 and later) cannot be told"
                .to_owned(),
        ),
    }
}

/// The device index `CAPTURE_HIP_DEVICE` (its value `raw`) selects among
/// `count` devices.
fn selected(raw: Option<OsString>, count: c_int) -> Result<c_int, String> {
    let Some(raw) = raw.filter(|v| !v.is_empty()) else {
        return Ok(0);
    };
    let text = raw.to_string_lossy();
    match text.trim().parse::<c_int>() {
        Ok(index) if (0..count).contains(&index) => Ok(index),
        Ok(index) => Err(format!(
            "{DEVICE_ENV}={index} selects no device: the HIP runtime sees {count} device(s), \
             numbered from 0"
        )),
        Err(_) => Err(format!(
            "{DEVICE_ENV}={text:?} is not a device index (expected 0 to {})",
            count - 1
        )),
    }
}

/// The loaded runtime, its version and the devices it sees.
struct Runtime {
    api: &'static Api,
    version: Option<c_int>,
    /// `driver <version>, HIP runtime <version>`, for reports.
    versions: String,
    count: c_int,
    /// Why there is no device, when `count` is 0.
    no_device: String,
}

/// Load and initialise the runtime and count its devices, or say why that
/// cannot be done. No device is not an error here: `count` is 0.
fn runtime() -> Result<Runtime, String> {
    let api = loader::api().map_err(|reason| format!("no HIP runtime: {reason}"))?;
    let init_code = init(api);
    let mut raw_version: c_int = 0;
    // SAFETY: the pointer is to a live local int.
    let code = unsafe { (api.runtime_get_version)(&mut raw_version) };
    let (version, runtime) = if code == ffi::SUCCESS {
        (Some(raw_version), version_text(raw_version))
    } else {
        (None, format!("unknown ({})", describe(Some(api), code)))
    };

    let mut count: c_int = 0;
    // SAFETY: the pointer is to a live local int.
    let count_code = unsafe { (api.get_device_count)(&mut count) };
    let init_note = if init_code == ffi::SUCCESS {
        String::new()
    } else {
        format!("; hipInit answered {}", describe(Some(api), init_code))
    };
    let mut no_device = String::new();
    if count_code == ffi::ERROR_NO_DEVICE || (count_code == ffi::SUCCESS && count <= 0) {
        no_device = format!(
            "no HIP device: hipGetDeviceCount answered {} (runtime {runtime} from {}{init_note})",
            describe(Some(api), ffi::ERROR_NO_DEVICE),
            api.path
        );
        count = 0;
    } else if count_code != ffi::SUCCESS {
        return Err(format!(
            "HIP runtime {runtime} from {} cannot count devices: {}{init_note}",
            api.path,
            describe(Some(api), count_code)
        ));
    } else if init_code != ffi::SUCCESS {
        return Err(format!(
            "HIP runtime {runtime} from {} failed to initialise: hipInit answered {}",
            api.path,
            describe(Some(api), init_code)
        ));
    }

    let mut driver: c_int = 0;
    // SAFETY: the pointer is to a live local int.
    let driver_code = unsafe { (api.driver_get_version)(&mut driver) };
    let driver = if driver_code == ffi::SUCCESS {
        version_text(driver)
    } else {
        format!("unknown ({})", describe(Some(api), driver_code))
    };
    Ok(Runtime {
        api,
        version,
        versions: format!("driver {driver}, HIP runtime {runtime}"),
        count,
        no_device,
    })
}

/// What one device says of itself.
struct Properties {
    info: DeviceInfo,
    max_block: [u32; 3],
    max_threads: u32,
    arch: Option<String>,
}

/// Ask device `ordinal` what it is, with it current.
fn properties(runtime: &Runtime, ordinal: c_int) -> Result<Properties, String> {
    let api = runtime.api;
    let _current = Current::enter(api, ordinal, "open device").map_err(|error| {
        format!(
            "HIP device {ordinal} cannot be made current: {}",
            error.message
        )
    })?;
    let name = device_name(api, ordinal);
    let attribute = |attribute, what| device_attribute(api, ordinal, attribute, what);
    let max_block = [
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "block size in x")?,
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, "block size in y")?,
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, "block size in z")?,
    ];
    let max_grid = [
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "grid size in x")?,
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "grid size in y")?,
        attribute(ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "grid size in z")?,
    ];
    let max_threads = attribute(
        ffi::DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        "threads per block",
    )?;
    let arch = arch_name(api, ordinal);
    let name = match &arch {
        Some(arch) => format!("{name} ({arch})"),
        None => name,
    };
    let mut info = DeviceInfo::new(name, runtime.versions.clone());
    info.max_groups = max_groups(max_grid, max_block);
    info.index = usize::try_from(ordinal).unwrap_or_default();
    info.memory_bytes = total_memory(api, ordinal);
    info.kind = "GPU".to_owned();
    Ok(Properties {
        info,
        max_block,
        max_threads,
        arch,
    })
}

/// Every device the runtime sees, in its order; empty when it sees none.
pub(crate) fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
    let runtime = runtime().map_err(|reason| open_error("list devices", reason))?;
    (0..runtime.count)
        .map(|ordinal| {
            properties(&runtime, ordinal)
                .map(|properties| properties.info)
                .map_err(|reason| open_error("list devices", reason))
        })
        .collect()
}

/// Open device `index`, or say why it cannot be used.
pub(crate) fn open_index(index: usize) -> Result<Device, DriverError> {
    let runtime = runtime().map_err(|reason| open_error("open device", reason))?;
    if runtime.count == 0 {
        return Err(open_error("open device", runtime.no_device));
    }
    let ordinal = c_int::try_from(index)
        .ok()
        .filter(|ordinal| *ordinal < runtime.count)
        .ok_or_else(|| {
            open_error(
                "open device",
                format!(
                    "HIP device {index} does not exist: the runtime sees {} device(s), \
                     numbered from 0",
                    runtime.count
                ),
            )
        })?;
    open_ordinal(&runtime, ordinal).map_err(|reason| open_error("open device", reason))
}

/// Open the device `CAPTURE_HIP_DEVICE` selects (device 0 by default).
pub(crate) fn open() -> Result<Device, DriverError> {
    let runtime = runtime().map_err(|reason| open_error("open device", reason))?;
    if runtime.count == 0 {
        return Err(open_error("open device", runtime.no_device));
    }
    selected(env::var_os(DEVICE_ENV), runtime.count)
        .and_then(|ordinal| open_ordinal(&runtime, ordinal))
        .map_err(|reason| open_error("open device", reason))
}

fn open_ordinal(runtime: &Runtime, ordinal: c_int) -> Result<Device, String> {
    let api = runtime.api;
    let properties = properties(runtime, ordinal)?;
    let rtc = api.rtc.as_ref().map_err(|reason| {
        format!("HIP runtime found, but hiprtc is missing, so the builtin kernels cannot be built: {reason}")
    })?;
    log::debug!("hip: runtime {}, hiprtc {}", api.path, rtc.path);
    if properties.arch.is_none() {
        log::warn!(
            "hip: device {ordinal} did not report its architecture; hiprtc targets the current \
             device itself"
        );
    }
    Ok(Device {
        api,
        ordinal,
        info: properties.info,
        max_block: properties.max_block,
        max_threads: properties.max_threads,
        arch: properties.arch,
        capture_refusal: capture_refusal(runtime.version),
        recorders: recorders_of(ordinal),
    })
}

/// Most blocks per grid dimension whatever the block size: the runtime's
/// own limit, and no more than fit 2^32 - 1 threads at the largest block,
/// since the runtime counts a dimension's threads in 32 bits and refuses
/// (in x) or truncates (in y and z) a grid past that.
fn max_groups(grid: [u32; 3], block: [u32; 3]) -> [u32; 3] {
    std::array::from_fn(|d| grid[d].min(u32::MAX / block[d].max(1)))
}

/// A positive device limit, or why the device cannot be used.
fn device_attribute(
    api: &Api,
    ordinal: c_int,
    attribute: ffi::DeviceAttribute,
    what: &str,
) -> Result<u32, String> {
    let mut value: c_int = 0;
    // SAFETY: the out-pointer is a live local; the attribute is one of the
    // documented values and the ordinal was validated.
    let code = unsafe { (api.device_get_attribute)(&mut value, attribute, ordinal) };
    if code != ffi::SUCCESS {
        return Err(format!(
            "HIP device {ordinal} cannot report its largest {what}: {}",
            describe(Some(api), code)
        ));
    }
    u32::try_from(value)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("HIP device {ordinal} reports a largest {what} of {value}"))
}

/// The device's `gcnArchName`, read from the one struct field this crate
/// reads (see [`ffi::PropsLayout`]), or `None` when the runtime cannot say.
fn arch_name(api: &Api, ordinal: c_int) -> Option<String> {
    let (getter, layout) = api.get_device_properties?;
    // Larger than either layout, and 8-byte aligned as the struct is.
    let mut buffer = [0u64; 512];
    let bytes = size_of_val(&buffer);
    if layout.size > bytes || layout.gcn_arch_name + ffi::GCN_ARCH_NAME_LEN > layout.size {
        return None;
    }
    // SAFETY: the runtime writes `layout.size` bytes, the size of the struct
    // the symbol fills, into a zeroed, aligned buffer of `bytes` >= that many
    // bytes that lives across the call; the ordinal was validated.
    let code = unsafe { getter(buffer.as_mut_ptr().cast(), ordinal) };
    if code != ffi::SUCCESS {
        log::warn!(
            "hip: {} for device {ordinal} answered {}",
            layout.symbol,
            describe(Some(api), code)
        );
        return None;
    }
    let all: Vec<u8> = buffer.iter().flat_map(|word| word.to_ne_bytes()).collect();
    let field = all.get(layout.gcn_arch_name..layout.gcn_arch_name + ffi::GCN_ARCH_NAME_LEN)?;
    let name = CStr::from_bytes_until_nul(field)
        .ok()?
        .to_str()
        .ok()?
        .trim();
    // An architecture name is `gfx` and target features; anything else means
    // the layout was not the one assumed, and is not passed to hiprtc.
    let plausible = name.starts_with("gfx")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'+' | b'-' | b'_'));
    if !plausible {
        log::warn!(
            "hip: {} gave an unexpected architecture name {name:?}",
            layout.symbol
        );
    }
    plausible.then(|| name.to_owned())
}

/// The device's marketing name, or a placeholder saying why there is none
/// (a name is for people; its absence is no reason to refuse the device).
fn device_name(api: &Api, ordinal: c_int) -> String {
    let mut device: ffi::Device = 0;
    // SAFETY: the pointer is to a live local; the ordinal was validated.
    let code = unsafe { (api.device_get)(&mut device, ordinal) };
    if code != ffi::SUCCESS {
        return format!(
            "HIP device {ordinal} (no name: {})",
            describe(Some(api), code)
        );
    }
    let mut buffer = [0u8; 256];
    let len = c_int::try_from(buffer.len()).unwrap_or(c_int::MAX);
    // SAFETY: the runtime writes at most `len` bytes, NUL included, into the
    // buffer, which is exactly `len` bytes long and lives across the call.
    let code = unsafe { (api.device_get_name)(buffer.as_mut_ptr().cast(), len, device) };
    if code != ffi::SUCCESS {
        return format!(
            "HIP device {ordinal} (no name: {})",
            describe(Some(api), code)
        );
    }
    match CStr::from_bytes_until_nul(&buffer) {
        Ok(name) if !name.is_empty() => name.to_string_lossy().into_owned(),
        _ => format!("HIP device {ordinal}"),
    }
}

/// A failure to list or open devices, in the driver contract's shape.
fn open_error(op: &'static str, reason: String) -> DriverError {
    DriverError::new(BACKEND, op, reason)
}

/// The device's global memory in bytes, or 0 when the runtime cannot say.
fn total_memory(api: &Api, ordinal: c_int) -> u64 {
    let mut device: ffi::Device = 0;
    // SAFETY: the pointer is to a live local; the ordinal was validated.
    if unsafe { (api.device_get)(&mut device, ordinal) } != ffi::SUCCESS {
        return 0;
    }
    let mut bytes = 0usize;
    // SAFETY: the out-pointer is a live local; the handle came from
    // hipDeviceGet.
    let code = unsafe { (api.device_total_mem)(&mut bytes, device) };
    if code == ffi::SUCCESS {
        u64::try_from(bytes).unwrap_or(u64::MAX)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_rocm_writes_them() {
        assert_eq!(version_text(50_221_153), "5.2.21153");
        assert_eq!(version_text(60_443_483), "6.4.43483");
        assert_eq!(version_text(42), "42");
    }

    #[test]
    fn captures_need_rocm_5_3() {
        assert_eq!(capture_refusal(Some(50_300_000)), None);
        assert_eq!(capture_refusal(Some(60_443_483)), None);
        let old = capture_refusal(Some(50_221_153)).unwrap_or_default();
        assert!(
            old.contains("5.2.21153") && old.contains("ROCm 5.3"),
            "{old}"
        );
        assert!(capture_refusal(None).is_some());
    }

    #[test]
    fn grid_limits_keep_every_dimension_within_32_bits_of_threads() {
        let rocm = max_groups([i32::MAX as u32, 65_535, 65_535], [1024, 1024, 1024]);
        assert_eq!(rocm, [4_194_303, 65_535, 65_535]);
        assert_eq!(max_groups([100, 100, 100], [1, 1, 1]), [100, 100, 100]);
    }

    #[test]
    fn device_selection() {
        assert_eq!(selected(None, 2), Ok(0));
        assert_eq!(selected(Some("".into()), 2), Ok(0));
        assert_eq!(selected(Some(" 1 ".into()), 2), Ok(1));
        let too_big = selected(Some("2".into()), 2).unwrap_err();
        assert!(too_big.contains("CAPTURE_HIP_DEVICE=2") && too_big.contains("2 device(s)"));
        let negative = selected(Some("-1".into()), 2).unwrap_err();
        assert!(negative.contains("selects no device"), "{negative}");
        let junk = selected(Some("gpu0".into()), 2).unwrap_err();
        assert!(junk.contains("is not a device index"), "{junk}");
    }
}
