//! Foreign operations: a caller's own work (cuBLAS, NCCL, its own kernels
//! and copies) enqueued where a launch of ours would be, over the buffers
//! it declared. Inside a window the work is captured on a side stream into
//! a graph of its own, which becomes one child graph node of the recording:
//! one node per operation, ordered by the dependency graph like a launch.

use std::ptr;
use std::sync::Arc;

use capture_core::{Access, DriverError};

use crate::conditional::Nesting;
use crate::device::Device;
use crate::error::refuse;
use crate::graph::count_nodes;
use crate::setter::CaptureFunctions;
use crate::sys::{self, Api, CUcontext, CUdeviceptr, CUgraph, CUgraphNode, CUstream};

const OP: &str = "foreign operation";

/// One declared buffer as the operation's work sees it: the device range it
/// may touch, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForeignBuffer {
    /// The device address of the declared bytes' start.
    pub address: CUdeviceptr,
    /// How many bytes were declared.
    pub len: u64,
    /// What the operation may do to them.
    pub access: Access,
}

impl ForeignBuffer {
    pub(crate) const NONE: ForeignBuffer = ForeignBuffer {
        address: 0,
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
    pub stream: CUstream,
    /// The device's context, current on the calling thread for the call.
    pub context: CUcontext,
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
    fn run(
        &self,
        stream: CUstream,
        capturing: bool,
        buffers: &[ForeignBuffer],
    ) -> Result<(), DriverError> {
        let handed = ForeignStream {
            stream,
            context: self.device.raw_context(),
            capturing,
            buffers,
        };
        capture_core::run_foreign_code(|| (self.op)(&handed)).map_err(|why| refuse(OP, why))
    }

    /// Enqueue the operation on `target`, the stream's own or, inside a
    /// window, the stream that records (its own or a body's side stream).
    /// The caller has made the context current.
    pub(crate) fn enqueue(
        &self,
        nesting: &mut Nesting,
        target: CUstream,
        recording: bool,
        buffers: &[ForeignBuffer],
    ) -> Result<(), DriverError> {
        if !recording {
            return self.run(target, false, buffers);
        }
        let api = self.device.api();
        let functions = CaptureFunctions::of(api).map_err(|missing| {
            refuse(
                OP,
                format!(
                    "a foreign operation inside a window needs {missing}, which this driver \
                     lacks (CUDA 12.3 or newer)"
                ),
            )
        })?;
        let side = nesting.side_stream(api, OP)?;
        let child = self.capture(api, side, buffers);
        nesting.recycle(api, side);
        let child = child?;
        let (_, memory_nodes) = count_nodes(api, child.0, OP)?;
        if memory_nodes > 0 {
            return Err(refuse(
                OP,
                format!(
                    "its work allocates or frees memory ({memory_nodes} memory node(s)), which \
                     a replayed graph cannot hold; give the library a workspace made before \
                     the window"
                ),
            ));
        }
        let info = functions.capture_info(api, target, OP)?;
        let mut node: CUgraphNode = ptr::null_mut();
        // SAFETY: both graphs are live and of the current context; every
        // dependency is a node of the recording's graph, as the driver
        // reported; the driver copies the child, which is destroyed after.
        api.check(OP, unsafe {
            (api.graph_add_child_graph_node)(
                &mut node,
                info.graph,
                info.dependencies.as_ptr(),
                info.dependencies.len(),
                child.0,
            )
        })?;
        functions.follow(api, target, node, OP)
    }

    /// The operation's work, captured on `side` into a graph of its own.
    /// The side stream's capture ends on every path.
    fn capture(
        &self,
        api: &'static Api,
        side: CUstream,
        buffers: &[ForeignBuffer],
    ) -> Result<Owned, DriverError> {
        // SAFETY: the side stream is live, the stream's own and not
        // capturing; its context is current.
        api.check(OP, unsafe {
            (api.stream_begin_capture)(side, sys::CU_STREAM_CAPTURE_MODE_RELAXED)
        })?;
        let ran = self.run(side, true, buffers);
        let mut graph: CUgraph = ptr::null_mut();
        // SAFETY: the side stream is capturing; `graph` is a valid place.
        let ended = api.check(OP, unsafe { (api.stream_end_capture)(side, &mut graph) });
        let owned = (!graph.is_null()).then_some(Owned(graph, api));
        ran?;
        ended.map_err(|e| {
            refuse(
                OP,
                format!(
                    "its work could not be captured ({e}); it enqueued something a graph cannot \
                     hold, or work on another stream it did not join back"
                ),
            )
        })?;
        owned.ok_or_else(|| refuse(OP, "the driver ended its capture without a graph"))
    }
}

/// A graph the library made, destroyed when dropped (the context current).
struct Owned(CUgraph, &'static Api);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: the graph is owned here alone and destroyed once; a child
        // graph node holds its own copy.
        let destroyed = unsafe { (self.1.graph_destroy)(self.0) };
        if let Err(e) = self
            .1
            .check("destroy a foreign operation's graph", destroyed)
        {
            log::warn!("{e}");
        }
    }
}
