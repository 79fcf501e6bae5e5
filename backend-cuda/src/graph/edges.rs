//! A captured chain's edges rewritten to the order a graph keeps, through
//! whichever spelling of the driver's edge functions it has.

use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use capture_core::edges::{self, Edge, Plan};
use capture_core::{DriverError, Order};

use super::level::Level;
use crate::device::Device;
use crate::error::refuse;
use crate::sys::{
    Api, CUgraph, CUgraphNode, CUresult, ChangePlain, ChangeWithData, DependentsPlain,
    DependentsWithData,
};

/// A graph whose edges are no longer the captured chain.
pub(super) struct Rewritten {
    /// Place `i`'s first node in the chain: what an edge to it ends at.
    pub(super) entries: Vec<CUgraphNode>,
    /// Place `i`'s last node: what an edge from it starts at.
    pub(super) exits: Vec<CUgraphNode>,
    /// The edges between places the graph holds now, sorted.
    pub(super) edges: Vec<Edge>,
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
pub(super) fn arrange_graph(
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
