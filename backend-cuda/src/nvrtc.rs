//! NVRTC, NVIDIA's run-time CUDA C++ compiler, loaded at run time like the
//! driver, so that building and running the crate needs no CUDA toolkit and
//! a machine without NVRTC gets an error with a reason, never a panic.
//!
//! Only the handful of functions the compiler needs are declared, with
//! plain integer results: a Rust enum for `nvrtcResult` would be undefined
//! behaviour for a code a newer NVRTC adds. NVRTC needs no GPU, so
//! [`nvrtc_compile_ptx`] and [`nvrtc_compile_for`] work on any machine that
//! has the library.
//!
//! A kernel is compiled to a cubin for the device's exact architecture
//! whenever NVRTC knows it: a cubin carries no PTX, so no PTX version newer
//! than the driver's can reach it. PTX is made only for a device NVRTC does
//! not know, and the driver's JIT compiles it.

use std::ffi::{CString, OsString, c_char, c_int, c_void};
use std::path::Path;
use std::ptr;
use std::sync::OnceLock;

use capture_core::{DriverError, Error};

use crate::error::BACKEND;

/// The variable naming the NVRTC library to load (a path, or a name the
/// dynamic loader resolves). When it is set, nothing else is tried; when
/// unset, NVRTC is looked for on the loader's path, then under `CUDA_HOME`
/// and `CUDA_PATH` (`lib64`) and `/usr/local/cuda/lib64`, then in NVIDIA's
/// wheels (`nvidia/cuda_nvrtc/lib`, `nvidia/cu13/lib`) under the
/// site-packages of the Python `PYTHON` names, or else of the `python3`
/// on the PATH.
pub const NVRTC_ENV: &str = "CAPTURE_NVRTC_LIBRARY";

/// Names tried on the loader's search path when [`NVRTC_ENV`] is unset:
/// the development link first (the toolkit the system calls its own), then
/// the runtime names of each supported major release.
const NAMES: &[&str] = &[
    "libnvrtc.so",
    "libnvrtc.so.12",
    "libnvrtc.so.13",
    "libnvrtc.so.11.2",
];

/// Where a toolkit installed in the default place keeps NVRTC, tried after
/// the search path and the toolkit the environment names.
const TOOLKIT_DIR: &str = "/usr/local/cuda/lib64";

/// Variables naming a toolkit's root, whose `lib64` holds NVRTC.
const TOOLKIT_VARS: &[&str] = &["CUDA_HOME", "CUDA_PATH"];

/// Where NVIDIA's PyPI wheels put NVRTC under a site-packages directory:
/// CUDA 12's `nvidia-cuda-nvrtc-cu12`, and CUDA 13's `nvidia-cuda-nvrtc`.
const WHEEL_DIRS: &[&str] = &["nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib"];

/// The variable naming the Python whose site-packages hold NVIDIA's wheels,
/// asked before the `python3` on the PATH.
const PYTHON_ENV: &str = "PYTHON";

/// Asks a Python for its site-packages directories.
const SITE_PACKAGES: &str = "import site, sys\n\
    paths = site.getsitepackages() if hasattr(site, 'getsitepackages') else []\n\
    paths.append(site.getusersitepackages())\n\
    print('\\n'.join(p for p in paths + sys.path if p))";

/// The operation name of every failure to find or use NVRTC.
pub(crate) const LOAD_OP: &str = "load NVRTC";

type Program = *mut c_void;
/// `nvrtcResult`, an enum in C, read as the int it is passed as.
type NvrtcResult = c_int;

/// One NVRTC function as declared here, for the ABI test to compare with
/// `nvrtc.h`.
#[derive(Debug, Clone, Copy)]
pub struct NvrtcPrototype {
    /// The exported symbol.
    pub symbol: &'static str,
    /// Each parameter's type as written in the declaration.
    pub params: &'static [&'static str],
    /// The result's type as written in the declaration.
    pub result: &'static str,
}

/// Declares each function's pointer type and lists it in
/// [`NVRTC_PROTOTYPES`], so the ABI test checks what is called.
macro_rules! nvrtc_functions {
    ($($alias:ident = $symbol:literal ($($param:ty),* $(,)?) -> $result:ty;)*) => {
        $(type $alias = unsafe extern "C" fn($($param),*) -> $result;)*

        /// Every NVRTC function this crate resolves.
        pub const NVRTC_PROTOTYPES: &[NvrtcPrototype] = &[$(NvrtcPrototype {
            symbol: $symbol,
            params: &[$(stringify!($param)),*],
            result: stringify!($result),
        }),*];
    };
}

nvrtc_functions! {
    CreateProgram = "nvrtcCreateProgram"(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult;
    CompileProgram = "nvrtcCompileProgram"(Program, c_int, *const *const c_char) -> NvrtcResult;
    DestroyProgram = "nvrtcDestroyProgram"(*mut Program) -> NvrtcResult;
    GetSize = "nvrtcGetProgramLogSize"(Program, *mut usize) -> NvrtcResult;
    GetText = "nvrtcGetProgramLog"(Program, *mut c_char) -> NvrtcResult;
    GetPtxSize = "nvrtcGetPTXSize"(Program, *mut usize) -> NvrtcResult;
    GetPtx = "nvrtcGetPTX"(Program, *mut c_char) -> NvrtcResult;
    GetCubinSize = "nvrtcGetCUBINSize"(Program, *mut usize) -> NvrtcResult;
    GetCubin = "nvrtcGetCUBIN"(Program, *mut c_char) -> NvrtcResult;
    ErrorString = "nvrtcGetErrorString"(NvrtcResult) -> *const c_char;
    Version = "nvrtcVersion"(*mut c_int, *mut c_int) -> NvrtcResult;
    NumArchs = "nvrtcGetNumSupportedArchs"(*mut c_int) -> NvrtcResult;
    Archs = "nvrtcGetSupportedArchs"(*mut c_int) -> NvrtcResult;
}

/// `NVRTC_SUCCESS`.
const SUCCESS: c_int = 0;

/// A loaded NVRTC and the functions this crate calls.
struct Library {
    /// Kept loaded for the life of the process: the function pointers below
    /// point into it.
    _library: libloading::Library,
    path: String,
    version: (u32, u32),
    archs: Vec<u32>,
    create_program: CreateProgram,
    compile_program: CompileProgram,
    destroy_program: DestroyProgram,
    get_log_size: GetSize,
    get_log: GetText,
    get_ptx_size: GetPtxSize,
    get_ptx: GetPtx,
    /// `nvrtcGetCUBINSize` and `nvrtcGetCUBIN`, which NVRTC has from 11.1
    /// on; without them every kernel goes through PTX.
    cubin: Option<(GetCubinSize, GetCubin)>,
    error_string: ErrorString,
}

/// What the NVRTC this process loaded is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvrtcInfo {
    /// The path or name it was loaded from.
    pub path: String,
    /// Its release, major and minor (`(12, 9)`).
    pub version: (u32, u32),
    /// The virtual architectures it compiles for, as `compute_XY` numbers
    /// (`[50, 52, ..., 120]`); empty for a release too old to say.
    pub archs: Vec<u32>,
}

/// NVRTC as this process loads it: found and checked once, on first use.
///
/// # Errors
///
/// [`Error::Driver`] whose message starts `NVRTC unavailable:` and names
/// every path tried, when no usable NVRTC was found.
pub fn nvrtc_info() -> Result<NvrtcInfo, Error> {
    let nvrtc = library()?;
    Ok(NvrtcInfo {
        path: nvrtc.path.clone(),
        version: nvrtc.version,
        archs: nvrtc.archs.clone(),
    })
}

/// What NVRTC made for a device: a cubin for its own architecture where
/// NVRTC knows it, PTX otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvrtcOutput {
    /// An ELF cubin for `sm_<arch>`, which the driver loads as it is.
    Cubin {
        /// The architecture number (`90` for `sm_90`).
        arch: u32,
        /// The cubin's bytes.
        image: Vec<u8>,
    },
    /// PTX text for `compute_<arch>`, without a trailing NUL, which the
    /// driver's JIT compiles for the device.
    Ptx {
        /// The virtual architecture number (`90` for `compute_90`).
        arch: u32,
        /// The PTX.
        text: String,
    },
}

/// Compile CUDA C++ `source` to PTX text for the virtual architecture
/// `arch` (`"compute_80"`), with `--fmad=false` so that `a * x + y` is
/// rounded twice, as the host computes it. Needs NVRTC, but no GPU.
///
/// The PTX comes back without a trailing NUL.
///
/// ```no_run
/// let source = r#"extern "C" __global__ void twice(float* x, unsigned n) {
///     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
///     if (i < n) x[i] *= 2.0f;
/// }"#;
/// let ptx = backend_cuda::nvrtc_compile_ptx(source, "compute_80")?;
/// assert!(ptx.contains(".entry twice"));
/// # Ok::<(), capture_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Compile`] with NVRTC's program log when the source does not
/// compile (or `arch` is not one NVRTC knows); [`Error::Driver`] when NVRTC
/// is unavailable.
pub fn nvrtc_compile_ptx(source: &str, arch: &str) -> Result<String, Error> {
    let program = compile(source, "program", arch)?;
    program.ptx()
}

/// Compile CUDA C++ `source` for a device of compute capability
/// `major.minor`, as [`Kernel::from_cuda`](crate::Kernel::from_cuda) does:
/// a cubin for `sm_XY` when NVRTC knows that architecture, otherwise PTX
/// for the newest `compute_XY` NVRTC knows below it. Needs NVRTC, but no
/// GPU.
///
/// ```no_run
/// let source = r#"extern "C" __global__ void twice(float* x, unsigned n) {
///     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
///     if (i < n) x[i] *= 2.0f;
/// }"#;
/// match backend_cuda::nvrtc_compile_for(source, (9, 0))? {
///     backend_cuda::NvrtcOutput::Cubin { arch, image } => {
///         assert_eq!(arch, 90);
///         assert!(image.starts_with(b"\x7fELF"));
///     }
///     backend_cuda::NvrtcOutput::Ptx { arch, .. } => println!("PTX for compute_{arch}"),
/// }
/// # Ok::<(), capture_core::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Compile`] with NVRTC's program log when the source does not
/// compile, or when every architecture NVRTC knows is newer than the
/// device; [`Error::Driver`] when NVRTC is unavailable.
pub fn nvrtc_compile_for(
    source: &str,
    compute_capability: (i32, i32),
) -> Result<NvrtcOutput, Error> {
    compile_for(source, "program", compute_capability)
}

/// Compile `source` for a device of `compute_capability`; `name` names the
/// program in NVRTC's log and the kernel in an error.
pub(crate) fn compile_for(
    source: &str,
    name: &str,
    (major, minor): (i32, i32),
) -> Result<NvrtcOutput, Error> {
    let nvrtc = library()?;
    let fail = |log: String| Error::Compile {
        kernel: name.to_owned(),
        log,
    };
    let device = u32::try_from(major * 10 + minor).map_err(|_| {
        fail(format!(
            "the device reports compute capability {major}.{minor}"
        ))
    })?;
    if nvrtc.cubin.is_some() && nvrtc.archs.contains(&device) {
        let program = compile(source, name, &format!("sm_{device}"))?;
        return Ok(NvrtcOutput::Cubin {
            arch: device,
            image: program.cubin()?,
        });
    }
    let arch = pick_arch(&nvrtc.archs, nvrtc.version, major, minor).map_err(fail)?;
    log::debug!(
        "NVRTC {}.{} does not know sm_{device}; {name} goes to the driver as PTX for \
         compute_{arch}",
        nvrtc.version.0,
        nvrtc.version.1
    );
    let program = compile(source, name, &format!("compute_{arch}"))?;
    Ok(NvrtcOutput::Ptx {
        arch,
        text: program.ptx()?,
    })
}

/// Compile `source` for `arch` (`compute_XY` or `sm_XY`); `name` names the
/// program in NVRTC's log and the kernel in an error. The compiled program
/// comes back, to read its PTX or cubin.
fn compile(source: &str, name: &str, arch: &str) -> Result<ProgramGuard, Error> {
    let nvrtc = library()?;
    let fail = |log: String| Error::Compile {
        kernel: name.to_owned(),
        log,
    };
    let source_c =
        CString::new(source).map_err(|_| fail("the source holds a NUL byte".to_owned()))?;
    let name_c = CString::new(format!("{name}.cu"))
        .map_err(|_| fail("the kernel name holds a NUL byte".to_owned()))?;
    let arch_option = CString::new(format!("--gpu-architecture={arch}"))
        .map_err(|_| fail("the architecture holds a NUL byte".to_owned()))?;
    let fmad_option = c"--fmad=false";
    let options = [arch_option.as_ptr(), fmad_option.as_ptr()];

    let mut raw: Program = ptr::null_mut();
    // SAFETY: `raw` is a valid place for the handle; the source and name are
    // NUL-terminated and outlive the call; no headers are passed, so both
    // header arrays may be null with a count of 0.
    let created = unsafe {
        (nvrtc.create_program)(
            &mut raw,
            source_c.as_ptr(),
            name_c.as_ptr(),
            0,
            ptr::null(),
            ptr::null(),
        )
    };
    if created != SUCCESS {
        return Err(fail(format!(
            "nvrtcCreateProgram failed: {}",
            nvrtc.describe(created)
        )));
    }
    let program = ProgramGuard {
        nvrtc,
        raw,
        name: name.to_owned(),
    };

    let count = c_int::try_from(options.len()).unwrap_or(c_int::MAX);
    // SAFETY: the program is live; `options` holds `count` NUL-terminated
    // strings that outlive the call.
    let compiled = unsafe { (nvrtc.compile_program)(program.raw, count, options.as_ptr()) };
    let log = program.text(nvrtc.get_log_size, nvrtc.get_log);
    if compiled != SUCCESS {
        let log = match log {
            Ok(log) if !log.trim().is_empty() => log,
            Ok(_) => format!("nvrtcCompileProgram failed: {}", nvrtc.describe(compiled)),
            Err(why) => format!(
                "nvrtcCompileProgram failed: {}; the log could not be read: {why}",
                nvrtc.describe(compiled)
            ),
        };
        return Err(fail(log));
    }
    if let Ok(log) = &log
        && !log.trim().is_empty()
    {
        log::debug!("NVRTC compiled {name} for {arch}: {}", log.trim());
    }
    Ok(program)
}

/// The `compute_XY` NVRTC should target for a device of compute capability
/// `major.minor` when it cannot make a cubin for it: the device's own where
/// NVRTC knows it, otherwise the newest NVRTC knows below it (the driver
/// compiles PTX of an older target for a newer GPU).
fn pick_arch(archs: &[u32], version: (u32, u32), major: i32, minor: i32) -> Result<u32, String> {
    let device = u32::try_from(major * 10 + minor).unwrap_or(0);
    if archs.is_empty() {
        return Ok(device);
    }
    archs
        .iter()
        .copied()
        .filter(|&arch| arch <= device)
        .max()
        .ok_or_else(|| {
            let oldest = archs.iter().min().copied().unwrap_or(0);
            format!(
                "NVRTC {}.{} compiles for compute_{oldest} and newer, and this device is \
                 sm_{device}; point {NVRTC_ENV} at an older NVRTC",
                version.0, version.1
            )
        })
}

/// A compiled program, destroyed on every path out of [`compile`] and of
/// its callers.
struct ProgramGuard {
    nvrtc: &'static Library,
    raw: Program,
    /// The kernel's name, for an error.
    name: String,
}

impl ProgramGuard {
    /// The program's PTX.
    fn ptx(&self) -> Result<String, Error> {
        self.text(self.nvrtc.get_ptx_size, self.nvrtc.get_ptx)
            .map_err(|why| self.fail(format!("the PTX could not be read: {why}")))
    }

    /// The program's cubin, which NVRTC makes only for an `sm_XY` target.
    fn cubin(&self) -> Result<Vec<u8>, Error> {
        let Some((size_of, read)) = self.nvrtc.cubin else {
            return Err(self.fail("this NVRTC cannot hand out a cubin".to_owned()));
        };
        let image = self
            .bytes(size_of, read)
            .map_err(|why| self.fail(format!("the cubin could not be read: {why}")))?;
        if image.is_empty() {
            return Err(self.fail("NVRTC made no cubin".to_owned()));
        }
        Ok(image)
    }

    fn fail(&self, log: String) -> Error {
        Error::Compile {
            kernel: self.name.clone(),
            log,
        }
    }

    /// The program's log or PTX, without the NUL NVRTC counts in the size.
    fn text(&self, size_of: GetSize, read: GetText) -> Result<String, String> {
        let mut buffer = self.bytes(size_of, read)?;
        let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
        buffer.truncate(end);
        String::from_utf8(buffer).map_err(|e| format!("the text is not UTF-8: {e}"))
    }

    /// The size query, then the bytes NVRTC writes: all of them, as a cubin
    /// holds NUL bytes of its own.
    fn bytes(&self, size_of: GetSize, read: GetText) -> Result<Vec<u8>, String> {
        let mut size = 0usize;
        // SAFETY: the program is live; `size` is a valid place for the answer.
        let sized = unsafe { size_of(self.raw, &mut size) };
        if sized != SUCCESS {
            return Err(self.nvrtc.describe(sized));
        }
        let mut buffer = vec![0u8; size.max(1)];
        // SAFETY: the buffer holds the `size` bytes NVRTC said it writes
        // (at least one, for the NUL of an empty text).
        let read_code = unsafe { read(self.raw, buffer.as_mut_ptr().cast::<c_char>()) };
        if read_code != SUCCESS {
            return Err(self.nvrtc.describe(read_code));
        }
        buffer.truncate(size);
        Ok(buffer)
    }
}

impl Drop for ProgramGuard {
    fn drop(&mut self) {
        // SAFETY: the program came from nvrtcCreateProgram and is destroyed
        // once; NVRTC nulls the handle through the pointer.
        let destroyed = unsafe { (self.nvrtc.destroy_program)(&mut self.raw) };
        if destroyed != SUCCESS {
            log::warn!(
                "nvrtcDestroyProgram failed: {}",
                self.nvrtc.describe(destroyed)
            );
        }
    }
}

impl Library {
    /// `NVRTC_ERROR_NAME (code)`, in NVRTC's words where it has them.
    fn describe(&self, code: c_int) -> String {
        // SAFETY: nvrtcGetErrorString takes any code and returns a static
        // string (or null for one it does not know).
        let text = unsafe { (self.error_string)(code) };
        if text.is_null() {
            return format!("NVRTC error {code}");
        }
        // SAFETY: a non-null answer is a NUL-terminated static string of
        // the library, which stays loaded for the life of the process.
        let text = unsafe { std::ffi::CStr::from_ptr(text) };
        format!("{} ({code})", text.to_string_lossy())
    }
}

fn unavailable(message: String) -> Error {
    Error::Driver(DriverError::new(BACKEND, LOAD_OP, message))
}

/// The process's NVRTC, loaded on first use.
fn library() -> Result<&'static Library, Error> {
    static LOADED: OnceLock<Result<Library, String>> = OnceLock::new();
    LOADED
        .get_or_init(load)
        .as_ref()
        .map_err(|why| unavailable(why.clone()))
}

fn load() -> Result<Library, String> {
    let chosen = std::env::var_os(NVRTC_ENV);
    let stages: Vec<Box<dyn Fn() -> Vec<OsString>>> = match &chosen {
        Some(path) => {
            let path = path.clone();
            vec![Box::new(move || vec![path.clone()])]
        }
        // Each stage only when the ones before found nothing, since asking
        // Python costs a process.
        None => vec![
            Box::new(|| NAMES.iter().map(OsString::from).collect()),
            Box::new(toolkit_paths),
            Box::new(wheel_paths),
        ],
    };
    let chosen = chosen.is_some();
    let mut failures = Vec::new();
    for stage in &stages {
        for candidate in stage() {
            // SAFETY: opening the library runs its initialisers, which is
            // what using NVRTC at all requires; NVRTC's do nothing but set
            // itself up.
            match unsafe { libloading::Library::new(&candidate) } {
                Ok(library) => {
                    return resolve(library, candidate.to_string_lossy().into_owned());
                }
                Err(e) => failures.push((candidate.to_string_lossy().into_owned(), e.to_string())),
            }
        }
    }
    let tried: Vec<&str> = failures.iter().map(|(name, _)| name.as_str()).collect();
    // A library that exists but cannot be loaded (a wrong architecture, a
    // missing dependency) is worth its own words; a name the search did not
    // find is not, unless it is the one path the variable named.
    let reasons: Vec<String> = failures
        .iter()
        .filter(|(_, why)| chosen || !why.contains("No such file"))
        .map(|(name, why)| format!("{name}: {why}"))
        .collect();
    let mut message = if chosen {
        format!(
            "NVRTC unavailable: {NVRTC_ENV}={} could not be loaded (tried only that path, as \
             the variable is set)",
            tried.join(", ")
        )
    } else {
        format!(
            "NVRTC unavailable: libnvrtc.so not found (tried {}); set {NVRTC_ENV} to its path",
            tried.join(", ")
        )
    };
    if !reasons.is_empty() {
        message.push_str("; ");
        message.push_str(&reasons.join("; "));
    }
    Err(message)
}

/// NVRTC under the toolkits `CUDA_HOME` and `CUDA_PATH` name, then under
/// the default install place.
fn toolkit_paths() -> Vec<OsString> {
    let dirs = TOOLKIT_VARS
        .iter()
        .filter_map(std::env::var_os)
        .filter(|root| !root.is_empty())
        .map(|root| Path::new(&root).join("lib64"))
        .chain(std::iter::once(Path::new(TOOLKIT_DIR).to_owned()));
    dirs.flat_map(|dir| {
        NAMES
            .iter()
            .map(move |name| dir.join(name).into_os_string())
    })
    .collect()
}

/// The Pythons asked for their site-packages, in order: the one
/// [`PYTHON_ENV`] names, then the `python3` on the PATH.
fn pythons() -> Vec<OsString> {
    pythons_from(std::env::var_os(PYTHON_ENV))
}

fn pythons_from(named: Option<OsString>) -> Vec<OsString> {
    let mut pythons: Vec<OsString> = named
        .filter(|python| !python.is_empty())
        .into_iter()
        .collect();
    let default = OsString::from("python3");
    if !pythons.contains(&default) {
        pythons.push(default);
    }
    pythons
}

/// The site-packages directories `python` names; none when it cannot run.
fn site_packages(python: &OsString) -> Vec<String> {
    let Ok(output) = std::process::Command::new(python)
        .args(["-c", SITE_PACKAGES])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    if !output.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim().to_owned())
        .filter(|line| !line.is_empty())
        .collect()
}

/// NVRTC in NVIDIA's wheels under the site-packages of each of
/// [`pythons`], in that order; none when there is no such Python.
fn wheel_paths() -> Vec<OsString> {
    wheel_paths_of(&pythons())
}

fn wheel_paths_of(pythons: &[OsString]) -> Vec<OsString> {
    let sites = pythons.iter().flat_map(site_packages);
    let mut paths: Vec<OsString> = Vec::new();
    for site in sites {
        for dir in WHEEL_DIRS {
            let dir = Path::new(&site).join(dir);
            if !dir.is_dir() {
                continue;
            }
            for name in NAMES {
                let path = dir.join(name).into_os_string();
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
        }
    }
    paths
}

/// Look up every function in `library`, and ask it its version and
/// architectures.
fn resolve(library: libloading::Library, path: String) -> Result<Library, String> {
    fn symbol<T: Copy>(library: &libloading::Library, path: &str, name: &str) -> Result<T, String> {
        // SAFETY: each `T` this is called with is the C signature NVRTC's
        // header declares for `name`, with `int` for its enum result.
        let found = unsafe { library.get::<T>(name.as_bytes()) };
        found
            .map(|f| *f)
            .map_err(|e| format!("NVRTC unavailable: {path} lacks {name} ({e})"))
    }
    let version: Version = symbol(&library, &path, "nvrtcVersion")?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both are valid places for an int.
    let asked = unsafe { version(&mut major, &mut minor) };
    if asked != SUCCESS {
        return Err(format!(
            "NVRTC unavailable: {path} cannot report its version (error {asked})"
        ));
    }
    let archs = supported_archs(&library);
    Ok(Library {
        create_program: symbol(&library, &path, "nvrtcCreateProgram")?,
        compile_program: symbol(&library, &path, "nvrtcCompileProgram")?,
        destroy_program: symbol(&library, &path, "nvrtcDestroyProgram")?,
        get_log_size: symbol(&library, &path, "nvrtcGetProgramLogSize")?,
        get_log: symbol(&library, &path, "nvrtcGetProgramLog")?,
        get_ptx_size: symbol(&library, &path, "nvrtcGetPTXSize")?,
        get_ptx: symbol(&library, &path, "nvrtcGetPTX")?,
        cubin: symbol(&library, &path, "nvrtcGetCUBINSize")
            .and_then(|size| Ok((size, symbol(&library, &path, "nvrtcGetCUBIN")?)))
            .ok(),
        error_string: symbol(&library, &path, "nvrtcGetErrorString")?,
        version: (
            u32::try_from(major).unwrap_or(0),
            u32::try_from(minor).unwrap_or(0),
        ),
        archs,
        path,
        _library: library,
    })
}

/// The architectures NVRTC compiles for, where it can say (11.2 and
/// newer); empty otherwise.
fn supported_archs(library: &libloading::Library) -> Vec<u32> {
    // SAFETY: both are looked up with the signatures NVRTC's header gives.
    let (count_of, list) = unsafe {
        match (
            library.get::<NumArchs>(b"nvrtcGetNumSupportedArchs"),
            library.get::<Archs>(b"nvrtcGetSupportedArchs"),
        ) {
            (Ok(count_of), Ok(list)) => (*count_of, *list),
            _ => return Vec::new(),
        }
    };
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid place for an int.
    if unsafe { count_of(&mut count) } != SUCCESS {
        return Vec::new();
    }
    // A count no release comes near is not trusted with a buffer.
    let Ok(len) = usize::try_from(count) else {
        return Vec::new();
    };
    if len > 1024 {
        return Vec::new();
    }
    let mut archs: Vec<c_int> = vec![0; len];
    // SAFETY: the buffer holds the `count` ints NVRTC said it writes.
    if unsafe { list(archs.as_mut_ptr()) } != SUCCESS {
        return Vec::new();
    }
    archs
        .into_iter()
        .filter_map(|arch| u32::try_from(arch).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::{pick_arch, pythons_from};

    #[test]
    fn the_python_named_is_asked_before_python3() {
        let named = OsString::from("/opt/venv/bin/python3");
        assert_eq!(
            pythons_from(Some(named.clone())),
            [named, OsString::from("python3")]
        );
        assert_eq!(pythons_from(None), [OsString::from("python3")]);
        assert_eq!(
            pythons_from(Some(OsString::new())),
            [OsString::from("python3")]
        );
        assert_eq!(
            pythons_from(Some(OsString::from("python3"))),
            [OsString::from("python3")]
        );
    }

    #[test]
    fn the_device_arch_is_taken_when_nvrtc_knows_it() {
        let archs = [50, 52, 60, 70, 75, 80, 86, 89, 90, 100, 120];
        assert_eq!(pick_arch(&archs, (12, 9), 8, 0), Ok(80));
        assert_eq!(pick_arch(&archs, (12, 9), 8, 6), Ok(86));
        // A device newer than NVRTC gets the newest target below it.
        assert_eq!(pick_arch(&archs, (12, 9), 12, 1), Ok(120));
        assert_eq!(pick_arch(&archs[..9], (12, 4), 10, 0), Ok(90));
        assert_eq!(pick_arch(&archs, (12, 9), 8, 7), Ok(86));
        // A release that cannot list its targets is given the device's own.
        assert_eq!(pick_arch(&[], (11, 1), 7, 5), Ok(75));
    }

    #[test]
    fn a_device_older_than_every_target_is_refused_with_the_reason() {
        let why = pick_arch(&[75, 80, 90], (13, 0), 6, 1).unwrap_err();
        assert!(
            why.contains("NVRTC 13.0 compiles for compute_75 and newer"),
            "{why}"
        );
        assert!(why.contains("sm_61"), "{why}");
    }
}
