//! Native CUDA graphs: what a stream capture recorded, its edges rewritten
//! to the order a graph keeps, its instantiation, and updating an
//! instantiated graph in place. Conditional nodes' bodies are checked and
//! given their order here too, when the conditional closes.
//!
//! A recording holding a conditional node is never embedded in another
//! graph as a child graph node (the driver refuses a conditional inside
//! one); this backend replays each recording as a graph of its own.

use std::borrow::Cow;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use capture_core::{DriverError, Order, Updated};

use crate::device::Device;
use crate::error::refuse;
use crate::memory::DevicePage;
use crate::setter::ConditionalFunctions;
use crate::sys::{
    self, Api, CUgraph, CUgraphExec, CUgraphExecUpdateResultInfo, CUgraphNode, CUresult, CUstream,
    ChangePlain, ChangeWithData, DependentsPlain, DependentsWithData,
};
use capture_core::edges::{self, Edge, Plan};

/// The operations one graph of a recording holds, in the order the stream
/// issued them: the recording's own graph, or one body of a conditional.
///
/// A launch or copy is one node of the captured chain; a conditional spans
/// its setter kernel and its node (or, for an if/else on a driver before
/// 12.8, its two `if` nodes); a loop's body ends in one more node, the
/// setter that decides on the next iteration.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Level {
    pub(crate) launches: usize,
    pub(crate) copies: usize,
    /// Each conditional's operation number and the chain nodes it spans,
    /// in issue order.
    pub(crate) conditionals: Vec<(usize, usize)>,
    /// Whether a node follows every operation: a loop body's setter.
    pub(crate) tail: bool,
}

impl Level {
    /// Operations recorded: launches, copies and conditionals.
    pub(crate) fn operations(&self) -> usize {
        self.launches + self.copies + self.conditionals.len()
    }

    /// What an edge can name: the operations, and the tail after them.
    fn places(&self) -> usize {
        self.operations() + usize::from(self.tail)
    }

    /// Nodes of the captured chain.
    pub(crate) fn nodes(&self) -> usize {
        self.places()
            + self
                .conditionals
                .iter()
                .map(|&(_, nodes)| nodes.saturating_sub(1))
                .sum::<usize>()
    }

    /// Chain nodes place `at` spans.
    fn span(&self, at: usize) -> usize {
        self.conditionals
            .binary_search_by_key(&at, |&(op, _)| op)
            .map_or(1, |i| self.conditionals[i].1.max(1))
    }

    /// A conditional closed here, spanning `nodes` chain nodes.
    pub(crate) fn add_conditional(&mut self, nodes: usize) {
        let at = self.operations();
        self.conditionals.push((at, nodes));
    }

    /// The edges between places that keep `order` among the operations
    /// and put the tail after every operation nothing follows, sorted.
    fn target<'a>(&self, order: Order<'a>) -> Cow<'a, [Edge]> {
        let places = self.places();
        match order {
            Order::Chain => Cow::Owned(edges::chain(places)),
            Order::Dependencies(deps) if !self.tail => Cow::Borrowed(&deps.edges),
            Order::Dependencies(deps) => {
                let last = self.operations();
                let mut followed = vec![false; last];
                for &(from, _) in &deps.edges {
                    if let Some(f) = followed.get_mut(from) {
                        *f = true;
                    }
                }
                let mut target = deps.edges.clone();
                target.extend((0..last).filter(|&op| !followed[op]).map(|op| (op, last)));
                target.sort_unstable();
                Cow::Owned(target)
            }
        }
    }
}

/// What a stream capture recorded: the captured `CUgraph`, and the
/// launches, copies and conditionals the stream issued while it recorded,
/// which the graph must hold the nodes of. Destroyed when dropped.
pub struct Recording {
    graph: CUgraph,
    level: Level,
    device: Arc<Device>,
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
    counters: Vec<Arc<DevicePage>>,
}

/// A graph whose edges are no longer the captured chain.
struct Rewritten {
    /// Place `i`'s first node in the chain: what an edge to it ends at.
    entries: Vec<CUgraphNode>,
    /// Place `i`'s last node: what an edge from it starts at.
    exits: Vec<CUgraphNode>,
    /// The edges between places the graph holds now, sorted.
    edges: Vec<Edge>,
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

/// Give `graph`, whose nodes follow `level`, the edges `order` asks for,
/// replacing the chain the capture recorded (or the edges an earlier call
/// gave it, `rewritten`). The caller has made the context current and
/// checked the nodes.
///
/// An order that is the chain, on a graph still as captured, makes no
/// driver call. On a driver without the edge functions in either spelling
/// (see [`EdgeFunctions`]) the graph keeps its chain, which orders every
/// pair of operations and so keeps any dependencies too.
fn arrange_graph(
    device: &Device,
    graph: CUgraph,
    level: &Level,
    rewritten: &mut Option<Rewritten>,
    order: Order<'_>,
    op: &'static str,
) -> Result<(), DriverError> {
    let places = level.places();
    let target = level.target(order);
    if rewritten.is_none() && edges::is_chain(&target, places) {
        return Ok(());
    }
    let api = device.api();
    let Some(functions) = EdgeFunctions::of(api) else {
        chain_kept(&device.info().driver_version);
        return Ok(());
    };
    let current = match rewritten.take() {
        Some(current) => current,
        None => match walk_chain(api, graph, level, functions, op)? {
            Some((entries, exits)) => Rewritten {
                entries,
                exits,
                edges: edges::chain(places),
            },
            None => {
                chain_kept(&device.info().driver_version);
                return Ok(());
            }
        },
    };
    let plan = Plan::between(&current.edges, &target);
    // `rewritten` is set again only once the driver has taken the whole
    // plan; on an error the caller drops the graph unused.
    let node = |list: &[CUgraphNode], i: usize| {
        list.get(i).copied().ok_or_else(|| {
            refuse(
                op,
                format!(
                    "an edge names operation {i}, and the graph holds {} operation(s)",
                    level.operations()
                ),
            )
        })
    };
    let ends = |list: &[Edge]| -> Result<(Vec<CUgraphNode>, Vec<CUgraphNode>), DriverError> {
        let mut from = Vec::with_capacity(list.len());
        let mut to = Vec::with_capacity(list.len());
        for &(a, b) in list {
            from.push(node(&current.exits, a)?);
            to.push(node(&current.entries, b)?);
        }
        Ok((from, to))
    };
    if !plan.remove.is_empty() {
        let (from, to) = ends(&plan.remove)?;
        // SAFETY: the graph is live and every node is one of its own.
        api.check(op, unsafe { functions.remove(graph, &from, &to) })?;
    }
    if !plan.add.is_empty() {
        let (from, to) = ends(&plan.add)?;
        // SAFETY: as for the removal; none of these edges is in the
        // graph, which the driver would refuse.
        api.check(op, unsafe { functions.add(graph, &from, &to) })?;
    }
    *rewritten = Some(Rewritten {
        entries: current.entries,
        exits: current.exits,
        edges: target.into_owned(),
    });
    Ok(())
}

/// Each place's first and last node in a captured chain.
type Ends = (Vec<CUgraphNode>, Vec<CUgraphNode>);

/// The captured graph's first and last node of each place of `level`, read
/// by walking its chain from the single root; `None` when the driver lacks
/// the functions to walk it. A graph that is not one chain of every node
/// is refused: its nodes cannot be matched to the operations issued.
fn walk_chain(
    api: &Api,
    graph: CUgraph,
    level: &Level,
    functions: EdgeFunctions,
    op: &'static str,
) -> Result<Option<Ends>, DriverError> {
    let Some(roots_of) = api.graph_get_root_nodes else {
        return Ok(None);
    };
    let expected = level.nodes();
    let mut nodes = Vec::with_capacity(expected);
    if expected > 0 {
        let not_a_chain = |what: String| {
            refuse(
                op,
                format!(
                    "the captured graph is not one chain of its {expected} node(s) ({what}), so \
                     its nodes cannot be matched to the operations issued"
                ),
            )
        };
        // Two slots: one is a chain's answer, two say it is not one.
        let mut found: [CUgraphNode; 2] = [ptr::null_mut(); 2];
        let mut count = found.len();
        // SAFETY: `found` holds `count` slots and `count` tells the driver
        // so; the graph is live.
        api.check(op, unsafe {
            roots_of(graph, found.as_mut_ptr(), &mut count)
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
                        "node {} is followed by more than one",
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
    }
    let places = level.places();
    let mut entries = Vec::with_capacity(places);
    let mut exits = Vec::with_capacity(places);
    let mut at = 0usize;
    for place in 0..places {
        let span = level.span(place);
        let (Some(&first), Some(&last)) = (nodes.get(at), nodes.get(at + span - 1)) else {
            return Err(refuse(
                op,
                format!("the captured chain of {} node(s) ends early", nodes.len()),
            ));
        };
        entries.push(first);
        exits.push(last);
        at += span;
    }
    Ok(Some((entries, exits)))
}

/// How many nodes `graph` holds, and how many of them allocate or free
/// memory. The caller has made the context current.
fn count_nodes(api: &Api, graph: CUgraph, op: &'static str) -> Result<(usize, usize), DriverError> {
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
/// no more, and give it the edges `order` asks for. An empty body gets an
/// empty node where `fill` says the driver would hang on an empty one
/// (drivers before r570, 12.8). The caller has made the context current.
pub(crate) fn finish_body(
    device: &Device,
    functions: &ConditionalFunctions,
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
    if nodes != level.nodes() {
        return Err(refuse(
            op,
            format!(
                "a conditional's body holds {nodes} node(s), and the stream issued {} \
                 operation(s) into it ({} node(s)): the driver lost work, so the body would not \
                 replay what was recorded",
                level.operations(),
                level.nodes()
            ),
        ));
    }
    arrange_graph(device, graph, level, &mut None, order, op)?;
    if fill && nodes == 0 {
        functions.add_empty(api, graph, op)?;
    }
    Ok(())
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
    fn holds_conditionals(&self) -> bool {
        !self.level.conditionals.is_empty()
    }

    /// The graph's edges where they are not the captured chain.
    fn edges(&self) -> Option<&[Edge]> {
        self.rewritten
            .as_ref()
            .map(|r| r.edges.as_slice())
            .filter(|edges| !edges::is_chain(edges, self.level.places()))
    }

    /// Give the graph the edges `order` asks for (see [`arrange_graph`]).
    /// The caller has made the context current and checked the nodes.
    fn arrange(&mut self, order: Order<'_>, op: &'static str) -> Result<(), DriverError> {
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
    fn check_nodes(&mut self, op: &'static str) -> Result<(), DriverError> {
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
            conditionals: self.holds_conditionals(),
            _counters: self.counters.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use capture_core::Dependencies;

    fn deps(nodes: usize, edges: &[Edge]) -> Dependencies {
        Dependencies {
            nodes,
            edges: edges.to_vec(),
            ..Dependencies::default()
        }
    }

    #[test]
    fn a_level_counts_a_conditionals_nodes_and_a_loops_tail() {
        let mut level = Level {
            launches: 2,
            ..Level::default()
        };
        level.add_conditional(2);
        level.copies += 1;
        level.add_conditional(3);
        assert_eq!(level.operations(), 5);
        assert_eq!(level.nodes(), 5 + 1 + 2);
        assert_eq!(level.conditionals, [(2, 2), (4, 3)]);
        assert_eq!(
            (0..5).map(|at| level.span(at)).collect::<Vec<_>>(),
            [1, 1, 2, 1, 3]
        );
        level.tail = true;
        assert_eq!((level.places(), level.nodes(), level.span(5)), (6, 9, 1));
    }

    #[test]
    fn a_tail_follows_every_operation_nothing_else_follows() {
        let level = Level {
            launches: 4,
            tail: true,
            ..Level::default()
        };
        let order = deps(4, &[(0, 2), (1, 2)]);
        assert_eq!(
            level.target(Order::Dependencies(&order)).as_ref(),
            [(0, 2), (1, 2), (2, 4), (3, 4)]
        );
        assert_eq!(
            level.target(Order::Chain).as_ref(),
            [(0, 1), (1, 2), (2, 3), (3, 4)]
        );
        let untailed = Level {
            launches: 4,
            ..Level::default()
        };
        assert_eq!(
            untailed.target(Order::Dependencies(&order)).as_ref(),
            [(0, 2), (1, 2)]
        );
        let empty = Level {
            tail: true,
            ..Level::default()
        };
        assert_eq!(
            empty.target(Order::Dependencies(&deps(0, &[]))).as_ref(),
            []
        );
    }
}
