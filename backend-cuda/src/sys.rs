//! The slice of the CUDA driver API this crate calls, declared here rather
//! than taken from generated bindings.
//!
//! Every function returns its `CUresult` as a plain `i32` and every enum is
//! its underlying integer: a driver newer than the declarations answers
//! codes and values they do not list (12.8 added `CUDA_ERROR_CONTAINED`,
//! 226), and such a value written into a Rust enum would be undefined
//! behaviour, where an integer is just a number to name or print.
//!
//! The types keep the C typedef names of `cuda.h`, so that the ABI test
//! (`tests/abi.rs`) can spell each prototype in C from its Rust
//! declaration and have a C compiler compare it with the real header, along
//! with every constant and layout listed in [`ABI_FACTS`].
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::mem::{offset_of, size_of};

/// A driver call's result code (`CUDA_SUCCESS` is 0).
pub type CUresult = i32;
/// A device ordinal's handle.
pub type CUdevice = c_int;
/// A device address.
pub type CUdeviceptr = c_ulonglong;
/// A context.
pub type CUcontext = *mut c_void;
/// A loaded module.
pub type CUmodule = *mut c_void;
/// A kernel of a module.
pub type CUfunction = *mut c_void;
/// A stream.
pub type CUstream = *mut c_void;
/// An event.
pub type CUevent = *mut c_void;
/// A graph, as stream capture returns it.
pub type CUgraph = *mut c_void;
/// A node of a graph.
pub type CUgraphNode = *mut c_void;
/// An instantiated graph.
pub type CUgraphExec = *mut c_void;
/// A JIT link in progress.
pub type CUlinkState = *mut c_void;
/// `CUdevice_attribute`, as its integer.
pub type CUdevice_attribute = c_uint;
/// `CUfunction_attribute`, as its integer.
pub type CUfunction_attribute = c_uint;
/// `CUjit_option`, as its integer.
pub type CUjit_option = c_uint;
/// `CUjitInputType`, as its integer.
pub type CUjitInputType = c_uint;
/// `CUstreamCaptureMode`, as its integer.
pub type CUstreamCaptureMode = c_uint;
/// `CUstreamCaptureStatus`, as its integer.
pub type CUstreamCaptureStatus = c_uint;
/// `CUgraphNodeType`, as its integer.
pub type CUgraphNodeType = c_uint;
/// `CUgraphExecUpdateResult`, as its integer.
pub type CUgraphExecUpdateResult = c_uint;
/// `CUpointer_attribute`, as its integer.
pub type CUpointer_attribute = c_uint;
/// `cuuint64_t`, an unsigned 64-bit integer (spelled so for the ABI test:
/// `uint64_t` is `unsigned long` on Linux, not `unsigned long long`).
pub type cuuint64_t = u64;
/// The value a conditional node reads, set from device code (12.3 and
/// newer).
pub type CUgraphConditionalHandle = cuuint64_t;
/// `CUgraphConditionalNodeType`, as its integer.
pub type CUgraphConditionalNodeType = c_uint;

/// What `cuGraphExecUpdate` (12.0 and newer) says about a failed update.
/// The fields keep their C names, which the ABI test's `offsetof` uses.
#[allow(non_snake_case)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUgraphExecUpdateResultInfo {
    /// Why the update failed, or `CU_GRAPH_EXEC_UPDATE_SUCCESS`.
    pub result: CUgraphExecUpdateResult,
    /// The node the failure is about, when there is one.
    pub errorNode: CUgraphNode,
    /// The other end of a mismatched edge, when there is one.
    pub errorFromNode: CUgraphNode,
}

/// What an edge carries besides its ends (12.3 and newer): ports and a
/// dependency type, all zero for the plain "after" edge a stream capture
/// records. Only ever passed as a null array, which means exactly that.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUgraphEdgeData {
    /// When the dependency triggers in the upstream node (0: its completion).
    pub from_port: u8,
    /// Which part of the downstream node waits (0: all of it).
    pub to_port: u8,
    /// `CUgraphDependencyType`, as a byte.
    pub r#type: u8,
    /// Unused, zero.
    pub reserved: [u8; 5],
}

/// What `cuGraphAddNode_v2` needs of a conditional node (12.3 and newer).
/// The fields keep their C names, which the ABI test's `offsetof` uses.
#[allow(non_snake_case)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_CONDITIONAL_NODE_PARAMS {
    /// The handle the node reads, made for the graph the node goes in.
    pub handle: CUgraphConditionalHandle,
    /// `CU_GRAPH_COND_TYPE_IF` or `CU_GRAPH_COND_TYPE_WHILE`.
    pub r#type: CUgraphConditionalNodeType,
    /// How many bodies: 1, or 2 for an if/else (12.8 and newer).
    pub size: c_uint,
    /// Written by the driver: its own array of the node's body graphs,
    /// valid as long as the node.
    pub phGraph_out: *mut CUgraph,
    /// The context the node runs in.
    pub ctx: CUcontext,
}

/// Bytes of `CUgraphNodeParams`'s union, of which a conditional node's
/// parameters are the first.
const NODE_PARAMS_UNION_BYTES: usize = 29 * 8;

/// `CUgraphNodeParams` (12.2 and newer) as this crate fills it: the union
/// of every node kind's parameters holds a conditional node's, or nothing
/// (an empty node), and the bytes past them stay zero, as the driver
/// requires of unused bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUgraphNodeParams {
    /// `CUgraphNodeType`: `CU_GRAPH_NODE_TYPE_CONDITIONAL` or
    /// `CU_GRAPH_NODE_TYPE_EMPTY`.
    pub r#type: CUgraphNodeType,
    /// Must be zero.
    pub reserved0: [c_int; 3],
    /// The union's conditional member.
    pub conditional: CUDA_CONDITIONAL_NODE_PARAMS,
    /// The rest of the union, zero.
    pub padding: [u8; NODE_PARAMS_UNION_BYTES - size_of::<CUDA_CONDITIONAL_NODE_PARAMS>()],
    /// Must be zero.
    pub reserved2: i64,
}

impl CUgraphNodeParams {
    /// Parameters of `kind` with every byte zero but the type.
    pub(crate) fn zeroed(kind: CUgraphNodeType) -> Self {
        Self {
            r#type: kind,
            reserved0: [0; 3],
            conditional: CUDA_CONDITIONAL_NODE_PARAMS {
                handle: 0,
                r#type: 0,
                size: 0,
                phGraph_out: std::ptr::null_mut(),
                ctx: std::ptr::null_mut(),
            },
            padding: [0; NODE_PARAMS_UNION_BYTES - size_of::<CUDA_CONDITIONAL_NODE_PARAMS>()],
            reserved2: 0,
        }
    }
}

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_STUB_LIBRARY: CUresult = 34;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_IMAGE: CUresult = 200;
pub const CUDA_ERROR_NO_BINARY_FOR_GPU: CUresult = 209;
pub const CUDA_ERROR_INVALID_PTX: CUresult = 218;
pub const CUDA_ERROR_JIT_COMPILER_NOT_FOUND: CUresult = 221;
pub const CUDA_ERROR_UNSUPPORTED_PTX_VERSION: CUresult = 222;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
pub const CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: CUresult = 910;

pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CUdevice_attribute = 1;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: CUdevice_attribute = 2;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: CUdevice_attribute = 3;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: CUdevice_attribute = 4;
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: CUdevice_attribute = 5;
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: CUdevice_attribute = 6;
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: CUdevice_attribute = 7;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CUdevice_attribute = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CUdevice_attribute = 76;

pub const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CUfunction_attribute = 0;

pub const CU_JIT_INFO_LOG_BUFFER: CUjit_option = 3;
pub const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: CUjit_option = 4;
pub const CU_JIT_ERROR_LOG_BUFFER: CUjit_option = 5;
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: CUjit_option = 6;
pub const CU_JIT_INPUT_PTX: CUjitInputType = 1;

pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// The legacy default stream's handle, `(CUstream)0x1`.
pub const CU_STREAM_LEGACY: usize = 1;
/// The per-thread default stream's handle, `(CUstream)0x2`.
pub const CU_STREAM_PER_THREAD: usize = 2;

pub const CU_POINTER_ATTRIBUTE_CONTEXT: CUpointer_attribute = 1;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: CUpointer_attribute = 9;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;

pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
pub const CU_STREAM_SET_CAPTURE_DEPENDENCIES: c_uint = 1;

pub const CU_GRAPH_NODE_TYPE_GRAPH: CUgraphNodeType = 4;
pub const CU_GRAPH_NODE_TYPE_MEM_ALLOC: CUgraphNodeType = 10;
pub const CU_GRAPH_NODE_TYPE_MEM_FREE: CUgraphNodeType = 11;
pub const CU_GRAPH_NODE_TYPE_EMPTY: CUgraphNodeType = 5;
pub const CU_GRAPH_NODE_TYPE_CONDITIONAL: CUgraphNodeType = 13;

pub const CU_GRAPH_COND_TYPE_IF: CUgraphConditionalNodeType = 0;
pub const CU_GRAPH_COND_TYPE_WHILE: CUgraphConditionalNodeType = 1;

pub const CU_GRAPH_EXEC_UPDATE_SUCCESS: CUgraphExecUpdateResult = 0;
pub const CU_GRAPH_EXEC_UPDATE_ERROR: CUgraphExecUpdateResult = 1;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: CUgraphExecUpdateResult = 2;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: CUgraphExecUpdateResult = 3;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED: CUgraphExecUpdateResult = 4;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED: CUgraphExecUpdateResult = 5;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: CUgraphExecUpdateResult = 6;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE: CUgraphExecUpdateResult = 7;
pub const CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED: CUgraphExecUpdateResult = 8;

/// A function's C prototype as its Rust declaration spells it: the symbol
/// the library exports and each parameter's Rust type, as text.
#[derive(Debug, Clone, Copy)]
pub struct Prototype {
    /// The exported symbol (`cuMemAlloc_v2`).
    pub symbol: &'static str,
    /// Each parameter's type as written in the declaration
    /// (`*mut CUdeviceptr`); the result is always `CUresult`.
    pub params: &'static [&'static str],
    /// Whether a driver may lack it (the function is then not used).
    pub optional: bool,
    /// Whether it is an older spelling that CUDA 13's `cuda.h` declares
    /// only for the driver's own build (`__CUDA_API_VERSION_INTERNAL`), its
    /// plain name there meaning the newer function; the ABI test checks it
    /// with that defined.
    pub legacy: bool,
}

/// Declares the driver functions once: the table of pointers resolved from
/// the library, the list of symbols, and their prototypes for the ABI test.
macro_rules! driver_api {
    (
        required {
            $( $(#[doc = $doc:literal])* $field:ident = $symbol:ident ( $( $ty:ty ),* $(,)? ); )*
        }
        optional {
            $( $(#[doc = $odoc:literal])* $ofield:ident = $osymbol:ident ( $( $oty:ty ),* $(,)? ); )*
        }
        legacy {
            $( $(#[doc = $ldoc:literal])* $lfield:ident = $lsymbol:ident ( $( $lty:ty ),* $(,)? ); )*
        }
    ) => {
        /// Every driver function this crate calls, resolved from the loaded
        /// library. A copy of plain function pointers: the library they
        /// point into stays loaded for the life of the process.
        ///
        /// `cuInit` and `cuDriverGetVersion` are called by the loader before
        /// the table is resolved, so their fields go unread; they are listed
        /// all the same so that the ABI test checks their prototypes.
        #[allow(dead_code)]
        #[derive(Clone, Copy)]
        pub(crate) struct Api {
            $( $(#[doc = $doc])* pub(crate) $field: unsafe extern "C" fn($($ty),*) -> CUresult, )*
            $( $(#[doc = $odoc])* pub(crate) $ofield: Option<unsafe extern "C" fn($($oty),*) -> CUresult>, )*
            $( $(#[doc = $ldoc])* pub(crate) $lfield: Option<unsafe extern "C" fn($($lty),*) -> CUresult>, )*
        }

        /// Every prototype the driver table declares, required ones first, in the
        /// order they are resolved.
        pub const PROTOTYPES: &[Prototype] = &[
            $( Prototype { symbol: stringify!($symbol), params: &[$(stringify!($ty)),*], optional: false, legacy: false }, )*
            $( Prototype { symbol: stringify!($osymbol), params: &[$(stringify!($oty)),*], optional: true, legacy: false }, )*
            $( Prototype { symbol: stringify!($lsymbol), params: &[$(stringify!($lty)),*], optional: true, legacy: true }, )*
        ];

        impl Api {
            /// Look every function up in `library`: the first required one
            /// missing is the error, with the loader's words.
            pub(crate) fn resolve(library: &libloading::Library) -> Result<Self, String> {
                Ok(Self {
                    $( $field: {
                        // SAFETY: the symbol is looked up with the prototype
                        // cuda.h declares for it (the ABI test compares the
                        // two), with integers for its enums.
                        let found = unsafe {
                            library.get::<unsafe extern "C" fn($($ty),*) -> CUresult>(
                                concat!(stringify!($symbol), "\0").as_bytes(),
                            )
                        };
                        *found.map_err(|e| format!("missing symbol {} ({e})", stringify!($symbol)))?
                    }, )*
                    $( $ofield: {
                        // SAFETY: as for the required functions.
                        let found = unsafe {
                            library.get::<unsafe extern "C" fn($($oty),*) -> CUresult>(
                                concat!(stringify!($osymbol), "\0").as_bytes(),
                            )
                        };
                        found.ok().map(|f| *f)
                    }, )*
                    $( $lfield: {
                        // SAFETY: as for the required functions, with the
                        // prototype of the older spelling.
                        let found = unsafe {
                            library.get::<unsafe extern "C" fn($($lty),*) -> CUresult>(
                                concat!(stringify!($lsymbol), "\0").as_bytes(),
                            )
                        };
                        found.ok().map(|f| *f)
                    }, )*
                })
            }
        }
    };
}

driver_api! {
    required {
        init = cuInit(c_uint);
        driver_get_version = cuDriverGetVersion(*mut c_int);
        get_error_string = cuGetErrorString(CUresult, *mut *const c_char);
        device_get_count = cuDeviceGetCount(*mut c_int);
        device_get = cuDeviceGet(*mut CUdevice, c_int);
        device_get_name = cuDeviceGetName(*mut c_char, c_int, CUdevice);
        device_get_attribute = cuDeviceGetAttribute(*mut c_int, CUdevice_attribute, CUdevice);
        device_total_mem = cuDeviceTotalMem_v2(*mut usize, CUdevice);
        primary_ctx_retain = cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
        ctx_push_current = cuCtxPushCurrent_v2(CUcontext);
        ctx_pop_current = cuCtxPopCurrent_v2(*mut CUcontext);
        /// The current context's device, for a context made elsewhere.
        ctx_get_device = cuCtxGetDevice(*mut CUdevice);
        mem_alloc = cuMemAlloc_v2(*mut CUdeviceptr, usize);
        mem_free = cuMemFree_v2(CUdeviceptr);
        mem_host_alloc = cuMemHostAlloc(*mut *mut c_void, usize, c_uint);
        mem_free_host = cuMemFreeHost(*mut c_void);
        /// What the driver knows of an address made elsewhere: its context
        /// and device, before it is imported.
        pointer_get_attribute = cuPointerGetAttribute(*mut c_void, CUpointer_attribute, CUdeviceptr);
        /// The allocation an address lies in, so an import cannot reach
        /// past its end.
        mem_get_address_range = cuMemGetAddressRange_v2(*mut CUdeviceptr, *mut usize, CUdeviceptr);
        memcpy_htod_async = cuMemcpyHtoDAsync_v2(CUdeviceptr, *const c_void, usize, CUstream);
        memcpy_dtoh_async = cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr, usize, CUstream);
        stream_create = cuStreamCreate(*mut CUstream, c_uint);
        stream_synchronize = cuStreamSynchronize(CUstream);
        stream_destroy = cuStreamDestroy_v2(CUstream);
        /// A stream made elsewhere's context, before it is adopted.
        stream_get_ctx = cuStreamGetCtx(CUstream, *mut CUcontext);
        /// A stream made elsewhere's flags: a blocking one is refused.
        stream_get_flags = cuStreamGetFlags(CUstream, *mut c_uint);
        stream_wait_event = cuStreamWaitEvent(CUstream, CUevent, c_uint);
        stream_begin_capture = cuStreamBeginCapture_v2(CUstream, CUstreamCaptureMode);
        stream_end_capture = cuStreamEndCapture(CUstream, *mut CUgraph);
        stream_is_capturing = cuStreamIsCapturing(CUstream, *mut CUstreamCaptureStatus);
        /// 10.1 and newer: set the calling thread's capture mode, handing
        /// back the one it had.
        thread_exchange_stream_capture_mode =
            cuThreadExchangeStreamCaptureMode(*mut CUstreamCaptureMode);
        event_create = cuEventCreate(*mut CUevent, c_uint);
        event_record = cuEventRecord(CUevent, CUstream);
        event_query = cuEventQuery(CUevent);
        event_synchronize = cuEventSynchronize(CUevent);
        event_destroy = cuEventDestroy_v2(CUevent);
        link_create = cuLinkCreate_v2(c_uint, *mut CUjit_option, *mut *mut c_void, *mut CUlinkState);
        link_add_data = cuLinkAddData_v2(
            CUlinkState,
            CUjitInputType,
            *mut c_void,
            usize,
            *const c_char,
            c_uint,
            *mut CUjit_option,
            *mut *mut c_void,
        );
        link_complete = cuLinkComplete(CUlinkState, *mut *mut c_void, *mut usize);
        link_destroy = cuLinkDestroy(CUlinkState);
        module_load_data_ex = cuModuleLoadDataEx(
            *mut CUmodule,
            *const c_void,
            c_uint,
            *mut CUjit_option,
            *mut *mut c_void,
        );
        module_get_function = cuModuleGetFunction(*mut CUfunction, CUmodule, *const c_char);
        module_unload = cuModuleUnload(CUmodule);
        func_get_attribute = cuFuncGetAttribute(*mut c_int, CUfunction_attribute, CUfunction);
        launch_kernel = cuLaunchKernel(
            CUfunction,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            CUstream,
            *mut *mut c_void,
            *mut *mut c_void,
        );
        graph_get_nodes = cuGraphGetNodes(CUgraph, *mut CUgraphNode, *mut usize);
        graph_node_get_type = cuGraphNodeGetType(CUgraphNode, *mut CUgraphNodeType);
        graph_instantiate = cuGraphInstantiateWithFlags(*mut CUgraphExec, CUgraph, c_ulonglong);
        graph_destroy = cuGraphDestroy(CUgraph);
        /// 10.0 and newer: a node running a copy of another graph, after
        /// the given nodes; a foreign operation's captured work.
        graph_add_child_graph_node = cuGraphAddChildGraphNode(
            *mut CUgraphNode,
            CUgraph,
            *const CUgraphNode,
            usize,
            CUgraph,
        );
        graph_exec_destroy = cuGraphExecDestroy(CUgraphExec);
        graph_upload = cuGraphUpload(CUgraphExec, CUstream);
        graph_launch = cuGraphLaunch(CUgraphExec, CUstream);
    }
    optional {
        /// 12.0 and newer: in-place update, reporting why it failed.
        graph_exec_update = cuGraphExecUpdate_v2(
            CUgraphExec,
            CUgraph,
            *mut CUgraphExecUpdateResultInfo,
        );
        /// 12.4 and newer: a kernel's parameters, for the build's check.
        func_get_param_info = cuFuncGetParamInfo(CUfunction, usize, *mut usize, *mut usize);
        /// A graph's nodes without dependencies, where the walk of a
        /// captured chain starts (with the three below, what replaying a
        /// graph as its dependency graph needs).
        graph_get_root_nodes = cuGraphGetRootNodes(CUgraph, *mut CUgraphNode, *mut usize);
        /// 12.3 and newer, and the only spelling CUDA 13's header declares
        /// (its `cuGraphNodeGetDependentNodes` is this symbol): the nodes
        /// that depend on a node.
        graph_node_get_dependent_nodes = cuGraphNodeGetDependentNodes_v2(
            CUgraphNode,
            *mut CUgraphNode,
            *mut CUgraphEdgeData,
            *mut usize,
        );
        /// 12.3 and newer (CUDA 13's `cuGraphAddDependencies`): add edges.
        graph_add_dependencies = cuGraphAddDependencies_v2(
            CUgraph,
            *const CUgraphNode,
            *const CUgraphNode,
            *const CUgraphEdgeData,
            usize,
        );
        /// 12.3 and newer (CUDA 13's `cuGraphRemoveDependencies`): remove
        /// edges.
        graph_remove_dependencies = cuGraphRemoveDependencies_v2(
            CUgraph,
            *const CUgraphNode,
            *const CUgraphNode,
            *const CUgraphEdgeData,
            usize,
        );
        /// 12.3 and newer, as every function below: a handle a conditional
        /// node of `hGraph` reads, set by `cudaGraphSetConditional` in
        /// device code. Conditional nodes in stream captures need 12.4.
        graph_conditional_handle_create = cuGraphConditionalHandleCreate(
            *mut CUgraphConditionalHandle,
            CUgraph,
            CUcontext,
            c_uint,
            c_uint,
        );
        /// Add a node of any kind (here a conditional or an empty node),
        /// over plain edges from its dependencies (CUDA 13's
        /// `cuGraphAddNode`).
        graph_add_node = cuGraphAddNode_v2(
            *mut CUgraphNode,
            CUgraph,
            *const CUgraphNode,
            *const CUgraphEdgeData,
            usize,
            *mut CUgraphNodeParams,
        );
        /// Capture a stream's work into an existing graph: a conditional
        /// node's body.
        stream_begin_capture_to_graph = cuStreamBeginCaptureToGraph(
            CUstream,
            CUgraph,
            *const CUgraphNode,
            *const CUgraphEdgeData,
            usize,
            CUstreamCaptureMode,
        );
        /// A capturing stream's graph and the nodes its next node will
        /// follow (CUDA 13's `cuStreamGetCaptureInfo`).
        stream_get_capture_info = cuStreamGetCaptureInfo_v3(
            CUstream,
            *mut CUstreamCaptureStatus,
            *mut cuuint64_t,
            *mut CUgraph,
            *mut *const CUgraphNode,
            *mut *const CUgraphEdgeData,
            *mut usize,
        );
        /// Make a capturing stream's next node follow the given nodes
        /// (CUDA 13's `cuStreamUpdateCaptureDependencies`).
        stream_update_capture_dependencies = cuStreamUpdateCaptureDependencies_v2(
            CUstream,
            *mut CUgraphNode,
            *const CUgraphEdgeData,
            usize,
            c_uint,
        );
    }
    legacy {
        /// 10.0 and newer, still exported by 13.0: the nodes that depend on
        /// a node, over plain edges. What a 12.0 to 12.2 driver offers in
        /// place of `cuGraphNodeGetDependentNodes_v2`.
        graph_node_get_dependent_nodes_plain = cuGraphNodeGetDependentNodes(
            CUgraphNode,
            *mut CUgraphNode,
            *mut usize,
        );
        /// 10.0 and newer: add plain edges, in place of
        /// `cuGraphAddDependencies_v2`.
        graph_add_dependencies_plain = cuGraphAddDependencies(
            CUgraph,
            *const CUgraphNode,
            *const CUgraphNode,
            usize,
        );
        /// 10.0 and newer: remove plain edges, in place of
        /// `cuGraphRemoveDependencies_v2`.
        graph_remove_dependencies_plain = cuGraphRemoveDependencies(
            CUgraph,
            *const CUgraphNode,
            *const CUgraphNode,
            usize,
        );
    }
}

/// `cuGraphAddDependencies_v2` and `cuGraphRemoveDependencies_v2`, as the
/// table holds them.
pub(crate) type ChangeWithData = unsafe extern "C" fn(
    CUgraph,
    *const CUgraphNode,
    *const CUgraphNode,
    *const CUgraphEdgeData,
    usize,
) -> CUresult;
/// The 10.0 `cuGraphAddDependencies` and `cuGraphRemoveDependencies`.
pub(crate) type ChangePlain =
    unsafe extern "C" fn(CUgraph, *const CUgraphNode, *const CUgraphNode, usize) -> CUresult;
/// `cuGraphNodeGetDependentNodes_v2`.
pub(crate) type DependentsWithData = unsafe extern "C" fn(
    CUgraphNode,
    *mut CUgraphNode,
    *mut CUgraphEdgeData,
    *mut usize,
) -> CUresult;
/// The 10.0 `cuGraphNodeGetDependentNodes`.
pub(crate) type DependentsPlain =
    unsafe extern "C" fn(CUgraphNode, *mut CUgraphNode, *mut usize) -> CUresult;

/// `cuGraphConditionalHandleCreate`.
pub(crate) type HandleCreate = unsafe extern "C" fn(
    *mut CUgraphConditionalHandle,
    CUgraph,
    CUcontext,
    c_uint,
    c_uint,
) -> CUresult;
/// `cuGraphAddNode_v2`.
pub(crate) type AddNode = unsafe extern "C" fn(
    *mut CUgraphNode,
    CUgraph,
    *const CUgraphNode,
    *const CUgraphEdgeData,
    usize,
    *mut CUgraphNodeParams,
) -> CUresult;
/// `cuStreamBeginCaptureToGraph`.
pub(crate) type BeginCaptureToGraph = unsafe extern "C" fn(
    CUstream,
    CUgraph,
    *const CUgraphNode,
    *const CUgraphEdgeData,
    usize,
    CUstreamCaptureMode,
) -> CUresult;
/// `cuStreamGetCaptureInfo_v3`.
pub(crate) type CaptureInfo = unsafe extern "C" fn(
    CUstream,
    *mut CUstreamCaptureStatus,
    *mut cuuint64_t,
    *mut CUgraph,
    *mut *const CUgraphNode,
    *mut *const CUgraphEdgeData,
    *mut usize,
) -> CUresult;
/// `cuStreamUpdateCaptureDependencies_v2`.
pub(crate) type UpdateDependencies = unsafe extern "C" fn(
    CUstream,
    *mut CUgraphNode,
    *const CUgraphEdgeData,
    usize,
    c_uint,
) -> CUresult;

/// A C expression whose value must be `value` under `cuda.h`: a constant
/// this file declares, or the size or offset of a type it declares.
#[derive(Debug, Clone, Copy)]
pub struct AbiFact {
    /// The expression in C (`CUDA_ERROR_STUB_LIBRARY`, `sizeof(CUdevice)`).
    pub c: &'static str,
    /// What the Rust declaration makes it.
    pub value: i64,
}

macro_rules! constants {
    ($($name:ident),* $(,)?) => {
        [$(AbiFact { c: stringify!($name), value: $name as i64 }),*]
    };
}

macro_rules! sizes {
    ($($name:ident),* $(,)?) => {
        [$(AbiFact { c: concat!("sizeof(", stringify!($name), ")"), value: size_of::<$name>() as i64 }),*]
    };
}

const CONSTANTS: [AbiFact; 55] = constants![
    CUDA_SUCCESS,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_STUB_LIBRARY,
    CUDA_ERROR_NO_DEVICE,
    CUDA_ERROR_INVALID_IMAGE,
    CUDA_ERROR_NO_BINARY_FOR_GPU,
    CUDA_ERROR_INVALID_PTX,
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
    CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_READY,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    CU_JIT_INFO_LOG_BUFFER,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    CU_JIT_ERROR_LOG_BUFFER,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    CU_JIT_INPUT_PTX,
    CU_STREAM_NON_BLOCKING,
    CU_STREAM_LEGACY,
    CU_STREAM_PER_THREAD,
    CU_POINTER_ATTRIBUTE_CONTEXT,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    CU_EVENT_DISABLE_TIMING,
    CU_MEMHOSTALLOC_PORTABLE,
    CU_STREAM_CAPTURE_MODE_RELAXED,
    CU_STREAM_CAPTURE_STATUS_NONE,
    CU_STREAM_CAPTURE_STATUS_ACTIVE,
    CU_STREAM_SET_CAPTURE_DEPENDENCIES,
    CU_GRAPH_NODE_TYPE_GRAPH,
    CU_GRAPH_NODE_TYPE_MEM_ALLOC,
    CU_GRAPH_NODE_TYPE_MEM_FREE,
    CU_GRAPH_NODE_TYPE_EMPTY,
    CU_GRAPH_NODE_TYPE_CONDITIONAL,
    CU_GRAPH_COND_TYPE_IF,
    CU_GRAPH_COND_TYPE_WHILE,
    CU_GRAPH_EXEC_UPDATE_SUCCESS,
    CU_GRAPH_EXEC_UPDATE_ERROR,
    CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
    CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED,
    CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED,
    CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED,
    CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED,
    CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE,
    CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED,
];

const SIZES: [AbiFact; 28] = sizes![
    CUresult,
    CUdevice,
    CUdeviceptr,
    CUcontext,
    CUmodule,
    CUfunction,
    CUstream,
    CUevent,
    CUgraph,
    CUgraphNode,
    CUgraphExec,
    CUlinkState,
    CUdevice_attribute,
    CUfunction_attribute,
    CUjit_option,
    CUjitInputType,
    CUstreamCaptureMode,
    CUstreamCaptureStatus,
    CUgraphNodeType,
    CUgraphExecUpdateResult,
    CUpointer_attribute,
    CUgraphExecUpdateResultInfo,
    CUgraphEdgeData,
    cuuint64_t,
    CUgraphConditionalHandle,
    CUgraphConditionalNodeType,
    CUDA_CONDITIONAL_NODE_PARAMS,
    CUgraphNodeParams,
];

const OFFSETS: [AbiFact; 18] = [
    AbiFact {
        c: "sizeof(size_t)",
        value: size_of::<usize>() as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphExecUpdateResultInfo, result)",
        value: offset_of!(CUgraphExecUpdateResultInfo, result) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphExecUpdateResultInfo, errorNode)",
        value: offset_of!(CUgraphExecUpdateResultInfo, errorNode) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphExecUpdateResultInfo, errorFromNode)",
        value: offset_of!(CUgraphExecUpdateResultInfo, errorFromNode) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphEdgeData, from_port)",
        value: offset_of!(CUgraphEdgeData, from_port) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphEdgeData, to_port)",
        value: offset_of!(CUgraphEdgeData, to_port) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphEdgeData, type)",
        value: offset_of!(CUgraphEdgeData, r#type) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphEdgeData, reserved)",
        value: offset_of!(CUgraphEdgeData, reserved) as i64,
    },
    AbiFact {
        c: "offsetof(CUDA_CONDITIONAL_NODE_PARAMS, handle)",
        value: offset_of!(CUDA_CONDITIONAL_NODE_PARAMS, handle) as i64,
    },
    AbiFact {
        c: "offsetof(CUDA_CONDITIONAL_NODE_PARAMS, type)",
        value: offset_of!(CUDA_CONDITIONAL_NODE_PARAMS, r#type) as i64,
    },
    AbiFact {
        c: "offsetof(CUDA_CONDITIONAL_NODE_PARAMS, size)",
        value: offset_of!(CUDA_CONDITIONAL_NODE_PARAMS, size) as i64,
    },
    AbiFact {
        c: "offsetof(CUDA_CONDITIONAL_NODE_PARAMS, phGraph_out)",
        value: offset_of!(CUDA_CONDITIONAL_NODE_PARAMS, phGraph_out) as i64,
    },
    AbiFact {
        c: "offsetof(CUDA_CONDITIONAL_NODE_PARAMS, ctx)",
        value: offset_of!(CUDA_CONDITIONAL_NODE_PARAMS, ctx) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphNodeParams, type)",
        value: offset_of!(CUgraphNodeParams, r#type) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphNodeParams, reserved0)",
        value: offset_of!(CUgraphNodeParams, reserved0) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphNodeParams, conditional)",
        value: offset_of!(CUgraphNodeParams, conditional) as i64,
    },
    AbiFact {
        c: "offsetof(CUgraphNodeParams, reserved2)",
        value: offset_of!(CUgraphNodeParams, reserved2) as i64,
    },
    AbiFact {
        c: "_Alignof(CUgraphNodeParams)",
        value: std::mem::align_of::<CUgraphNodeParams>() as i64,
    },
];

/// Every constant, size and offset the declarations rely on, for the ABI
/// test to check against `cuda.h`.
pub fn abi_facts() -> Vec<AbiFact> {
    let mut facts = Vec::with_capacity(CONSTANTS.len() + SIZES.len() + OFFSETS.len());
    facts.extend(CONSTANTS);
    facts.extend(SIZES);
    facts.extend(OFFSETS);
    facts
}
