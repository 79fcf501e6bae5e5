//! Foreign operations: a caller's own work (rocBLAS, RCCL, its own kernels
//! and copies) enqueued where a launch of ours would be, over the buffers
//! it declared. Inside a window the work is captured on a side stream into
//! a graph of its own, which becomes one child graph node of the
//! recording, placed in the dependency graph like a launch.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Arc;

use capture_core::{Access, DriverError};

use crate::device::Device;
use crate::error::{self, other};
use crate::ffi;
use crate::loader::{Api, CaptureNodes};

const OP: &str = "foreign operation";

/// One declared buffer as the operation's work sees it: the device range it
/// may touch, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForeignBuffer {
    /// The device address of the declared bytes' start.
    pub address: *mut c_void,
    /// How many bytes were declared.
    pub len: u64,
    /// What the operation may do to them.
    pub access: Access,
}

impl ForeignBuffer {
    pub(crate) const NONE: ForeignBuffer = ForeignBuffer {
        address: ptr::null_mut(),
        len: 0,
        access: Access::Read,
    };
}

/// What a foreign operation enqueues its work on.
#[derive(Debug)]
pub struct ForeignStream<'a> {
    /// The stream to enqueue on: the library's stream when it runs at once,
    /// or a side stream capturing into the operation's own graph inside a
    /// window.
    pub stream: ffi::Stream,
    /// The HIP device, current on the calling thread for the call.
    pub device: c_int,
    /// Whether `stream` is capturing: the work becomes part of a graph and
    /// runs at each replay, not now.
    pub capturing: bool,
    /// The declared buffers, in declaration order.
    pub buffers: &'a [ForeignBuffer],
}

type Op = dyn Fn(&ForeignStream<'_>) -> Result<(), String> + Send + Sync;

/// A foreign operation's code, and the device it enqueues on.
pub(crate) struct Foreign {
    pub(crate) device: Arc<Device>,
    op: Box<Op>,
}

impl Foreign {
    pub(crate) fn new(
        device: &Arc<Device>,
        op: impl Fn(&ForeignStream<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            device: Arc::clone(device),
            op: Box::new(op),
        }
    }

    /// Run the operation onto `stream`; its `Err` or panic is a refusal.
    pub(crate) fn run(
        &self,
        stream: ffi::Stream,
        capturing: bool,
        buffers: &[ForeignBuffer],
    ) -> Result<(), DriverError> {
        let handed = ForeignStream {
            stream,
            device: self.device.ordinal,
            capturing,
            buffers,
        };
        capture_core::run_foreign_code(|| (self.op)(&handed)).map_err(|why| other(OP, why))
    }

    /// Capture the operation on `side` into a graph of its own and add that
    /// graph to `target`'s capture as one child graph node, which the
    /// stream's next node follows. The device is current.
    pub(crate) fn capture_into(
        &self,
        target: ffi::Stream,
        side: ffi::Stream,
        buffers: &[ForeignBuffer],
    ) -> Result<(), DriverError> {
        let api = self.device.api;
        let nodes = api.capture_nodes.ok_or_else(|| {
            other(
                OP,
                "a foreign operation inside a window needs hipStreamGetCaptureInfo_v2, \
                 hipStreamUpdateCaptureDependencies and hipGraphAddChildGraphNode, which this \
                 runtime lacks (ROCm 5.3 or newer)",
            )
        })?;
        let child = self.capture(api, side, buffers)?;
        add_child(api, nodes, target, child.0)
    }

    /// The operation's work, captured on `side`; the side stream's capture
    /// ends on every path.
    fn capture(
        &self,
        api: &'static Api,
        side: ffi::Stream,
        buffers: &[ForeignBuffer],
    ) -> Result<Owned, DriverError> {
        // SAFETY: the side stream is live, the stream's own and not
        // capturing; the mode is a documented one.
        let code = unsafe { (api.stream_begin_capture)(side, ffi::CAPTURE_MODE_RELAXED) };
        error::check(api, OP, code)?;
        let ran = self.run(side, true, buffers);
        let mut graph = ptr::null_mut();
        // SAFETY: the side stream is capturing; the out-pointer is a live
        // local.
        let code = unsafe { (api.stream_end_capture)(side, &mut graph) };
        let owned = (!graph.is_null()).then_some(Owned(graph, api));
        ran?;
        error::check(api, OP, code).map_err(|e| {
            other(
                OP,
                format!(
                    "its work could not be captured ({}); it enqueued something a graph cannot \
                     hold, or work on another stream it did not join back",
                    e.message
                ),
            )
        })?;
        owned.ok_or_else(|| other(OP, "the runtime ended its capture without a graph"))
    }
}

/// Add `child` to `target`'s capture after what its next node would
/// follow, and make that node follow the child instead.
fn add_child(
    api: &'static Api,
    nodes: CaptureNodes,
    target: ffi::Stream,
    child: ffi::Graph,
) -> Result<(), DriverError> {
    let mut status = ffi::CAPTURE_STATUS_NONE;
    let mut graph = ptr::null_mut();
    let mut dependencies: *const ffi::GraphNode = ptr::null();
    let mut count = 0usize;
    // SAFETY: the stream is live; every out-pointer is a live local and the
    // id is not asked for.
    let code = unsafe {
        (nodes.get_capture_info)(
            target,
            &mut status,
            ptr::null_mut(),
            &mut graph,
            &mut dependencies,
            &mut count,
        )
    };
    error::check(api, OP, code)?;
    if status != ffi::CAPTURE_STATUS_ACTIVE || graph.is_null() {
        return Err(other(
            OP,
            format!("the recording stream is not capturing (capture status {status})"),
        ));
    }
    let after: &[ffi::GraphNode] = match count {
        0 => &[],
        _ if dependencies.is_null() => {
            return Err(other(
                OP,
                format!("the runtime reported {count} dependencies of the capture, and no nodes"),
            ));
        }
        // SAFETY: on success the runtime points `dependencies` at `count`
        // nodes, valid until the next call on the stream; read before it.
        _ => unsafe { std::slice::from_raw_parts(dependencies, count) },
    };
    let mut node = ptr::null_mut();
    // SAFETY: both graphs are live; every dependency is a node of the
    // capture's graph, as the runtime reported; the runtime copies the
    // child, which its owner destroys after.
    let code = unsafe {
        (nodes.add_child_graph_node)(&mut node, graph, after.as_ptr(), after.len(), child)
    };
    error::check(api, OP, code)?;
    let mut follow = [node];
    // SAFETY: the stream captures into the graph `node` belongs to; one
    // node is passed.
    let code = unsafe {
        (nodes.update_capture_dependencies)(
            target,
            follow.as_mut_ptr(),
            follow.len(),
            ffi::STREAM_SET_CAPTURE_DEPENDENCIES,
        )
    };
    error::check(api, OP, code)
}

/// A graph the library made, destroyed when dropped.
struct Owned(ffi::Graph, &'static Api);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: the graph is owned here alone and destroyed once; a child
        // graph node holds its own copy.
        let code = unsafe { (self.1.graph_destroy)(self.0) };
        if let Err(e) = error::check(self.1, "destroy a foreign operation's graph", code) {
            log::warn!("{e}");
        }
    }
}
