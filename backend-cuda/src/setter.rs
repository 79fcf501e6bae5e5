//! What conditional nodes need of the driver: its functions for them,
//! looked up as optional so that an older driver still loads the library,
//! and the setter kernels, a module of their own that reads a flag and
//! sets a node's handle (see `conditional.ptx`).

use std::ffi::{CStr, c_int, c_uint, c_void};
use std::ptr;

use capture_core::DriverError;

use crate::error::refuse;
use crate::sys::{
    self, AddNode, Api, BeginCaptureToGraph, CUcontext, CUfunction, CUgraph,
    CUgraphConditionalHandle, CUgraphConditionalNodeType, CUgraphEdgeData, CUgraphNode,
    CUgraphNodeParams, CUjit_option, CUmodule, CUstream, CaptureInfo, HandleCreate,
    UpdateDependencies,
};

/// The setters' body; the header naming the PTX version and target is
/// chosen per device by [`setter_ptx`].
const SETTER_BODY: &str = include_str!("conditional.ptx");

/// The oldest driver whose stream captures hold conditional nodes (with
/// `cuStreamBeginCaptureToGraph` filling their bodies).
pub(crate) const CONDITIONAL_DRIVER: c_int = 12040;

/// The oldest driver (r570) with if/else nodes of two bodies, and the
/// first that runs a body without a kernel rather than hang on it (before
/// it an empty body gets the no-op kernel, as XLA's fix for that hang
/// does; an empty node is not enough).
pub(crate) const IF_ELSE_DRIVER: c_int = 12080;

/// The setter PTX for a device of compute capability `major.minor`, with
/// the builtins' header: `sm_75` from Turing on, `sm_50` before.
pub(crate) fn setter_ptx(major: i32, minor: i32) -> String {
    let (version, target) = if (major, minor) >= (7, 5) {
        ("7.4", "sm_75")
    } else {
        ("7.0", "sm_50")
    };
    format!(".version {version}\n.target {target}\n.address_size 64\n\n{SETTER_BODY}")
}

/// Every setter PTX text this crate can give a driver, labelled by the
/// devices that get it, so that an assembler can check each offline.
pub fn setter_ptx_variants() -> Vec<(String, String)> {
    vec![
        (
            "conditional setters for compute capability below 7.5".to_owned(),
            setter_ptx(5, 0),
        ),
        (
            "conditional setters for compute capability 7.5 and newer".to_owned(),
            setter_ptx(7, 5),
        ),
    ]
}

/// One setter kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setter {
    /// `(flag, handle)`: the handle is the flag.
    If,
    /// `(flag, then, otherwise)`: an if/else as two `if` nodes.
    IfElse,
    /// `(flag, handle, trips, bound)`: before a loop, the trip counter set
    /// to 0.
    WhileFirst,
    /// `(flag, handle, trips, bound)`: at the end of each iteration, the
    /// trip counter counted.
    WhileNext,
    /// `()`: sets nothing; the kernel an otherwise empty body is given on
    /// a driver before 12.8, which hangs on a body without one.
    Noop,
}

impl Setter {
    const ALL: [Setter; 5] = [
        Setter::If,
        Setter::IfElse,
        Setter::WhileFirst,
        Setter::WhileNext,
        Setter::Noop,
    ];

    /// Its entry point in `conditional.ptx`.
    pub(crate) fn entry(self) -> &'static CStr {
        match self {
            Setter::If => c"conditional_set_if",
            Setter::IfElse => c"conditional_set_if_else",
            Setter::WhileFirst => c"conditional_while_first",
            Setter::WhileNext => c"conditional_while_next",
            Setter::Noop => c"conditional_noop",
        }
    }

    /// The bytes of each parameter a launch passes it, in order.
    pub(crate) fn params(self) -> &'static [usize] {
        match self {
            Setter::If => &[8, 8],
            Setter::IfElse => &[8, 8, 8],
            Setter::WhileFirst | Setter::WhileNext => &[8, 8, 8, 4],
            Setter::Noop => &[],
        }
    }
}

/// Every setter entry point and the bytes of each parameter a launch
/// passes it, for the offline checks.
pub fn setter_entries() -> Vec<(&'static str, &'static [usize])> {
    Setter::ALL
        .iter()
        .map(|s| (s.entry().to_str().unwrap_or_default(), s.params()))
        .collect()
}

/// The setter module loaded in one context, and its entry points.
pub(crate) struct Setters {
    module: CUmodule,
    functions: [CUfunction; Setter::ALL.len()],
}

// SAFETY: a module and its functions are process-wide handles any thread
// may launch once their context is current; nothing mutates them, and the
// module is unloaded once, by the device that loaded it.
unsafe impl Send for Setters {}
// SAFETY: as for Send.
unsafe impl Sync for Setters {}

impl Setters {
    /// The loaded module, for its device to unload.
    pub(crate) fn module(&self) -> CUmodule {
        self.module
    }

    /// `which`'s function.
    pub(crate) fn function(&self, which: Setter) -> CUfunction {
        let at = Setter::ALL.iter().position(|&s| s == which).unwrap_or(0);
        self.functions[at]
    }
}

/// Bytes kept of the JIT's error log.
const LOG_BYTES: usize = 4096;

/// Load the setter module for a device of compute capability `compute`,
/// whose context the caller made current. On a refused entry point the
/// module is handed back with the reason, for the device to unload.
pub(crate) fn load(
    api: &Api,
    compute: (c_int, c_int),
) -> Result<Setters, (String, Option<CUmodule>)> {
    let mut text = setter_ptx(compute.0, compute.1).into_bytes();
    text.push(0);
    let mut log = vec![0u8; LOG_BYTES];
    let mut options: [CUjit_option; 2] = [
        sys::CU_JIT_ERROR_LOG_BUFFER,
        sys::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values: [*mut c_void; 2] = [
        log.as_mut_ptr().cast::<c_void>(),
        ptr::without_provenance_mut(LOG_BYTES),
    ];
    let mut module: CUmodule = ptr::null_mut();
    // SAFETY: the PTX ends in its NUL and outlives the call; `options` and
    // `values` hold the same number of entries, which is passed, and the
    // log buffer holds the size its option announces.
    let loaded = unsafe {
        (api.module_load_data_ex)(
            &mut module,
            text.as_ptr().cast::<c_void>(),
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if loaded != sys::CUDA_SUCCESS {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let words = String::from_utf8_lossy(&log[..end]).trim().to_owned();
        let mut reason = format!(
            "the driver refused the conditional setter kernels (they call \
             cudaGraphSetConditional, which the driver links in from 12.3 on): {}",
            api.describe(loaded)
        );
        if !words.is_empty() {
            reason.push_str(&format!("; JIT error log:\n{words}"));
        }
        return Err((reason, None));
    }
    let mut functions = [ptr::null_mut(); Setter::ALL.len()];
    for (slot, which) in functions.iter_mut().zip(Setter::ALL) {
        // SAFETY: the module is live, the name NUL-terminated, and the slot
        // a valid place for the handle.
        let found = unsafe { (api.module_get_function)(slot, module, which.entry().as_ptr()) };
        if found != sys::CUDA_SUCCESS {
            return Err((
                format!(
                    "the conditional setter module has no entry point {:?}: {}",
                    which.entry(),
                    api.describe(found)
                ),
                Some(module),
            ));
        }
    }
    Ok(Setters { module, functions })
}

/// The driver functions conditional nodes need, all present.
#[derive(Clone, Copy)]
pub(crate) struct ConditionalFunctions {
    handle_create: HandleCreate,
    add_node: AddNode,
    begin_capture_to_graph: BeginCaptureToGraph,
    /// What adding a node to a capture needs.
    pub(crate) capture: CaptureFunctions,
}

/// The driver functions that add a node of the library's own to a stream
/// capture and make the stream's next node follow it (12.3 and newer).
#[derive(Clone, Copy)]
pub(crate) struct CaptureFunctions {
    capture_info: CaptureInfo,
    update_dependencies: UpdateDependencies,
}

/// What a capturing stream's next node follows, and the graph it goes in.
pub(crate) struct CaptureInfoOf {
    pub(crate) graph: CUgraph,
    pub(crate) dependencies: Vec<CUgraphNode>,
}

impl CaptureFunctions {
    /// Both functions, or the name of the first the driver lacks.
    pub(crate) fn of(api: &Api) -> Result<Self, &'static str> {
        Ok(Self {
            capture_info: api
                .stream_get_capture_info
                .ok_or("cuStreamGetCaptureInfo_v3")?,
            update_dependencies: api
                .stream_update_capture_dependencies
                .ok_or("cuStreamUpdateCaptureDependencies_v2")?,
        })
    }

    /// The graph `stream` captures into and the nodes its next node will
    /// follow. The caller has made the stream's context current.
    pub(crate) fn capture_info(
        &self,
        api: &Api,
        stream: CUstream,
        op: &'static str,
    ) -> Result<CaptureInfoOf, DriverError> {
        let mut status = sys::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut graph: CUgraph = ptr::null_mut();
        let mut dependencies: *const CUgraphNode = ptr::null();
        // Asked for, though unused: without a place for it the driver
        // refuses (CUDA_ERROR_LOSSY_QUERY) when an edge carries data, as
        // the caller's programmatic launches on an adopted stream make. The
        // node then follows those nodes over plain edges, which order at
        // least as strongly.
        let mut edge_data: *const CUgraphEdgeData = ptr::null();
        let mut count: usize = 0;
        // SAFETY: the stream is live; every out-pointer is a valid place,
        // and the id is not asked for (null).
        api.check(op, unsafe {
            (self.capture_info)(
                stream,
                &mut status,
                ptr::null_mut(),
                &mut graph,
                &mut dependencies,
                &mut edge_data,
                &mut count,
            )
        })?;
        if status != sys::CU_STREAM_CAPTURE_STATUS_ACTIVE || graph.is_null() {
            return Err(refuse(
                op,
                format!("the stream is not capturing (capture status {status})"),
            ));
        }
        let dependencies = if count == 0 || dependencies.is_null() {
            Vec::new()
        } else {
            // SAFETY: on success the driver points `dependencies` at
            // `count` nodes, valid until the next call on the stream; they
            // are copied out before that.
            unsafe { std::slice::from_raw_parts(dependencies, count) }.to_vec()
        };
        Ok(CaptureInfoOf {
            graph,
            dependencies,
        })
    }

    /// Make `stream`'s next captured node follow `node` alone.
    pub(crate) fn follow(
        &self,
        api: &Api,
        stream: CUstream,
        node: CUgraphNode,
        op: &'static str,
    ) -> Result<(), DriverError> {
        let mut nodes = [node];
        // SAFETY: the stream is capturing into the graph `node` belongs
        // to; one node is passed, with plain edges (no edge data).
        api.check(op, unsafe {
            (self.update_dependencies)(
                stream,
                nodes.as_mut_ptr(),
                ptr::null(),
                nodes.len(),
                sys::CU_STREAM_SET_CAPTURE_DEPENDENCIES,
            )
        })
    }
}

impl ConditionalFunctions {
    /// Every function, or the name of the first the driver lacks.
    pub(crate) fn of(api: &Api) -> Result<Self, &'static str> {
        Ok(Self {
            handle_create: api
                .graph_conditional_handle_create
                .ok_or("cuGraphConditionalHandleCreate")?,
            add_node: api.graph_add_node.ok_or("cuGraphAddNode_v2")?,
            begin_capture_to_graph: api
                .stream_begin_capture_to_graph
                .ok_or("cuStreamBeginCaptureToGraph")?,
            capture: CaptureFunctions::of(api)?,
        })
    }

    /// A handle for a conditional node of `graph`, with no default value:
    /// a setter always sets it before the node reads it.
    pub(crate) fn handle(
        &self,
        api: &Api,
        graph: CUgraph,
        context: CUcontext,
        op: &'static str,
    ) -> Result<CUgraphConditionalHandle, DriverError> {
        let mut handle: CUgraphConditionalHandle = 0;
        // SAFETY: the graph is live and of `context`, which is current;
        // `handle` is a valid place for the answer.
        api.check(op, unsafe {
            (self.handle_create)(&mut handle, graph, context, 0, 0)
        })?;
        Ok(handle)
    }

    /// Add a conditional node of `kind` over `handle` to `graph`, after
    /// `after`, with `bodies` bodies; its body graphs, which the driver
    /// owns with the node.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_conditional(
        &self,
        api: &Api,
        graph: CUgraph,
        after: &[CUgraphNode],
        handle: CUgraphConditionalHandle,
        kind: CUgraphConditionalNodeType,
        bodies: usize,
        context: CUcontext,
        op: &'static str,
    ) -> Result<(CUgraphNode, Vec<CUgraph>), DriverError> {
        let mut params = CUgraphNodeParams::zeroed(sys::CU_GRAPH_NODE_TYPE_CONDITIONAL);
        params.conditional.handle = handle;
        params.conditional.r#type = kind;
        params.conditional.size = c_uint::try_from(bodies).unwrap_or(1);
        params.conditional.ctx = context;
        let mut node: CUgraphNode = ptr::null_mut();
        // SAFETY: the graph is live and every node of `after` is one of
        // its own; a null edge-data array means plain edges; `params` is a
        // whole, zeroed `CUgraphNodeParams` (the ABI test checks its
        // layout) whose output array the driver fills.
        api.check(op, unsafe {
            (self.add_node)(
                &mut node,
                graph,
                after.as_ptr(),
                ptr::null(),
                after.len(),
                &mut params,
            )
        })?;
        let out = params.conditional.phGraph_out;
        if out.is_null() {
            return Err(refuse(
                op,
                "the driver made a conditional node without bodies",
            ));
        }
        // SAFETY: on success the driver points `phGraph_out` at an array of
        // `size` body graphs it owns for the node's life.
        let graphs = unsafe { std::slice::from_raw_parts(out, bodies) }.to_vec();
        if graphs.iter().any(|g| g.is_null()) {
            return Err(refuse(
                op,
                "the driver made a conditional node without bodies",
            ));
        }
        Ok((node, graphs))
    }

    /// Capture `stream`'s work from here into `graph`, from its roots, in
    /// relaxed mode (see the stream's own captures).
    pub(crate) fn capture_into(
        &self,
        api: &Api,
        stream: CUstream,
        graph: CUgraph,
        op: &'static str,
    ) -> Result<(), DriverError> {
        // SAFETY: the stream is live and not capturing, the graph live and
        // of its context; no dependencies are passed.
        api.check(op, unsafe {
            (self.begin_capture_to_graph)(
                stream,
                graph,
                ptr::null(),
                ptr::null(),
                0,
                sys::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `entry`'s text from `.visible .entry` up to its closing brace.
    fn entry_text(entry: &str) -> &'static str {
        let start = SETTER_BODY
            .find(&format!(".visible .entry {entry}("))
            .unwrap_or_else(|| panic!("{entry} is missing"));
        let rest = &SETTER_BODY[start..];
        &rest[..rest.find("\n}\n").expect("the body closes")]
    }

    /// Without an assembler here (the offline tests have one), at least the
    /// interface: each entry declares the parameters its launch passes and
    /// loads each once, runs one thread, and sets its handles.
    #[test]
    fn every_setter_takes_what_its_launch_passes_and_sets_its_handles() {
        for which in Setter::ALL {
            let entry = which.entry().to_str().expect("an ASCII name");
            let body = entry_text(entry);
            let (head, code) = body.split_once('{').expect("the body opens");
            let declared: Vec<usize> = head
                .split(".param .u")
                .skip(1)
                .map(|p| if p.starts_with("64") { 8 } else { 4 })
                .collect();
            assert_eq!(declared, which.params(), "{entry}");
            assert_eq!(
                code.matches("ld.param.u").count(),
                declared.len(),
                "{entry}"
            );
            assert!(head.contains(".reqntid 1, 1, 1"), "{entry}");
            let calls = code.matches("call.uni cudaGraphSetConditional").count();
            let handles = match which {
                Setter::IfElse => 2,
                Setter::Noop => 0,
                _ => 1,
            };
            assert_eq!(calls, handles, "{entry}");
        }
        // The loop's bound counts iterations made: the first setter resets
        // the counter, the next one counts up and compares before setting.
        let first = entry_text("conditional_while_first");
        assert!(first.contains("st.global.u32 \t[%rd4], 0;"), "{first}");
        let next = entry_text("conditional_while_next");
        assert!(next.contains("add.u32 \t%r3, %r3, 1;"), "{next}");
        assert!(next.contains("setp.lt.u32 \t%p2, %r3, %r2;"), "{next}");
        // Neither writes the flag: it stays as the body left it.
        for entry in ["conditional_while_first", "conditional_while_next"] {
            assert_eq!(entry_text(entry).matches("st.global").count(), 1, "{entry}");
        }
        assert!(setter_ptx(9, 0).starts_with(".version 7.4\n.target sm_75\n"));
        assert!(setter_ptx(6, 1).starts_with(".version 7.0\n.target sm_50\n"));
        assert_eq!(setter_ptx_variants().len(), 2);
        assert_eq!(
            SETTER_BODY.matches(".visible .entry").count(),
            Setter::ALL.len()
        );
    }
}
