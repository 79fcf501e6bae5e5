//! The hand-written declarations in `backend_hip::ffi` against the bindings
//! hip-sys generated from ROCm's headers, and hiprtc's codes against
//! `hiprtc.h` itself (hip-sys has no hiprtc bindings).
//!
//! Constants and types are compared, and the prototypes of the functions
//! added to the loader since it was first checked, argument by argument at
//! the ABI level (an `int` enum and an `i32` pass alike; so do two opaque
//! handle pointers). A prototype is read from a closure that is never called;
//! only functions every supported runtime exports are named that way, since
//! hip-sys declares some the older ones lack (`hipGraphUpload` before ROCm
//! 5.3).
//!
//! Run with `HIP_PATH=/usr cargo test -p backend-hip --features abi-check`
//! where ROCm's development files are installed.
#![cfg(feature = "abi-check")]

use std::env;
use std::ffi::c_int;
use std::fs;
use std::marker::PhantomData;
use std::path::PathBuf;

use backend_hip::ffi;
use hip_sys::hiprt::{
    self as sys, hipDeviceAttribute_t, hipError_t, hipFunction_attribute, hipGraphExecUpdateResult,
    hipStreamCaptureMode, hipStreamCaptureStatus,
};

/// Compiles only when both arguments name the same type.
fn same_type<T>(_: PhantomData<T>, _: PhantomData<T>) {}

#[test]
fn error_codes_match() {
    let pairs: &[(ffi::HipError, hipError_t)] = &[
        (ffi::SUCCESS, hipError_t::hipSuccess),
        (ffi::ERROR_INVALID_VALUE, hipError_t::hipErrorInvalidValue),
        (ffi::ERROR_OUT_OF_MEMORY, hipError_t::hipErrorOutOfMemory),
        (
            ffi::ERROR_NOT_INITIALIZED,
            hipError_t::hipErrorNotInitialized,
        ),
        (
            ffi::ERROR_INVALID_CONFIGURATION,
            hipError_t::hipErrorInvalidConfiguration,
        ),
        (
            ffi::ERROR_INSUFFICIENT_DRIVER,
            hipError_t::hipErrorInsufficientDriver,
        ),
        (
            ffi::ERROR_INVALID_DEVICE_FUNCTION,
            hipError_t::hipErrorInvalidDeviceFunction,
        ),
        (ffi::ERROR_NO_DEVICE, hipError_t::hipErrorNoDevice),
        (ffi::ERROR_INVALID_DEVICE, hipError_t::hipErrorInvalidDevice),
        (ffi::ERROR_INVALID_IMAGE, hipError_t::hipErrorInvalidImage),
        (
            ffi::ERROR_NO_BINARY_FOR_GPU,
            hipError_t::hipErrorNoBinaryForGpu,
        ),
        (ffi::ERROR_INVALID_HANDLE, hipError_t::hipErrorInvalidHandle),
        (ffi::ERROR_ILLEGAL_STATE, hipError_t::hipErrorIllegalState),
        (ffi::ERROR_NOT_FOUND, hipError_t::hipErrorNotFound),
        (ffi::ERROR_NOT_READY, hipError_t::hipErrorNotReady),
        (
            ffi::ERROR_ILLEGAL_ADDRESS,
            hipError_t::hipErrorIllegalAddress,
        ),
        (
            ffi::ERROR_LAUNCH_OUT_OF_RESOURCES,
            hipError_t::hipErrorLaunchOutOfResources,
        ),
        (ffi::ERROR_LAUNCH_FAILURE, hipError_t::hipErrorLaunchFailure),
        (ffi::ERROR_NOT_SUPPORTED, hipError_t::hipErrorNotSupported),
        (
            ffi::ERROR_STREAM_CAPTURE_UNSUPPORTED,
            hipError_t::hipErrorStreamCaptureUnsupported,
        ),
        (
            ffi::ERROR_STREAM_CAPTURE_INVALIDATED,
            hipError_t::hipErrorStreamCaptureInvalidated,
        ),
        (
            ffi::ERROR_STREAM_CAPTURE_WRONG_THREAD,
            hipError_t::hipErrorStreamCaptureWrongThread,
        ),
        (
            ffi::ERROR_GRAPH_EXEC_UPDATE_FAILURE,
            hipError_t::hipErrorGraphExecUpdateFailure,
        ),
        (ffi::ERROR_UNKNOWN, hipError_t::hipErrorUnknown),
    ];
    for &(ours, theirs) in pairs {
        let name = format!("{theirs:?}");
        assert_eq!(i64::from(ours), theirs as i64, "{name}");
        assert_eq!(ffi::error_name(ours), Some(name.as_str()), "name of {ours}");
        assert!(
            ffi::error_description(ours).is_some(),
            "{name} has no description"
        );
    }
}

#[test]
fn enums_travel_as_c_int() {
    assert_eq!(size_of::<hipError_t>(), size_of::<ffi::HipError>());
    assert_eq!(
        size_of::<hipStreamCaptureMode>(),
        size_of::<ffi::CaptureMode>()
    );
    assert_eq!(
        size_of::<hipStreamCaptureStatus>(),
        size_of::<ffi::CaptureStatus>()
    );
    assert_eq!(
        size_of::<hipGraphExecUpdateResult>(),
        size_of::<ffi::GraphExecUpdateResult>()
    );
    assert_eq!(size_of::<ffi::HipError>(), size_of::<c_int>());
    same_type(PhantomData::<sys::hipDevice_t>, PhantomData::<ffi::Device>);
}

#[test]
fn handles_are_pointers() {
    assert_eq!(size_of::<sys::hipStream_t>(), size_of::<ffi::Stream>());
    assert_eq!(size_of::<sys::hipEvent_t>(), size_of::<ffi::Event>());
    assert_eq!(size_of::<sys::hipModule_t>(), size_of::<ffi::Module>());
    assert_eq!(size_of::<sys::hipFunction_t>(), size_of::<ffi::Function>());
    assert_eq!(size_of::<sys::hipGraph_t>(), size_of::<ffi::Graph>());
    assert_eq!(
        size_of::<sys::hipGraphExec_t>(),
        size_of::<ffi::GraphExec>()
    );
    assert_eq!(
        size_of::<sys::hipGraphNode_t>(),
        size_of::<ffi::GraphNode>()
    );
    assert_eq!(
        size_of::<sys::hipDeviceptr_t>(),
        size_of::<*mut std::ffi::c_void>()
    );
}

#[test]
fn capture_modes_match() {
    use hipStreamCaptureMode::*;
    assert_eq!(
        ffi::CAPTURE_MODE_GLOBAL,
        hipStreamCaptureModeGlobal as c_int
    );
    assert_eq!(
        ffi::CAPTURE_MODE_THREAD_LOCAL,
        hipStreamCaptureModeThreadLocal as c_int
    );
    assert_eq!(
        ffi::CAPTURE_MODE_RELAXED,
        hipStreamCaptureModeRelaxed as c_int
    );
}

#[test]
fn capture_statuses_match() {
    use hipStreamCaptureStatus::*;
    assert_eq!(
        ffi::CAPTURE_STATUS_NONE,
        hipStreamCaptureStatusNone as c_int
    );
    assert_eq!(
        ffi::CAPTURE_STATUS_ACTIVE,
        hipStreamCaptureStatusActive as c_int
    );
    assert_eq!(
        ffi::CAPTURE_STATUS_INVALIDATED,
        hipStreamCaptureStatusInvalidated as c_int
    );
}

#[test]
fn graph_update_results_match() {
    use hipGraphExecUpdateResult::*;
    let pairs = [
        (ffi::GRAPH_EXEC_UPDATE_SUCCESS, hipGraphExecUpdateSuccess),
        (ffi::GRAPH_EXEC_UPDATE_ERROR, hipGraphExecUpdateError),
        (
            ffi::GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
            hipGraphExecUpdateErrorTopologyChanged,
        ),
        (
            ffi::GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED,
            hipGraphExecUpdateErrorNodeTypeChanged,
        ),
        (
            ffi::GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED,
            hipGraphExecUpdateErrorFunctionChanged,
        ),
        (
            ffi::GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED,
            hipGraphExecUpdateErrorParametersChanged,
        ),
        (
            ffi::GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED,
            hipGraphExecUpdateErrorNotSupported,
        ),
        (
            ffi::GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE,
            hipGraphExecUpdateErrorUnsupportedFunctionChange,
        ),
    ];
    for (ours, theirs) in pairs {
        let name = format!("{theirs:?}");
        assert_eq!(ours, theirs as c_int, "{name}");
        assert_eq!(
            ffi::graph_exec_update_result_name(ours),
            Some(name.as_str())
        );
    }
}

/// What a type is at the C ABI: a 32-bit integer (a C enum, `int` or
/// `unsigned`), a `size_t`, an opaque object behind a pointer, or a pointer
/// or function pointer made of those.
trait Abi {
    type Repr;
}

/// A 32-bit integer argument, whatever its C type.
struct Int32;
/// An object only ever seen through a pointer.
struct Opaque;

macro_rules! abi_as {
    ($repr:ty: $($ty:ty),* $(,)?) => {
        $(impl Abi for $ty {
            type Repr = $repr;
        })*
    };
}

/// `hipPointerAttribute_t`, whose layout `pointer_attributes_match`
/// compares field by field.
struct PointerAttributes;

abi_as!(PointerAttributes: ffi::PointerAttributes, sys::hipPointerAttribute_t);

abi_as!(
    Int32: i32,
    u32,
    hipError_t,
    hipFunction_attribute,
    hipStreamCaptureMode,
    hipStreamCaptureStatus,
    hipGraphExecUpdateResult,
);
abi_as!(usize: usize);
abi_as!(u64: u64);
abi_as!(
    Opaque: std::ffi::c_void,
    sys::ihipStream_t,
    sys::ihipEvent_t,
    sys::ihipGraph,
    sys::hipGraphNode,
    sys::hipGraphExec,
    sys::ihipModuleSymbol_t,
);

impl<T: Abi> Abi for *mut T {
    type Repr = *mut T::Repr;
}

impl<T: Abi> Abi for *const T {
    type Repr = *const T::Repr;
}

macro_rules! abi_fn {
    ($($arg:ident),*) => {
        impl<R: Abi, $($arg: Abi),*> Abi for unsafe extern "C" fn($($arg),*) -> R {
            type Repr = unsafe extern "C" fn($($arg::Repr),*) -> R::Repr;
        }
    };
}

abi_fn!();
abi_fn!(A);
abi_fn!(A, B);
abi_fn!(A, B, C);
abi_fn!(A, B, C, D);
abi_fn!(A, B, C, D, E);
abi_fn!(A, B, C, D, E, F);

/// The ABI of the function pointer `f` would return, without calling it.
fn abi_of<F: Abi>(_: impl FnOnce() -> F) -> PhantomData<F::Repr> {
    PhantomData
}

fn abi<F: Abi>() -> PhantomData<F::Repr> {
    PhantomData
}

/// Each declaration takes what the header's prototype takes: a mismatch is
/// a compile error here.
#[test]
fn new_prototypes_match() {
    same_type(
        abi::<ffi::HipGetDevice>(),
        abi_of(|| sys::hipGetDevice as unsafe extern "C" fn(_) -> _),
    );
    same_type(
        abi::<ffi::HipDeviceTotalMem>(),
        abi_of(|| sys::hipDeviceTotalMem as unsafe extern "C" fn(_, _) -> _),
    );
    same_type(
        abi::<ffi::HipStreamWaitEvent>(),
        abi_of(|| sys::hipStreamWaitEvent as unsafe extern "C" fn(_, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipStreamIsCapturing>(),
        abi_of(|| sys::hipStreamIsCapturing as unsafe extern "C" fn(_, _) -> _),
    );
    same_type(
        abi::<ffi::HipGraphExecUpdate>(),
        abi_of(|| sys::hipGraphExecUpdate as unsafe extern "C" fn(_, _, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipGraphGetNodes>(),
        abi_of(|| sys::hipGraphGetNodes as unsafe extern "C" fn(_, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipEventOp>(),
        abi_of(|| sys::hipEventQuery as unsafe extern "C" fn(_) -> _),
    );
    // The calls behind `Driver::record_event`, `wait_event` and an event's
    // drop (`hipStreamWaitEvent` is checked above).
    same_type(
        abi::<ffi::HipEventCreateWithFlags>(),
        abi_of(|| sys::hipEventCreateWithFlags as unsafe extern "C" fn(_, _) -> _),
    );
    same_type(
        abi::<ffi::HipEventRecord>(),
        abi_of(|| sys::hipEventRecord as unsafe extern "C" fn(_, _) -> _),
    );
    same_type(
        abi::<ffi::HipEventOp>(),
        abi_of(|| sys::hipEventDestroy as unsafe extern "C" fn(_) -> _),
    );
    // Entering every call: the thread's capture mode, relaxed and put back.
    same_type(
        abi::<ffi::HipThreadExchangeStreamCaptureMode>(),
        abi_of(|| sys::hipThreadExchangeStreamCaptureMode as unsafe extern "C" fn(_) -> _),
    );
    same_type(
        abi::<ffi::HipStreamEndCapture>(),
        abi_of(|| sys::hipStreamEndCapture as unsafe extern "C" fn(_, _) -> _),
    );
    // The calls that replace a captured chain's edges by a dependency
    // graph's.
    same_type(
        abi::<ffi::HipGraphGetRootNodes>(),
        abi_of(|| sys::hipGraphGetRootNodes as unsafe extern "C" fn(_, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipGraphNodeGetDependentNodes>(),
        abi_of(|| sys::hipGraphNodeGetDependentNodes as unsafe extern "C" fn(_, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipGraphDependencies>(),
        abi_of(|| sys::hipGraphAddDependencies as unsafe extern "C" fn(_, _, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipGraphDependencies>(),
        abi_of(|| sys::hipGraphRemoveDependencies as unsafe extern "C" fn(_, _, _, _) -> _),
    );
}

/// The calls that put a foreign operation's own graph into a capture, as
/// one child graph node after what the stream's next node would follow.
#[test]
fn foreign_prototypes_match() {
    same_type(
        abi::<ffi::HipStreamGetCaptureInfoV2>(),
        abi_of(|| sys::hipStreamGetCaptureInfo_v2 as unsafe extern "C" fn(_, _, _, _, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipStreamUpdateCaptureDependencies>(),
        abi_of(|| sys::hipStreamUpdateCaptureDependencies as unsafe extern "C" fn(_, _, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipGraphAddChildGraphNode>(),
        abi_of(|| sys::hipGraphAddChildGraphNode as unsafe extern "C" fn(_, _, _, _, _) -> _),
    );
    assert_eq!(
        ffi::STREAM_SET_CAPTURE_DEPENDENCIES,
        sys::hipStreamUpdateCaptureDependenciesFlags::hipStreamSetCaptureDependencies as u32
    );
}

/// The calls that check memory, streams and functions made elsewhere
/// before they are brought in.
#[test]
fn import_prototypes_match() {
    same_type(
        abi::<ffi::HipPointerGetAttributes>(),
        abi_of(|| sys::hipPointerGetAttributes as unsafe extern "C" fn(_, _) -> _),
    );
    same_type(
        abi::<ffi::HipMemGetAddressRange>(),
        abi_of(|| sys::hipMemGetAddressRange as unsafe extern "C" fn(_, _, _) -> _),
    );
    same_type(
        abi::<ffi::HipFuncGetAttribute>(),
        abi_of(|| sys::hipFuncGetAttribute as unsafe extern "C" fn(_, _, _) -> _),
    );
    assert_eq!(
        ffi::FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        hipFunction_attribute::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK as c_int
    );
}

#[test]
fn pointer_attributes_match() {
    use std::mem::offset_of;
    type Theirs = sys::hipPointerAttribute_t;
    type Ours = ffi::PointerAttributes;
    assert_eq!(size_of::<Ours>(), size_of::<Theirs>());
    assert_eq!(align_of::<Ours>(), align_of::<Theirs>());
    assert_eq!(size_of::<sys::hipMemoryType>(), size_of::<c_int>());
    let pairs = [
        (
            offset_of!(Ours, memory_type),
            offset_of!(Theirs, memoryType),
        ),
        (offset_of!(Ours, device), offset_of!(Theirs, device)),
        (
            offset_of!(Ours, device_pointer),
            offset_of!(Theirs, devicePointer),
        ),
        (
            offset_of!(Ours, host_pointer),
            offset_of!(Theirs, hostPointer),
        ),
        (offset_of!(Ours, is_managed), offset_of!(Theirs, isManaged)),
        (
            offset_of!(Ours, allocation_flags),
            offset_of!(Theirs, allocationFlags),
        ),
    ];
    for (ours, theirs) in pairs {
        assert_eq!(ours, theirs);
    }
}

/// What hip-sys's bindings lack: `hipStreamGetDevice` (ROCm 6 on) and the
/// `hipStreamPerThread` handle, each compared with the header's text where
/// the header declares it.
#[test]
fn stream_declarations_match_the_header() {
    let path = include_dir().join("hip_runtime_api.h");
    let header =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let declared: String = header.split_whitespace().collect::<Vec<_>>().join(" ");
    if declared.contains("hipStreamGetDevice(") {
        assert!(
            declared.contains(
                "hipError_t hipStreamGetDevice(hipStream_t stream, hipDevice_t* device);"
            ),
            "{} declares hipStreamGetDevice otherwise",
            path.display()
        );
    }
    let per_thread = format!(
        "#define hipStreamPerThread ((hipStream_t){})",
        ffi::STREAM_PER_THREAD
    );
    assert!(
        declared.contains(&per_thread) || !declared.contains("#define hipStreamPerThread"),
        "{} lacks `{per_thread}`",
        path.display()
    );
    // Older headers have no hipStreamLegacy; a header that has one agrees.
    let legacy = format!(
        "#define hipStreamLegacy ((hipStream_t){})",
        ffi::STREAM_LEGACY
    );
    assert!(
        declared.contains(&legacy) || !declared.contains("#define hipStreamLegacy"),
        "{} lacks `{legacy}`",
        path.display()
    );
}

#[test]
fn flags_match() {
    assert_eq!(ffi::STREAM_NON_BLOCKING, sys::hipStreamNonBlocking);
    assert_eq!(ffi::EVENT_DISABLE_TIMING, sys::hipEventDisableTiming);
    assert_eq!(ffi::HOST_MALLOC_DEFAULT, sys::hipHostMallocDefault);
}

/// The include folder the build found (`HIP_PATH`, then `ROCM_PATH`, then
/// ROCm's default), as hip-sys's build script looks for it.
fn include_dir() -> PathBuf {
    ["HIP_PATH", "ROCM_PATH"]
        .iter()
        .filter_map(|var| env::var_os(var).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
        .chain([PathBuf::from("/opt/rocm")])
        .map(|root| root.join("include/hip"))
        .find(|dir| dir.join("hiprtc.h").is_file())
        .unwrap_or_else(|| panic!("no include/hip/hiprtc.h under HIP_PATH, ROCM_PATH or /opt/rocm"))
}

/// Every hiprtc result the backend names is declared with that value in
/// `hiprtc.h` (`NAME = value`), the one source hiprtc's ABI has. Codes a
/// later ROCm added (`HIPRTC_ERROR_LINKING = 100`, ROCm 6) may be absent from
/// an older header, but a header that has the name must have its value.
#[test]
fn hiprtc_results_match_the_header() {
    let path = include_dir().join("hiprtc.h");
    let header =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let declared: String = header.split_whitespace().collect::<Vec<_>>().join(" ");
    for &(code, name) in ffi::RTC_RESULTS {
        let line = format!("{name} = {code}");
        let required = code <= 11;
        assert!(
            declared.contains(&line) || (!required && !declared.contains(name)),
            "{} lacks `{line}`",
            path.display()
        );
    }
    assert_eq!(
        ffi::rtc_result_name(ffi::RTC_ERROR_COMPILATION),
        Some("HIPRTC_ERROR_COMPILATION")
    );
}

#[test]
fn device_attributes_match() {
    use hipDeviceAttribute_t::*;
    let pairs = [
        (
            ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
            hipDeviceAttributeMaxBlockDimX,
        ),
        (
            ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
            hipDeviceAttributeMaxBlockDimY,
        ),
        (
            ffi::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
            hipDeviceAttributeMaxBlockDimZ,
        ),
        (
            ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
            hipDeviceAttributeMaxGridDimX,
        ),
        (
            ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
            hipDeviceAttributeMaxGridDimY,
        ),
        (
            ffi::DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
            hipDeviceAttributeMaxGridDimZ,
        ),
        (
            ffi::DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            hipDeviceAttributeMaxThreadsPerBlock,
        ),
    ];
    for (ours, theirs) in pairs {
        assert_eq!(ours, theirs as c_int, "{theirs:?}");
    }
    assert_eq!(
        size_of::<hipDeviceAttribute_t>(),
        size_of::<ffi::DeviceAttribute>()
    );
}

/// hip-sys's `hipDeviceProp_t` is ROCm 5's layout, which the unversioned
/// getter fills on every release: `gcnArchName` must lie where
/// `ffi::PROPS_R0000` reads it. (The R0600 layout, 1472 bytes with the name
/// at 1160, is ROCm 6's header's; hip-sys has no bindings for it.)
#[test]
fn rocm5_properties_layout_matches() {
    assert_eq!(size_of::<sys::hipDeviceProp_t>(), ffi::PROPS_R0000.size);
    assert_eq!(
        std::mem::offset_of!(sys::hipDeviceProp_t, gcnArchName),
        ffi::PROPS_R0000.gcn_arch_name
    );
    const { assert!(ffi::PROPS_R0600.gcn_arch_name + ffi::GCN_ARCH_NAME_LEN <= ffi::PROPS_R0600.size) };
}
