//! Native CUDA graphs: what a stream capture recorded, its edges rewritten
//! to the order a graph keeps, its instantiation, and updating an
//! instantiated graph in place.

use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use capture_core::{DriverError, Order, Updated};

use crate::device::Device;
use crate::error::refuse;
use crate::sys::{
    self, Api, CUgraph, CUgraphExec, CUgraphExecUpdateResultInfo, CUgraphNode, CUresult, CUstream,
    ChangePlain, ChangeWithData, DependentsPlain, DependentsWithData,
};
use capture_core::edges::{self, Edge, Plan};

/// What a stream capture recorded: the captured `CUgraph`, and how many
/// launches and copies the stream issued while it recorded, which the graph
/// must hold one node each of. Destroyed when dropped.
pub struct Recording {
    graph: CUgraph,
    launches: usize,
    copies: usize,
    device: Arc<Device>,
    /// Whether the stream was adopted, so that the caller's own work on it
    /// may add nodes the library did not issue.
    adopted: bool,
    /// Nodes beyond the library's, found by the node check: the caller's
    /// own work on an adopted stream.
    foreign: usize,
    /// Set once the captured chain's edges were rewritten: the nodes in
    /// issue order and the edges the graph holds now. `None` while the graph
    /// is the chain as captured.
    rewritten: Option<Rewritten>,
}

/// A recording's graph whose edges are no longer the captured chain.
struct Rewritten {
    /// Node `i` is operation `i`, the `i`-th launch or copy issued.
    nodes: Vec<CUgraphNode>,
    /// The edges the graph holds, sorted.
    edges: Vec<Edge>,
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
        adopted: bool,
    ) -> Self {
        Self {
            graph,
            launches,
            copies,
            device: Arc::clone(device),
            adopted,
            foreign: 0,
            rewritten: None,
        }
    }

    /// Operations recorded: launches and copies, one node each.
    fn operations(&self) -> usize {
        self.launches + self.copies
    }

    /// The graph's edges where they are not the captured chain.
    fn edges(&self) -> Option<&[Edge]> {
        self.rewritten
            .as_ref()
            .map(|r| r.edges.as_slice())
            .filter(|edges| !edges::is_chain(edges, self.operations()))
    }

    /// Give the graph the edges `order` asks for, replacing the chain the
    /// capture recorded (or the edges an earlier call gave it). The caller
    /// has made the context current and checked the nodes.
    ///
    /// `Order::Chain` on a graph still as captured makes no driver call. On
    /// a driver without the edge functions in either spelling (see
    /// [`EdgeFunctions`]) the graph keeps its chain, which orders every pair
    /// of operations and so keeps any dependencies too.
    fn arrange(&mut self, order: Order<'_>, op: &'static str) -> Result<(), DriverError> {
        let nodes = self.operations();
        let chain;
        let target: &[Edge] = match order {
            Order::Chain if self.rewritten.is_none() => return Ok(()),
            Order::Chain => {
                chain = edges::chain(nodes);
                &chain
            }
            Order::Dependencies(deps) => &deps.edges,
        };
        if self.rewritten.is_none() && edges::is_chain(target, nodes) {
            return Ok(());
        }
        if self.foreign > 0 {
            // The caller's nodes have no place in the dependencies, which
            // name the library's operations only; the chain orders them all.
            log::debug!(
                "cuda: a capture holds {} node(s) of the caller's own and replays as captured",
                self.foreign
            );
            return Ok(());
        }
        let api = self.device.api();
        let Some(functions) = EdgeFunctions::of(api) else {
            chain_kept(&self.device.info().driver_version);
            return Ok(());
        };
        let rewritten = match self.rewritten.take() {
            Some(rewritten) => rewritten,
            None => match self.walk_chain(functions, op)? {
                Some(nodes) => Rewritten {
                    edges: edges::chain(nodes.len()),
                    nodes,
                },
                None => {
                    chain_kept(&self.device.info().driver_version);
                    return Ok(());
                }
            },
        };
        let plan = Plan::between(&rewritten.edges, target);
        // `self.rewritten` is set again only once the driver has taken the
        // whole plan; on an error the caller drops the recording unused.
        let node = |i: usize| {
            rewritten.nodes.get(i).copied().ok_or_else(|| {
                refuse(
                    op,
                    format!(
                        "an edge names operation {i}, and the recording holds {} operation(s)",
                        rewritten.nodes.len()
                    ),
                )
            })
        };
        let ends = |list: &[Edge]| -> Result<(Vec<CUgraphNode>, Vec<CUgraphNode>), DriverError> {
            let mut from = Vec::with_capacity(list.len());
            let mut to = Vec::with_capacity(list.len());
            for &(a, b) in list {
                from.push(node(a)?);
                to.push(node(b)?);
            }
            Ok((from, to))
        };
        if !plan.remove.is_empty() {
            let (from, to) = ends(&plan.remove)?;
            // SAFETY: the graph is live and every node is one of its own.
            api.check(op, unsafe { functions.remove(self.graph, &from, &to) })?;
        }
        if !plan.add.is_empty() {
            let (from, to) = ends(&plan.add)?;
            // SAFETY: as for the removal; none of these edges is in the
            // graph, which the driver would refuse.
            api.check(op, unsafe { functions.add(self.graph, &from, &to) })?;
        }
        self.rewritten = Some(Rewritten {
            nodes: rewritten.nodes,
            edges: target.to_vec(),
        });
        Ok(())
    }

    /// The captured graph's nodes in issue order, read by walking its chain
    /// from the single root; `None` when the driver lacks the functions to
    /// walk it. A graph that is not one chain of every node is refused: its
    /// nodes cannot be matched to the operations issued.
    fn walk_chain(
        &self,
        functions: EdgeFunctions,
        op: &'static str,
    ) -> Result<Option<Vec<CUgraphNode>>, DriverError> {
        let api = self.device.api();
        let Some(roots_of) = api.graph_get_root_nodes else {
            return Ok(None);
        };
        let expected = self.operations();
        let mut nodes = Vec::with_capacity(expected);
        if expected == 0 {
            return Ok(Some(nodes));
        }
        let not_a_chain = |what: String| {
            refuse(
                op,
                format!(
                    "the captured graph is not one chain of its {expected} operation(s) ({what}), \
                     so its nodes cannot be matched to the operations issued"
                ),
            )
        };
        // Two slots: one is a chain's answer, two say it is not one.
        let mut found: [CUgraphNode; 2] = [ptr::null_mut(); 2];
        let mut count = found.len();
        // SAFETY: `found` holds `count` slots and `count` tells the driver
        // so; the graph is live.
        api.check(op, unsafe {
            roots_of(self.graph, found.as_mut_ptr(), &mut count)
        })?;
        if count != 1 {
            return Err(not_a_chain(format!("{count} root node(s)")));
        }
        let mut node = found[0];
        loop {
            nodes.push(node);
            let mut count = found.len();
            // SAFETY: the node belongs to the live graph.
            api.check(op, unsafe {
                functions.dependents(node, &mut found, &mut count)
            })?;
            match count {
                0 => break,
                1 if nodes.len() < expected => node = found[0],
                1 => {
                    return Err(not_a_chain(format!("it runs on past {expected} node(s)")));
                }
                _ => {
                    return Err(not_a_chain(format!(
                        "operation {} is followed by more than one",
                        nodes.len() - 1
                    )));
                }
            }
        }
        if nodes.len() != expected {
            return Err(not_a_chain(format!(
                "the chain from its root ends after {} node(s)",
                nodes.len()
            )));
        }
        Ok(Some(nodes))
    }

    /// Refuse a graph that does not hold exactly one node per launch and
    /// copy issued while recording: one that silently lost work, or one
    /// holding memory nodes, which replays once and then fails on every
    /// later launch since its allocation is still live. The caller has made
    /// the context current.
    ///
    /// On an adopted stream, nodes beyond the library's are the caller's own
    /// work on the stream, which the graph keeps: counted in `foreign`.
    fn check_nodes(&mut self, op: &'static str) -> Result<(), DriverError> {
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
        if self.adopted && nodes.len() > expected {
            self.foreign = nodes.len() - expected;
            return Ok(());
        }
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

    /// Instantiate the recording with the edges `order` asks for; the
    /// recording is destroyed afterwards either way.
    pub(crate) fn instantiate(mut self, order: Order<'_>) -> Result<Executable, DriverError> {
        const OP: &str = "instantiate";
        let api = self.device.api();
        let _current = self.device.enter()?;
        self.check_nodes(OP)?;
        self.arrange(order, OP)?;
        let mut raw: CUgraphExec = ptr::null_mut();
        // SAFETY: the graph is live and owned by `self`, which destroys it
        // once this returns (an executable does not need its graph); `raw`
        // is a valid place for the handle.
        api.check(OP, unsafe {
            (api.graph_instantiate)(&mut raw, self.graph, 0)
        })?;
        Ok(Executable {
            raw,
            edges: self.edges().map(<[Edge]>::to_vec),
            device: Arc::clone(&self.device),
        })
    }
}

/// Say once per process that graphs replay as the captured chain because
/// the driver cannot rewrite their edges.
fn chain_kept(version: &str) {
    static TOLD: AtomicBool = AtomicBool::new(false);
    if !TOLD.swap(true, Ordering::Relaxed) {
        log::info!(
            "cuda: driver {version} lacks cuGraphGetRootNodes or one of \
             cuGraphAddDependencies, cuGraphRemoveDependencies and \
             cuGraphNodeGetDependentNodes (10.0 and newer have them); graphs replay their \
             operations one after another, as captured"
        );
    }
}

/// The driver's functions that read and change a graph's edges. Drivers
/// 12.0 to 12.2 lack the 12.3 spellings with edge data; the 10.0 ones do
/// the same for the plain edges a capture records, so they stand in.
#[derive(Clone, Copy)]
enum EdgeFunctions {
    /// 12.3 and newer, always passed a null edge-data array: plain edges.
    WithData {
        add: ChangeWithData,
        remove: ChangeWithData,
        dependents: DependentsWithData,
    },
    /// 10.0 and newer.
    Plain {
        add: ChangePlain,
        remove: ChangePlain,
        dependents: DependentsPlain,
    },
}

impl EdgeFunctions {
    /// The newer spellings where the driver has all three, else the older
    /// ones where it has those; `None` when it has neither set.
    fn of(api: &Api) -> Option<Self> {
        if let (Some(add), Some(remove), Some(dependents)) = (
            api.graph_add_dependencies,
            api.graph_remove_dependencies,
            api.graph_node_get_dependent_nodes,
        ) {
            return Some(Self::WithData {
                add,
                remove,
                dependents,
            });
        }
        match (
            api.graph_add_dependencies_plain,
            api.graph_remove_dependencies_plain,
            api.graph_node_get_dependent_nodes_plain,
        ) {
            (Some(add), Some(remove), Some(dependents)) => Some(Self::Plain {
                add,
                remove,
                dependents,
            }),
            _ => None,
        }
    }

    /// Add the plain edges `from[i] -> to[i]` to `graph`.
    ///
    /// # Safety
    ///
    /// `graph` is live, its context is current, and every node is one of
    /// its own; `from` and `to` have the same length.
    unsafe fn add(self, graph: CUgraph, from: &[CUgraphNode], to: &[CUgraphNode]) -> CUresult {
        debug_assert_eq!(from.len(), to.len());
        let count = from.len().min(to.len());
        match self {
            // SAFETY: the caller's promise; both arrays hold `count` nodes,
            // and a null edge-data array means plain edges.
            Self::WithData { add, .. } => unsafe {
                add(graph, from.as_ptr(), to.as_ptr(), ptr::null(), count)
            },
            // SAFETY: as above.
            Self::Plain { add, .. } => unsafe { add(graph, from.as_ptr(), to.as_ptr(), count) },
        }
    }

    /// Remove the plain edges `from[i] -> to[i]` from `graph`.
    ///
    /// # Safety
    ///
    /// As for [`EdgeFunctions::add`].
    unsafe fn remove(self, graph: CUgraph, from: &[CUgraphNode], to: &[CUgraphNode]) -> CUresult {
        debug_assert_eq!(from.len(), to.len());
        let count = from.len().min(to.len());
        match self {
            // SAFETY: as in `add`.
            Self::WithData { remove, .. } => unsafe {
                remove(graph, from.as_ptr(), to.as_ptr(), ptr::null(), count)
            },
            // SAFETY: as in `add`.
            Self::Plain { remove, .. } => unsafe {
                remove(graph, from.as_ptr(), to.as_ptr(), count)
            },
        }
    }

    /// Write up to `*count` of `node`'s dependents into `found` (`*count`
    /// at most `found.len()`), as the driver answers.
    ///
    /// # Safety
    ///
    /// `node` belongs to a live graph whose context is current.
    unsafe fn dependents(
        self,
        node: CUgraphNode,
        found: &mut [CUgraphNode],
        count: &mut usize,
    ) -> CUresult {
        *count = (*count).min(found.len());
        match self {
            // SAFETY: `found` holds at least `count` slots; a null edge-data
            // array asks for none, which is allowed for plain edges.
            Self::WithData { dependents, .. } => unsafe {
                dependents(node, found.as_mut_ptr(), ptr::null_mut(), count)
            },
            // SAFETY: as above.
            Self::Plain { dependents, .. } => unsafe {
                dependents(node, found.as_mut_ptr(), count)
            },
        }
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
    /// The edges it was instantiated or last updated with, where they are
    /// not the captured chain.
    edges: Option<Vec<Edge>>,
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
    ///
    /// The recording's edges are first made those `order` asks for. Where
    /// they differ from the executable's, the recording is handed back
    /// without asking the driver, which pairs nodes by following edges and
    /// could pair a differently shaped graph's nodes out of issue order.
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
