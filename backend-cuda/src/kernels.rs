//! Kernels: a function of a loaded module, with the signature every launch
//! of it is checked against.
//!
//! A kernel is built from PTX text ([`Kernel::from_ptx`]), from a cubin or
//! fatbin ([`Kernel::from_image`]) or from CUDA C++ compiled by NVRTC at run
//! time ([`Kernel::from_cuda`]). The builtins are PTX shipped in the crate,
//! built through the same path with [`Builtin::signature`].

use std::ffi::{CString, c_int, c_uint, c_void};
use std::sync::Arc;

use capture_core::{Builtin, DriverError, Error, Signature};
use cudarc::driver::sys::{self, CUfunction, CUfunction_attribute, CUmodule, CUresult};

use crate::device::CudaDevice;
use crate::error::{check, describe, refuse};
use crate::image;
use crate::{loader, nvrtc};

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

/// `which`, built for `device` from the shipped PTX.
pub(crate) fn builtin(device: &Arc<CudaDevice>, which: Builtin) -> Result<Kernel, DriverError> {
    let (major, minor) = device.compute_capability();
    let ptx = ptx_for(major, minor);
    // SAFETY: each builtin reads and writes the `n` elements its info names
    // in each of its buffers (fewer where the grid is smaller), and writes
    // only the bindings `Builtin::accesses` declares written; its entry
    // takes one pointer per binding and the info pointer, as its signature
    // says. capture-core launches builtins only through
    // `Client::run_builtin`, which checks `n` against every buffer's length,
    // so every launch a builtin is given stays inside its buffers.
    let built = unsafe { Kernel::from_ptx(device, &ptx, &entry_name(which), which.signature()) };
    built.map_err(|e| match e {
        Error::Driver(e) => e,
        other => refuse("build builtin kernel", other.to_string()),
    })
}

/// Bytes kept of each JIT log, enough for any message about one module.
const LOG_BYTES: usize = 16 * 1024;

/// Most parameters read back from the driver when counting an entry's:
/// far past what a kernel's 32 KiB of parameters can hold in pointers.
const MAX_COUNTED_PARAMS: usize = 4096;

/// A loaded module, unloaded (with its device's context current) when the
/// last kernel of it drops.
pub(crate) struct Module {
    raw: CUmodule,
    pub(crate) device: Arc<CudaDevice>,
}

// SAFETY: a CUmodule is a process-wide handle; it is only unloaded, once, in
// Drop, with its context made current first.
unsafe impl Send for Module {}
// SAFETY: as for Send; nothing mutates the handle.
unsafe impl Sync for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        if let Err(e) = self.device.bind() {
            log::warn!("leaking a module: {e}");
            return;
        }
        // SAFETY: the module is owned here and unloaded once; every kernel
        // of it held this module through an Arc, so none is left.
        let unloaded = unsafe { sys::cuModuleUnload(self.raw) };
        if let Err(e) = check("unload module", unloaded) {
            log::warn!("{e}");
        }
    }
}

/// A kernel compiled for one device: a function of a loaded module, and its
/// signature.
///
/// Holds the module it lives in, which holds its device, so the function
/// cannot outlive its code nor the code its context.
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
    pub(crate) function: CUfunction,
    pub(crate) module: Arc<Module>,
}

// SAFETY: a CUfunction is an immutable, process-wide handle any thread may
// launch once its context is current, which every launch ensures; the module
// it belongs to is Send and Sync.
unsafe impl Send for Kernel {}
// SAFETY: as for Send; nothing mutates the handle.
unsafe impl Sync for Kernel {}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({})", self.signature)
    }
}

/// Where a module image came from, for the words of a load failure.
#[derive(Clone, Copy)]
enum Origin {
    Caller,
    Nvrtc { version: (u32, u32) },
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
        device: &Arc<CudaDevice>,
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
        device: &Arc<CudaDevice>,
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
    /// capability (or the newest architecture NVRTC knows below it), with
    /// `--fmad=false` so that `a * x + y` rounds as the host does, and take
    /// its entry point `entry` as a kernel with `signature`.
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
        device: &Arc<CudaDevice>,
        source: &str,
        entry: &str,
        signature: Signature,
    ) -> Result<Kernel, Error> {
        check_signature(device, &signature)?;
        let arch = nvrtc::arch_for(signature.name(), device.compute_capability())?;
        let ptx = nvrtc::compile(source, signature.name(), &arch)?;
        let version = nvrtc::nvrtc_info()?.version;
        let text = CString::new(ptx).map_err(|_| Error::Compile {
            kernel: signature.name().to_owned(),
            log: "NVRTC's PTX holds a NUL byte".to_owned(),
        })?;
        load(
            device,
            text.as_bytes_with_nul(),
            entry,
            signature,
            Origin::Nvrtc { version },
        )
    }

    /// What the kernel takes.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }
}

/// Whether `device` can run blocks of the signature's workgroup size, and
/// the signature holds within every backend's limits.
fn check_signature(device: &CudaDevice, signature: &Signature) -> Result<(), Error> {
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
    device: &Arc<CudaDevice>,
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
    device.bind()?;

    let mut error_log = vec![0u8; LOG_BYTES];
    let mut info_log = vec![0u8; LOG_BYTES];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    // The JIT takes each option's value in a pointer-sized slot; a size is
    // passed as the integer itself, not as a pointer to it.
    let mut values: [*mut c_void; 4] = [
        error_log.as_mut_ptr().cast::<c_void>(),
        std::ptr::without_provenance_mut(LOG_BYTES),
        info_log.as_mut_ptr().cast::<c_void>(),
        std::ptr::without_provenance_mut(LOG_BYTES),
    ];
    let mut raw: CUmodule = std::ptr::null_mut();
    // SAFETY: every byte the driver reads of the image lies in `image` (PTX
    // ends in its NUL; a cubin's or fatbin's headers were checked against
    // the slice), which outlives the call; `options` and `values` hold the
    // same number of entries, which is passed; each log buffer holds the
    // LOG_BYTES its size option announces.
    let loaded = unsafe {
        sys::cuModuleLoadDataEx(
            &mut raw,
            image.as_ptr().cast::<c_void>(),
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if loaded != CUresult::CUDA_SUCCESS {
        return Err(fail(load_failure(
            device, loaded, &error_log, &info_log, origin,
        )));
    }
    let module = Arc::new(Module {
        raw,
        device: Arc::clone(device),
    });

    let mut function: CUfunction = std::ptr::null_mut();
    // SAFETY: the module is live, the name NUL-terminated, and `function` a
    // valid place for the handle.
    let found = unsafe { sys::cuModuleGetFunction(&mut function, module.raw, entry_c.as_ptr()) };
    if found != CUresult::CUDA_SUCCESS {
        return Err(fail(format!(
            "the module has no entry point {entry}: {}{}",
            describe(found),
            if found == CUresult::CUDA_ERROR_NOT_FOUND {
                " (a CUDA C++ kernel needs extern \"C\" to keep its name)"
            } else {
                ""
            }
        )));
    }

    let max_threads = function_attribute(
        function,
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    )?;
    if u64::try_from(max_threads).unwrap_or(0) < signature.threads() {
        return Err(fail(format!(
            "{entry} runs at most {max_threads} threads per block (its launch bounds or its \
             register use), and its signature declares a block of {:?}",
            signature.workgroup_size()
        )));
    }
    check_parameters(function, entry, &signature).map_err(fail)?;
    Ok(Kernel {
        signature,
        function,
        module,
    })
}

/// The words of a failed module load: the driver's code, the JIT's logs,
/// and what to do about a PTX version the driver does not know.
fn load_failure(
    device: &CudaDevice,
    code: CUresult,
    error_log: &[u8],
    info_log: &[u8],
    origin: Origin,
) -> String {
    let text = |log: &[u8]| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).trim().to_owned()
    };
    let mut message = format!("the driver refused the module: {}", describe(code));
    for (what, log) in [("error log", text(error_log)), ("info log", text(info_log))] {
        if !log.is_empty() {
            message.push_str(&format!("; JIT {what}:\n{log}"));
        }
    }
    if code == CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        && let Origin::Nvrtc {
            version: (major, minor),
        } = origin
    {
        message.push_str(&format!(
            "\nthe PTX came from NVRTC {major}.{minor}, newer than driver {} compiles; point {} \
             at an NVRTC no newer than the driver",
            device.info().driver_version,
            nvrtc::NVRTC_ENV
        ));
    }
    message
}

fn function_attribute(
    function: CUfunction,
    which: CUfunction_attribute,
) -> Result<c_int, DriverError> {
    let mut value: c_int = 0;
    // SAFETY: the function belongs to a live module; `value` is a valid
    // place for the answer.
    check("get function attribute", unsafe {
        sys::cuFuncGetAttribute(&mut value, which, function)
    })?;
    Ok(value)
}

/// Compare the entry's parameters, where the driver can list them, with
/// what the signature makes a launch pass: their number, then each size.
fn check_parameters(
    function: CUfunction,
    entry: &str,
    signature: &Signature,
) -> Result<(), String> {
    let Some(param_info) = loader::param_info() else {
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
            loader::CUDA_SUCCESS => found.push(size),
            // The index past the last parameter.
            loader::CUDA_ERROR_INVALID_VALUE => break,
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
