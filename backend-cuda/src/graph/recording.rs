//! What a stream capture recorded, checked against what the stream issued
//! and instantiated; a conditional's bodies are checked the same way.

use std::ptr;
use std::sync::Arc;

use capture_core::edges::{self, Edge};
use capture_core::{DriverError, Order};

use super::edges::{Rewritten, arrange_graph};
use super::level::Level;
use crate::device::Device;
use crate::error::refuse;
use crate::memory::DevicePage;
use crate::sys::{self, Api, CUgraph, CUgraphNode};

/// What a stream capture recorded: the captured `CUgraph`, and the
/// launches, copies and conditionals the stream issued while it recorded,
/// which the graph must hold the nodes of. Destroyed when dropped.
pub struct Recording {
    pub(super) graph: CUgraph,
    level: Level,
    pub(super) device: Arc<Device>,
    /// Whether the stream was adopted, so that the caller's own work on it
    /// may add nodes the library did not issue.
    adopted: bool,
    /// Nodes beyond the library's, found by the node check: the caller's
    /// own work on an adopted stream.
    foreign: usize,
    /// Set once the captured chain's edges were rewritten. `None` while the
    /// graph is the chain as captured.
    rewritten: Option<Rewritten>,
    /// The loops' trip counters, which every replay's setters write.
    pub(super) counters: Vec<Arc<DevicePage>>,
}

// SAFETY: a CUgraph is a process-wide handle; the recording owns it alone
// and destroys it once, with its context current.
unsafe impl Send for Recording {}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Recording({} launch(es), {} copy(ies), {} conditional(s))",
            self.level.launches,
            self.level.copies,
            self.level.conditionals.len()
        )
    }
}

/// How many nodes `graph` holds, and how many of them allocate or free
/// memory. The caller has made the context current.
pub(crate) fn count_nodes(
    api: &Api,
    graph: CUgraph,
    op: &'static str,
) -> Result<(usize, usize), DriverError> {
    let mut count: usize = 0;
    // SAFETY: a null node array asks only for the count, written to
    // `count`; the graph is live.
    api.check(op, unsafe {
        (api.graph_get_nodes)(graph, ptr::null_mut(), &mut count)
    })?;
    let mut nodes: Vec<CUgraphNode> = vec![ptr::null_mut(); count];
    // SAFETY: `nodes` holds `count` slots and `count` tells the driver
    // so; it writes at most that many and stores how many it wrote.
    api.check(op, unsafe {
        (api.graph_get_nodes)(graph, nodes.as_mut_ptr(), &mut count)
    })?;
    nodes.truncate(count);
    let mut memory_nodes = 0usize;
    for &node in &nodes {
        let mut kind: sys::CUgraphNodeType = u32::MAX;
        // SAFETY: the node belongs to the live graph; `kind` is a valid
        // place for the type, an integer of the enum's size.
        api.check(op, unsafe { (api.graph_node_get_type)(node, &mut kind) })?;
        if kind == sys::CU_GRAPH_NODE_TYPE_MEM_ALLOC || kind == sys::CU_GRAPH_NODE_TYPE_MEM_FREE {
            memory_nodes += 1;
        }
    }
    Ok((nodes.len(), memory_nodes))
}

/// The refusal of a graph holding memory nodes: it replays once and then
/// fails on every later launch, since its allocation is still live.
fn memory_nodes_refused(op: &'static str, memory_nodes: usize) -> DriverError {
    refuse(
        op,
        format!(
            "the recording holds {memory_nodes} memory allocation or free node(s); a graph that \
             allocates replays once and then fails, so allocate before the window"
        ),
    )
}

/// Check a conditional's body as its capture left it, `level`'s nodes and
/// no more, and give it the edges `order` asks for. Where `fill` says the
/// driver would hang on a body without a kernel (drivers before r570,
/// 12.8), an empty body holds the no-op kernel its capture was given. The
/// caller has made the context current.
pub(crate) fn finish_body(
    device: &Device,
    graph: CUgraph,
    level: &Level,
    order: Order<'_>,
    fill: bool,
    op: &'static str,
) -> Result<(), DriverError> {
    let api = device.api();
    let (nodes, memory_nodes) = count_nodes(api, graph, op)?;
    if memory_nodes > 0 {
        return Err(memory_nodes_refused(op, memory_nodes));
    }
    let expected = level.nodes() + usize::from(fill && level.nodes() == 0);
    if nodes != expected {
        return Err(refuse(
            op,
            format!(
                "a conditional's body holds {nodes} node(s), and the stream issued {} \
                 operation(s) into it ({expected} node(s)): the driver lost work, so the body \
                 would not replay what was recorded",
                level.operations(),
            ),
        ));
    }
    arrange_graph(device, graph, level, &mut None, order, op)
}

impl Recording {
    /// Own `graph`, which the stream's capture returned after issuing what
    /// `level` counts; `counters` are its loops' trip counters.
    pub(crate) fn new(
        graph: CUgraph,
        level: Level,
        device: &Arc<Device>,
        adopted: bool,
        counters: Vec<Arc<DevicePage>>,
    ) -> Self {
        Self {
            graph,
            level,
            device: Arc::clone(device),
            adopted,
            foreign: 0,
            rewritten: None,
            counters,
        }
    }

    /// Whether the graph holds a conditional node.
    pub(super) fn holds_conditionals(&self) -> bool {
        !self.level.conditionals.is_empty()
    }

    /// The graph's edges where they are not the captured chain.
    pub(super) fn edges(&self) -> Option<&[Edge]> {
        self.rewritten
            .as_ref()
            .map(|r| r.edges.as_slice())
            .filter(|edges| !edges::is_chain(edges, self.level.places()))
    }

    /// Give the graph the edges `order` asks for (see [`arrange_graph`]).
    /// The caller has made the context current and checked the nodes.
    pub(super) fn arrange(
        &mut self,
        order: Order<'_>,
        op: &'static str,
    ) -> Result<(), DriverError> {
        if self.foreign > 0 {
            let target = self.level.target(order);
            if self.rewritten.is_none() && edges::is_chain(&target, self.level.places()) {
                return Ok(());
            }
            // The caller's nodes have no place in the dependencies, which
            // name the library's operations only; the chain orders them all.
            log::debug!(
                "cuda: a capture holds {} node(s) of the caller's own and replays as captured",
                self.foreign
            );
            return Ok(());
        }
        arrange_graph(
            &self.device,
            self.graph,
            &self.level,
            &mut self.rewritten,
            order,
            op,
        )
    }

    /// Refuse a graph that does not hold exactly the nodes of the launches,
    /// copies and conditionals issued while recording: one that silently
    /// lost work, or one holding memory nodes, which replays once and then
    /// fails on every later launch since its allocation is still live. The
    /// caller has made the context current.
    ///
    /// On an adopted stream, nodes beyond the library's are the caller's own
    /// work on the stream, which the graph keeps: counted in `foreign`.
    pub(super) fn check_nodes(&mut self, op: &'static str) -> Result<(), DriverError> {
        let (nodes, memory_nodes) = count_nodes(self.device.api(), self.graph, op)?;
        if memory_nodes > 0 {
            return Err(memory_nodes_refused(op, memory_nodes));
        }
        let expected = self.level.nodes();
        if self.adopted && nodes > expected {
            self.foreign = nodes - expected;
            return Ok(());
        }
        if nodes != expected {
            return Err(refuse(
                op,
                format!(
                    "the captured graph holds {nodes} node(s), and the stream issued {} \
                     launch(es), {} copy(ies) and {} conditional(s) ({expected} node(s)) while \
                     recording: the driver lost work, so the graph would not replay what was \
                     recorded",
                    self.level.launches,
                    self.level.copies,
                    self.level.conditionals.len()
                ),
            ));
        }
        Ok(())
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
