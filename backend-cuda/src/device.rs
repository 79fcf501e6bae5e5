//! The opened GPU: its primary context, made current around every call, and
//! the GPU-wide count of streams recording, behind which frees wait.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use capture_core::{DeviceInfo, DriverError};

use crate::error::refuse;
use crate::loader::{self, DriverVersion, LOAD_OP};
use crate::setter::{self, CONDITIONAL_DRIVER, ConditionalFunctions, Setters};
use crate::sys::{
    self, Api, CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUmodule, CUstreamCaptureMode,
};
use capture_core::{KeepAlive, Rejected};

/// The variable that picks a device by index when a machine has several
/// (default 0).
pub const DEVICE_ENV: &str = "CAPTURE_CUDA_DEVICE";

/// One GPU, with its primary context or a context made elsewhere.
///
/// The primary context is the one the CUDA runtime and other libraries in
/// the same process use too, so memory and graphs made here stay usable by
/// them and no second context competes for the device. It is retained on
/// the first open of the device in the process and kept until the process
/// ends, as the runtime keeps it: opening the device again (which every
/// probe does) costs a lookup, not a context. [`Device::from_primary`]
/// opens a device that way; [`Device::from_raw_context`] adopts a context
/// another library made, which this library never destroys or releases.
///
/// Every call on the device, its streams, pages, kernels and graphs pushes
/// the context on the calling thread and pops it on return, so the caller's
/// own current context is as it was; the thread's stream-capture mode is
/// relaxed for the call and restored likewise.
pub struct Device {
    api: &'static Api,
    ordinal: c_int,
    context: CUcontext,
    /// Compute capability, which picks the PTX target.
    compute: (c_int, c_int),
    limits: BlockLimits,
    info: DeviceInfo,
    /// Shared by every `Device` opened on this ordinal (see [`recorders_of`]).
    recording: Arc<Mutex<Recorders>>,
    /// What keeps an adopted context alive; `None` for a primary context,
    /// which the process keeps. Shared with every release queued for the
    /// context, so that it outlives them.
    owner: Option<Arc<KeepAlive>>,
    /// The driver's version, which says what conditional nodes it has.
    version: DriverVersion,
    /// The conditional setter kernels, loaded before the device's first
    /// capture on a driver that has conditional nodes, or why they are not.
    setters: OnceLock<Result<Setters, String>>,
}

/// The largest block the device runs, which every kernel's signature is
/// checked against when it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockLimits {
    /// Most threads in x, y and z.
    pub(crate) max_block: [u32; 3],
    /// Most threads in one block.
    pub(crate) max_threads_per_block: u32,
}

/// Streams of the GPU recording now, and the releases waiting for the
/// last of them to end.
#[derive(Default)]
struct Recorders {
    streams: usize,
    deferred: Vec<Deferred>,
}

/// A release queued behind the GPU's recordings, with the context it is
/// performed in and what keeps that context alive until then.
struct Deferred {
    context: CUcontext,
    owner: Option<Arc<KeepAlive>>,
    release: Release,
}

// SAFETY: the context is a process-wide handle, kept alive by `owner` (or
// for the life of the process, for a primary context); the release is Send.
unsafe impl Send for Deferred {}

/// The recording state of GPU `ordinal`, one per process.
///
/// Every `Device` opened on an ordinal shares its primary context, so a free
/// made through one would invalidate a capture open on a stream of another;
/// the count and the deferred releases belong to the GPU, not to the handle.
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

/// Memory or code given back to the driver, which may wait for the device
/// to have no recording stream (see [`Device::release`]).
pub(crate) enum Release {
    /// A `cuMemAlloc` block.
    DevicePage(CUdeviceptr),
    /// A `cuMemHostAlloc` block.
    HostPage(*mut c_void),
    /// A loaded module.
    Module(CUmodule),
    /// What the caller handed over with memory, a stream or a kernel made
    /// elsewhere, whose drop may free or unload what it owns.
    KeepAlive(KeepAlive),
}

// SAFETY: each pointer is a driver allocation or handle owned by the release
// alone (its page or kernel is gone), usable from any thread once the
// context is current.
unsafe impl Send for Release {}

/// The device's context made current on this thread, in relaxed capture
/// mode; popped, and the thread's mode put back, when dropped.
pub(crate) struct Current {
    api: &'static Api,
    /// Dropped after the pop, so the mode is restored last.
    _relaxed: Relaxed,
}

impl Drop for Current {
    fn drop(&mut self) {
        let mut popped: CUcontext = std::ptr::null_mut();
        // SAFETY: `enter` pushed the device's context on this thread, so
        // popping gives the thread back the context it had before.
        let code = unsafe { (self.api.ctx_pop_current)(&mut popped) };
        if let Err(e) = self.api.check("restore the caller's context", code) {
            log::warn!("{e}");
        }
    }
}

/// The calling thread in relaxed stream-capture mode, holding the mode it
/// had before, which is put back when dropped.
///
/// In the default global mode, a capture another library of the process
/// runs on any thread makes the driver refuse this thread's allocations,
/// frees and module loads; in relaxed mode they go ahead.
struct Relaxed {
    api: &'static Api,
    previous: CUstreamCaptureMode,
}

impl Relaxed {
    fn enter(api: &'static Api) -> Result<Self, DriverError> {
        let mut mode = sys::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: `mode` is a live local holding a valid mode, which the
        // driver swaps with the calling thread's.
        let code = unsafe { (api.thread_exchange_stream_capture_mode)(&mut mode) };
        api.check("relax the thread's stream-capture mode", code)?;
        Ok(Self {
            api,
            previous: mode,
        })
    }
}

impl Drop for Relaxed {
    fn drop(&mut self) {
        let mut mode = self.previous;
        // SAFETY: `mode` is a live local holding the mode the driver handed
        // back on entry, on this same thread.
        let code = unsafe { (self.api.thread_exchange_stream_capture_mode)(&mut mode) };
        if let Err(e) = self
            .api
            .check("restore the thread's stream-capture mode", code)
        {
            log::warn!("{e}");
        }
    }
}

// SAFETY: a CUcontext is a process-wide handle that any thread may push;
// every use of it here goes through `enter`, and the driver synchronises
// access to context state. The recording count is behind a mutex; nothing
// else changes after `open`.
unsafe impl Send for Device {}
// SAFETY: as for Send.
unsafe impl Sync for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.ordinal)
            .field("name", &self.info.name)
            .field("driver_version", &self.info.driver_version)
            .finish()
    }
}

/// `context` made current on the calling thread, with the thread in relaxed
/// stream-capture mode, until the guard drops.
fn enter_context(api: &'static Api, context: CUcontext) -> Result<Current, DriverError> {
    let relaxed = Relaxed::enter(api)?;
    // SAFETY: every context entered is alive: a primary context is retained
    // for the life of the process, an adopted one until its owner drops,
    // which outlives every device, page and queued release of it.
    let code = unsafe { (api.ctx_push_current)(context) };
    api.check("make the device's context current", code)?;
    Ok(Current {
        api,
        _relaxed: relaxed,
    })
}

/// A failure while opening, with what was being done said in the message,
/// since the probe hands on the message alone.
fn opening(e: DriverError) -> DriverError {
    if e.op == LOAD_OP {
        e
    } else {
        DriverError {
            message: format!("{}: {}", e.op, e.message),
            ..e
        }
    }
}

impl Device {
    /// Every device the driver sees, in ordinal order.
    pub(crate) fn list() -> Result<Vec<DeviceInfo>, DriverError> {
        let loaded = loader::load()?;
        let count = count(&loaded.api).map_err(opening)?;
        (0..count)
            .map(|ordinal| {
                describe(&loaded.api, &loaded.version.to_string(), ordinal)
                    .map(|(info, _, _, _)| info)
                    .map_err(opening)
            })
            .collect()
    }

    /// Open the device [`DEVICE_ENV`] names (the first one when unset).
    pub(crate) fn open() -> Result<Arc<Self>, DriverError> {
        let index = match std::env::var(DEVICE_ENV) {
            Err(_) => 0,
            Ok(text) => text.trim().parse::<usize>().map_err(|_| {
                refuse(
                    "select device",
                    format!("{DEVICE_ENV}={text:?} is not a device index"),
                )
            })?,
        };
        Self::open_index(index).map_err(|e| {
            if std::env::var_os(DEVICE_ENV).is_some() && e.op == "select device" {
                DriverError {
                    message: format!("{DEVICE_ENV}={index}: {}", e.message),
                    ..e
                }
            } else {
                e
            }
        })
    }

    /// Open the device at `index` of [`Device::list`].
    pub(crate) fn open_index(index: usize) -> Result<Arc<Self>, DriverError> {
        let loaded = loader::load()?;
        let api = &loaded.api;
        let count = count(api).map_err(opening)?;
        if count <= 0 {
            return Err(refuse(
                "count devices",
                "no CUDA device: the driver is installed but reports no device",
            ));
        }
        let ordinal = c_int::try_from(index)
            .ok()
            .filter(|&ordinal| ordinal < count)
            .ok_or_else(|| {
                refuse(
                    "select device",
                    format!(
                        "device {index} was asked for, and the driver reports {count} device(s)"
                    ),
                )
            })?;
        Self::assemble(api, loaded.version, ordinal, None).map(Arc::new)
    }

    /// Device `ordinal` over `context`, or over its primary context when
    /// `None`; `owner` keeps an adopted context alive.
    fn assemble(
        api: &'static Api,
        version: DriverVersion,
        ordinal: c_int,
        context: Option<CUcontext>,
    ) -> Result<Self, DriverError> {
        let (info, raw, compute, limits) =
            describe(api, &version.to_string(), ordinal).map_err(opening)?;
        let context = match context {
            Some(context) => context,
            None => primary_context(api, raw).map_err(opening)?,
        };
        Ok(Self {
            api,
            ordinal,
            context,
            compute,
            limits,
            info,
            recording: recorders_of(ordinal),
            owner: None,
            version,
            setters: OnceLock::new(),
        })
    }

    /// The device at `ordinal` over its primary context, the one the CUDA
    /// runtime and libraries over it (cudarc's `CudaContext::new`, candle)
    /// use too, so memory, streams and kernels of theirs in that context
    /// are usable here. The context is retained once per process and never
    /// released, as [`Driver::open_index`](capture_core::Driver::open_index)
    /// does.
    ///
    /// # Errors
    ///
    /// As for opening: no driver, no such device, or a context the driver
    /// refuses.
    pub fn from_primary(ordinal: usize) -> Result<Arc<Self>, DriverError> {
        Self::open_index(ordinal)
    }

    /// A device over `context`, a context made elsewhere (`cuCtxCreate`, or
    /// a primary context another library retained), which this library
    /// makes current around each of its calls and never destroys, releases
    /// or makes current for longer.
    ///
    /// `keep_alive` is dropped once the device, and every stream, page,
    /// kernel and graph of it, is gone: to hand the context over, pass a
    /// value whose drop destroys or releases it; to keep it, pass `()`.
    /// Refused, it is handed back untouched in the [`Rejected`].
    ///
    /// Memory, streams and kernels of another device over the same context
    /// (the primary context, say) are usable on this one too: they are
    /// compared by context.
    ///
    /// # Safety
    ///
    /// `context` is a live context and stays alive until `keep_alive` is
    /// dropped; nothing destroys it meanwhile.
    ///
    /// # Errors
    ///
    /// A null handle, or a context the driver does not know or cannot say
    /// the device of.
    pub unsafe fn from_raw_context<K: Send + 'static>(
        context: CUcontext,
        keep_alive: K,
    ) -> Result<Arc<Self>, Rejected<K>> {
        // SAFETY: the caller's promise, passed on.
        match unsafe { Self::adopt_context(context) } {
            Ok(mut device) => {
                device.owner = Some(Arc::new(KeepAlive::new(keep_alive)));
                Ok(Arc::new(device))
            }
            Err(e) => Err(Rejected::new(e, keep_alive)),
        }
    }

    /// A device over `context`, not yet given its owner.
    ///
    /// # Safety
    ///
    /// `context` is null or a live context.
    unsafe fn adopt_context(context: CUcontext) -> Result<Self, DriverError> {
        const OP: &str = "adopt context";
        if context.is_null() {
            return Err(refuse(OP, "the context handle is null"));
        }
        let loaded = loader::load()?;
        let api = &loaded.api;
        let raw = {
            let _current = enter_context(api, context)?;
            let mut raw: CUdevice = 0;
            // SAFETY: the caller's context is current; `raw` is a valid
            // place for the handle.
            api.check(OP, unsafe { (api.ctx_get_device)(&mut raw) })?;
            raw
        };
        let count = count(api).map_err(opening)?;
        let ordinal = (0..count)
            .find(|&ordinal| {
                let mut found: CUdevice = -1;
                // SAFETY: `found` is a valid place for the handle; the
                // ordinal is below the device count.
                let code = unsafe { (api.device_get)(&mut found, ordinal) };
                code == sys::CUDA_SUCCESS && found == raw
            })
            .ok_or_else(|| {
                refuse(
                    OP,
                    format!("the context's device ({raw}) is none of the {count} the driver lists"),
                )
            })?;
        Self::assemble(api, loaded.version, ordinal, Some(context))
    }

    /// The driver's functions.
    pub(crate) fn api(&self) -> &'static Api {
        self.api
    }

    /// Make this device's context current on the calling thread, with the
    /// thread in relaxed stream-capture mode, until the guard drops.
    ///
    /// Called on every entry point: capture-core may drive a device from any
    /// thread, and a context and a capture mode are per thread, so no call
    /// may assume the previous one ran on the same thread, nor leave its
    /// context or mode behind for the caller.
    pub(crate) fn enter(&self) -> Result<Current, DriverError> {
        enter_context(self.api, self.context)
    }

    /// The context this device runs in: its primary context, or the one it
    /// adopted. Valid for as long as the device lives.
    pub fn raw_context(&self) -> CUcontext {
        self.context
    }

    /// The device's ordinal, as the driver numbers devices.
    pub fn ordinal(&self) -> usize {
        usize::try_from(self.ordinal).unwrap_or(0)
    }

    /// Whether `other` shares this device's context, so that its memory and
    /// code are usable here.
    pub(crate) fn same_context(&self, other: &Device) -> bool {
        self.context == other.context
    }

    /// The device's compute capability, major and minor.
    pub(crate) fn compute_capability(&self) -> (c_int, c_int) {
        self.compute
    }

    /// Whether building a kernel checks its entry point's parameters against
    /// its signature: the driver can list them from 12.4 on
    /// (`cuFuncGetParamInfo`); older ones leave it to the constructor's
    /// promise.
    pub fn checks_kernel_parameters(&self) -> bool {
        self.api.func_get_param_info.is_some()
    }

    /// The driver's version as it encodes it (`12040`).
    pub(crate) fn driver_version(&self) -> c_int {
        self.version.0
    }

    /// Load the conditional setter kernels, once, where the driver has
    /// conditional nodes: called before a capture begins, so that no module
    /// is loaded while the stream records. A refusal is kept as the reason
    /// conditionals cannot be recorded; nothing else depends on the module.
    pub(crate) fn prepare_conditionals(&self) {
        if self.version.0 < CONDITIONAL_DRIVER || ConditionalFunctions::of(self.api).is_err() {
            return;
        }
        self.setters.get_or_init(|| {
            let _current = self.enter().map_err(|e| e.to_string())?;
            setter::load(self.api, self.compute).map_err(|(reason, module)| {
                if let Some(module) = module {
                    self.release(Release::Module(module));
                }
                reason
            })
        });
    }

    /// The driver's conditional-node functions and the setter kernels, or
    /// why a capture on this device cannot hold a conditional node.
    pub(crate) fn conditionals(&self) -> Result<(ConditionalFunctions, &Setters), String> {
        let version = self.version;
        if version.0 < CONDITIONAL_DRIVER {
            return Err(format!(
                "CUDA driver {version} has no conditional graph nodes that a stream capture can \
                 hold; they need driver {} or newer",
                DriverVersion(CONDITIONAL_DRIVER)
            ));
        }
        let functions = ConditionalFunctions::of(self.api).map_err(|missing| {
            format!(
                "CUDA driver {version} lacks {missing}, which conditional graph nodes need \
                 (driver {} or newer has it)",
                DriverVersion(CONDITIONAL_DRIVER)
            )
        })?;
        match self.setters.get() {
            Some(Ok(setters)) => Ok((functions, setters)),
            Some(Err(reason)) => Err(reason.clone()),
            None => Err(
                "the conditional setter kernels are loaded before a capture begins, \
                 and this device has not begun one"
                    .to_owned(),
            ),
        }
    }

    /// The largest block the device runs.
    pub(crate) fn limits(&self) -> BlockLimits {
        self.limits
    }

    /// What a person needs to know about the device, and its grid limit.
    pub(crate) fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn recording(&self) -> MutexGuard<'_, Recorders> {
        self.recording
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Put a stream into recording mode with `begin`, counting it as
    /// recording when it succeeds. Under the count's lock, so no release
    /// can slip between the check and the capture.
    pub(crate) fn begin_recording(
        &self,
        begin: impl FnOnce() -> Result<(), DriverError>,
    ) -> Result<(), DriverError> {
        let mut recording = self.recording();
        begin()?;
        recording.streams += 1;
        Ok(())
    }

    /// Take a stream out of recording mode with `end`, whatever it answers,
    /// and perform the releases that waited once no stream records any
    /// more.
    pub(crate) fn end_recording<T>(&self, end: impl FnOnce() -> T) -> T {
        let (ended, deferred) = {
            let mut recording = self.recording();
            let ended = end();
            recording.streams = recording.streams.saturating_sub(1);
            let deferred = if recording.streams == 0 {
                std::mem::take(&mut recording.deferred)
            } else {
                Vec::new()
            };
            (ended, deferred)
        };
        self.perform_deferred(deferred);
        ended
    }

    /// Perform releases taken off the queue without holding the lock, one
    /// at a time: a free may wait for every stream of the device to drain,
    /// and other threads' begins and releases must not wait for that. Once
    /// a recording has begun, the rest goes back to the queue for its end;
    /// one that begins while a free is under way may be invalidated by it,
    /// and fails at its end like any invalidated capture. Each is performed
    /// in its own context.
    fn perform_deferred(&self, deferred: Vec<Deferred>) {
        let mut left = deferred.into_iter();
        while let Some(release) = left.next() {
            {
                let mut recording = self.recording();
                if recording.streams > 0 {
                    recording.deferred.push(release);
                    recording.deferred.extend(left);
                    return;
                }
            }
            self.perform(release);
        }
    }

    /// Give memory or code back to the driver: now, or once the last stream
    /// recording on the GPU has ended, whichever `Device` opened it.
    ///
    /// `cuMemFree`, `cuMemFreeHost` and `cuModuleUnload` may synchronize the
    /// device implicitly, which invalidates any capture in progress on it;
    /// capture-core releases nothing on the recording stream itself, but
    /// another stream of the same GPU may be freeing meanwhile.
    ///
    /// A keep-alive is held back too, since its drop may free or unload, but
    /// dropped outside the lock: it runs the caller's code, which may call
    /// this library.
    pub(crate) fn release(&self, release: Release) {
        let mut recording = self.recording();
        if recording.streams > 0 {
            recording.deferred.push(Deferred {
                context: self.context,
                owner: self.owner.clone(),
                release,
            });
            return;
        }
        if let Release::KeepAlive(keep) = release {
            drop(recording);
            drop(keep);
            return;
        }
        self.perform(Deferred {
            context: self.context,
            owner: None,
            release,
        });
        drop(recording);
    }

    /// Perform one release in its own context, made current for it.
    fn perform(&self, deferred: Deferred) {
        let api = self.api;
        let Deferred {
            context,
            owner,
            release,
        } = deferred;
        if let Release::KeepAlive(keep) = release {
            drop(keep);
            drop(owner);
            return;
        }
        let current = match enter_context(api, context) {
            Ok(current) => current,
            Err(e) => {
                log::warn!("leaking memory or a module: {e}");
                return;
            }
        };
        let (op, code) = match release {
            Release::DevicePage(pointer) => {
                // SAFETY: the address came from cuMemAlloc, and its page is
                // gone, so it is freed exactly once; capture-core releases a
                // page only once no enqueued work uses it.
                let code = unsafe { (api.mem_free)(pointer) };
                ("free device page", code)
            }
            Release::HostPage(pointer) => {
                // SAFETY: as for device pages, from cuMemHostAlloc.
                let code = unsafe { (api.mem_free_host)(pointer) };
                ("free host page", code)
            }
            Release::Module(module) => {
                // SAFETY: the module's kernel is gone, so nothing can launch
                // it any more; it is unloaded exactly once.
                let code = unsafe { (api.module_unload)(module) };
                ("unload module", code)
            }
            Release::KeepAlive(_) => return,
        };
        if let Err(e) = api.check(op, code) {
            log::warn!("{e}");
        }
        drop(current);
        // The context's owner goes last, after the release made in it.
        drop(owner);
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(Ok(setters)) = self.setters.take() {
            self.release(Release::Module(setters.module()));
        }
        // A stream of another `Device` on this GPU may still be recording,
        // and performs what waits when it ends. Otherwise this is for a
        // release made while the last stream was recording and never ended.
        let deferred = {
            let mut recording = self.recording();
            if recording.streams > 0 || recording.deferred.is_empty() {
                return;
            }
            std::mem::take(&mut recording.deferred)
        };
        self.perform_deferred(deferred);
    }
}

/// The primary context of `raw`, retained once per process.
fn primary_context(api: &Api, raw: CUdevice) -> Result<CUcontext, DriverError> {
    /// A retained context, shared by every `Device` opened on its ordinal.
    struct Retained(CUdevice, CUcontext);
    // SAFETY: a CUcontext is a process-wide handle; this list only stores it.
    unsafe impl Send for Retained {}
    static RETAINED: Mutex<Vec<Retained>> = Mutex::new(Vec::new());

    let mut retained = RETAINED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = retained.iter().find(|r| r.0 == raw) {
        return Ok(found.1);
    }
    let mut context: CUcontext = std::ptr::null_mut();
    // SAFETY: `raw` came from cuDeviceGet; `context` is a valid place for
    // the handle. It is never released: the process keeps it.
    let code = unsafe { (api.primary_ctx_retain)(&mut context, raw) };
    api.check("retain the device's primary context", code)?;
    retained.push(Retained(raw, context));
    Ok(context)
}

fn count(api: &Api) -> Result<c_int, DriverError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid place for the driver to write an int.
    let code = unsafe { (api.device_get_count)(&mut count) };
    api.check("count devices", code)?;
    Ok(count)
}

/// What device `ordinal` is: its description, handle, compute capability
/// and block limits.
fn describe(
    api: &Api,
    driver_version: &str,
    ordinal: c_int,
) -> Result<(DeviceInfo, CUdevice, (c_int, c_int), BlockLimits), DriverError> {
    let mut raw: CUdevice = 0;
    // SAFETY: `raw` is a valid place for the handle; the ordinal is below
    // the device count.
    let code = unsafe { (api.device_get)(&mut raw, ordinal) };
    api.check("get device", code)?;
    let name = device_name(api, raw)?;
    let compute = (
        attribute(api, raw, sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attribute(api, raw, sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let max_groups = [
        limit(api, raw, sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
        limit(api, raw, sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
        limit(api, raw, sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
    ];
    let limits = BlockLimits {
        max_block: [
            limit(api, raw, sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            limit(api, raw, sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            limit(api, raw, sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_threads_per_block: limit(api, raw, sys::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
    };
    let mut memory: usize = 0;
    // SAFETY: `memory` is a valid place for the size; `raw` came from
    // cuDeviceGet.
    let code = unsafe { (api.device_total_mem)(&mut memory, raw) };
    api.check("get device memory", code)?;
    let info = DeviceInfo {
        name: format!("{name} (sm_{}{})", compute.0, compute.1),
        driver_version: driver_version.to_owned(),
        max_groups,
        index: usize::try_from(ordinal).unwrap_or(0),
        memory_bytes: u64::try_from(memory).unwrap_or(u64::MAX),
        kind: "GPU".to_owned(),
    };
    Ok((info, raw, compute, limits))
}

fn attribute(api: &Api, raw: CUdevice, which: CUdevice_attribute) -> Result<c_int, DriverError> {
    let mut value: c_int = 0;
    // SAFETY: `value` is a valid place for the answer; `raw` came from
    // cuDeviceGet.
    let code = unsafe { (api.device_get_attribute)(&mut value, which, raw) };
    api.check("get device attribute", code)?;
    Ok(value)
}

/// A limit attribute, which the driver reports as a positive int.
fn limit(api: &Api, raw: CUdevice, which: CUdevice_attribute) -> Result<u32, DriverError> {
    let value = attribute(api, raw, which)?;
    u32::try_from(value).ok().filter(|&v| v > 0).ok_or_else(|| {
        refuse(
            "get device attribute",
            format!("device attribute {which} is {value}"),
        )
    })
}

fn device_name(api: &Api, raw: CUdevice) -> Result<String, DriverError> {
    let mut buffer = [0u8; 256];
    let len = c_int::try_from(buffer.len()).unwrap_or(c_int::MAX);
    // SAFETY: the driver writes at most `len` bytes, NUL included, into a
    // buffer of exactly that size.
    let code = unsafe { (api.device_get_name)(buffer.as_mut_ptr().cast::<c_char>(), len, raw) };
    api.check("get device name", code)?;
    // A driver that filled the buffer without a NUL still yields a name.
    let name = match CStr::from_bytes_until_nul(&buffer) {
        Ok(name) => name.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&buffer).into_owned(),
    };
    Ok(name)
}
