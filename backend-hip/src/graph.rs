//! Instantiating a recording as an executable HIP graph, updating one in
//! place, and replaying it.

use std::ffi::CStr;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use capture_core::{DriverError, Order, Updated};

use crate::error::{self, describe, other};
use crate::ffi;
use crate::loader::GraphEdges;
use crate::stream::{Recording, Rewritten, Stream};
use capture_core::edges::{self, Edge, Plan};

/// In-place updates one executable takes before the next update hands the
/// recording back for a fresh instantiation instead.
///
/// ROCm's runtime (6.1 and later) writes each updated kernel node's
/// arguments to fresh kernel-argument space that is only given back when
/// the executable is destroyed, so an executable updated without end grows
/// without end; re-instantiating every this many updates bounds what one
/// holds, at the cost of one instantiation per this many updates.
pub const IN_PLACE_UPDATES_PER_INSTANCE: u32 = 128;

/// An instantiated HIP graph, destroyed when dropped.
///
/// It keeps the recording it runs: the graph it was instantiated from (what
/// a failed update puts back). The modules its kernel nodes run stay loaded
/// while it lives because capture-core holds their kernels until it drops.
pub struct Executable {
    exec: ffi::GraphExec,
    /// Executables a failed update could not put back in order, replaced by
    /// a fresh one; destroyed with this one, when no replay of any of them
    /// can still run.
    retired: Vec<ffi::GraphExec>,
    recording: Recording,
    /// In-place updates made to `exec` so far (see
    /// [`IN_PLACE_UPDATES_PER_INSTANCE`]).
    updates: u32,
}

// SAFETY: a graph executable is a runtime object usable from any thread (the
// device is made current on every entry); it is destroyed only by Drop.
unsafe impl Send for Executable {}

impl Drop for Executable {
    fn drop(&mut self) {
        const OP: &str = "destroy graph";
        let device = &self.recording.device;
        let api = device.api;
        let current = device.enter(OP);
        if let Err(error) = &current {
            log::warn!("{error}; destroying the graph on whichever device is current");
        }
        for exec in std::iter::once(self.exec).chain(self.retired.drain(..)) {
            // SAFETY: each executable came from hipGraphInstantiate and is
            // destroyed exactly once, here; capture-core drops an executable
            // only once no replay of it can still run.
            let code = unsafe { (api.graph_exec_destroy)(exec) };
            if let Err(error) = error::check(api, OP, code) {
                log::warn!("{error}");
            }
        }
        // The recording, its graph, drops after this.
    }
}

/// Refuse a recording whose graph does not hold exactly one node per launch
/// and copy recorded: a graph that lost work would replay without it. On an
/// adopted stream, nodes beyond the library's are the caller's own work on
/// the stream, which the graph keeps: counted in `foreign`.
fn check_nodes(recording: &mut Recording, op: &'static str) -> Result<(), DriverError> {
    let api = recording.device.api;
    let mut count = 0usize;
    // SAFETY: the graph is live; a null node array asks for the count only.
    let code = unsafe { (api.graph_get_nodes)(recording.graph, ptr::null_mut(), &mut count) };
    error::check(api, "list graph nodes", code)?;
    let recorded = recording.work.len();
    if count == recorded {
        return Ok(());
    }
    if recording.adopted && count > recorded {
        recording.foreign = count - recorded;
        return Ok(());
    }
    Err(other(
        op,
        format!(
            "the captured graph holds {count} node(s) where {recorded} launch(es) and copies \
             were recorded: the runtime {} work, so the graph would not replay what was issued",
            if count < recorded { "lost" } else { "added" }
        ),
    ))
}

/// The recording's edges where they are not the captured chain.
fn edges_of(recording: &Recording) -> Option<&[Edge]> {
    recording
        .rewritten
        .as_ref()
        .map(|r| r.edges.as_slice())
        .filter(|edges| !edges::is_chain(edges, recording.work.len()))
}

/// Give the recording's graph the edges `order` asks for, replacing the
/// chain the capture recorded (or the edges an earlier call gave it). The
/// caller has made the device current and checked the nodes.
///
/// `Order::Chain` on a graph still as captured makes no runtime call. A
/// runtime without the edge functions keeps the chain, which orders every
/// pair of operations and so keeps any dependencies too.
fn arrange(
    recording: &mut Recording,
    order: Order<'_>,
    op: &'static str,
) -> Result<(), DriverError> {
    let operations = recording.work.len();
    let chain;
    let target: &[Edge] = match order {
        Order::Chain if recording.rewritten.is_none() => return Ok(()),
        Order::Chain => {
            chain = edges::chain(operations);
            &chain
        }
        Order::Dependencies(deps) => &deps.edges,
    };
    if recording.rewritten.is_none() && edges::is_chain(target, operations) {
        return Ok(());
    }
    if recording.foreign > 0 {
        // The caller's nodes have no place in the dependencies, which name
        // the library's operations only; the chain orders them all.
        log::debug!(
            "hip: a capture holds {} node(s) of the caller's own and replays as captured",
            recording.foreign
        );
        return Ok(());
    }
    let api = recording.device.api;
    let Some(functions) = api.graph_edges else {
        chain_kept();
        return Ok(());
    };
    let rewritten = match recording.rewritten.take() {
        Some(rewritten) => rewritten,
        None => {
            let nodes = walk_chain(recording, functions, op)?;
            Rewritten {
                edges: edges::chain(nodes.len()),
                nodes,
            }
        }
    };
    let plan = Plan::between(&rewritten.edges, target);
    let node = |i: usize| {
        rewritten.nodes.get(i).copied().ok_or_else(|| {
            other(
                op,
                format!(
                    "an edge names operation {i}, and the recording holds {} operation(s)",
                    rewritten.nodes.len()
                ),
            )
        })
    };
    let ends = |list: &[Edge]| -> Result<(Vec<ffi::GraphNode>, Vec<ffi::GraphNode>), DriverError> {
        let mut from = Vec::with_capacity(list.len());
        let mut to = Vec::with_capacity(list.len());
        for &(a, b) in list {
            from.push(node(a)?);
            to.push(node(b)?);
        }
        Ok((from, to))
    };
    // The runtime refuses null arrays even for no edges, so empty lists are
    // not passed at all.
    if !plan.remove.is_empty() {
        let (from, to) = ends(&plan.remove)?;
        // SAFETY: the graph is live and every node is one of its own; `from`
        // and `to` hold `from.len()` nodes each.
        let code = unsafe {
            (functions.remove_dependencies)(recording.graph, from.as_ptr(), to.as_ptr(), from.len())
        };
        error::check(api, op, code)?;
    }
    if !plan.add.is_empty() {
        let (from, to) = ends(&plan.add)?;
        // SAFETY: as for the removal; none of these edges is in the graph,
        // which the runtime would refuse.
        let code = unsafe {
            (functions.add_dependencies)(recording.graph, from.as_ptr(), to.as_ptr(), from.len())
        };
        error::check(api, op, code)?;
    }
    recording.rewritten = Some(Rewritten {
        nodes: rewritten.nodes,
        edges: target.to_vec(),
    });
    Ok(())
}

/// The captured graph's nodes in issue order, read by walking its chain
/// from the single root. A graph that is not one chain of every node is
/// refused: its nodes cannot be matched to the operations issued.
fn walk_chain(
    recording: &Recording,
    functions: GraphEdges,
    op: &'static str,
) -> Result<Vec<ffi::GraphNode>, DriverError> {
    let api = recording.device.api;
    let expected = recording.work.len();
    let mut nodes = Vec::with_capacity(expected);
    if expected == 0 {
        return Ok(nodes);
    }
    let not_a_chain = |what: String| {
        other(
            op,
            format!(
                "the captured graph is not one chain of its {expected} operation(s) ({what}), so \
                 its nodes cannot be matched to the operations issued"
            ),
        )
    };
    // Two slots: one is a chain's answer, two say it is not one (ROCm leaves
    // the count as given when there are at least that many).
    let mut found: [ffi::GraphNode; 2] = [ptr::null_mut(); 2];
    let mut count = found.len();
    // SAFETY: `found` holds `count` slots and `count` tells the runtime so;
    // the graph is live.
    let code =
        unsafe { (functions.get_root_nodes)(recording.graph, found.as_mut_ptr(), &mut count) };
    error::check(api, op, code)?;
    if count != 1 {
        return Err(not_a_chain(format!("{count} root node(s)")));
    }
    let mut node = found[0];
    loop {
        nodes.push(node);
        let mut count = found.len();
        // SAFETY: the node belongs to the live graph; `found` holds `count`
        // slots.
        let code =
            unsafe { (functions.node_get_dependent_nodes)(node, found.as_mut_ptr(), &mut count) };
        error::check(api, op, code)?;
        match count {
            0 => break,
            1 if nodes.len() < expected => node = found[0],
            1 => return Err(not_a_chain(format!("it runs on past {expected} node(s)"))),
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
    Ok(nodes)
}

/// Say once per process that graphs replay as the captured chain because
/// the runtime cannot rewrite their edges.
fn chain_kept() {
    static TOLD: AtomicBool = AtomicBool::new(false);
    if !TOLD.swap(true, Ordering::Relaxed) {
        log::info!(
            "hip: this runtime lacks hipGraphAddDependencies, hipGraphRemoveDependencies, \
             hipGraphNodeGetDependentNodes or hipGraphGetRootNodes; graphs replay their \
             operations one after another, as captured"
        );
    }
}

/// `hipGraphInstantiate` of `recording`'s graph.
fn instantiate_graph(
    recording: &Recording,
    op: &'static str,
) -> Result<ffi::GraphExec, DriverError> {
    let api = recording.device.api;
    let mut exec = ptr::null_mut();
    let mut error_node: ffi::GraphNode = ptr::null_mut();
    let mut log = [0u8; 2048];
    // SAFETY: the graph is live; every out-pointer is a live local, and the
    // log buffer's length is passed with it.
    let code = unsafe {
        (api.graph_instantiate)(
            &mut exec,
            recording.graph,
            &mut error_node,
            log.as_mut_ptr().cast(),
            log.len(),
        )
    };
    if code != ffi::SUCCESS {
        let log = CStr::from_bytes_until_nul(&log)
            .map(|text| text.to_string_lossy().trim().to_owned())
            .unwrap_or_default();
        let mut message = describe(Some(api), code);
        if !log.is_empty() {
            message = format!("{message}; runtime log: {log}");
        }
        return Err(DriverError::new(error::BACKEND, op, message));
    }
    if exec.is_null() {
        return Err(other(
            op,
            "hipGraphInstantiate succeeded but returned no executable",
        ));
    }
    Ok(exec)
}

pub(crate) fn instantiate(
    stream: &mut Stream,
    mut recording: Recording,
    order: Order<'_>,
) -> Result<Executable, DriverError> {
    const OP: &str = "instantiate";
    let _current = stream.device.enter(OP)?;
    check_nodes(&mut recording, OP)?;
    arrange(&mut recording, order, OP)?;
    let exec = instantiate_graph(&recording, OP)?;
    Ok(Executable {
        exec,
        retired: Vec::new(),
        recording,
        updates: 0,
    })
}

/// Results of `hipGraphExecUpdate` that mean the recording cannot be put
/// into the executable in place, so that it is to be instantiated instead:
/// a different shape, parameters an update may not change (ROCm answers
/// "parameters changed" for some a fresh graph takes without complaint),
/// or an update the runtime does not support. The CUDA backend treats the
/// same answers alike.
fn instantiate_instead(result: ffi::GraphExecUpdateResult) -> bool {
    matches!(
        result,
        ffi::GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
            | ffi::GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
            | ffi::GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED
            | ffi::GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED
            | ffi::GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED
            | ffi::GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE
    )
}

/// `hipGraphExecUpdate(exec, graph)`: the code and the update result.
fn exec_update(
    update: ffi::HipGraphExecUpdate,
    exec: ffi::GraphExec,
    graph: ffi::Graph,
) -> (ffi::HipError, ffi::GraphExecUpdateResult) {
    let mut error_node: ffi::GraphNode = ptr::null_mut();
    let mut result = ffi::GRAPH_EXEC_UPDATE_ERROR;
    // SAFETY: the executable and the graph are live and on the current
    // device; both out-pointers are live locals.
    let code = unsafe { update(exec, graph, &mut error_node, &mut result) };
    (code, result)
}

/// Make `exec` run `recording`'s work, in place where the runtime can.
///
/// The recording's edges are first made those `order` asks for. The shapes
/// are compared here first (the same kernels and copies in the same order,
/// and the same edges), since ROCm's `hipGraphExecUpdate` updates node by
/// node and may stop at a mismatch with the nodes before it already
/// changed, and does not compare edges. When it
/// fails anyway, the executable is updated back from the graph it was
/// instantiated from; should that fail too, that graph is instantiated anew
/// in its place and the half-updated one is kept until the executable drops
/// (a replay of it may still run). Either way the executable is left running
/// its old work.
///
/// The runtime writes updated kernel arguments to fresh argument space, so
/// replays enqueued before the update finish with their old work; that
/// space lives as long as the executable, so after
/// [`IN_PLACE_UPDATES_PER_INSTANCE`] updates the recording is handed back
/// for a fresh executable instead.
pub(crate) fn update(
    stream: &mut Stream,
    exec: &mut Executable,
    mut recording: Recording,
    order: Order<'_>,
) -> Result<Updated<Recording>, DriverError> {
    const OP: &str = "update graph";
    let api = stream.device.api;
    let _current = stream.device.enter(OP)?;
    check_nodes(&mut recording, OP)?;
    arrange(&mut recording, order, OP)?;
    let Some(graph_exec_update) = api.graph_exec_update else {
        return Ok(Updated::Topology(recording));
    };
    // The caller's own nodes cannot be compared, so a graph holding any is
    // instantiated anew.
    if recording.work != exec.recording.work
        || recording.foreign > 0
        || exec.recording.foreign > 0
        || edges_of(&recording) != edges_of(&exec.recording)
        || exec.updates >= IN_PLACE_UPDATES_PER_INSTANCE
    {
        return Ok(Updated::Topology(recording));
    }
    let (code, result) = exec_update(graph_exec_update, exec.exec, recording.graph);
    if code == ffi::SUCCESS && result == ffi::GRAPH_EXEC_UPDATE_SUCCESS {
        // The same functions: the old recording's kernels are held by
        // capture-core until the replays enqueued before are past.
        exec.recording = recording;
        exec.updates += 1;
        return Ok(Updated::InPlace);
    }
    restore(graph_exec_update, exec);
    if instantiate_instead(result) {
        return Ok(Updated::Topology(recording));
    }
    let result = match ffi::graph_exec_update_result_name(result) {
        Some(name) => name.to_owned(),
        None => format!("hipGraphExecUpdateResult({result})"),
    };
    let message = if code == ffi::SUCCESS {
        format!("hipGraphExecUpdate succeeded but answered {result}")
    } else {
        format!("{} ({result})", describe(Some(api), code))
    };
    Err(DriverError::new(error::BACKEND, OP, message))
}

/// Put `exec` back to running its own recording after a failed update (see
/// [`update`]).
fn restore(graph_exec_update: ffi::HipGraphExecUpdate, exec: &mut Executable) {
    const OP: &str = "restore graph after a failed update";
    let (code, result) = exec_update(graph_exec_update, exec.exec, exec.recording.graph);
    if code == ffi::SUCCESS && result == ffi::GRAPH_EXEC_UPDATE_SUCCESS {
        return;
    }
    match instantiate_graph(&exec.recording, OP) {
        Ok(fresh) => {
            let broken = std::mem::replace(&mut exec.exec, fresh);
            exec.retired.push(broken);
        }
        Err(error) => log::error!(
            "{error}; the graph may run part of the refused recording's work on its next replay"
        ),
    }
}

pub(crate) fn upload(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
    const OP: &str = "upload graph";
    same_device(exec, stream, OP)?;
    let api = stream.device.api;
    let Some(graph_upload) = api.graph_upload else {
        static TOLD: AtomicBool = AtomicBool::new(false);
        if !TOLD.swap(true, Ordering::Relaxed) {
            log::info!(
                "hip: this runtime has no hipGraphUpload (it arrived in ROCm 5.3); graphs are \
                 staged on their first replay instead"
            );
        }
        return Ok(());
    };
    let _current = stream.device.enter(OP)?;
    // SAFETY: the executable and the stream are live and on the same device.
    let code = unsafe { graph_upload(exec.exec, stream.raw()) };
    error::check(api, OP, code)?;
    stream.enqueued();
    Ok(())
}

pub(crate) fn replay(exec: &Executable, stream: &mut Stream) -> Result<(), DriverError> {
    const OP: &str = "replay graph";
    same_device(exec, stream, OP)?;
    let api = stream.device.api;
    let _current = stream.device.enter(OP)?;
    // SAFETY: the executable and the stream are live and on the same device.
    let code = unsafe { (api.graph_launch)(exec.exec, stream.raw()) };
    error::check(api, OP, code)?;
    stream.enqueued();
    Ok(())
}

/// A graph replays only on a stream of the device it was made on.
fn same_device(exec: &Executable, stream: &Stream, op: &'static str) -> Result<(), DriverError> {
    let ours = exec.recording.device.ordinal;
    if ours == stream.device.ordinal {
        Ok(())
    } else {
        Err(other(
            op,
            format!(
                "the graph belongs to HIP device {ours} and the stream to device {}",
                stream.device.ordinal
            ),
        ))
    }
}
