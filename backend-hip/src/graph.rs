//! Recording a stream into a HIP graph, and replaying it.
//!
//! Captures run in `hipStreamCaptureModeRelaxed`. capture-core drives the
//! backend under a lock from whichever thread calls, so `begin` and
//! `instantiate` may arrive on different threads; the global and thread-local
//! modes refuse that (`hipErrorStreamCaptureWrongThread`). What those modes
//! guard against, a device allocation or a host sync while a capture records,
//! capture-core refuses itself: a page allocated while recording fails the
//! window at `instantiate`, and host syncs are refused or deferred until the
//! window closes. Relaxed mode therefore gives up no protection here.

use std::ffi::CStr;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use capture_core::{DriverError, Error};

use crate::device::HipDevice;
use crate::error::{self, describe, other};
use crate::ffi;
use crate::loader::Api;
use crate::stream::HipStream;

/// An instantiated HIP graph, destroyed when dropped.
pub struct HipGraph {
    exec: ffi::GraphExec,
    device: Arc<HipDevice>,
}

// SAFETY: a graph executable is a runtime object usable from any thread (the
// device is made current on every entry); it is destroyed only by Drop.
unsafe impl Send for HipGraph {}

impl Drop for HipGraph {
    fn drop(&mut self) {
        let api = self.device.api;
        if let Err(error) = self.device.make_current("destroy graph") {
            log::warn!("{error}; destroying the graph on whichever device is current");
        }
        // SAFETY: the executable came from hipGraphInstantiate and is
        // destroyed exactly once, here; capture-core drops it only once no
        // replay of it can still run.
        let code = unsafe { (api.graph_exec_destroy)(self.exec) };
        if let Err(error) = error::check(api, "destroy graph", code) {
            log::warn!("{error}");
        }
    }
}

/// A captured graph (not yet instantiated), destroyed on every path out of
/// `instantiate`: once the executable exists the graph is no longer needed,
/// and on any refusal it must not leak.
struct CapturedGraph {
    api: &'static Api,
    raw: ffi::Graph,
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        // SAFETY: the graph came from hipStreamEndCapture and is destroyed
        // exactly once, here.
        let code = unsafe { (self.api.graph_destroy)(self.raw) };
        if let Err(error) = error::check(self.api, "destroy captured graph", code) {
            log::warn!("{error}");
        }
    }
}

/// End the stream's capture, whatever state it is in, and hand back the
/// graph (owned, so it is destroyed however the caller leaves) and the code.
fn end_capture(stream: &mut HipStream) -> (CapturedGraph, ffi::HipError) {
    let api = stream.device.api;
    stream.capturing = false;
    let mut raw = ptr::null_mut();
    // SAFETY: the stream is live; the out-pointer is a live local.
    let code = unsafe { (api.stream_end_capture)(stream.raw(), &mut raw) };
    (CapturedGraph { api, raw }, code)
}

/// Close a capture no one will instantiate (the stream is being dropped).
pub(crate) fn abandon_capture(stream: &mut HipStream) {
    let (_graph, code) = end_capture(stream);
    if let Err(error) = error::check(stream.device.api, "end capture", code) {
        log::warn!("{error}");
    }
}

pub(crate) fn begin(stream: &mut HipStream) -> Result<(), DriverError> {
    const OP: &str = "begin capture";
    if stream.capturing {
        return Err(other(OP, "the stream is already capturing"));
    }
    let api = stream.device.api;
    stream.device.make_current(OP)?;
    // Marks the end of the work issued before the capture, which is the
    // point a signal asked for while recording stands for (see
    // `HipStream::signal`); the last signal handed out may lie before
    // launches issued since, which a fence on it would not wait for.
    stream.signal()?;
    // SAFETY: the stream is live and not capturing; the mode is a documented one.
    let code = unsafe { (api.stream_begin_capture)(stream.raw(), ffi::CAPTURE_MODE_RELAXED) };
    error::check(api, OP, code)?;
    stream.capturing = true;
    Ok(())
}

pub(crate) fn instantiate(
    stream: &mut HipStream,
    doomed: Option<Error>,
) -> Result<HipGraph, Error> {
    const OP: &str = "instantiate";
    let api = stream.device.api;
    // The capture is ended before anything can fail: a stream left capturing
    // would swallow every later launch. The device is made current first, but
    // its failure is reported only after the capture is closed.
    let current = stream.device.make_current(OP);
    let (graph, code) = end_capture(stream);
    if let Some(doomed) = doomed {
        return Err(doomed);
    }
    current?;
    error::check(api, "end capture", code)?;
    if graph.raw.is_null() {
        return Err(other(OP, "hipStreamEndCapture succeeded but returned no graph").into());
    }
    refuse_memory_nodes(api, &graph)?;

    let mut exec = ptr::null_mut();
    let mut error_node: ffi::GraphNode = ptr::null_mut();
    let mut log = [0u8; 2048];
    // SAFETY: the graph is live; every out-pointer is a live local, and the
    // log buffer's length is passed with it.
    let code = unsafe {
        (api.graph_instantiate)(
            &mut exec,
            graph.raw,
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
        return Err(DriverError::new(error::BACKEND, OP, message).into());
    }
    if exec.is_null() {
        return Err(other(
            OP,
            "hipGraphInstantiate succeeded but returned no executable",
        )
        .into());
    }
    Ok(HipGraph {
        exec,
        device: Arc::clone(&stream.device),
    })
}

/// Refuse a recording holding memory allocation or free nodes: such a graph
/// allocates on launch and never frees, so its second replay fails while the
/// first succeeds. Slots 10 and 11 of `hipGraphNodeType` hold those nodes on
/// every release that has them, and symbol copies (which this backend never
/// issues) on the releases before, so refusing them is right on all.
fn refuse_memory_nodes(api: &Api, graph: &CapturedGraph) -> Result<(), DriverError> {
    const OP: &str = "instantiate";
    let mut count = 0usize;
    // SAFETY: the graph is live; a null node array asks for the count only.
    let code = unsafe { (api.graph_get_nodes)(graph.raw, ptr::null_mut(), &mut count) };
    error::check(api, "list graph nodes", code)?;
    if count == 0 {
        return Ok(());
    }
    let mut nodes: Vec<ffi::GraphNode> = vec![ptr::null_mut(); count];
    let mut filled = count;
    // SAFETY: the array holds `filled` entries and lives across the call; the
    // runtime writes at most that many and updates `filled`.
    let code = unsafe { (api.graph_get_nodes)(graph.raw, nodes.as_mut_ptr(), &mut filled) };
    error::check(api, "list graph nodes", code)?;
    for &node in nodes.iter().take(filled.min(count)) {
        let mut kind: ffi::GraphNodeType = -1;
        // SAFETY: the node belongs to the live graph; the out-pointer is a
        // live local.
        let code = unsafe { (api.graph_node_get_type)(node, &mut kind) };
        error::check(api, "inspect graph node", code)?;
        if matches!(
            kind,
            ffi::GRAPH_NODE_TYPE_MEM_ALLOC | ffi::GRAPH_NODE_TYPE_MEM_FREE
        ) {
            return Err(other(
                OP,
                format!(
                    "the recording holds a memory allocation or free node (hipGraphNodeType \
                     {kind}); a graph that allocates fails on its second replay, so allocate \
                     before the capture begins"
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn upload(exec: &HipGraph, stream: &mut HipStream) -> Result<(), DriverError> {
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
    stream.device.make_current(OP)?;
    // SAFETY: the executable and the stream are live and on the same device.
    let code = unsafe { graph_upload(exec.exec, stream.raw()) };
    error::check(api, OP, code)
}

pub(crate) fn replay(exec: &HipGraph, stream: &mut HipStream) -> Result<(), DriverError> {
    const OP: &str = "replay graph";
    same_device(exec, stream, OP)?;
    let api = stream.device.api;
    stream.device.make_current(OP)?;
    // SAFETY: the executable and the stream are live and on the same device.
    let code = unsafe { (api.graph_launch)(exec.exec, stream.raw()) };
    error::check(api, OP, code)
}

/// A graph replays only on a stream of the device it was made on.
fn same_device(exec: &HipGraph, stream: &HipStream, op: &'static str) -> Result<(), DriverError> {
    if exec.device.ordinal == stream.device.ordinal {
        Ok(())
    } else {
        Err(other(
            op,
            format!(
                "the graph belongs to HIP device {} and the stream to device {}",
                exec.device.ordinal, stream.device.ordinal
            ),
        ))
    }
}
