//! Kernels: a function of a loaded module, with the signature every launch
//! of it is checked against.
//!
//! A kernel is built from PTX text ([`Kernel::from_ptx`]), from a cubin or
//! fatbin ([`Kernel::from_image`]) or from CUDA C++ compiled by NVRTC at run
//! time ([`Kernel::from_cuda`]). The builtins are PTX shipped in the crate,
//! compiled by the driver's JIT once per process for each GPU target and
//! loaded from that cubin, through the same path, with
//! [`Builtin::signature`].

use std::ffi::{CString, c_int, c_uint, c_void};
use std::sync::{Arc, Mutex, PoisonError};

use capture_core::{Builtin, DriverError, Error, Rejected, Signature};

use crate::device::{Device, Release};
use crate::error::refuse;
use crate::foreign::{Foreign, ForeignStream};
use crate::image;
use crate::nvrtc::{self, NvrtcOutput};
use crate::sys::{
    self, Api, CUfunction, CUfunction_attribute, CUjit_option, CUlinkState, CUmodule,
};
use capture_core::KeepAlive;

/// The builtins' body; the header naming the PTX version and target is
/// chosen per device by [`ptx_for`].
const PTX_BODY: &str = include_str!("kernels.ptx");

/// The builtin PTX for a device of compute capability `major.minor`.
///
/// From Turing (7.5) on, the target is `sm_75`: drivers that no longer
/// compile for older targets all know it, as does every driver this backend
/// accepts (11.4 and newer, PTX ISA 7.4). Older GPUs get `sm_50`, which
/// every GPU the driver supports can run (the instructions used are all
/// Maxwell's).
pub(crate) fn ptx_for(major: i32, minor: i32) -> String {
    let (version, target) = if (major, minor) >= (7, 5) {
        ("7.4", "sm_75")
    } else {
        ("7.0", "sm_50")
    };
    format!(".version {version}\n.target {target}\n.address_size 64\n\n{PTX_BODY}")
}

/// Every PTX text of the builtins this crate can give a driver, labelled by
/// the devices that get it, so that an assembler can check each offline.
/// Each is a whole PTX module, without a trailing NUL.
pub fn builtin_ptx_variants() -> Vec<(String, String)> {
    vec![
        (
            "builtins for compute capability below 7.5".to_owned(),
            ptx_for(5, 0),
        ),
        (
            "builtins for compute capability 7.5 and newer".to_owned(),
            ptx_for(7, 5),
        ),
    ]
}

/// The PTX entry point of `which`: its name behind a prefix, since `add` is a
/// reserved word of PTX.
pub(crate) fn entry_name(which: Builtin) -> String {
    format!("builtin_{}", which.name())
}

/// `which`, built for `device` from the builtins' cubin for its target.
pub(crate) fn builtin(device: &Arc<Device>, which: Builtin) -> Result<Kernel, DriverError> {
    const OP: &str = "build builtin kernel";
    let cubin = builtin_cubin(device)?;
    // SAFETY: each builtin reads and writes the `n` elements its info names
    // in each of its buffers (fewer where the grid is smaller), and writes
    // only the bindings `Builtin::accesses` declares written; its entry
    // takes one pointer per binding and the info pointer, as its signature
    // says. capture-core launches builtins only through
    // `Client::run_builtin`, which checks `n` against every buffer's length,
    // so every launch a builtin is given stays inside its buffers.
    let built =
        unsafe { Kernel::from_image(device, &cubin, &entry_name(which), which.signature()) };
    built.map_err(|e| match e {
        Error::Driver(e) => e,
        other => refuse(OP, other.to_string()),
    })
}

/// The builtins compiled for `device`'s compute capability: by the driver's
/// JIT on the first call for that target in the process, from the cache
/// after that.
fn builtin_cubin(device: &Device) -> Result<Arc<[u8]>, DriverError> {
    type Cache = Vec<((c_int, c_int), Arc<[u8]>)>;
    static CUBINS: Mutex<Cache> = Mutex::new(Vec::new());
    let target = device.compute_capability();
    // Held while compiling, so that threads building the builtins at once
    // compile them once between them.
    let mut cache = CUBINS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, cubin)) = cache.iter().find(|(t, _)| *t == target) {
        return Ok(Arc::clone(cubin));
    }
    let cubin: Arc<[u8]> = jit_link(device, &ptx_for(target.0, target.1))?.into();
    cache.push((target, Arc::clone(&cubin)));
    Ok(cubin)
}

/// A JIT link in progress, destroyed on every path out of [`jit_link`].
struct Link<'a> {
    api: &'a Api,
    state: CUlinkState,
}

impl Drop for Link<'_> {
    fn drop(&mut self) {
        // SAFETY: the state came from cuLinkCreate and is destroyed once;
        // the cubin it produced was copied out first.
        let destroyed = unsafe { (self.api.link_destroy)(self.state) };
        if let Err(e) = self.api.check("finish JIT link", destroyed) {
            log::warn!("{e}");
        }
    }
}

/// Compile `ptx` with the driver's JIT for `device`'s GPU into a cubin.
fn jit_link(device: &Device, ptx: &str) -> Result<Vec<u8>, DriverError> {
    const OP: &str = "compile the builtins";
    let api = device.api();
    let mut text = Vec::with_capacity(ptx.len() + 1);
    text.extend_from_slice(ptx.as_bytes());
    text.push(0);
    let mut logs = JitLogs::new();
    let (mut options, mut values) = logs.options();
    let _current = device.enter()?;
    let mut state: CUlinkState = std::ptr::null_mut();
    // SAFETY: `options` and `values` hold the same number of entries, which
    // is passed; each log buffer holds the size its option announces and
    // outlives the link state (`logs` is declared before `link`, so it is
    // dropped after it).
    let created = unsafe {
        (api.link_create)(
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
            &mut state,
        )
    };
    api.check(OP, created)?;
    let link = Link { api, state };
    // SAFETY: the PTX is NUL-terminated and its length (NUL included) is
    // passed; the name is a NUL-terminated literal; no per-input options.
    let added = unsafe {
        (api.link_add_data)(
            link.state,
            sys::CU_JIT_INPUT_PTX,
            text.as_mut_ptr().cast::<c_void>(),
            text.len(),
            c"builtins.ptx".as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if added != sys::CUDA_SUCCESS {
        return Err(refuse(OP, logs.failure(api, added)));
    }
    let mut cubin: *mut c_void = std::ptr::null_mut();
    let mut size: usize = 0;
    // SAFETY: the link state is live; both out-pointers are valid places.
    let completed = unsafe { (api.link_complete)(link.state, &mut cubin, &mut size) };
    if completed != sys::CUDA_SUCCESS || cubin.is_null() {
        return Err(refuse(OP, logs.failure(api, completed)));
    }
    // SAFETY: on success the driver points `cubin` at `size` bytes owned by
    // the link state, which lives until `link` drops, after this copy.
    let bytes = unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) }.to_vec();
    drop(link);
    Ok(bytes)
}

/// Bytes kept of each JIT log, enough for any message about one module.
const LOG_BYTES: usize = 16 * 1024;

/// The JIT's error and information logs, for a failure's words.
struct JitLogs {
    error: Vec<u8>,
    info: Vec<u8>,
}

impl JitLogs {
    fn new() -> Self {
        Self {
            error: vec![0; LOG_BYTES],
            info: vec![0; LOG_BYTES],
        }
    }

    /// The JIT options that have the driver fill the logs, and their values.
    ///
    /// The JIT takes each option's value in a pointer-sized slot; a size is
    /// passed as the integer itself, not as a pointer to it.
    fn options(&mut self) -> ([CUjit_option; 4], [*mut c_void; 4]) {
        (
            [
                sys::CU_JIT_ERROR_LOG_BUFFER,
                sys::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                sys::CU_JIT_INFO_LOG_BUFFER,
                sys::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            ],
            [
                self.error.as_mut_ptr().cast::<c_void>(),
                std::ptr::without_provenance_mut(LOG_BYTES),
                self.info.as_mut_ptr().cast::<c_void>(),
                std::ptr::without_provenance_mut(LOG_BYTES),
            ],
        )
    }

    /// The driver's code for a failed JIT step, then what the logs say.
    fn failure(&self, api: &Api, code: i32) -> String {
        let text = |log: &[u8]| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            String::from_utf8_lossy(&log[..end]).trim().to_owned()
        };
        let mut message = format!("the driver refused the module: {}", api.describe(code));
        for (what, log) in [
            ("error log", text(&self.error)),
            ("info log", text(&self.info)),
        ] {
            if !log.is_empty() {
                message.push_str(&format!("; JIT {what}:\n{log}"));
            }
        }
        message
    }
}

/// Most parameters read back from the driver when counting an entry's:
/// far past what a kernel's 32 KiB of parameters can hold in pointers.
const MAX_COUNTED_PARAMS: usize = 4096;

/// A kernel compiled for one device: a function of a module loaded for it
/// alone, and its signature.
///
/// The kernel owns its module and holds its device, so the function cannot
/// outlive its code nor the code its context. The module is unloaded when
/// the kernel drops, once no stream of the device records
/// (`cuModuleUnload` may synchronize, as a free may).
///
/// # Kernel ABI
///
/// The entry point takes, in order: one pointer per bound buffer, in binding
/// order; a pointer to the info bytes, only when the signature reads info;
/// then each by-value parameter, in declaration order, of the size the
/// signature gives it. In CUDA C++, for a signature of a read-write and a
/// read binding, no info, and a 4-byte and an 8-byte parameter:
///
/// ```cuda
/// extern "C" __global__ void k(float* x, const float* y, unsigned n, double a);
/// ```
///
/// Each launch runs blocks of the signature's workgroup size, in a grid of
/// the launch's groups.
pub struct Kernel {
    signature: Signature,
    function: CUfunction,
    /// The module loaded for the kernel; `None` for a function made
    /// elsewhere ([`Kernel::from_raw`]), whose module is not the library's
    /// to unload.
    module: Option<CUmodule>,
    /// What keeps a function made elsewhere loaded.
    keep_alive: Option<KeepAlive>,
    /// A foreign operation's code, in place of a function (then null).
    foreign: Option<Arc<Foreign>>,
    device: Arc<Device>,
}

// SAFETY: a CUfunction and its CUmodule are process-wide handles any thread
// may launch once the context is current, which every launch ensures; the
// module is only unloaded, once, when the kernel drops.
unsafe impl Send for Kernel {}
// SAFETY: as for Send; nothing mutates the handles.
unsafe impl Sync for Kernel {}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({})", self.signature)
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            self.device.release(Release::Module(module));
        }
        if let Some(keep_alive) = self.keep_alive.take() {
            self.device.release(Release::KeepAlive(keep_alive));
        }
        // Its code may own what a drop tears down with a device-wide sync
        // (a cuBLAS handle, an NCCL communicator): not while a stream of
        // the GPU records.
        if let Some(foreign) = self.foreign.take() {
            self.device
                .release(Release::KeepAlive(KeepAlive::new(foreign)));
        }
    }
}

/// Where a module image came from, for the words of a load failure.
#[derive(Clone, Copy)]
enum Origin {
    Caller,
    /// NVRTC of `version` made it: a cubin for `sm_<arch>`, or PTX for
    /// `compute_<arch>` when `ptx`.
    Nvrtc {
        version: (u32, u32),
        arch: u32,
        ptx: bool,
    },
}

impl Kernel {
    /// Load PTX text and take its entry point `entry` as a kernel with
    /// `signature`. The driver's JIT compiles the PTX for the device.
    ///
    /// ```no_run
    /// use backend_cuda::{Cuda, Kernel};
    /// use capture_core::{Access, Driver, Signature};
    ///
    /// let ptx = r#"
    /// .version 7.4
    /// .target sm_75
    /// .address_size 64
    /// .visible .entry zero(.param .u64 out, .param .u32 n)
    /// .reqntid 64, 1, 1
    /// {
    ///     .reg .pred %p;
    ///     .reg .b32 %r<3>;
    ///     .reg .b64 %rd<4>;
    ///     mov.u32 %r1, %ctaid.x;
    ///     mov.u32 %r2, %tid.x;
    ///     mad.lo.u32 %r1, %r1, 64, %r2;
    ///     ld.param.u32 %r2, [n];
    ///     setp.ge.u32 %p, %r1, %r2;
    ///     @%p ret;
    ///     ld.param.u64 %rd1, [out];
    ///     cvta.to.global.u64 %rd1, %rd1;
    ///     mul.wide.u32 %rd2, %r1, 4;
    ///     add.u64 %rd3, %rd1, %rd2;
    ///     st.global.u32 [%rd3], 0;
    ///     ret;
    /// }
    /// "#;
    /// let device = Cuda::open()?;
    /// let signature = Signature::new("zero").binding(Access::Write).param(4);
    /// // SAFETY: `zero` writes only elements below `n` of its one buffer;
    /// // every launch passes an `n` no larger than that buffer's length.
    /// let kernel = unsafe { Kernel::from_ptx(&device, ptx, "zero", signature)? };
    /// assert_eq!(kernel.signature().param_bytes(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Safety
    ///
    /// For every launch it is given, the kernel reads and writes only inside
    /// its bound buffers (whose byte lengths it is not told), given the info
    /// and by-value parameters passed, and does what its signature declares
    /// (it writes no binding declared read). Its entry point takes exactly
    /// the parameters the [kernel ABI](Kernel#kernel-abi) derives from the
    /// signature: drivers older than 12.4 cannot report an entry's
    /// parameters, and the launch passes only those.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] with the JIT's log when the PTX does not compile,
    /// when the module has no `entry`, or when the kernel disagrees with the
    /// signature or the device's limits; [`Error::Driver`] when the device
    /// cannot be used.
    pub unsafe fn from_ptx(
        device: &Arc<Device>,
        ptx: &str,
        entry: &str,
        signature: Signature,
    ) -> Result<Kernel, Error> {
        let text = ptx.strip_suffix('\0').unwrap_or(ptx);
        let text = CString::new(text).map_err(|_| Error::Compile {
            kernel: signature.name().to_owned(),
            log: "the PTX holds a NUL byte before its end".to_owned(),
        })?;
        load(
            device,
            text.as_bytes_with_nul(),
            entry,
            signature,
            Origin::Caller,
        )
    }

    /// Load a cubin or fatbin (or NUL-terminated PTX text) and take its
    /// entry point `entry` as a kernel with `signature`.
    ///
    /// The lengths the image's headers announce are checked against the
    /// slice first, since the driver reads an image without being told its
    /// length.
    ///
    /// ```no_run
    /// use backend_cuda::{Cuda, Kernel};
    /// use capture_core::{Access, Driver, Signature};
    ///
    /// // Made offline by `nvcc -fatbin -arch=sm_80 scale.cu`.
    /// let image = std::fs::read("scale.fatbin")?;
    /// let device = Cuda::open()?;
    /// let signature = Signature::new("scale")
    ///     .binding(Access::ReadWrite)
    ///     .param(4)
    ///     .param(4);
    /// // SAFETY: `scale(float* x, unsigned n, float a)` touches only
    /// // elements below `n`, and every launch passes an `n` that fits `x`.
    /// let kernel = unsafe { Kernel::from_image(&device, &image, "scale", signature)? };
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`Kernel::from_ptx`].
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] when the image is not a whole cubin, fatbin or
    /// PTX text, when the driver refuses it (with its words and the JIT's
    /// log), when it has no `entry`, or when the kernel disagrees with the
    /// signature or the device's limits; [`Error::Driver`] when the device
    /// cannot be used.
    pub unsafe fn from_image(
        device: &Arc<Device>,
        image: &[u8],
        entry: &str,
        signature: Signature,
    ) -> Result<Kernel, Error> {
        match image::classify(image) {
            Ok(kind) => {
                log::debug!("loading a {} for {}", kind.name(), signature.name());
                load(device, image, entry, signature, Origin::Caller)
            }
            Err(why) => Err(Error::Compile {
                kernel: signature.name().to_owned(),
                log: why,
            }),
        }
    }

    /// Compile CUDA C++ `source` with NVRTC for the device's compute
    /// capability, with `--fmad=false` so that `a * x + y` rounds as the
    /// host does, and take its entry point `entry` as a kernel with
    /// `signature`.
    ///
    /// NVRTC makes a cubin for the device's architecture (`sm_XY`) when it
    /// knows it, which any driver of the same major release loads whatever
    /// PTX version it reads. Only for a device NVRTC does not know does the
    /// driver get PTX, for the newest architecture NVRTC knows below the
    /// device's (see [`nvrtc_compile_for`](crate::nvrtc_compile_for)).
    ///
    /// The entry point must be declared `extern "C"`, or its name is
    /// mangled. NVRTC is found as [`NVRTC_ENV`](crate::NVRTC_ENV) says.
    ///
    /// ```no_run
    /// use backend_cuda::{Cuda, Kernel};
    /// use capture_core::{Access, Driver, Signature};
    ///
    /// let source = r#"
    /// extern "C" __global__ void __launch_bounds__(64)
    /// scale(float* x, unsigned n, float a) {
    ///     unsigned i = blockIdx.x * 64 + threadIdx.x;
    ///     if (i < n) x[i] = x[i] * a;
    /// }"#;
    /// let device = Cuda::open()?;
    /// let signature = Signature::new("scale")
    ///     .binding(Access::ReadWrite)
    ///     .param(4)
    ///     .param(4);
    /// // SAFETY: `scale` touches only elements below `n`, and every launch
    /// // passes an `n` that fits `x`.
    /// let kernel = unsafe { Kernel::from_cuda(&device, source, "scale", signature)? };
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`Kernel::from_ptx`].
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] with NVRTC's program log when the source does not
    /// compile, and as for [`Kernel::from_ptx`] after that;
    /// [`Error::Driver`] saying `NVRTC unavailable` when NVRTC cannot be
    /// loaded.
    pub unsafe fn from_cuda(
        device: &Arc<Device>,
        source: &str,
        entry: &str,
        signature: Signature,
    ) -> Result<Kernel, Error> {
        check_signature(device, &signature)?;
        let output = nvrtc::compile_for(source, signature.name(), device.compute_capability())?;
        let version = nvrtc::nvrtc_info()?.version;
        let fail = |log: String| Error::Compile {
            kernel: signature.name().to_owned(),
            log,
        };
        match output {
            NvrtcOutput::Cubin { arch, image } => {
                // The driver reads a cubin without its length: its headers
                // must lie inside what NVRTC handed out.
                image::classify(&image).map_err(|why| fail(format!("NVRTC's cubin: {why}")))?;
                let origin = Origin::Nvrtc {
                    version,
                    arch,
                    ptx: false,
                };
                load(device, &image, entry, signature, origin)
            }
            NvrtcOutput::Ptx { arch, text } => {
                let text =
                    CString::new(text).map_err(|_| fail("NVRTC's PTX holds a NUL byte".into()))?;
                let origin = Origin::Nvrtc {
                    version,
                    arch,
                    ptx: true,
                };
                load(device, text.as_bytes_with_nul(), entry, signature, origin)
            }
        }
    }

    /// A kernel over `function`, a function loaded elsewhere (cudarc's
    /// `CudaFunction`, `cuModuleGetFunction` on a module of the caller's),
    /// with `signature`. The library never unloads its module.
    ///
    /// The signature is validated and checked against the device's block
    /// limits, the function's own limit on threads per block and, on
    /// drivers from 12.4 on, its parameters, as for [`Kernel::from_ptx`].
    ///
    /// `keep_alive` is dropped once the kernel, and every graph that
    /// recorded it, is gone and no stream of the GPU records: to hand the
    /// module over, pass a value whose drop unloads it; to keep it, pass
    /// `()`. Refused, it is handed back untouched in the [`Rejected`].
    ///
    /// # Safety
    ///
    /// `function` is a function of a module loaded in `device`'s context,
    /// which stays loaded until `keep_alive` is dropped. Otherwise as for
    /// [`Kernel::from_ptx`]: its entry point takes exactly the parameters
    /// the [kernel ABI](Kernel#kernel-abi) derives from the signature, and
    /// for every launch it is given, it reads and writes only inside its
    /// bound buffers, given the info and by-value parameters passed, and
    /// writes no binding declared read.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] for a null function, or when the function
    /// disagrees with the signature or the device's limits;
    /// [`Error::Driver`] when the device cannot be used.
    pub unsafe fn from_raw<K: Send + 'static>(
        device: &Arc<Device>,
        function: CUfunction,
        signature: Signature,
        keep_alive: K,
    ) -> Result<Kernel, Rejected<K>> {
        let name = signature.name().to_owned();
        if function.is_null() {
            let error = Error::Compile {
                kernel: name,
                log: "the function handle is null".to_owned(),
            };
            return Err(Rejected::new(error, keep_alive));
        }
        if let Err(e) = check_signature(device, &signature) {
            return Err(Rejected::new(e, keep_alive));
        }
        let checked = device.enter().map_err(Error::from).and_then(|current| {
            // Checked without the keep-alive, which a refusal hands back.
            let kernel = Kernel {
                signature,
                function,
                module: None,
                keep_alive: None,
                foreign: None,
                device: Arc::clone(device),
            };
            check_function(&kernel, &name)?;
            drop(current);
            Ok(kernel)
        });
        match checked {
            Ok(mut kernel) => {
                kernel.keep_alive = Some(KeepAlive::new(keep_alive));
                Ok(kernel)
            }
            Err(e) => Err(Rejected::new(e, keep_alive)),
        }
    }

    /// A foreign operation named `name` over buffers of `accesses`: the
    /// caller's own work (cuBLAS, NCCL, its own kernels, copies and
    /// memsets), enqueued by `op` where a launch of ours would be.
    /// [`Client::foreign`](capture_core::Client::foreign) issues it.
    ///
    /// Outside a window `op` enqueues on the stream itself. Inside one it
    /// enqueues on a side stream capturing into a graph of the operation's
    /// own, which becomes one child graph node of the window's graph,
    /// ordered against the other operations by the declared accesses; its
    /// `Err` or panic refuses the call, which dooms the window. `op` is
    /// handed the stream, the context (current for the call) and each
    /// declared buffer's device range. An update of a graph holding foreign
    /// operations goes in place where `cuGraphExecUpdate` accepts the
    /// child graphs, and instantiates anew otherwise
    /// ([`Updated::Topology`](capture_core::Updated)). Inside a conditional
    /// body, the driver must accept the work as a body's (kernels, copies
    /// and memsets of device memory).
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
    /// does not synchronize the stream, the context or the device, query
    /// or wait on the stream from outside, begin or end a capture, or
    /// allocate or free memory (`cuMemAllocAsync`, a library's lazily made
    /// workspace: give it one made beforehand). It enqueues on no other
    /// stream unless that stream waits on an event of the given one first
    /// and is waited on again before `op` returns. It calls no method of
    /// the client (it runs with the stream's lock held). It checks each
    /// buffer's length against what its work touches, on every call. It
    /// keeps neither the stream nor the context after it returns (no
    /// library handle left bound to them: a side stream is reused or
    /// destroyed), leaves the current context and the thread's capture
    /// mode as it found them, and captures no conditional node (a child
    /// graph may hold none). Its work reads no host memory at replay
    /// (copies from the host, host callbacks) unless that memory outlives
    /// every graph holding it, and shares no scratch memory with work that
    /// may run at the same time (a cuBLAS workspace: set none, or one per
    /// stream, after each `cublasSetStream`, which resets it). Everything
    /// its work uses (a cuBLAS handle, an NCCL communicator) stays alive
    /// and unchanged while the kernel, and any graph made from a window
    /// holding it, lives.
    pub unsafe fn foreign(
        device: &Arc<Device>,
        name: &str,
        accesses: &[capture_core::Access],
        op: impl Fn(&ForeignStream<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Kernel, Error> {
        let signature = Signature::foreign(name, accesses);
        check_signature(device, &signature)?;
        Ok(Kernel {
            signature,
            function: std::ptr::null_mut(),
            module: None,
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

    /// The entry point, to launch.
    pub(crate) fn function(&self) -> CUfunction {
        self.function
    }

    /// The device the kernel was built for.
    pub(crate) fn device(&self) -> &Device {
        &self.device
    }
}

/// Whether `device` can run blocks of the signature's workgroup size, and
/// the signature holds within every backend's limits.
fn check_signature(device: &Device, signature: &Signature) -> Result<(), Error> {
    let fail = |log: String| Error::Compile {
        kernel: signature.name().to_owned(),
        log,
    };
    signature.validate().map_err(fail)?;
    let limits = device.limits();
    let size = signature.workgroup_size();
    if size.iter().zip(limits.max_block).any(|(&s, max)| s > max) {
        return Err(fail(format!(
            "a block of {size:?} threads does not fit the device's largest block, {:?}",
            limits.max_block
        )));
    }
    if signature.threads() > u64::from(limits.max_threads_per_block) {
        return Err(fail(format!(
            "a block of {} threads is more than the device's {} threads per block",
            signature.threads(),
            limits.max_threads_per_block
        )));
    }
    Ok(())
}

/// Load `image` (whole, as checked by the caller) into a module on
/// `device` and build the kernel `entry` of it.
fn load(
    device: &Arc<Device>,
    image: &[u8],
    entry: &str,
    signature: Signature,
    origin: Origin,
) -> Result<Kernel, Error> {
    check_signature(device, &signature)?;
    let name = signature.name().to_owned();
    let fail = |log: String| Error::Compile {
        kernel: name.clone(),
        log,
    };
    let entry_c =
        CString::new(entry).map_err(|_| fail("the entry name holds a NUL byte".into()))?;
    let api = device.api();
    let mut logs = JitLogs::new();
    let (mut options, mut values) = logs.options();
    let _current = device.enter()?;

    let mut module: CUmodule = std::ptr::null_mut();
    // SAFETY: every byte the driver reads of the image lies in `image` (PTX
    // ends in its NUL; a cubin's or fatbin's headers were checked against
    // the slice), which outlives the call; `options` and `values` hold the
    // same number of entries, which is passed; each log buffer holds the
    // LOG_BYTES its size option announces and outlives the call.
    let loaded = unsafe {
        (api.module_load_data_ex)(
            &mut module,
            image.as_ptr().cast::<c_void>(),
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if loaded != sys::CUDA_SUCCESS {
        return Err(fail(load_failure(device, &logs, loaded, origin)));
    }
    // Owned from here on: every path below that fails drops the kernel,
    // which unloads the module.
    let mut kernel = Kernel {
        signature,
        function: std::ptr::null_mut(),
        module: Some(module),
        keep_alive: None,
        foreign: None,
        device: Arc::clone(device),
    };

    // SAFETY: the module is live, the name NUL-terminated, and the
    // kernel's function a valid place for the handle.
    let found =
        unsafe { (api.module_get_function)(&mut kernel.function, module, entry_c.as_ptr()) };
    if found != sys::CUDA_SUCCESS {
        return Err(fail(format!(
            "the module has no entry point {entry}: {}{}",
            api.describe(found),
            if found == sys::CUDA_ERROR_NOT_FOUND {
                " (a CUDA C++ kernel needs extern \"C\" to keep its name)"
            } else {
                ""
            }
        )));
    }

    check_function(&kernel, entry)?;
    Ok(kernel)
}

/// Whether the kernel's function runs blocks of its signature's size and,
/// where the driver can list them, takes the parameters the signature
/// makes a launch pass. The caller has made the context current.
fn check_function(kernel: &Kernel, entry: &str) -> Result<(), Error> {
    let api = kernel.device.api();
    let fail = |log: String| Error::Compile {
        kernel: kernel.signature.name().to_owned(),
        log,
    };
    let max_threads = function_attribute(
        api,
        kernel.function,
        sys::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    )?;
    if u64::try_from(max_threads).unwrap_or(0) < kernel.signature.threads() {
        return Err(fail(format!(
            "{entry} runs at most {max_threads} threads per block (its launch bounds or its \
             register use), and its signature declares a block of {:?}",
            kernel.signature.workgroup_size()
        )));
    }
    check_parameters(api, kernel.function, entry, &kernel.signature).map_err(fail)
}

/// The words of a failed module load: the driver's code, the JIT's logs,
/// and, for what NVRTC made, which NVRTC and driver disagree.
fn load_failure(device: &Device, logs: &JitLogs, code: i32, origin: Origin) -> String {
    let mut message = logs.failure(device.api(), code);
    if let Origin::Nvrtc { version, arch, ptx } = origin {
        message.push_str(&nvrtc_mismatch(
            version,
            arch,
            ptx,
            &device.info().driver_version,
            code,
        ));
    }
    message
}

/// What to say when driver `driver` refuses with `code` what NVRTC
/// `version` made: nothing for a refusal that is not about the image.
fn nvrtc_mismatch(version: (u32, u32), arch: u32, ptx: bool, driver: &str, code: i32) -> String {
    let (major, minor) = version;
    let fix = format!(
        "point {} at an NVRTC no newer than the driver, or update the driver",
        nvrtc::NVRTC_ENV
    );
    let ptx_refused = [
        sys::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        sys::CUDA_ERROR_INVALID_PTX,
        sys::CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
        sys::CUDA_ERROR_INVALID_IMAGE,
        sys::CUDA_ERROR_NO_BINARY_FOR_GPU,
    ];
    if !ptx_refused.contains(&code) {
        return String::new();
    }
    if ptx {
        format!(
            "\nNVRTC {major}.{minor} and driver {driver} disagree: NVRTC {major}.{minor} does not \
             know this device's architecture, so it made PTX for compute_{arch}, and driver \
             {driver} cannot compile that PTX (its PTX version is likely newer than the driver \
             reads); {fix}"
        )
    } else {
        format!(
            "\nNVRTC {major}.{minor} and driver {driver} disagree: driver {driver} refuses the \
             cubin NVRTC {major}.{minor} made for sm_{arch}; {fix}"
        )
    }
}

fn function_attribute(
    api: &Api,
    function: CUfunction,
    which: CUfunction_attribute,
) -> Result<c_int, DriverError> {
    let mut value: c_int = 0;
    // SAFETY: the function belongs to a live module; `value` is a valid
    // place for the answer.
    api.check("get function attribute", unsafe {
        (api.func_get_attribute)(&mut value, which, function)
    })?;
    Ok(value)
}

/// Compare the entry's parameters, where the driver can list them, with
/// what the signature makes a launch pass: their number, then each size.
fn check_parameters(
    api: &Api,
    function: CUfunction,
    entry: &str,
    signature: &Signature,
) -> Result<(), String> {
    let Some(param_info) = api.func_get_param_info else {
        return Ok(());
    };
    let bindings = signature.accesses().len();
    let info = usize::from(signature.info_bytes() > 0);
    let mut expected: Vec<usize> = vec![8; bindings + info];
    expected.extend(signature.param_sizes().iter().map(|&s| s as usize));

    let mut found = Vec::new();
    for index in 0..MAX_COUNTED_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: the function belongs to a live module, its context is
        // current, and both out-pointers are valid places for a size.
        let answer = unsafe { param_info(function, index, &mut offset, &mut size) };
        match answer {
            sys::CUDA_SUCCESS => found.push(size),
            // The index past the last parameter.
            sys::CUDA_ERROR_INVALID_VALUE => break,
            other => {
                log::debug!(
                    "cuFuncGetParamInfo answered {other}; {entry}'s parameters go unchecked"
                );
                return Ok(());
            }
        }
    }
    let declared = format!(
        "{bindings} buffer pointer(s), {info} info pointer(s) and {} by-value parameter(s)",
        signature.param_sizes().len()
    );
    if found.len() != expected.len() {
        return Err(format!(
            "{entry} takes {} parameter(s), and its signature {} makes a launch pass {}: {declared}",
            found.len(),
            signature,
            expected.len()
        ));
    }
    for (index, (&got, &want)) in found.iter().zip(&expected).enumerate() {
        if got != want {
            return Err(format!(
                "{entry}'s parameter {index} is {got} bytes, and its signature {signature} passes \
                 {want} there ({declared})"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_refusal_names_the_nvrtc_and_the_driver() {
        let ptx = nvrtc_mismatch(
            (13, 5),
            90,
            true,
            "13.0",
            sys::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        );
        assert!(ptx.contains("NVRTC 13.5 and driver 13.0 disagree"), "{ptx}");
        assert!(ptx.contains("PTX for compute_90"), "{ptx}");
        let cubin = nvrtc_mismatch((13, 5), 90, false, "12.4", sys::CUDA_ERROR_INVALID_IMAGE);
        assert!(
            cubin.contains("NVRTC 13.5 and driver 12.4 disagree"),
            "{cubin}"
        );
        assert!(cubin.contains("sm_90"), "{cubin}");
        // A refusal that is not about the image says nothing of versions.
        assert_eq!(
            nvrtc_mismatch((13, 5), 90, true, "13.0", sys::CUDA_ERROR_INVALID_VALUE),
            ""
        );
    }

    /// The PTX as a Turing-or-newer device loads it.
    const PTX: &str = PTX_BODY;

    /// `which`'s entry name, and its text from `.visible .entry` up to the
    /// closing brace.
    fn entry_text(which: Builtin) -> (String, &'static str) {
        let entry = entry_name(which);
        let start = PTX
            .find(&format!(".visible .entry {entry}("))
            .unwrap_or_else(|| panic!("{entry} is missing"));
        let rest = &PTX[start..];
        let body = &rest[..rest.find("\n}\n").expect("body closes")];
        (entry, body)
    }

    /// Without an assembler here (the offline tests have one), at least the
    /// interface is checked: one entry per builtin, each taking one pointer
    /// per binding plus the info pointer, requiring the signature's block
    /// and indexing in 64 bits.
    #[test]
    fn every_builtin_has_an_entry_with_its_bindings() {
        for which in Builtin::ALL {
            let (entry, body) = entry_text(which);
            let params = &body[..body.find(')').expect("parameter list closes")];
            let count = params.matches(".param .u64").count();
            assert_eq!(count, which.accesses().len() + 1, "{entry} parameters");
            let [x, y, z] = which.signature().workgroup_size();
            assert!(
                body.contains(&format!(".reqntid {x}, {y}, {z}")),
                "{entry} does not require its block"
            );
            for needle in [
                "%ctaid.y",
                "%nctaid.x",
                "%ctaid.x",
                "%ntid.x",
                "%tid.x",
                "mul.wide.u32",
                "mad.lo.u64",
                "setp.ge.u64",
                "ret;",
            ] {
                assert!(body.contains(needle), "{entry} lacks {needle}");
            }
            // The block index is never formed in 32 bits.
            assert!(!body.contains("mad.lo.u32"), "{entry} indexes in 32 bits");
            assert_eq!(
                body.matches("st.global.f32").count(),
                1,
                "{entry} stores once"
            );
        }
        assert_eq!(PTX.matches(".visible .entry").count(), Builtin::ALL.len());
        assert!(ptx_for(9, 0).starts_with(".version 7.4\n.target sm_75\n.address_size 64\n"));
        assert!(ptx_for(7, 5).contains(".target sm_75\n"));
        assert!(ptx_for(7, 0).starts_with(".version 7.0\n.target sm_50\n.address_size 64\n"));
        assert!(ptx_for(5, 0).contains(".target sm_50\n"));
        assert!(!PTX.contains("\n.version") && !PTX.contains("\n.target"));
        let variants = builtin_ptx_variants();
        assert_eq!(variants.len(), 2);
        assert!(variants.iter().all(|(_, ptx)| !ptx.contains('\0')));
    }

    /// Each entry loads exactly the parameters it declares, each once, and
    /// uses only registers its declarations cover.
    #[test]
    fn entries_load_their_own_parameters_and_declared_registers() {
        for which in Builtin::ALL {
            let (entry, body) = entry_text(which);
            let (head, code) = body.split_once('{').expect("body opens");
            let params = &head[..head.find(')').expect("parameter list closes")];
            let declared: Vec<&str> = params
                .split(".param .u64")
                .skip(1)
                .map(|p| p.trim().trim_end_matches([',', ')']).trim())
                .collect();
            let loaded: Vec<&str> = code
                .match_indices("ld.param.u64")
                .map(|(at, _)| {
                    let line = &code[at..code[at..].find(';').map_or(code.len(), |e| at + e)];
                    let open = line.find('[').expect("operand opens");
                    &line[open + 1..line.len() - 1]
                })
                .collect();
            let mut sorted = loaded.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                loaded.len(),
                "{entry} loads a parameter twice"
            );
            for name in &declared {
                assert!(name.starts_with(&format!("{entry}_")), "{entry}: {name}");
                assert!(loaded.contains(name), "{entry} never loads {name}");
            }
            assert_eq!(loaded.len(), declared.len(), "{entry}: {loaded:?}");
            // The info pointer comes last, after one pointer per binding.
            assert_eq!(declared.last(), Some(&format!("{entry}_info").as_str()));
            for (prefix, kind) in [
                ("%rd", ".b64"),
                ("%r", ".b32"),
                ("%f", ".f32"),
                ("%p", ".pred"),
            ] {
                let decl = format!(".reg {kind} \t{prefix}<");
                let at = code
                    .find(&decl)
                    .unwrap_or_else(|| panic!("{entry}: no {decl}"));
                let count: usize = code[at + decl.len()..]
                    .split('>')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{entry}: bad {decl}"));
                for (at, _) in code.match_indices(prefix) {
                    let digits: String = code[at + prefix.len()..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    if let Ok(index) = digits.parse::<usize>() {
                        assert!(index < count, "{entry} uses {prefix}{index} of {count}");
                    }
                }
            }
        }
        assert_eq!(PTX.matches('{').count(), PTX.matches('}').count());
    }
}
