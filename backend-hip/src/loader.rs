//! Finding and loading `libamdhip64.so` (and hiprtc) at run time, once per
//! process.
//!
//! Loading at run time, the way cudarc loads CUDA, is what lets the crate
//! build, link and run its tests on a machine with no ROCm at all: a missing
//! library becomes a probe reason instead of a link error.
//!
//! Where the library is looked for, in order:
//! - `CAPTURE_HIP_LIBRARY`, when set, is the only path tried, so a test (or a
//!   person) can point the backend at one exact build or at nothing;
//! - `$ROCM_PATH/lib`, then `$HIP_PATH/lib`, for an installation outside the
//!   loader's search path; when neither is set, ROCm's default install folder
//!   `/opt/rocm/lib`, which its packages do not add to the loader's path;
//! - the dynamic loader's own search (`ld.so.conf`, `LD_LIBRARY_PATH`).
//!
//! In each place `libamdhip64.so`, then `.so.7`, `.so.6` and `.so.5` are
//! tried, so a machine with only the runtime package (no development symlink)
//! works too.
//!
//! hiprtc is its own library from ROCm 6 on (`libhiprtc.so`, `.so.7`, ...);
//! ROCm 5 ships its functions inside `libamdhip64.so`. Both are tried, the
//! separate library first.
//!
//! When no candidate exists the reason is only `libamdhip64 not found`;
//! every path tried, with what loading it answered, is in
//! [`library_search`], for a verbose report.

use std::env;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::Library;

use crate::ffi;

/// Environment variable naming the one HIP runtime library to load.
pub const LIBRARY_ENV: &str = "CAPTURE_HIP_LIBRARY";

const HIP_NAMES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];
const RTC_NAMES: [&str; 4] = [
    "libhiprtc.so",
    "libhiprtc.so.7",
    "libhiprtc.so.6",
    "libhiprtc.so.5",
];

/// Where ROCm installs itself when no variable says otherwise.
const DEFAULT_ROOT: &str = "/opt/rocm";

/// The runtime's entry points this backend calls, resolved once.
pub(crate) struct Api {
    pub init: ffi::HipInit,
    pub get_device_count: ffi::HipGetDeviceCount,
    pub set_device: ffi::HipSetDevice,
    pub get_device: ffi::HipGetDevice,
    pub device_total_mem: ffi::HipDeviceTotalMem,
    pub device_get: ffi::HipDeviceGet,
    pub device_get_name: ffi::HipDeviceGetName,
    pub device_get_attribute: ffi::HipDeviceGetAttribute,
    /// The properties getter and the layout it fills (for the architecture
    /// name only); absent from a runtime that has neither symbol.
    pub get_device_properties: Option<(ffi::HipGetDeviceProperties, ffi::PropsLayout)>,
    pub runtime_get_version: ffi::HipGetVersion,
    pub driver_get_version: ffi::HipGetVersion,
    pub get_error_name: ffi::HipGetErrorText,
    pub get_error_string: ffi::HipGetErrorText,
    pub stream_create_with_flags: ffi::HipStreamCreateWithFlags,
    pub stream_destroy: ffi::HipStreamOp,
    pub stream_synchronize: ffi::HipStreamOp,
    pub stream_wait_event: ffi::HipStreamWaitEvent,
    /// Absent before ROCm 4.3; a failed end of capture then replaces the
    /// stream whatever state it is in.
    pub stream_is_capturing: Option<ffi::HipStreamIsCapturing>,
    /// Absent before ROCm 6; an adopted stream's device is then the
    /// caller's word.
    pub stream_get_device: Option<ffi::HipStreamGetDevice>,
    /// What the runtime knows of memory made elsewhere, before it is
    /// imported; an import is checked only as far as these are there.
    pub pointer_get_attributes: Option<ffi::HipPointerGetAttributes>,
    pub mem_get_address_range: Option<ffi::HipMemGetAddressRange>,
    /// A function's limits, for a kernel made elsewhere.
    pub func_get_attribute: Option<ffi::HipFuncGetAttribute>,
    pub malloc: ffi::HipMalloc,
    pub free: ffi::HipFree,
    pub host_malloc: ffi::HipHostMalloc,
    pub host_free: ffi::HipFree,
    pub memcpy_htod_async: ffi::HipMemcpyHtoDAsync,
    pub memcpy_dtoh_async: ffi::HipMemcpyDtoHAsync,
    pub module_load_data: ffi::HipModuleLoadData,
    pub module_unload: ffi::HipModuleUnload,
    pub module_get_function: ffi::HipModuleGetFunction,
    pub module_launch_kernel: ffi::HipModuleLaunchKernel,
    pub event_create_with_flags: ffi::HipEventCreateWithFlags,
    pub event_record: ffi::HipEventRecord,
    pub event_synchronize: ffi::HipEventOp,
    pub event_query: ffi::HipEventOp,
    pub event_destroy: ffi::HipEventOp,
    /// Exported by ROCm 5.2 (as `hip_5.0`); without it every call runs in
    /// the calling thread's own capture mode.
    pub thread_exchange_stream_capture_mode: Option<ffi::HipThreadExchangeStreamCaptureMode>,
    pub stream_begin_capture: ffi::HipStreamBeginCapture,
    pub stream_end_capture: ffi::HipStreamEndCapture,
    pub graph_get_nodes: ffi::HipGraphGetNodes,
    pub graph_instantiate: ffi::HipGraphInstantiate,
    pub graph_destroy: ffi::HipGraphDestroy,
    pub graph_exec_destroy: ffi::HipGraphExecDestroy,
    /// Absent before ROCm 4.5; every update is then an instantiation.
    pub graph_exec_update: Option<ffi::HipGraphExecUpdate>,
    pub graph_launch: ffi::HipGraphOnStream,
    /// Absent before ROCm 5.3; an upload is then skipped (a launch stages the
    /// graph itself).
    pub graph_upload: Option<ffi::HipGraphOnStream>,
    /// Absent from a runtime lacking any of them; graphs then replay as the
    /// chain their capture recorded.
    pub graph_edges: Option<GraphEdges>,
    /// Absent from a runtime lacking any of them (before ROCm 5.3); a
    /// foreign operation inside a window is then refused.
    pub capture_nodes: Option<CaptureNodes>,
    /// hiprtc, or why it could not be found.
    pub rtc: Result<Rtc, String>,
    /// Where the runtime was loaded from, for reports.
    pub path: String,
    // Kept last and never dropped (the Api lives in a static): every pointer
    // above points into these libraries.
    _libraries: Vec<Library>,
}

/// The functions that read and rewrite a graph's edges, found all together
/// or not at all.
#[derive(Clone, Copy)]
pub(crate) struct GraphEdges {
    pub get_root_nodes: ffi::HipGraphGetRootNodes,
    pub node_get_dependent_nodes: ffi::HipGraphNodeGetDependentNodes,
    pub add_dependencies: ffi::HipGraphDependencies,
    pub remove_dependencies: ffi::HipGraphDependencies,
}

/// The functions that add a node of the library's own to a stream capture,
/// found all together or not at all: a foreign operation's child graph.
#[derive(Clone, Copy)]
pub(crate) struct CaptureNodes {
    pub get_capture_info: ffi::HipStreamGetCaptureInfoV2,
    pub update_capture_dependencies: ffi::HipStreamUpdateCaptureDependencies,
    pub add_child_graph_node: ffi::HipGraphAddChildGraphNode,
}

/// hiprtc's entry points.
pub(crate) struct Rtc {
    pub create_program: ffi::RtcCreateProgram,
    pub compile_program: ffi::RtcCompileProgram,
    pub get_program_log_size: ffi::RtcGetSize,
    pub get_program_log: ffi::RtcGetBytes,
    pub get_code_size: ffi::RtcGetSize,
    pub get_code: ffi::RtcGetBytes,
    pub destroy_program: ffi::RtcDestroyProgram,
    pub get_error_string: ffi::RtcGetErrorString,
    /// Where the functions were found, for reports.
    pub path: String,
}

/// One place the HIP runtime library was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The path, or the bare file name given to the dynamic loader's own
    /// search.
    pub path: String,
    /// `None` for the library that loaded; otherwise what the loader said.
    pub error: Option<String>,
    /// Whether nothing was there (rather than a library that failed to load).
    missing: bool,
}

/// The loaded runtime, or the reason it could not be loaded, and every
/// place looked in; decided once, since neither the environment nor the
/// installed files are expected to change under a running process.
fn loaded() -> &'static (Result<Api, String>, Vec<Attempt>) {
    static LOADED: OnceLock<(Result<Api, String>, Vec<Attempt>)> = OnceLock::new();
    LOADED.get_or_init(load)
}

/// The loaded runtime, or the reason it could not be loaded.
pub(crate) fn api() -> Result<&'static Api, &'static str> {
    loaded().0.as_ref().map_err(String::as_str)
}

/// Every place the HIP runtime library (`libamdhip64.so`) was looked for,
/// in order, with what loading it answered; the last loaded when any did.
/// The unavailability reason names none of these paths, so a verbose
/// report (a device listing) can show them from here. Searching happens
/// once per process, on the first call into the backend or this one.
pub fn library_search() -> &'static [Attempt] {
    &loaded().1
}

/// The install roots' library folders named by `ROCM_PATH` and `HIP_PATH`,
/// or ROCm's default one when neither is set.
fn env_dirs() -> Vec<PathBuf> {
    install_dirs(["ROCM_PATH", "HIP_PATH"].iter().filter_map(env::var_os))
}

/// `lib` under each non-empty root, or under [`DEFAULT_ROOT`] when there is
/// none.
fn install_dirs(roots: impl Iterator<Item = std::ffi::OsString>) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = roots
        .filter(|root| !root.is_empty())
        .map(|root| PathBuf::from(root).join("lib"))
        .collect();
    if dirs.is_empty() {
        vec![PathBuf::from(DEFAULT_ROOT).join("lib")]
    } else {
        dirs
    }
}

/// Every name in every folder, folder by folder, then (when `system`) the bare
/// names for the dynamic loader's own search.
fn candidates(names: &[&str], dirs: &[PathBuf], system: bool) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .collect();
    if system {
        out.extend(names.iter().map(PathBuf::from));
    }
    out
}

/// Open the first candidate that loads, saying what each one tried
/// answered.
fn open_first(candidates: &[PathBuf]) -> (Option<(Library, PathBuf)>, Vec<Attempt>) {
    let mut attempts = Vec::new();
    for path in candidates {
        // SAFETY: loading a shared library runs its initialisers. The
        // candidates are the HIP runtime's own file names in ROCm's install
        // locations, or the path the user named in CAPTURE_HIP_LIBRARY;
        // their initialisers are the vendor's, which do not assume anything
        // of the loading program.
        match unsafe { Library::new(path) } {
            Ok(library) => {
                attempts.push(Attempt {
                    path: path.display().to_string(),
                    error: None,
                    missing: false,
                });
                return (Some((library, path.clone())), attempts);
            }
            Err(error) => attempts.push(failed(path, error.to_string())),
        }
    }
    (None, attempts)
}

/// A candidate that did not load, and whether that is because nothing is
/// there: a path with a folder is checked on disk, and a bare name is
/// missing when the loader says it cannot open that very name (a missing
/// dependency of a library it found is named instead).
fn failed(path: &Path, error: String) -> Attempt {
    let shown = path.display().to_string();
    let missing = if path.parent().is_some_and(|dir| !dir.as_os_str().is_empty()) {
        !path.exists()
    } else {
        error.starts_with(&format!("{shown}: cannot open shared object file"))
    };
    Attempt {
        path: shown,
        error: Some(error),
        missing,
    }
}

/// Why no runtime loaded, in a few words: that none is there, or which one
/// is there and failed to load, and why. `explicit` is the path
/// `CAPTURE_HIP_LIBRARY` named, when it did.
fn not_loaded(attempts: &[Attempt], explicit: Option<&Path>) -> String {
    let broken = attempts
        .iter()
        .find(|attempt| !attempt.missing && attempt.error.is_some());
    match (broken, explicit) {
        (Some(attempt), _) => format!(
            "{} did not load: {}",
            attempt.path,
            attempt.error.as_deref().unwrap_or_default()
        ),
        (None, Some(path)) => format!(
            "libamdhip64 not found at {} ({LIBRARY_ENV})",
            path.display()
        ),
        (None, None) => "libamdhip64 not found".to_owned(),
    }
}

/// Resolve `name` in `library` as a function pointer of type `T`.
///
/// # Safety
///
/// `T` must be the `unsafe extern "C" fn` type matching the C prototype of
/// `name` in ROCm's headers.
unsafe fn symbol<T: Copy>(library: &Library, name: &str) -> Result<T, String> {
    let mut bytes = Vec::with_capacity(name.len() + 1);
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(0);
    // SAFETY: the caller promises `T` is the symbol's real function type; the
    // copied pointer stays valid as long as `library` is loaded, which the
    // Api guarantees by owning it for the life of the process.
    unsafe { library.get::<T>(&bytes) }
        .map(|symbol| *symbol)
        .map_err(|error| format!("{name}: {error}"))
}

fn load() -> (Result<Api, String>, Vec<Attempt>) {
    let explicit = env::var_os(LIBRARY_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let hip_candidates = match &explicit {
        Some(path) => vec![path.clone()],
        None => candidates(&HIP_NAMES, &env_dirs(), true),
    };
    let (found, attempts) = open_first(&hip_candidates);
    let api = match found {
        Some((hip, hip_path)) => load_api(hip, &hip_path, explicit.as_deref()),
        None => Err(not_loaded(&attempts, explicit.as_deref())),
    };
    (api, attempts)
}

/// Resolve the runtime's functions from `hip`, loaded from `hip_path`, and
/// find hiprtc.
fn load_api(hip: Library, hip_path: &Path, explicit: Option<&Path>) -> Result<Api, String> {
    // hiprtc is looked for where the runtime was: beside an explicit library
    // only, else along the same search.
    let rtc_candidates = match explicit {
        Some(path) => {
            let dir = path.parent().map(PathBuf::from).unwrap_or_default();
            candidates(&RTC_NAMES, &[dir], false)
        }
        None => candidates(&RTC_NAMES, &env_dirs(), true),
    };
    let rtc_library = match open_first(&rtc_candidates) {
        (Some(found), _) => Ok(found),
        (None, attempts) => Err(attempts
            .iter()
            .filter_map(|attempt| attempt.error.as_deref())
            .collect::<Vec<_>>()
            .join("; ")),
    };

    macro_rules! hip_fn {
        ($name:literal) => {
            // SAFETY: each field's type is the `ffi` declaration of the C
            // function of the same name (checked against ROCm's headers by
            // the abi-check feature's test).
            unsafe { symbol(&hip, $name) }
                .map_err(|e| format!("{} is not a usable HIP runtime: {e}", hip_path.display()))?
        };
    }

    // SAFETY: as for `hip_fn!`: each type is the declaration of the function
    // of that name; these are the functions older runtimes lack.
    let graph_upload = unsafe { symbol::<ffi::HipGraphOnStream>(&hip, "hipGraphUpload") }.ok();
    // SAFETY: as above.
    let stream_is_capturing =
        unsafe { symbol::<ffi::HipStreamIsCapturing>(&hip, "hipStreamIsCapturing") }.ok();
    // SAFETY: as above.
    let stream_get_device =
        unsafe { symbol::<ffi::HipStreamGetDevice>(&hip, "hipStreamGetDevice") }.ok();
    // SAFETY: as above.
    let pointer_get_attributes =
        unsafe { symbol::<ffi::HipPointerGetAttributes>(&hip, "hipPointerGetAttributes") }.ok();
    // SAFETY: as above.
    let mem_get_address_range =
        unsafe { symbol::<ffi::HipMemGetAddressRange>(&hip, "hipMemGetAddressRange") }.ok();
    // SAFETY: as above.
    let func_get_attribute =
        unsafe { symbol::<ffi::HipFuncGetAttribute>(&hip, "hipFuncGetAttribute") }.ok();
    // SAFETY: as above.
    let graph_exec_update =
        unsafe { symbol::<ffi::HipGraphExecUpdate>(&hip, "hipGraphExecUpdate") }.ok();
    // SAFETY: as above.
    let thread_exchange_stream_capture_mode = unsafe {
        symbol::<ffi::HipThreadExchangeStreamCaptureMode>(
            &hip,
            "hipThreadExchangeStreamCaptureMode",
        )
    }
    .ok();
    // Said once, since the runtime is loaded once per process.
    if thread_exchange_stream_capture_mode.is_none() {
        log::info!(
            "{} has no hipThreadExchangeStreamCaptureMode: while another library captures in \
             global mode, the runtime may refuse this backend's allocations, frees and syncs",
            hip_path.display()
        );
    }
    // SAFETY: as above, for each of the four.
    let graph_edges = unsafe {
        match (
            symbol::<ffi::HipGraphGetRootNodes>(&hip, "hipGraphGetRootNodes"),
            symbol::<ffi::HipGraphNodeGetDependentNodes>(&hip, "hipGraphNodeGetDependentNodes"),
            symbol::<ffi::HipGraphDependencies>(&hip, "hipGraphAddDependencies"),
            symbol::<ffi::HipGraphDependencies>(&hip, "hipGraphRemoveDependencies"),
        ) {
            (Ok(get_root_nodes), Ok(node_get_dependent_nodes), Ok(add), Ok(remove)) => {
                Some(GraphEdges {
                    get_root_nodes,
                    node_get_dependent_nodes,
                    add_dependencies: add,
                    remove_dependencies: remove,
                })
            }
            _ => None,
        }
    };
    // SAFETY: as above, for each of the three.
    let capture_nodes = unsafe {
        match (
            symbol::<ffi::HipStreamGetCaptureInfoV2>(&hip, "hipStreamGetCaptureInfo_v2"),
            symbol::<ffi::HipStreamUpdateCaptureDependencies>(
                &hip,
                "hipStreamUpdateCaptureDependencies",
            ),
            symbol::<ffi::HipGraphAddChildGraphNode>(&hip, "hipGraphAddChildGraphNode"),
        ) {
            (Ok(get_capture_info), Ok(update_capture_dependencies), Ok(add_child_graph_node)) => {
                Some(CaptureNodes {
                    get_capture_info,
                    update_capture_dependencies,
                    add_child_graph_node,
                })
            }
            _ => None,
        }
    };
    // The R0600 layout first: a ROCm 6 or later runtime also exports the
    // unversioned name, with ROCm 5's layout, for old binaries.
    let get_device_properties =
        [ffi::PROPS_R0600, ffi::PROPS_R0000]
            .into_iter()
            .find_map(|layout| {
                // SAFETY: both symbols take (a struct pointer, an int ordinal) and
                // return hipError_t, which is the declared type; the struct is
                // passed as bytes sized for `layout`.
                unsafe { symbol::<ffi::HipGetDeviceProperties>(&hip, layout.symbol) }
                    .ok()
                    .map(|getter| (getter, layout))
            });

    let mut libraries = Vec::new();
    let rtc = match rtc_library {
        Ok((library, path)) => {
            let rtc = load_rtc(&library, &path.display().to_string());
            libraries.push(library);
            rtc
        }
        Err(separate) => load_rtc(&hip, &hip_path.display().to_string())
            .map_err(|inside| format!("{separate}; and not inside the runtime: {inside}")),
    };

    let mut api = Api {
        init: hip_fn!("hipInit"),
        get_device_count: hip_fn!("hipGetDeviceCount"),
        set_device: hip_fn!("hipSetDevice"),
        get_device: hip_fn!("hipGetDevice"),
        device_total_mem: hip_fn!("hipDeviceTotalMem"),
        device_get: hip_fn!("hipDeviceGet"),
        device_get_name: hip_fn!("hipDeviceGetName"),
        device_get_attribute: hip_fn!("hipDeviceGetAttribute"),
        get_device_properties,
        runtime_get_version: hip_fn!("hipRuntimeGetVersion"),
        driver_get_version: hip_fn!("hipDriverGetVersion"),
        get_error_name: hip_fn!("hipGetErrorName"),
        get_error_string: hip_fn!("hipGetErrorString"),
        stream_create_with_flags: hip_fn!("hipStreamCreateWithFlags"),
        stream_destroy: hip_fn!("hipStreamDestroy"),
        stream_synchronize: hip_fn!("hipStreamSynchronize"),
        stream_wait_event: hip_fn!("hipStreamWaitEvent"),
        stream_is_capturing,
        stream_get_device,
        pointer_get_attributes,
        mem_get_address_range,
        func_get_attribute,
        malloc: hip_fn!("hipMalloc"),
        free: hip_fn!("hipFree"),
        host_malloc: hip_fn!("hipHostMalloc"),
        host_free: hip_fn!("hipHostFree"),
        memcpy_htod_async: hip_fn!("hipMemcpyHtoDAsync"),
        memcpy_dtoh_async: hip_fn!("hipMemcpyDtoHAsync"),
        module_load_data: hip_fn!("hipModuleLoadData"),
        module_unload: hip_fn!("hipModuleUnload"),
        module_get_function: hip_fn!("hipModuleGetFunction"),
        module_launch_kernel: hip_fn!("hipModuleLaunchKernel"),
        event_create_with_flags: hip_fn!("hipEventCreateWithFlags"),
        event_record: hip_fn!("hipEventRecord"),
        event_synchronize: hip_fn!("hipEventSynchronize"),
        event_query: hip_fn!("hipEventQuery"),
        event_destroy: hip_fn!("hipEventDestroy"),
        thread_exchange_stream_capture_mode,
        stream_begin_capture: hip_fn!("hipStreamBeginCapture"),
        stream_end_capture: hip_fn!("hipStreamEndCapture"),
        graph_get_nodes: hip_fn!("hipGraphGetNodes"),
        graph_instantiate: hip_fn!("hipGraphInstantiate"),
        graph_destroy: hip_fn!("hipGraphDestroy"),
        graph_exec_destroy: hip_fn!("hipGraphExecDestroy"),
        graph_exec_update,
        graph_launch: hip_fn!("hipGraphLaunch"),
        graph_upload,
        graph_edges,
        capture_nodes,
        rtc,
        path: hip_path.display().to_string(),
        _libraries: Vec::new(),
    };
    libraries.push(hip);
    api._libraries = libraries;
    Ok(api)
}

fn load_rtc(library: &Library, path: &str) -> Result<Rtc, String> {
    macro_rules! rtc_fn {
        ($name:literal) => {
            // SAFETY: each field's type is the `ffi` declaration of the hiprtc
            // function of the same name in ROCm's hiprtc.h.
            unsafe { symbol(library, $name) }.map_err(|e| format!("{path}: {e}"))?
        };
    }
    Ok(Rtc {
        create_program: rtc_fn!("hiprtcCreateProgram"),
        compile_program: rtc_fn!("hiprtcCompileProgram"),
        get_program_log_size: rtc_fn!("hiprtcGetProgramLogSize"),
        get_program_log: rtc_fn!("hiprtcGetProgramLog"),
        get_code_size: rtc_fn!("hiprtcGetCodeSize"),
        get_code: rtc_fn!("hiprtcGetCode"),
        destroy_program: rtc_fn!("hiprtcDestroyProgram"),
        get_error_string: rtc_fn!("hiprtcGetErrorString"),
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_roots_come_before_the_system_search() {
        let dirs = [PathBuf::from("/opt/rocm/lib"), PathBuf::from("/usr/lib")];
        let found = candidates(&HIP_NAMES, &dirs, true);
        let found: Vec<_> = found.iter().map(|p| p.display().to_string()).collect();
        let mut expected = Vec::new();
        for dir in ["/opt/rocm/lib/", "/usr/lib/", ""] {
            for suffix in ["", ".7", ".6", ".5"] {
                expected.push(format!("{dir}libamdhip64.so{suffix}"));
            }
        }
        assert_eq!(found, expected);
        assert_eq!(candidates(&RTC_NAMES, &[], false), Vec::<PathBuf>::new());
        assert_eq!(
            candidates(&RTC_NAMES, &[PathBuf::from("/x")], false)[1],
            PathBuf::from("/x/libhiprtc.so.7")
        );
    }

    fn missing(path: &str) -> Attempt {
        Attempt {
            path: path.to_owned(),
            error: Some(format!(
                "{path}: cannot open shared object file: No such file or directory"
            )),
            missing: true,
        }
    }

    #[test]
    fn a_missing_runtime_is_said_in_a_few_words() {
        let dirs = [PathBuf::from("/opt/rocm/lib"), PathBuf::from("/usr/lib")];
        let all: Vec<Attempt> = candidates(&HIP_NAMES, &dirs, true)
            .iter()
            .map(|path| missing(&path.display().to_string()))
            .collect();
        assert_eq!(all.len(), 12);
        assert_eq!(not_loaded(&all, None), "libamdhip64 not found");
        let named = Path::new("/x/libamdhip64.so");
        assert_eq!(
            not_loaded(&all[..1], Some(named)),
            "libamdhip64 not found at /x/libamdhip64.so (CAPTURE_HIP_LIBRARY)"
        );
        // A library that is there and does not load is named, with why.
        let mut some = all.clone();
        some[5] = Attempt {
            path: "/usr/lib/libamdhip64.so.7".to_owned(),
            error: Some("libnuma.so.1: cannot open shared object file".to_owned()),
            missing: false,
        };
        assert_eq!(
            not_loaded(&some, None),
            "/usr/lib/libamdhip64.so.7 did not load: libnuma.so.1: cannot open shared object file"
        );
    }

    #[test]
    fn a_bare_name_is_missing_only_when_the_loader_cannot_open_it() {
        let bare = failed(
            Path::new("libamdhip64.so.6"),
            "libamdhip64.so.6: cannot open shared object file: No such file or directory"
                .to_owned(),
        );
        assert!(bare.missing);
        let dependency = failed(
            Path::new("libamdhip64.so.6"),
            "libnuma.so.1: cannot open shared object file: No such file or directory".to_owned(),
        );
        assert!(!dependency.missing);
        let absent = failed(Path::new("/nonexistent/libamdhip64.so"), "gone".to_owned());
        assert!(absent.missing);
    }

    #[test]
    fn rocm_default_folder_only_when_no_root_is_named() {
        let none = install_dirs(std::iter::empty());
        assert_eq!(none, [PathBuf::from("/opt/rocm/lib")]);
        let empty = install_dirs(["".into()].into_iter());
        assert_eq!(empty, [PathBuf::from("/opt/rocm/lib")]);
        let named = install_dirs(["/rocm-6.4".into(), "/hip".into()].into_iter());
        assert_eq!(
            named,
            [PathBuf::from("/rocm-6.4/lib"), PathBuf::from("/hip/lib")]
        );
    }
}
