//! The part of the HIP runtime and hiprtc C APIs this backend calls, declared
//! by hand.
//!
//! Only what the backend uses is declared, as function-pointer types filled
//! in by the loader at run time, so the crate builds and links on a
//! machine without ROCm. Every value that crosses from the runtime is a plain
//! integer: a C enum read into a Rust enum is undefined behaviour for any code
//! a newer runtime adds, so codes stay `i32` and are named by lookup.
//!
//! The declarations are public so that the `abi-check` feature's test can
//! compare each one with the bindings generated from ROCm's headers.
//!
//! One struct of the runtime is read, and only one field of it:
//! `hipDeviceProp_t` changed layout between ROCm 5 and 6 (and is versioned per
//! symbol since), so everything else comes from the scalar getters
//! (`hipDeviceGetName`, `hipDeviceGetAttribute`). The device's architecture
//! name has no scalar getter; it is read from a byte buffer larger than either
//! layout, at its offset in the layout of the symbol that filled it (see
//! [`PROPS_R0600`] and [`PROPS_R0000`]).

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `hipError_t`: a C enum, carried as its underlying `int` so that an unknown
/// code stays a value instead of becoming undefined behaviour.
pub type HipError = i32;

/// `hiprtcResult`, kept as an integer for the same reason as [`HipError`].
pub type RtcResult = i32;

/// `hipDevice_t`: the runtime's device handle, an `int`.
pub type Device = c_int;

/// `hipStream_t`: an opaque runtime pointer.
pub type Stream = *mut c_void;
/// `hipEvent_t`: an opaque runtime pointer.
pub type Event = *mut c_void;
/// `hipModule_t`: an opaque runtime pointer.
pub type Module = *mut c_void;
/// `hipFunction_t`: an opaque runtime pointer.
pub type Function = *mut c_void;
/// `hipGraph_t`: an opaque runtime pointer.
pub type Graph = *mut c_void;
/// `hipGraphExec_t`: an opaque runtime pointer.
pub type GraphExec = *mut c_void;
/// `hipGraphNode_t`: an opaque runtime pointer.
pub type GraphNode = *mut c_void;
/// `hiprtcProgram`: an opaque hiprtc pointer.
pub type RtcProgram = *mut c_void;

// ---------------------------------------------------------------- error codes

/// `hipSuccess`.
pub const SUCCESS: HipError = 0;
/// `hipErrorInvalidValue`.
pub const ERROR_INVALID_VALUE: HipError = 1;
/// `hipErrorOutOfMemory`.
pub const ERROR_OUT_OF_MEMORY: HipError = 2;
/// `hipErrorNotInitialized`.
pub const ERROR_NOT_INITIALIZED: HipError = 3;
/// `hipErrorInvalidConfiguration`.
pub const ERROR_INVALID_CONFIGURATION: HipError = 9;
/// `hipErrorInsufficientDriver`: the kernel driver is older than the runtime.
pub const ERROR_INSUFFICIENT_DRIVER: HipError = 35;
/// `hipErrorInvalidDeviceFunction`.
pub const ERROR_INVALID_DEVICE_FUNCTION: HipError = 98;
/// `hipErrorNoDevice`: the answer of a machine without a usable AMD GPU.
pub const ERROR_NO_DEVICE: HipError = 100;
/// `hipErrorInvalidDevice`: what ROCm 5.2's `hipInit` answers on such a machine.
pub const ERROR_INVALID_DEVICE: HipError = 101;
/// `hipErrorInvalidImage`: a code object the device cannot load.
pub const ERROR_INVALID_IMAGE: HipError = 200;
/// `hipErrorNoBinaryForGpu`: a code object built for another architecture.
pub const ERROR_NO_BINARY_FOR_GPU: HipError = 209;
/// `hipErrorInvalidHandle`.
pub const ERROR_INVALID_HANDLE: HipError = 400;
/// `hipErrorIllegalState`: for example ending a capture that never began.
pub const ERROR_ILLEGAL_STATE: HipError = 401;
/// `hipErrorNotFound`: for example a kernel name missing from a module.
pub const ERROR_NOT_FOUND: HipError = 500;
/// `hipErrorNotReady`: `hipEventQuery`'s "not yet", not a failure.
pub const ERROR_NOT_READY: HipError = 600;
/// `hipErrorIllegalAddress`.
pub const ERROR_ILLEGAL_ADDRESS: HipError = 700;
/// `hipErrorLaunchOutOfResources`.
pub const ERROR_LAUNCH_OUT_OF_RESOURCES: HipError = 701;
/// `hipErrorLaunchFailure`.
pub const ERROR_LAUNCH_FAILURE: HipError = 719;
/// `hipErrorNotSupported`.
pub const ERROR_NOT_SUPPORTED: HipError = 801;
/// `hipErrorStreamCaptureUnsupported`: an operation a capture cannot record.
pub const ERROR_STREAM_CAPTURE_UNSUPPORTED: HipError = 900;
/// `hipErrorStreamCaptureInvalidated`: the capture broke and was ended.
pub const ERROR_STREAM_CAPTURE_INVALIDATED: HipError = 901;
/// `hipErrorStreamCaptureWrongThread`: what global and thread-local capture
/// modes answer when the capture ends on another thread.
pub const ERROR_STREAM_CAPTURE_WRONG_THREAD: HipError = 908;
/// `hipErrorGraphExecUpdateFailure`: `hipGraphExecUpdate` refused the update;
/// its `hipGraphExecUpdateResult` says why.
pub const ERROR_GRAPH_EXEC_UPDATE_FAILURE: HipError = 910;
/// `hipErrorUnknown`.
pub const ERROR_UNKNOWN: HipError = 999;

/// The name and a short description of every error code this backend names,
/// for when the runtime cannot be asked (it is not loaded) or answers with the
/// bare name, as ROCm 5.2's `hipGetErrorString` does.
const ERRORS: &[(HipError, &str, &str)] = &[
    (SUCCESS, "hipSuccess", "no error"),
    (
        ERROR_INVALID_VALUE,
        "hipErrorInvalidValue",
        "an argument is out of range",
    ),
    (ERROR_OUT_OF_MEMORY, "hipErrorOutOfMemory", "out of memory"),
    (
        ERROR_NOT_INITIALIZED,
        "hipErrorNotInitialized",
        "the runtime is not initialised",
    ),
    (
        ERROR_INVALID_CONFIGURATION,
        "hipErrorInvalidConfiguration",
        "invalid launch configuration",
    ),
    (
        ERROR_INSUFFICIENT_DRIVER,
        "hipErrorInsufficientDriver",
        "the kernel driver is older than the runtime",
    ),
    (
        ERROR_INVALID_DEVICE_FUNCTION,
        "hipErrorInvalidDeviceFunction",
        "the kernel cannot run on this device",
    ),
    (
        ERROR_NO_DEVICE,
        "hipErrorNoDevice",
        "no ROCm-capable device was found",
    ),
    (
        ERROR_INVALID_DEVICE,
        "hipErrorInvalidDevice",
        "invalid device ordinal",
    ),
    (
        ERROR_INVALID_IMAGE,
        "hipErrorInvalidImage",
        "the code object is invalid",
    ),
    (
        ERROR_NO_BINARY_FOR_GPU,
        "hipErrorNoBinaryForGpu",
        "the code object has no kernel for this device's architecture",
    ),
    (
        ERROR_INVALID_HANDLE,
        "hipErrorInvalidHandle",
        "invalid resource handle",
    ),
    (
        ERROR_ILLEGAL_STATE,
        "hipErrorIllegalState",
        "the operation is not allowed in the object's current state",
    ),
    (
        ERROR_NOT_FOUND,
        "hipErrorNotFound",
        "named symbol not found",
    ),
    (
        ERROR_NOT_READY,
        "hipErrorNotReady",
        "the work has not finished yet",
    ),
    (
        ERROR_ILLEGAL_ADDRESS,
        "hipErrorIllegalAddress",
        "a kernel accessed an illegal address",
    ),
    (
        ERROR_LAUNCH_OUT_OF_RESOURCES,
        "hipErrorLaunchOutOfResources",
        "too many resources requested for launch",
    ),
    (
        ERROR_LAUNCH_FAILURE,
        "hipErrorLaunchFailure",
        "a kernel failed while running",
    ),
    (
        ERROR_NOT_SUPPORTED,
        "hipErrorNotSupported",
        "operation not supported",
    ),
    (
        ERROR_STREAM_CAPTURE_UNSUPPORTED,
        "hipErrorStreamCaptureUnsupported",
        "the operation is not permitted while the stream is capturing",
    ),
    (
        ERROR_STREAM_CAPTURE_INVALIDATED,
        "hipErrorStreamCaptureInvalidated",
        "the capture was invalidated by an earlier error",
    ),
    (
        ERROR_STREAM_CAPTURE_WRONG_THREAD,
        "hipErrorStreamCaptureWrongThread",
        "the capture was begun on another thread in a mode that forbids it",
    ),
    (
        ERROR_GRAPH_EXEC_UPDATE_FAILURE,
        "hipErrorGraphExecUpdateFailure",
        "the executable graph cannot be updated with this graph",
    ),
    (ERROR_UNKNOWN, "hipErrorUnknown", "unknown error"),
];

/// The C name of `code`, when it is one this backend knows.
pub fn error_name(code: HipError) -> Option<&'static str> {
    ERRORS
        .iter()
        .find(|(c, ..)| *c == code)
        .map(|(_, name, _)| *name)
}

/// A short description of `code`, when it is one this backend knows.
pub fn error_description(code: HipError) -> Option<&'static str> {
    ERRORS
        .iter()
        .find(|(c, ..)| *c == code)
        .map(|(.., text)| *text)
}

/// `HIPRTC_SUCCESS`.
pub const RTC_SUCCESS: RtcResult = 0;
/// `HIPRTC_ERROR_COMPILATION`: the source did not compile; the log says why.
pub const RTC_ERROR_COMPILATION: RtcResult = 6;

/// hiprtc's result names, keyed by value as `hiprtc.h` declares them (ROCm 6
/// added `HIPRTC_ERROR_LINKING = 100` after a gap, so a position in a list is
/// not a code), for when `hiprtcGetErrorString` cannot be asked.
pub const RTC_RESULTS: &[(RtcResult, &str)] = &[
    (RTC_SUCCESS, "HIPRTC_SUCCESS"),
    (1, "HIPRTC_ERROR_OUT_OF_MEMORY"),
    (2, "HIPRTC_ERROR_PROGRAM_CREATION_FAILURE"),
    (3, "HIPRTC_ERROR_INVALID_INPUT"),
    (4, "HIPRTC_ERROR_INVALID_PROGRAM"),
    (5, "HIPRTC_ERROR_INVALID_OPTION"),
    (RTC_ERROR_COMPILATION, "HIPRTC_ERROR_COMPILATION"),
    (7, "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE"),
    (8, "HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION"),
    (9, "HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION"),
    (10, "HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID"),
    (11, "HIPRTC_ERROR_INTERNAL_ERROR"),
    (100, "HIPRTC_ERROR_LINKING"),
];

/// The C name of a hiprtc result, when it is one of ROCm's documented codes.
pub fn rtc_result_name(code: RtcResult) -> Option<&'static str> {
    RTC_RESULTS
        .iter()
        .find(|(value, _)| *value == code)
        .map(|(_, name)| *name)
}

// ---------------------------------------------------------------- flags and modes

/// `hipStreamNonBlocking`: the stream does not wait for the legacy null
/// stream, so work other code puts there cannot stall or join a capture.
pub const STREAM_NON_BLOCKING: c_uint = 0x1;
/// `hipEventDisableTiming`: events are only ever waited on, and timing makes
/// every record slower.
pub const EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `hipHostMallocDefault`: pinned, portable enough for the one device used.
pub const HOST_MALLOC_DEFAULT: c_uint = 0x0;

/// `hipStreamCaptureMode`, as its underlying `int`.
pub type CaptureMode = c_int;
/// `hipStreamCaptureModeGlobal`.
pub const CAPTURE_MODE_GLOBAL: CaptureMode = 0;
/// `hipStreamCaptureModeThreadLocal`.
pub const CAPTURE_MODE_THREAD_LOCAL: CaptureMode = 1;
/// `hipStreamCaptureModeRelaxed`: the only mode in which a capture may end on
/// another thread than the one that began it.
pub const CAPTURE_MODE_RELAXED: CaptureMode = 2;

/// `hipStreamCaptureStatus`, as its underlying `int`.
pub type CaptureStatus = c_int;
/// `hipStreamCaptureStatusNone`: the stream is not capturing.
pub const CAPTURE_STATUS_NONE: CaptureStatus = 0;
/// `hipStreamCaptureStatusActive`.
pub const CAPTURE_STATUS_ACTIVE: CaptureStatus = 1;
/// `hipStreamCaptureStatusInvalidated`: the capture broke but was not ended,
/// so the stream still swallows the work issued on it.
pub const CAPTURE_STATUS_INVALIDATED: CaptureStatus = 2;

/// `hipStreamSetCaptureDependencies`: a capture's next node follows the
/// given nodes alone.
pub const STREAM_SET_CAPTURE_DEPENDENCIES: c_uint = 1;

/// `hipGraphExecUpdateResult`, as its underlying `int`.
pub type GraphExecUpdateResult = c_int;
/// `hipGraphExecUpdateSuccess`.
pub const GRAPH_EXEC_UPDATE_SUCCESS: GraphExecUpdateResult = 0;
/// `hipGraphExecUpdateError`: the update failed for the reason the returned
/// code gives.
pub const GRAPH_EXEC_UPDATE_ERROR: GraphExecUpdateResult = 1;
/// `hipGraphExecUpdateErrorTopologyChanged`: other nodes or other edges.
pub const GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: GraphExecUpdateResult = 2;
/// `hipGraphExecUpdateErrorNodeTypeChanged`: a node of another kind.
pub const GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: GraphExecUpdateResult = 3;
/// `hipGraphExecUpdateErrorFunctionChanged`: a kernel node runs another
/// function.
pub const GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED: GraphExecUpdateResult = 4;
/// `hipGraphExecUpdateErrorParametersChanged`: a node's parameters changed
/// in a way the update cannot carry.
pub const GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED: GraphExecUpdateResult = 5;
/// `hipGraphExecUpdateErrorNotSupported`.
pub const GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: GraphExecUpdateResult = 6;
/// `hipGraphExecUpdateErrorUnsupportedFunctionChange`: a kernel node's
/// function changed in a way the update cannot carry.
pub const GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE: GraphExecUpdateResult = 7;

/// The C name of a `hipGraphExecUpdateResult`, when it is one ROCm declares.
pub fn graph_exec_update_result_name(result: GraphExecUpdateResult) -> Option<&'static str> {
    Some(match result {
        GRAPH_EXEC_UPDATE_SUCCESS => "hipGraphExecUpdateSuccess",
        GRAPH_EXEC_UPDATE_ERROR => "hipGraphExecUpdateError",
        GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED => "hipGraphExecUpdateErrorTopologyChanged",
        GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED => "hipGraphExecUpdateErrorNodeTypeChanged",
        GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED => "hipGraphExecUpdateErrorFunctionChanged",
        GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED => "hipGraphExecUpdateErrorParametersChanged",
        GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED => "hipGraphExecUpdateErrorNotSupported",
        GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE => {
            "hipGraphExecUpdateErrorUnsupportedFunctionChange"
        }
        _ => return None,
    })
}

/// `hipDeviceAttribute_t`, as its underlying `int`. The values below have
/// been the same since ROCm 5.0 renumbered the enum (checked against ROCm's
/// headers by the abi-check feature's test).
pub type DeviceAttribute = c_int;
/// `hipDeviceAttributeMaxBlockDimX`.
pub const DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: DeviceAttribute = 26;
/// `hipDeviceAttributeMaxBlockDimY`.
pub const DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: DeviceAttribute = 27;
/// `hipDeviceAttributeMaxBlockDimZ`.
pub const DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: DeviceAttribute = 28;
/// `hipDeviceAttributeMaxGridDimX`.
pub const DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: DeviceAttribute = 29;
/// `hipDeviceAttributeMaxGridDimY`.
pub const DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: DeviceAttribute = 30;
/// `hipDeviceAttributeMaxGridDimZ`.
pub const DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: DeviceAttribute = 31;
/// `hipDeviceAttributeMaxThreadsPerBlock`.
pub const DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: DeviceAttribute = 56;

/// Where `gcnArchName` (`char[256]`) lies in one layout of `hipDeviceProp_t`,
/// and how large that layout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropsLayout {
    /// The symbol that fills this layout.
    pub symbol: &'static str,
    /// `sizeof` the struct.
    pub size: usize,
    /// `offsetof(gcnArchName)`.
    pub gcn_arch_name: usize,
}

/// Length of `gcnArchName`, its NUL included.
pub const GCN_ARCH_NAME_LEN: usize = 256;

/// `hipDeviceProp_tR0600`, filled by `hipGetDevicePropertiesR0600` (ROCm 6.0
/// on, which still exports the old layout under the unversioned name).
pub const PROPS_R0600: PropsLayout = PropsLayout {
    symbol: "hipGetDevicePropertiesR0600",
    size: 1472,
    gcn_arch_name: 1160,
};

/// ROCm 5's `hipDeviceProp_t` (`hipDeviceProp_tR0000` since), filled by the
/// unversioned `hipGetDeviceProperties` of a runtime without the R0600 symbol.
pub const PROPS_R0000: PropsLayout = PropsLayout {
    symbol: "hipGetDeviceProperties",
    size: 792,
    gcn_arch_name: 396,
};

// ---------------------------------------------------------------- functions

/// `hipInit(unsigned flags)`.
pub type HipInit = unsafe extern "C" fn(flags: c_uint) -> HipError;
/// `hipGetDeviceCount(int* count)`.
pub type HipGetDeviceCount = unsafe extern "C" fn(count: *mut c_int) -> HipError;
/// `hipSetDevice(int ordinal)`.
pub type HipSetDevice = unsafe extern "C" fn(ordinal: c_int) -> HipError;
/// `hipGetDevice(int* ordinal)`: the calling thread's current device.
pub type HipGetDevice = unsafe extern "C" fn(ordinal: *mut c_int) -> HipError;
/// `hipDeviceTotalMem(size_t* bytes, hipDevice_t device)`.
pub type HipDeviceTotalMem = unsafe extern "C" fn(bytes: *mut usize, device: Device) -> HipError;
/// `hipDeviceGet(hipDevice_t* device, int ordinal)`.
pub type HipDeviceGet = unsafe extern "C" fn(device: *mut Device, ordinal: c_int) -> HipError;
/// `hipDeviceGetName(char* name, int len, hipDevice_t device)`.
pub type HipDeviceGetName =
    unsafe extern "C" fn(name: *mut c_char, len: c_int, device: Device) -> HipError;
/// `hipRuntimeGetVersion(int*)` and `hipDriverGetVersion(int*)`.
pub type HipGetVersion = unsafe extern "C" fn(version: *mut c_int) -> HipError;
/// `hipGetErrorName(hipError_t)` and `hipGetErrorString(hipError_t)`.
pub type HipGetErrorText = unsafe extern "C" fn(code: HipError) -> *const c_char;

/// `hipDeviceGetAttribute(int* value, hipDeviceAttribute_t, int ordinal)`.
pub type HipDeviceGetAttribute =
    unsafe extern "C" fn(value: *mut c_int, attribute: DeviceAttribute, ordinal: c_int) -> HipError;
/// `hipGetDevicePropertiesR0600(hipDeviceProp_tR0600*, int ordinal)` and ROCm
/// 5's `hipGetDeviceProperties(hipDeviceProp_t*, int ordinal)`, the struct
/// passed as bytes (see [`PropsLayout`]).
pub type HipGetDeviceProperties =
    unsafe extern "C" fn(properties: *mut c_void, ordinal: c_int) -> HipError;

/// `hipStreamCreateWithFlags(hipStream_t*, unsigned flags)`.
pub type HipStreamCreateWithFlags =
    unsafe extern "C" fn(stream: *mut Stream, flags: c_uint) -> HipError;
/// `hipStreamDestroy(hipStream_t)` and `hipStreamSynchronize(hipStream_t)`.
pub type HipStreamOp = unsafe extern "C" fn(stream: Stream) -> HipError;
/// `hipStreamWaitEvent(hipStream_t, hipEvent_t, unsigned flags)`.
pub type HipStreamWaitEvent =
    unsafe extern "C" fn(stream: Stream, event: Event, flags: c_uint) -> HipError;
/// `hipStreamIsCapturing(hipStream_t, hipStreamCaptureStatus*)`.
pub type HipStreamIsCapturing =
    unsafe extern "C" fn(stream: Stream, status: *mut CaptureStatus) -> HipError;

/// `hipPointerAttribute_t`, as ROCm 5 and 6 lay it out (6 renames the
/// first field `type`, with other values for the memory types, which are
/// not read here). Filled by `hipPointerGetAttributes`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PointerAttributes {
    /// `hipMemoryType`, as its integer.
    pub memory_type: c_int,
    /// The ordinal of the device the memory belongs to.
    pub device: c_int,
    /// The address on the device.
    pub device_pointer: *mut c_void,
    /// The address on the host, for host memory.
    pub host_pointer: *mut c_void,
    /// Whether the memory is managed.
    pub is_managed: c_int,
    /// The flags it was allocated with.
    pub allocation_flags: c_uint,
}

/// `hipPointerGetAttributes(hipPointerAttribute_t*, const void* ptr)`.
pub type HipPointerGetAttributes =
    unsafe extern "C" fn(attributes: *mut PointerAttributes, ptr: *const c_void) -> HipError;
/// `hipMemGetAddressRange(hipDeviceptr_t* base, size_t* size,
/// hipDeviceptr_t ptr)`: the allocation an address lies in.
pub type HipMemGetAddressRange =
    unsafe extern "C" fn(base: *mut *mut c_void, size: *mut usize, ptr: *mut c_void) -> HipError;
/// `hipStreamGetDevice(hipStream_t, hipDevice_t*)` (ROCm 6 and later): the
/// device a stream belongs to.
pub type HipStreamGetDevice = unsafe extern "C" fn(stream: Stream, device: *mut Device) -> HipError;
/// `hipFuncGetAttribute(int* value, hipFunction_attribute, hipFunction_t)`.
pub type HipFuncGetAttribute = unsafe extern "C" fn(
    value: *mut c_int,
    attribute: FunctionAttribute,
    function: Function,
) -> HipError;

/// `hipFunction_attribute`, as its underlying `int`.
pub type FunctionAttribute = c_int;
/// `HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
pub const FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: FunctionAttribute = 0;
/// `hipStreamLegacy`, `(hipStream_t)1`: the legacy default stream, which
/// synchronizes with every blocking stream of the device.
pub const STREAM_LEGACY: usize = 1;
/// `hipStreamPerThread`, `(hipStream_t)2`: the calling thread's default
/// stream, a different stream on every thread.
pub const STREAM_PER_THREAD: usize = 2;

/// `hipMalloc(void** ptr, size_t size)`.
pub type HipMalloc = unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize) -> HipError;
/// `hipFree(void*)` and `hipHostFree(void*)`.
pub type HipFree = unsafe extern "C" fn(ptr: *mut c_void) -> HipError;
/// `hipHostMalloc(void** ptr, size_t size, unsigned flags)`.
pub type HipHostMalloc =
    unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> HipError;
/// `hipMemcpyHtoDAsync(hipDeviceptr_t dst, void* src, size_t, hipStream_t)`.
pub type HipMemcpyHtoDAsync = unsafe extern "C" fn(
    dst: *mut c_void,
    src: *mut c_void,
    bytes: usize,
    stream: Stream,
) -> HipError;
/// `hipMemcpyDtoHAsync(void* dst, hipDeviceptr_t src, size_t, hipStream_t)`.
pub type HipMemcpyDtoHAsync = unsafe extern "C" fn(
    dst: *mut c_void,
    src: *mut c_void,
    bytes: usize,
    stream: Stream,
) -> HipError;

/// `hipModuleLoadData(hipModule_t*, const void* image)`.
pub type HipModuleLoadData =
    unsafe extern "C" fn(module: *mut Module, image: *const c_void) -> HipError;
/// `hipModuleUnload(hipModule_t)`.
pub type HipModuleUnload = unsafe extern "C" fn(module: Module) -> HipError;
/// `hipModuleGetFunction(hipFunction_t*, hipModule_t, const char* name)`.
pub type HipModuleGetFunction =
    unsafe extern "C" fn(function: *mut Function, module: Module, name: *const c_char) -> HipError;
/// `hipModuleLaunchKernel(f, grid x/y/z, block x/y/z, shared bytes, stream,
/// void** params, void** extra)`.
pub type HipModuleLaunchKernel = unsafe extern "C" fn(
    function: Function,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: Stream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipError;

/// `hipEventCreateWithFlags(hipEvent_t*, unsigned flags)`.
pub type HipEventCreateWithFlags =
    unsafe extern "C" fn(event: *mut Event, flags: c_uint) -> HipError;
/// `hipEventRecord(hipEvent_t, hipStream_t)`.
pub type HipEventRecord = unsafe extern "C" fn(event: Event, stream: Stream) -> HipError;
/// `hipEventSynchronize`, `hipEventQuery` and `hipEventDestroy`, all
/// `(hipEvent_t)`.
pub type HipEventOp = unsafe extern "C" fn(event: Event) -> HipError;

/// `hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode* mode)`: sets
/// the calling thread's capture mode to `*mode` and writes the one it had
/// there.
pub type HipThreadExchangeStreamCaptureMode =
    unsafe extern "C" fn(mode: *mut CaptureMode) -> HipError;

/// `hipStreamBeginCapture(hipStream_t, hipStreamCaptureMode)`.
pub type HipStreamBeginCapture =
    unsafe extern "C" fn(stream: Stream, mode: CaptureMode) -> HipError;
/// `hipStreamEndCapture(hipStream_t, hipGraph_t*)`.
pub type HipStreamEndCapture = unsafe extern "C" fn(stream: Stream, graph: *mut Graph) -> HipError;
/// `hipGraphGetNodes(hipGraph_t, hipGraphNode_t* nodes, size_t* count)`.
pub type HipGraphGetNodes =
    unsafe extern "C" fn(graph: Graph, nodes: *mut GraphNode, count: *mut usize) -> HipError;
/// `hipGraphGetRootNodes(hipGraph_t, hipGraphNode_t* roots, size_t* count)`.
pub type HipGraphGetRootNodes =
    unsafe extern "C" fn(graph: Graph, roots: *mut GraphNode, count: *mut usize) -> HipError;
/// `hipGraphNodeGetDependentNodes(hipGraphNode_t, hipGraphNode_t* dependents,
/// size_t* count)`.
pub type HipGraphNodeGetDependentNodes = unsafe extern "C" fn(
    node: GraphNode,
    dependents: *mut GraphNode,
    count: *mut usize,
) -> HipError;
/// `hipGraphAddDependencies` and `hipGraphRemoveDependencies`, which share
/// the signature `(hipGraph_t, const hipGraphNode_t* from, const
/// hipGraphNode_t* to, size_t count)`.
pub type HipGraphDependencies = unsafe extern "C" fn(
    graph: Graph,
    from: *const GraphNode,
    to: *const GraphNode,
    count: usize,
) -> HipError;
/// `hipGraphInstantiate(hipGraphExec_t*, hipGraph_t, hipGraphNode_t* error
/// node, char* log, size_t log size)`.
pub type HipGraphInstantiate = unsafe extern "C" fn(
    exec: *mut GraphExec,
    graph: Graph,
    error_node: *mut GraphNode,
    log: *mut c_char,
    log_size: usize,
) -> HipError;
/// `hipGraphExecUpdate(hipGraphExec_t, hipGraph_t, hipGraphNode_t* error
/// node, hipGraphExecUpdateResult* result)`.
pub type HipGraphExecUpdate = unsafe extern "C" fn(
    exec: GraphExec,
    graph: Graph,
    error_node: *mut GraphNode,
    result: *mut GraphExecUpdateResult,
) -> HipError;
/// `hipStreamGetCaptureInfo_v2(hipStream_t, hipStreamCaptureStatus*,
/// unsigned long long* id, hipGraph_t*, const hipGraphNode_t**
/// dependencies, size_t* count)`.
pub type HipStreamGetCaptureInfoV2 = unsafe extern "C" fn(
    stream: Stream,
    status: *mut CaptureStatus,
    id: *mut u64,
    graph: *mut Graph,
    dependencies: *mut *const GraphNode,
    count: *mut usize,
) -> HipError;
/// `hipStreamUpdateCaptureDependencies(hipStream_t, hipGraphNode_t*
/// dependencies, size_t count, unsigned int flags)`.
pub type HipStreamUpdateCaptureDependencies = unsafe extern "C" fn(
    stream: Stream,
    dependencies: *mut GraphNode,
    count: usize,
    flags: c_uint,
) -> HipError;
/// `hipGraphAddChildGraphNode(hipGraphNode_t*, hipGraph_t, const
/// hipGraphNode_t* dependencies, size_t count, hipGraph_t child)`.
pub type HipGraphAddChildGraphNode = unsafe extern "C" fn(
    node: *mut GraphNode,
    graph: Graph,
    dependencies: *const GraphNode,
    count: usize,
    child: Graph,
) -> HipError;
/// `hipGraphDestroy(hipGraph_t)`.
pub type HipGraphDestroy = unsafe extern "C" fn(graph: Graph) -> HipError;
/// `hipGraphExecDestroy(hipGraphExec_t)`.
pub type HipGraphExecDestroy = unsafe extern "C" fn(exec: GraphExec) -> HipError;
/// `hipGraphLaunch(hipGraphExec_t, hipStream_t)` and `hipGraphUpload`, which
/// share the signature.
pub type HipGraphOnStream = unsafe extern "C" fn(exec: GraphExec, stream: Stream) -> HipError;

/// `hiprtcCreateProgram(hiprtcProgram*, const char* src, const char* name,
/// int headers, const char** sources, const char** include names)`.
pub type RtcCreateProgram = unsafe extern "C" fn(
    program: *mut RtcProgram,
    source: *const c_char,
    name: *const c_char,
    header_count: c_int,
    headers: *const *const c_char,
    include_names: *const *const c_char,
) -> RtcResult;
/// `hiprtcCompileProgram(hiprtcProgram, int count, const char** options)`.
pub type RtcCompileProgram = unsafe extern "C" fn(
    program: RtcProgram,
    option_count: c_int,
    options: *const *const c_char,
) -> RtcResult;
/// `hiprtcGetCodeSize` and `hiprtcGetProgramLogSize`, both
/// `(hiprtcProgram, size_t*)`.
pub type RtcGetSize = unsafe extern "C" fn(program: RtcProgram, size: *mut usize) -> RtcResult;
/// `hiprtcGetCode` and `hiprtcGetProgramLog`, both `(hiprtcProgram, char*)`.
pub type RtcGetBytes = unsafe extern "C" fn(program: RtcProgram, out: *mut c_char) -> RtcResult;
/// `hiprtcDestroyProgram(hiprtcProgram*)`.
pub type RtcDestroyProgram = unsafe extern "C" fn(program: *mut RtcProgram) -> RtcResult;
/// `hiprtcGetErrorString(hiprtcResult)`.
pub type RtcGetErrorString = unsafe extern "C" fn(code: RtcResult) -> *const c_char;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_code_has_one_entry() {
        for (i, (code, name, text)) in ERRORS.iter().enumerate() {
            assert!(name.starts_with("hip") && !text.is_empty());
            assert!(
                ERRORS[i + 1..].iter().all(|(other, ..)| other != code),
                "{name} twice"
            );
            assert_eq!(error_name(*code), Some(*name));
        }
        assert_eq!(error_name(ERROR_NO_DEVICE), Some("hipErrorNoDevice"));
        assert_eq!(error_name(123_456), None);
    }

    #[test]
    fn update_results_are_named() {
        assert_eq!(
            graph_exec_update_result_name(GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED),
            Some("hipGraphExecUpdateErrorTopologyChanged")
        );
        assert_eq!(graph_exec_update_result_name(8), None);
        assert_eq!(graph_exec_update_result_name(-1), None);
    }

    #[test]
    fn rtc_names_follow_their_codes() {
        assert_eq!(rtc_result_name(RTC_SUCCESS), Some("HIPRTC_SUCCESS"));
        assert_eq!(
            rtc_result_name(RTC_ERROR_COMPILATION),
            Some("HIPRTC_ERROR_COMPILATION")
        );
        assert_eq!(rtc_result_name(100), Some("HIPRTC_ERROR_LINKING"));
        assert_eq!(rtc_result_name(-1), None);
        assert_eq!(rtc_result_name(12), None);
        assert_eq!(rtc_result_name(99), None);
        for (i, (code, name)) in RTC_RESULTS.iter().enumerate() {
            assert!(name.starts_with("HIPRTC_"));
            assert!(
                RTC_RESULTS[i + 1..].iter().all(|(other, _)| other != code),
                "{name} twice"
            );
        }
    }
}
