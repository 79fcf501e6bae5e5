//! Kernels: built from a code object or from HIP C++ (through hiprtc) and
//! checked against their signature. A kernel owns the module it lives in;
//! a stream launches it (and a recording holds its module for as long as a
//! graph may run it).
//!
//! The builtins are ordinary kernels here: [`builtin`] builds them from the
//! embedded `kernels.hip` through [`Kernel::from_hip`], like any user's.

use std::ffi::{CString, c_int};
use std::mem::size_of;
use std::ptr;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use capture_core::{Builtin, DriverError, Error, Signature};
use capture_core::{MAX_BINDINGS, MAX_PARAM_BYTES};

use crate::device::Device;
use crate::error::{describe, into_driver};
use crate::ffi;
use crate::foreign::{Foreign, ForeignStream};
use crate::image;
use crate::metadata::{self, KernelInterface};
use crate::rtc;
use capture_core::{KeepAlive, Rejected};

/// The builtin kernels' source, embedded so that nothing is read from disk at
/// run time.
const BUILTIN_SOURCE: &str = include_str!("kernels.hip");

/// Most pointers one launch passes: one per binding and one for the info
/// block.
pub(crate) const MAX_POINTERS: usize = MAX_BINDINGS + 1;

/// Most by-value parameters one launch passes (at least a byte each).
pub(crate) const MAX_VALUES: usize = MAX_PARAM_BYTES as usize;

/// A loaded code object, unloaded (on its device) when the last kernel or
/// recording holding it drops.
pub(crate) struct Module {
    device: Arc<Device>,
    raw: ffi::Module,
    /// What the image's metadata says of its kernels; `None` when it holds
    /// none this crate reads, and its kernels go unchecked.
    interfaces: Option<Vec<KernelInterface>>,
}

// SAFETY: a loaded module is a runtime object usable from any thread; it is
// only read (function lookups) until Drop unloads it, once.
unsafe impl Send for Module {}
// SAFETY: as above; shared references only look functions up.
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // hipModuleUnload may synchronize the device, so it waits for the
        // GPU's recordings to end, as frees do.
        self.device.unload(self.raw);
    }
}

/// Modules compiled from HIP C++, by device and source, while a kernel holds
/// them: every kernel of one source (the four builtins, a user's five)
/// shares one compile, which takes hiprtc a second or more.
static COMPILED: Mutex<Vec<(c_int, String, Weak<Module>)>> = Mutex::new(Vec::new());

/// A HIP kernel: a function in a loaded code object, and the [`Signature`]
/// every launch of it is checked against.
///
/// Launches pass, as the kernel's parameters, one device pointer per bound
/// buffer in binding order, then (for a signature that reads info bytes) a
/// pointer to the info block, then each by-value parameter in declaration
/// order; blocks are the signature's workgroup size, the grid the launch's
/// workgroup count. This is the same convention as the CUDA backend's, so
/// one CUDA C++ source serves both:
///
/// ```c
/// // Signature::new("scale").binding(Access::ReadWrite).param(4).param(4)
/// extern "C" __global__ void __launch_bounds__(64)
/// scale(float* x, unsigned n, float a) { /* ... */ }
/// ```
///
/// The code object stays loaded while any kernel from it lives, and while
/// any recording or graph that launches one does.
pub struct Kernel {
    signature: Signature,
    function: ffi::Function,
    /// The module loaded for the kernel, held so that it stays loaded;
    /// `None` for a function made elsewhere ([`Kernel::from_raw`]), whose
    /// module is not the library's to unload.
    _module: Option<Arc<Module>>,
    /// What keeps a function made elsewhere loaded.
    keep_alive: Option<KeepAlive>,
    /// A foreign operation's code, in place of a function (then null).
    foreign: Option<Arc<Foreign>>,
    device: Arc<Device>,
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if let Some(keep_alive) = self.keep_alive.take() {
            self.device.let_go(keep_alive);
        }
        // Its code may own what a drop tears down with a device-wide sync
        // (a rocBLAS handle, an RCCL communicator): not while a stream of
        // the GPU records.
        if let Some(foreign) = self.foreign.take() {
            self.device.let_go(KeepAlive::new(foreign));
        }
    }
}

// SAFETY: a function handle is an immutable runtime object usable from any
// thread; the Arc keeps its module loaded.
unsafe impl Send for Kernel {}
// SAFETY: as above; a launch only reads the handle.
unsafe impl Sync for Kernel {}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hip::Kernel({})", self.signature)
    }
}

impl Kernel {
    /// Load kernel `entry` from `image`, a code object for this device's
    /// architecture ([`Device::arch`]) as `hipcc --genco`, clang
    /// (`-x hip --offload-arch=... --cuda-device-only`) or
    /// [`hiprtc_compile`](crate::hiprtc_compile) write it, raw or in an
    /// offload bundle.
    ///
    /// The signature is validated, checked against the device's block limits
    /// and, where the image's metadata can be read (code object v3 and
    /// later), against the kernel's own arguments (one pointer per binding,
    /// a pointer for the info block, by-value parameters of the declared
    /// sizes) and launch bounds.
    ///
    /// ```no_run
    /// use backend_hip::{Hip, Kernel};
    /// use capture_core::{Access, Client, Params, Signature};
    ///
    /// let client = Client::<Hip>::open()?;
    /// let image = std::fs::read("scale.hsaco").expect("a code object");
    /// let signature = Signature::new("scale")
    ///     .binding(Access::ReadWrite)
    ///     .param(4)
    ///     .param(4);
    /// // SAFETY: `scale` writes x[i] only for i < n, and every launch below
    /// // passes an n no larger than the buffer's length.
    /// let kernel = unsafe { Kernel::from_code_object(client.device(), &image, "scale", signature) }?;
    /// let kernel = capture_core::Kernel::<Hip>::new(kernel);
    /// let stream = client.create_stream()?;
    /// let x = client.create_f32(stream, &[1.0; 256])?;
    /// let params = Params::new().u32(256).f32(0.5);
    /// client.launch(stream, &kernel, [4, 1, 1], &[&x], &[], params.as_bytes())?;
    /// # Ok::<(), capture_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// For every launch it is given, the kernel reads and writes only inside
    /// its bound buffers (whose byte lengths it is not told), given the info
    /// and by-value parameters passed, and does what its signature declares
    /// (it writes no binding declared read). The library checks the
    /// interface where it can, never what the code does.
    ///
    /// The image's own bounds are not the caller's to promise:
    /// `hipModuleLoadData` takes no length and sizes the image from its
    /// headers, so before it is called every byte those headers name (an
    /// ELF's header tables, sections and segments; an offload bundle's entry
    /// table and entries) is checked to lie in `image`, and an image that
    /// is truncated or points past its end is refused without loading.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] when the signature is invalid or beyond the
    /// device's limits, when the image is not an ELF code object or an
    /// uncompressed offload bundle whose headers stay within the slice,
    /// when the runtime refuses the image (its answer is
    /// the log), when it has no kernel `entry`, or when the kernel's
    /// metadata disagrees with the signature; [`Error::Driver`] when the
    /// device cannot be made current.
    pub unsafe fn from_code_object(
        device: &Arc<Device>,
        image: &[u8],
        entry: &str,
        signature: Signature,
    ) -> Result<Self, Error> {
        check_limits(device, entry, &signature)?;
        image::check(image).map_err(|log| Error::Compile {
            kernel: entry.to_owned(),
            log,
        })?;
        let module = load(device, image, entry)?;
        find(device, module, entry, signature)
    }

    /// Compile HIP C++ `source` with hiprtc for this device's architecture
    /// (`--offload-arch=<gcnArchName>`, with `-O3 -ffp-contract=off` so that
    /// `a * b + c` is not fused and the bits match the CUDA backend's), then
    /// load kernel `entry` from it as [`Kernel::from_code_object`] does,
    /// with the same checks.
    ///
    /// The source needs no includes: hiprtc provides the HIP built-ins
    /// (`threadIdx`, `__syncthreads`, `sqrtf`, ...). Kernels of one source
    /// share one compile and one loaded module per device, for as long as
    /// one of them lives.
    ///
    /// ```no_run
    /// use backend_hip::{Hip, Kernel};
    /// use capture_core::{Access, Client, Params, Signature};
    ///
    /// const SOURCE: &str = r#"
    /// extern "C" __global__ void __launch_bounds__(64)
    /// scale(float* x, unsigned n, float a) {
    ///     unsigned i = blockIdx.x * 64 + threadIdx.x;
    ///     if (i < n) x[i] *= a;
    /// }"#;
    ///
    /// let client = Client::<Hip>::open()?;
    /// let signature = Signature::new("scale")
    ///     .binding(Access::ReadWrite)
    ///     .param(4)
    ///     .param(4);
    /// // SAFETY: `scale` writes x[i] only for i < n, and every launch below
    /// // passes an n no larger than the buffer's length.
    /// let kernel = unsafe { Kernel::from_hip(client.device(), SOURCE, "scale", signature) }?;
    /// let kernel = capture_core::Kernel::<Hip>::new(kernel);
    /// let stream = client.create_stream()?;
    /// let x = client.create_f32(stream, &[1.0; 100])?;
    /// let params = Params::new().u32(100).f32(2.0);
    /// client.launch(stream, &kernel, [2, 1, 1], &[&x], &[], params.as_bytes())?;
    /// assert_eq!(client.read_f32(&x)?, vec![2.0; 100]);
    /// # Ok::<(), capture_core::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// For every launch it is given, the kernel reads and writes only inside
    /// its bound buffers (whose byte lengths it is not told), given the info
    /// and by-value parameters passed, and does what its signature declares
    /// (it writes no binding declared read). The library checks the
    /// interface, never what the code does.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] with hiprtc's log when the source does not
    /// compile, and for every refusal [`Kernel::from_code_object`] lists;
    /// [`Error::Driver`] saying `hiprtc unavailable: ...` (with the paths
    /// tried) when hiprtc cannot be loaded.
    pub unsafe fn from_hip(
        device: &Arc<Device>,
        source: &str,
        entry: &str,
        signature: Signature,
    ) -> Result<Self, Error> {
        check_limits(device, entry, &signature)?;
        let module = compiled(device, source, entry)?;
        find(device, module, entry, signature)
    }

    /// A foreign operation named `name` over buffers of `accesses`: the
    /// caller's own work (rocBLAS, RCCL, its own kernels and copies),
    /// enqueued by `op` where a launch of ours would be.
    /// [`Client::foreign`](capture_core::Client::foreign) issues it.
    ///
    /// Outside a window `op` enqueues on the stream itself. Inside one it
    /// enqueues on a side stream capturing into a graph of the operation's
    /// own, which becomes one child graph node of the window's graph,
    /// ordered against the other operations by the declared accesses; its
    /// `Err` or panic refuses the call, which dooms the window. `op` is
    /// handed the stream, the device (current for the call) and each
    /// declared buffer's device range.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] for more buffers than a launch may bind.
    ///
    /// # Safety
    ///
    /// Every time it is called, `op` enqueues only on the stream it is
    /// given, and only work that reads and writes nothing but the declared
    /// ranges as declared (nothing written that was declared read). It
    /// does not synchronize the stream or the device, query or wait on the
    /// stream from outside, begin or end a capture, or allocate or free
    /// memory. It enqueues on no other stream unless that stream waits on
    /// an event of the given one first and is waited on again before `op`
    /// returns. It calls no method of the client (it runs with the stream's
    /// lock held), and no synchronous `hipMemcpy` or `hipMemset`, which
    /// invalidate every capture in the process on ROCm. It checks each
    /// buffer's length against what its work touches, on every call. It
    /// keeps neither the stream nor the device after it returns, and
    /// leaves the current device and the thread's capture mode as it found
    /// them. Its work reads no host memory at replay unless that memory
    /// outlives every graph holding it, and shares no scratch memory with
    /// work that may run at the same time; it allocates or frees nothing
    /// (a child graph holding memory nodes is not checked for here).
    /// Everything its work uses (a rocBLAS handle, an RCCL communicator)
    /// stays alive and unchanged while the kernel, and any graph made from
    /// a window holding it, lives.
    pub unsafe fn foreign(
        device: &Arc<Device>,
        name: &str,
        accesses: &[capture_core::Access],
        op: impl Fn(&ForeignStream<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Kernel, Error> {
        let signature = Signature::foreign(name, accesses);
        check_limits(device, name, &signature)?;
        Ok(Kernel {
            signature,
            function: ptr::null_mut(),
            _module: None,
            keep_alive: None,
            foreign: Some(Arc::new(Foreign::new(device, op))),
            device: Arc::clone(device),
        })
    }

    /// What the kernel takes.
    #[inline]
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// A foreign operation's code; `None` for a kernel.
    pub(crate) fn foreign_code(&self) -> Option<&Foreign> {
        self.foreign.as_deref()
    }

    /// The runtime's handle, for a launch.
    pub(crate) fn function(&self) -> ffi::Function {
        self.function
    }

    /// The device the kernel was loaded on.
    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// A kernel over `function`, a function loaded elsewhere
    /// (`hipModuleGetFunction` on a module of the caller's), with
    /// `signature`. The library never unloads its module.
    ///
    /// The signature is validated and checked against the device's block
    /// limits and, where the runtime can say (`hipFuncGetAttribute`), the
    /// function's own limit on threads per block. Its parameters cannot be
    /// read back from a loaded function, so they are the caller's promise.
    ///
    /// `keep_alive` is dropped once the kernel, and every graph that
    /// recorded it, is gone and no stream of the GPU records: to hand the
    /// module over, pass a value whose drop unloads it; to keep it, pass
    /// `()`. Refused, it is handed back untouched in the [`Rejected`].
    ///
    /// # Safety
    ///
    /// `function` is a function of a module loaded on `device`, which stays
    /// loaded until `keep_alive` is dropped. It takes exactly the parameters
    /// the [`Kernel`] convention derives from the signature (a pointer per
    /// binding, the info pointer when the signature reads info, then the
    /// by-value parameters), and for every launch it is given, it reads and
    /// writes only inside its bound buffers, given the info and by-value
    /// parameters passed, and writes no binding declared read.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] for a null function, or when the function
    /// disagrees with the signature or the device's limits;
    /// [`Error::Driver`] when the device cannot be made current.
    pub unsafe fn from_raw<K: Send + 'static>(
        device: &Arc<Device>,
        function: ffi::Function,
        signature: Signature,
        keep_alive: K,
    ) -> Result<Self, Rejected<K>> {
        // SAFETY: the caller's promise, passed on.
        if let Err(e) = unsafe { check_function(device, function, &signature) } {
            return Err(Rejected::new(e, keep_alive));
        }
        Ok(Self {
            signature,
            function,
            _module: None,
            foreign: None,
            keep_alive: Some(KeepAlive::new(keep_alive)),
            device: Arc::clone(device),
        })
    }

    /// The by-value parameters packed in `params`, each in its own 8-byte
    /// slot of `values` (aligned for any size; the runtime reads as many
    /// bytes as the kernel's parameter holds, which on a little-endian host
    /// is the value); how many slots were filled.
    pub(crate) fn pack_params(&self, params: &[u8], values: &mut [u64; MAX_VALUES]) -> usize {
        // capture-core guarantees `params` holds exactly the declared sizes;
        // the copy below reads within it whatever it holds.
        let mut rest = params;
        let mut count = 0;
        for (slot, &size) in values.iter_mut().zip(self.signature.param_sizes()) {
            let (value, tail) = rest.split_at(rest.len().min(size as usize));
            let mut bytes = [0u8; size_of::<u64>()];
            let len = value.len().min(bytes.len());
            bytes[..len].copy_from_slice(&value[..len]);
            *slot = u64::from_ne_bytes(bytes);
            rest = tail;
            count += 1;
        }
        count
    }
}

/// Check what `from_code_object` checks of an image's kernel `entry` against
/// `signature`, with no device: its arguments and launch bounds as the
/// image's metadata states them.
///
/// `Ok(true)` when the metadata was read and agrees; `Ok(false)` when the
/// image holds no metadata this crate reads (code object v2, a compressed
/// bundle), so nothing could be checked.
///
/// ```no_run
/// use capture_core::{Access, Signature};
///
/// let image = backend_hip::hiprtc_compile(
///     r#"extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }"#,
///     "twice.hip",
///     "gfx90a",
/// )?;
/// let signature = Signature::new("twice").binding(Access::ReadWrite);
/// assert!(backend_hip::check_code_object(&image, "twice", &signature)?);
/// # Ok::<(), capture_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Compile`] saying what disagrees, or that the image has no kernel
/// `entry`.
pub fn check_code_object(image: &[u8], entry: &str, signature: &Signature) -> Result<bool, Error> {
    let Some(interfaces) = metadata::read(image) else {
        return Ok(false);
    };
    metadata::check(&interfaces, entry, signature).map_err(|log| Error::Compile {
        kernel: entry.to_owned(),
        log,
    })?;
    Ok(true)
}

/// Whether `function` agrees with `signature` and `device`'s limits, where
/// the runtime can say.
///
/// # Safety
///
/// `function` is null or a live function of a module loaded on `device`.
unsafe fn check_function(
    device: &Device,
    function: ffi::Function,
    signature: &Signature,
) -> Result<(), Error> {
    const OP: &str = "adopt kernel";
    let name = signature.name().to_owned();
    let failed = |log: String| Error::Compile {
        kernel: name.clone(),
        log,
    };
    if function.is_null() {
        return Err(failed("the function handle is null".to_owned()));
    }
    check_limits(device, &name, signature)?;
    let api = device.api;
    if let Some(get_attribute) = api.func_get_attribute {
        let _current = device.enter(OP)?;
        let mut max_threads: c_int = 0;
        // SAFETY: the caller promises a live function; the out-pointer
        // is a live local int.
        let code = unsafe {
            get_attribute(
                &mut max_threads,
                ffi::FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                function,
            )
        };
        if code != ffi::SUCCESS {
            return Err(failed(format!(
                "hipFuncGetAttribute answered {}",
                describe(Some(api), code)
            )));
        }
        if u64::try_from(max_threads).unwrap_or(0) < signature.threads() {
            return Err(failed(format!(
                "the function runs at most {max_threads} threads per block, and its \
                     signature declares a block of {:?}",
                signature.workgroup_size()
            )));
        }
    }
    Ok(())
}

/// The signature's own validity and the device's block limits.
fn check_limits(device: &Device, entry: &str, signature: &Signature) -> Result<(), Error> {
    let refuse = |log: String| {
        Err(Error::Compile {
            kernel: entry.to_owned(),
            log,
        })
    };
    if let Err(reason) = signature.validate() {
        return refuse(reason);
    }
    let [x, y, z] = signature.workgroup_size();
    let [mx, my, mz] = device.max_block;
    if x > mx || y > my || z > mz || signature.threads() > u64::from(device.max_threads) {
        return refuse(format!(
            "a workgroup of {x}x{y}x{z} is beyond this device's blocks: at most {mx}x{my}x{mz}, \
             {} threads in all",
            device.max_threads
        ));
    }
    Ok(())
}

/// Load `image` on the device.
fn load(device: &Arc<Device>, image: &[u8], entry: &str) -> Result<Arc<Module>, Error> {
    const OP: &str = "load kernels";
    let api = device.api;
    let _current = device.enter(OP)?;
    let mut raw = ptr::null_mut();
    // SAFETY: the image is the caller's bytes, live across the call (the
    // runtime copies what it keeps); hipModuleLoadData validates it and
    // answers with an error for anything it cannot load.
    let code = unsafe { (api.module_load_data)(&mut raw, image.as_ptr().cast()) };
    if code != ffi::SUCCESS {
        return Err(Error::Compile {
            kernel: entry.to_owned(),
            log: format!("hipModuleLoadData answered {}", describe(Some(api), code)),
        });
    }
    Ok(Arc::new(Module {
        device: Arc::clone(device),
        raw,
        interfaces: metadata::read(image),
    }))
}

/// The module compiled from `source` on this device: the one a live kernel
/// of the same source holds, else a fresh compile.
fn compiled(device: &Arc<Device>, source: &str, entry: &str) -> Result<Arc<Module>, Error> {
    // Held across the compile, so that two streams building kernels of one
    // source compile it once; a poisoned lock still holds a consistent list.
    let mut cache = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
    cache.retain(|(_, _, module)| module.strong_count() > 0);
    if let Some(module) = cache
        .iter()
        .find(|(ordinal, cached, _)| *ordinal == device.ordinal && cached == source)
        .and_then(|(_, _, module)| module.upgrade())
    {
        return Ok(module);
    }
    let rtc = rtc::rtc()?;
    // hiprtc targets the current device when no architecture is named.
    let current = device.enter("compile kernel")?;
    // The program is named for the kernel asked for; the error names the
    // kernel itself.
    let image =
        rtc::compile(rtc, source, &format!("{entry}.hip"), device.arch()).map_err(|error| {
            match error {
                Error::Compile { log, .. } => Error::Compile {
                    kernel: entry.to_owned(),
                    log,
                },
                other => other,
            }
        })?;
    drop(current);
    let module = load(device, &image, entry)?;
    cache.push((device.ordinal, source.to_owned(), Arc::downgrade(&module)));
    Ok(module)
}

/// Kernel `entry` of `module`, checked against its metadata.
fn find(
    device: &Device,
    module: Arc<Module>,
    entry: &str,
    signature: Signature,
) -> Result<Kernel, Error> {
    const OP: &str = "load kernel";
    let failed = |log: String| Error::Compile {
        kernel: entry.to_owned(),
        log,
    };
    if let Some(interfaces) = &module.interfaces {
        metadata::check(interfaces, entry, &signature).map_err(failed)?;
    }
    let name = CString::new(entry).map_err(|_| failed("the entry name holds a NUL byte".into()))?;
    let api = device.api;
    let _current = device.enter(OP)?;
    let mut function = ptr::null_mut();
    // SAFETY: the module is live (held by the Arc); the name is a live,
    // NUL-terminated string; the out-pointer is a live local.
    let code = unsafe { (api.module_get_function)(&mut function, module.raw, name.as_ptr()) };
    if code != ffi::SUCCESS {
        return Err(failed(format!(
            "hipModuleGetFunction answered {}",
            describe(Some(api), code)
        )));
    }
    Ok(Kernel {
        signature,
        function,
        device: Arc::clone(&module.device),
        _module: Some(module),
        keep_alive: None,
        foreign: None,
    })
}

/// Builtin `which`, built from the embedded source like any user kernel.
pub(crate) fn builtin(device: &Arc<Device>, which: Builtin) -> Result<Kernel, DriverError> {
    // SAFETY: each builtin touches element i of its buffers only for
    // i < info.n, which fits every bound buffer only when the launch says so;
    // capture-core launches builtins only through `Client::run_builtin`,
    // which checks n against each buffer's length before the launch.
    unsafe { Kernel::from_hip(device, BUILTIN_SOURCE, which.name(), which.signature()) }
        .map_err(|error| into_driver("build builtin kernel", error))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded source compiles with the installed hiprtc for an
    /// architecture named explicitly (a machine without a GPU has no current
    /// device to default to), and agrees with every builtin's signature.
    /// Skipped where no hiprtc is installed.
    #[test]
    fn builtin_source_compiles_and_matches_the_signatures() {
        let image = match rtc::hiprtc_compile(BUILTIN_SOURCE, "builtins.hip", "gfx90a") {
            Ok(image) => image,
            Err(Error::Driver(error)) if error.message.starts_with("hiprtc unavailable") => {
                eprintln!("skipped: {error}");
                return;
            }
            Err(error) => panic!("the builtin source does not compile: {error}"),
        };
        assert!(image.starts_with(b"\x7fELF"), "not an ELF code object");
        for which in Builtin::ALL {
            assert_eq!(
                check_code_object(&image, which.name(), &which.signature()),
                Ok(true),
                "{which:?}"
            );
        }
    }
}
