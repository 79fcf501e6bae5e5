//! An instantiated graph: updated in place where a recording has its
//! shape, uploaded and launched.

use std::ptr;
use std::sync::Arc;

use capture_core::edges::Edge;
use capture_core::{DriverError, Order, Updated};

use super::recording::Recording;
use crate::device::Device;
use crate::error::refuse;
use crate::memory::DevicePage;
use crate::sys::{self, CUgraphExec, CUgraphExecUpdateResultInfo, CUstream};

/// An instantiated graph, destroyed (with its context current) when dropped.
pub struct Executable {
    raw: CUgraphExec,
    /// The edges it was instantiated or last updated with, where they are
    /// not the captured chain.
    edges: Option<Vec<Edge>>,
    /// Whether it holds a conditional node.
    conditionals: bool,
    /// The loops' trip counters its setters write, kept while it lives.
    _counters: Vec<Arc<DevicePage>>,
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
    /// Instantiate `recording` with the edges `order` asks for; the
    /// recording is destroyed afterwards either way.
    pub(crate) fn instantiate(
        mut recording: Recording,
        order: Order<'_>,
    ) -> Result<Self, DriverError> {
        const OP: &str = "instantiate";
        let device = Arc::clone(&recording.device);
        let api = device.api();
        let _current = device.enter()?;
        recording.check_nodes(OP)?;
        recording.arrange(order, OP)?;
        let mut raw: CUgraphExec = ptr::null_mut();
        // SAFETY: the graph is live and owned by `recording`, which
        // destroys it once this returns (an executable does not need its
        // graph); `raw` is a valid place for the handle.
        api.check(OP, unsafe {
            (api.graph_instantiate)(&mut raw, recording.graph, 0)
        })?;
        Ok(Self {
            raw,
            edges: recording.edges().map(<[Edge]>::to_vec),
            conditionals: recording.holds_conditionals(),
            _counters: recording.counters.clone(),
            device,
        })
    }

    /// Make the executable run `recording`'s work, in place where the two
    /// have the same shape.
    ///
    /// The driver applies an update to later launches only: replays already
    /// enqueued run the parameters they were launched with, so nothing of
    /// the old work has to be kept here. A refused update leaves the
    /// executable as it was.
    ///
    /// The recording's edges are first made those `order` asks for. Where
    /// they differ from the executable's, the recording is handed back
    /// without asking the driver, which pairs nodes by following edges and
    /// could pair a differently shaped graph's nodes out of issue order.
    ///
    /// A graph holding a conditional node is handed back too: each capture
    /// makes handles of its own, which its setter kernels name, so an
    /// update would pair the new setters with the old graph's handles.
    pub(crate) fn update(
        &mut self,
        mut recording: Recording,
        order: Order<'_>,
    ) -> Result<Updated<Recording>, DriverError> {
        const OP: &str = "update graph";
        same_device(OP, &self.device, &recording.device)?;
        let api = self.device.api();
        // A driver older than 12.0 has no update with this signature; a
        // fresh instantiation does the same.
        let Some(update) = api.graph_exec_update else {
            return Ok(Updated::Topology(recording));
        };
        if self.conditionals || recording.holds_conditionals() {
            return Ok(Updated::Topology(recording));
        }
        let _current = self.device.enter()?;
        recording.check_nodes(OP)?;
        recording.arrange(order, OP)?;
        if recording.edges() != self.edges.as_deref() {
            log::debug!("the recording's edges differ from the graph's; instantiating anew");
            return Ok(Updated::Topology(recording));
        }
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
            // The edges are equal already (checked above).
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
