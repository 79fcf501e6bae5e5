//! Native CUDA graphs, made by stream capture.
//!
//! Capture runs in `CU_STREAM_CAPTURE_MODE_RELAXED`. capture-core drives a
//! device from whichever thread calls, so `begin` and `instantiate` may
//! arrive on different threads, which the global and thread-local modes
//! refuse with `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`. What those modes
//! guard against, a synchronous allocation or a host sync while a capture is
//! open, capture-core refuses itself: it takes no page from the driver and
//! runs no fence while a window records.

use std::ptr;
use std::sync::Arc;

use capture_core::{DriverError, Error};
use cudarc::driver::sys::{self, CUgraph, CUgraphExec, CUgraphNode, CUresult};

use crate::device::CudaDevice;
use crate::error::{check, describe, refuse};
use crate::stream::CudaStream;

/// An instantiated graph, destroyed (with its context current) when dropped.
pub struct CudaExecutable {
    raw: CUgraphExec,
    device: Arc<CudaDevice>,
}

// SAFETY: a CUgraphExec is a process-wide handle any thread may launch or
// destroy once its context is current, which every use here ensures.
unsafe impl Send for CudaExecutable {}

impl std::fmt::Debug for CudaExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaExecutable({:p})", self.raw)
    }
}

impl Drop for CudaExecutable {
    fn drop(&mut self) {
        if let Err(e) = self.device.bind() {
            log::warn!("leaking a graph: {e}");
            return;
        }
        // SAFETY: the executable is owned here and destroyed once;
        // capture-core drops it only once no replay of it can be running.
        let destroyed = unsafe { sys::cuGraphExecDestroy(self.raw) };
        if let Err(e) = check("destroy graph", destroyed) {
            log::warn!("{e}");
        }
    }
}

/// A captured graph, destroyed on every path out of `instantiate`.
pub(crate) struct CapturedGraph(CUgraph);

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        // SAFETY: the graph came from cuStreamEndCapture, is owned here and
        // destroyed once; an executable made from it does not need it.
        let destroyed = unsafe { sys::cuGraphDestroy(self.0) };
        if let Err(e) = check("destroy captured graph", destroyed) {
            log::warn!("{e}");
        }
    }
}

pub(crate) fn begin(stream: &mut CudaStream) -> Result<(), DriverError> {
    const OP: &str = "begin capture";
    if stream.capturing {
        return Err(refuse(OP, "the stream is already recording"));
    }
    stream.device.bind()?;
    // Recorded before the capture so that signals asked for while it records
    // have a real point to stand for (see `CudaStream::before_capture`).
    let before = stream.record_signal()?;
    // SAFETY: the stream is live and its context current.
    check(OP, unsafe {
        sys::cuStreamBeginCapture_v2(
            stream.raw,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        )
    })?;
    stream.capturing = true;
    stream.before_capture = Some(before);
    Ok(())
}

/// End the capture on `stream` whatever its state, returning the captured
/// graph or why there is none. The stream is not recording afterwards.
pub(crate) fn end_capture(stream: &mut CudaStream) -> Result<CapturedGraph, DriverError> {
    let mut graph: CUgraph = ptr::null_mut();
    // SAFETY: the stream is live; `graph` is a valid place for the handle.
    // Called even when the capture was invalidated: that is what returns the
    // stream to normal, and it is a harmless error on a stream not recording.
    let ended = unsafe { sys::cuStreamEndCapture(stream.raw, &mut graph) };
    stream.capturing = false;
    stream.before_capture = None;
    // An invalidated capture may still hand back a partial graph; owning it
    // first makes sure it is destroyed whatever the answer.
    let captured = (!graph.is_null()).then_some(CapturedGraph(graph));
    match (ended, captured) {
        (CUresult::CUDA_SUCCESS, Some(captured)) => Ok(captured),
        (CUresult::CUDA_SUCCESS, None) => Err(refuse(
            "end capture",
            "the driver ended the capture without a graph",
        )),
        (CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, _) => Err(refuse(
            "end capture",
            format!(
                "{}; an operation the capture cannot hold was issued while it recorded",
                describe(ended)
            ),
        )),
        (code, _) => Err(refuse("end capture", describe(code))),
    }
}

pub(crate) fn instantiate(
    stream: &mut CudaStream,
    doomed: Option<Error>,
) -> Result<CudaExecutable, Error> {
    const OP: &str = "instantiate";
    // The capture is closed before anything else can fail: a stream left
    // recording would swallow every later launch.
    let bound = stream.device.bind();
    let ended = end_capture(stream);
    if let Some(reason) = doomed {
        return Err(reason);
    }
    bound?;
    let captured = ended?;
    refuse_memory_nodes(&captured)?;
    let mut raw: CUgraphExec = ptr::null_mut();
    // SAFETY: the graph is live and owned by `captured`, which destroys it
    // once this returns; `raw` is a valid place for the handle.
    check(OP, unsafe {
        sys::cuGraphInstantiateWithFlags(&mut raw, captured.0, 0)
    })?;
    Ok(CudaExecutable {
        raw,
        device: Arc::clone(&stream.device),
    })
}

/// A graph that allocates or frees memory launches once and then fails on
/// every later launch, since its allocation is still live; refuse it here
/// rather than on its second replay.
fn refuse_memory_nodes(captured: &CapturedGraph) -> Result<(), DriverError> {
    const OP: &str = "inspect captured graph";
    let mut count: usize = 0;
    // SAFETY: a null node array asks only for the count, written to `count`.
    check(OP, unsafe {
        sys::cuGraphGetNodes(captured.0, ptr::null_mut(), &mut count)
    })?;
    let mut nodes: Vec<CUgraphNode> = vec![ptr::null_mut(); count];
    // SAFETY: `nodes` holds `count` slots and `count` tells the driver so;
    // it writes at most that many and stores how many it wrote.
    check(OP, unsafe {
        sys::cuGraphGetNodes(captured.0, nodes.as_mut_ptr(), &mut count)
    })?;
    nodes.truncate(count);
    // Read as the enum's underlying integer: a node type newer than cudarc's
    // bindings, written into the Rust enum, would be an invalid value.
    let alloc = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC as u32;
    let free = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE as u32;
    let mut memory_nodes = 0usize;
    for node in nodes {
        let mut kind = u32::MAX;
        // SAFETY: the node belongs to the live graph; `kind` is a valid place
        // for the driver's `CUgraphNodeType`, a C enum that cudarc declares
        // `#[repr(u32)]`, so the pointer cast changes no size or alignment.
        check(OP, unsafe {
            sys::cuGraphNodeGetType(node, (&raw mut kind).cast::<sys::CUgraphNodeType>())
        })?;
        if kind == alloc || kind == free {
            memory_nodes += 1;
        }
    }
    if memory_nodes > 0 {
        return Err(refuse(
            "instantiate",
            format!(
                "the recording holds {memory_nodes} memory allocation or free node(s); a graph \
                 that allocates replays once and then fails, so allocate before the window"
            ),
        ));
    }
    Ok(())
}

pub(crate) fn upload(exec: &CudaExecutable, stream: &mut CudaStream) -> Result<(), DriverError> {
    const OP: &str = "upload graph";
    same_device(OP, exec, stream)?;
    stream.device.bind()?;
    // SAFETY: both handles are live and belong to the current context.
    check(OP, unsafe { sys::cuGraphUpload(exec.raw, stream.raw) })
}

pub(crate) fn replay(exec: &CudaExecutable, stream: &mut CudaStream) -> Result<(), DriverError> {
    const OP: &str = "replay graph";
    same_device(OP, exec, stream)?;
    stream.device.bind()?;
    // SAFETY: both handles are live and belong to the current context;
    // capture-core keeps every buffer the graph touches alive while it lives.
    check(OP, unsafe { sys::cuGraphLaunch(exec.raw, stream.raw) })
}

fn same_device(
    op: &'static str,
    exec: &CudaExecutable,
    stream: &CudaStream,
) -> Result<(), DriverError> {
    if Arc::ptr_eq(&exec.device, &stream.device) {
        Ok(())
    } else {
        Err(refuse(op, "the graph was made on another device"))
    }
}
