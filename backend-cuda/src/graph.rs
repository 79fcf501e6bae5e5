//! Native CUDA graphs: what a stream capture recorded, its instantiation,
//! and updating an instantiated graph in place.

use std::ptr;
use std::sync::Arc;

use capture_core::{DriverError, Updated};

use crate::device::Device;
use crate::error::refuse;
use crate::sys::{self, CUgraph, CUgraphExec, CUgraphExecUpdateResultInfo, CUgraphNode, CUstream};

/// What a stream capture recorded: the captured `CUgraph`, and how many
/// launches and copies the stream issued while it recorded, which the graph
/// must hold one node each of. Destroyed when dropped.
pub struct Recording {
    graph: CUgraph,
    launches: usize,
    copies: usize,
    device: Arc<Device>,
}

// SAFETY: a CUgraph is a process-wide handle; the recording owns it alone
// and destroys it once, with its context current.
unsafe impl Send for Recording {}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Recording({} launch(es), {} copy(ies))",
            self.launches, self.copies
        )
    }
}

impl Recording {
    /// Own `graph`, which the stream's capture returned after issuing
    /// `launches` launches and `copies` copies.
    pub(crate) fn new(
        graph: CUgraph,
        launches: usize,
        copies: usize,
        device: &Arc<Device>,
    ) -> Self {
        Self {
            graph,
            launches,
            copies,
            device: Arc::clone(device),
        }
    }

    /// Refuse a graph that does not hold exactly one node per launch and
    /// copy issued while recording: one that silently lost work, or one
    /// holding memory nodes, which replays once and then fails on every
    /// later launch since its allocation is still live. The caller has made
    /// the context current.
    fn check_nodes(&self, op: &'static str) -> Result<(), DriverError> {
        let api = self.device.api();
        let mut count: usize = 0;
        // SAFETY: a null node array asks only for the count, written to
        // `count`; the graph is live.
        api.check(op, unsafe {
            (api.graph_get_nodes)(self.graph, ptr::null_mut(), &mut count)
        })?;
        let mut nodes: Vec<CUgraphNode> = vec![ptr::null_mut(); count];
        // SAFETY: `nodes` holds `count` slots and `count` tells the driver
        // so; it writes at most that many and stores how many it wrote.
        api.check(op, unsafe {
            (api.graph_get_nodes)(self.graph, nodes.as_mut_ptr(), &mut count)
        })?;
        nodes.truncate(count);
        let mut memory_nodes = 0usize;
        for &node in &nodes {
            let mut kind: sys::CUgraphNodeType = u32::MAX;
            // SAFETY: the node belongs to the live graph; `kind` is a valid
            // place for the type, an integer of the enum's size.
            api.check(op, unsafe { (api.graph_node_get_type)(node, &mut kind) })?;
            if kind == sys::CU_GRAPH_NODE_TYPE_MEM_ALLOC || kind == sys::CU_GRAPH_NODE_TYPE_MEM_FREE
            {
                memory_nodes += 1;
            }
        }
        if memory_nodes > 0 {
            return Err(refuse(
                op,
                format!(
                    "the recording holds {memory_nodes} memory allocation or free node(s); a \
                     graph that allocates replays once and then fails, so allocate before the \
                     window"
                ),
            ));
        }
        let expected = self.launches + self.copies;
        if nodes.len() != expected {
            return Err(refuse(
                op,
                format!(
                    "the captured graph holds {} node(s), and the stream issued {} launch(es) and \
                     {} copy(ies) while recording: the driver lost work, so the graph would not \
                     replay what was recorded",
                    nodes.len(),
                    self.launches,
                    self.copies
                ),
            ));
        }
        Ok(())
    }

    /// Instantiate the recording, which is destroyed afterwards either way.
    pub(crate) fn instantiate(self) -> Result<Executable, DriverError> {
        const OP: &str = "instantiate";
        let api = self.device.api();
        let _current = self.device.enter()?;
        self.check_nodes(OP)?;
        let mut raw: CUgraphExec = ptr::null_mut();
        // SAFETY: the graph is live and owned by `self`, which destroys it
        // once this returns (an executable does not need its graph); `raw`
        // is a valid place for the handle.
        api.check(OP, unsafe {
            (api.graph_instantiate)(&mut raw, self.graph, 0)
        })?;
        Ok(Executable {
            raw,
            device: Arc::clone(&self.device),
        })
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let api = self.device.api();
        let current = match self.device.enter() {
            Ok(current) => current,
            Err(e) => {
                log::warn!("leaking a captured graph: {e}");
                return;
            }
        };
        // SAFETY: the graph came from cuStreamEndCapture, is owned here and
        // destroyed once; an executable made from it does not need it.
        let destroyed = unsafe { (api.graph_destroy)(self.graph) };
        if let Err(e) = api.check("destroy captured graph", destroyed) {
            log::warn!("{e}");
        }
        drop(current);
    }
}

/// An instantiated graph, destroyed (with its context current) when dropped.
pub struct Executable {
    raw: CUgraphExec,
    device: Arc<Device>,
}

// SAFETY: a CUgraphExec is a process-wide handle any thread may launch or
// destroy once its context is current, which every use here ensures.
unsafe impl Send for Executable {}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Executable({:p})", self.raw)
    }
}

/// The answers of `cuGraphExecUpdate` that say the recording's shape
/// differs from the executable's (its nodes, their order, their kinds, the
/// kernels they run, or what about them an update cannot change), so that
/// instantiating it instead is the way forward. Anything else is an error.
const SHAPE_CHANGED: &[sys::CUgraphExecUpdateResult] = &[
    sys::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
    sys::CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED,
    sys::CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED,
    sys::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED,
    sys::CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED,
    sys::CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE,
    sys::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED,
];

impl Executable {
    /// Make the executable run `recording`'s work, in place where the two
    /// have the same shape.
    ///
    /// The driver applies an update to later launches only: replays already
    /// enqueued run the parameters they were launched with, so nothing of
    /// the old work has to be kept here. A refused update leaves the
    /// executable as it was.
    pub(crate) fn update(
        &mut self,
        recording: Recording,
    ) -> Result<Updated<Recording>, DriverError> {
        const OP: &str = "update graph";
        same_device(OP, &self.device, &recording.device)?;
        let api = self.device.api();
        // A driver older than 12.0 has no update with this signature; a
        // fresh instantiation does the same.
        let Some(update) = api.graph_exec_update else {
            return Ok(Updated::Topology(recording));
        };
        let _current = self.device.enter()?;
        recording.check_nodes(OP)?;
        let mut info = CUgraphExecUpdateResultInfo {
            result: sys::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: ptr::null_mut(),
            errorFromNode: ptr::null_mut(),
        };
        // SAFETY: both handles are live and of this context; `info` is a
        // valid place for the driver's answer, laid out as cuda.h declares
        // it (the ABI test checks it).
        let code = unsafe { update(self.raw, recording.graph, &mut info) };
        match code {
            sys::CUDA_SUCCESS => Ok(Updated::InPlace),
            sys::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE if SHAPE_CHANGED.contains(&info.result) => {
                log::debug!(
                    "the graph cannot be updated in place (update result {}); instantiating anew",
                    info.result
                );
                Ok(Updated::Topology(recording))
            }
            code => Err(refuse(
                OP,
                format!(
                    "{} (update result {}); the graph is left as it was",
                    api.describe(code),
                    info.result
                ),
            )),
        }
    }

    /// Pre-stage the executable on `stream`, a stream of `device`.
    pub(crate) fn upload(&self, device: &Device, stream: CUstream) -> Result<(), DriverError> {
        const OP: &str = "upload graph";
        same_device(OP, &self.device, device)?;
        let api = self.device.api();
        let _current = self.device.enter()?;
        // SAFETY: both handles are live and belong to the current context.
        api.check(OP, unsafe { (api.graph_upload)(self.raw, stream) })
    }

    /// Enqueue the executable's work on `stream`, a stream of `device`.
    pub(crate) fn launch(&self, device: &Device, stream: CUstream) -> Result<(), DriverError> {
        const OP: &str = "replay graph";
        same_device(OP, &self.device, device)?;
        let api = self.device.api();
        let _current = self.device.enter()?;
        // SAFETY: both handles are live and belong to the current context;
        // capture-core keeps every buffer the graph touches alive while it
        // lives.
        api.check(OP, unsafe { (api.graph_launch)(self.raw, stream) })
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        let api = self.device.api();
        let current = match self.device.enter() {
            Ok(current) => current,
            Err(e) => {
                log::warn!("leaking a graph: {e}");
                return;
            }
        };
        // SAFETY: the executable is owned here and destroyed once;
        // capture-core drops it only once no replay of it can be running
        // (and the driver would free one still in flight on completion).
        let destroyed = unsafe { (api.graph_exec_destroy)(self.raw) };
        if let Err(e) = api.check("destroy graph", destroyed) {
            log::warn!("{e}");
        }
        drop(current);
    }
}

fn same_device(op: &'static str, ours: &Device, theirs: &Device) -> Result<(), DriverError> {
    if ours.same_context(theirs) {
        Ok(())
    } else {
        Err(refuse(op, "the graph was made on another device"))
    }
}
