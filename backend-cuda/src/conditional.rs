//! Conditional nodes in a stream capture, as the driver records them from
//! 12.4 on: the setter kernel is captured like any launch, the node is
//! added to the capture's graph after it (`cuGraphAddNode_v2`) and made
//! what the stream's next node follows
//! (`cuStreamUpdateCaptureDependencies_v2`), and each body is filled by
//! capturing a side stream into the body graph the driver made with the
//! node (`cuStreamBeginCaptureToGraph`). The stream's work goes to the
//! innermost open body's side stream until the conditional closes, so
//! conditionals nest to any depth, each level on a side stream of its own.
//!
//! A loop's setter runs before the node and again at the end of each
//! iteration, counting the iterations in a trip counter of the stream's
//! device memory; the bound clears the handle and never the caller's flag.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use capture_core::{Conditional, DriverError, Order};

use crate::device::Device;
use crate::error::refuse;
use crate::graph::{self, Level};
use crate::memory::DevicePage;
use crate::setter::{IF_ELSE_DRIVER, Setter, Setters};
use crate::sys::{self, Api, CUdeviceptr, CUgraph, CUgraphConditionalHandle, CUstream};

/// Bytes of the first page of loop trip counters a stream allocates: a
/// `u32` per loop of a recording, 64 loops.
const COUNTER_PAGE_BYTES: u64 = 256;

/// The conditionals a stream's recording has open, the side streams that
/// capture their bodies, and its loops' trip counters.
#[derive(Default)]
pub(crate) struct Nesting {
    /// Open conditionals, the innermost last.
    open: Vec<Frame>,
    /// Side streams of the stream's own, not capturing, to capture the
    /// next body into.
    spare: Vec<CUstream>,
    /// The page trip counters are cut from, and the earlier pages the
    /// recording being made still uses.
    counters: Option<Arc<DevicePage>>,
    held: Vec<Arc<DevicePage>>,
    /// Trip counters handed out to the recording being made. Recordings of
    /// one stream reuse them: its replays run one after another, and each
    /// loop's first setter resets its counter.
    used: u64,
    /// Whether a body's capture ended invalidated since the recording
    /// began: the driver freed the body graph, and ending the stream's own
    /// capture would then crash inside it (NVBUG 6805256).
    invalidated: bool,
}

/// One open conditional.
struct Frame {
    /// The body graphs the driver made with the node(s), one per body.
    bodies: Vec<CUgraph>,
    /// What each body begun so far holds; the last is being captured.
    levels: Vec<Level>,
    /// The side stream capturing the current body.
    side: CUstream,
    /// Whether `side` is capturing: not after a body's capture failed.
    capturing: bool,
    /// Nodes the conditional spans in the chain of the graph it is in: its
    /// setter and its node, or two `if` nodes for an if/else.
    span: usize,
    /// A loop's setter for the end of each iteration.
    next: Option<LoopSetter>,
    /// Whether a body's capture ended invalidated.
    invalidated: bool,
}

/// What a loop's setters are launched with.
#[derive(Debug, Clone, Copy)]
struct LoopSetter {
    flag: CUdeviceptr,
    handle: CUgraphConditionalHandle,
    trips: CUdeviceptr,
    bound: u32,
}

// SAFETY: the side streams and graphs are process-wide driver handles any
// thread may use once the context is current, which every method ensures;
// the stream owning the nesting hands out `&mut` access only.
unsafe impl Send for Nesting {}

impl Nesting {
    /// A new recording begins: its loops count from the first counter.
    pub(crate) fn begin(&mut self) {
        self.used = 0;
        self.held.clear();
        self.invalidated = false;
    }

    /// Whether a body's capture ended invalidated since the recording
    /// began, clearing it: the recording is over (see `Stream::end`).
    pub(crate) fn take_invalidated(&mut self) -> bool {
        let invalidated = self.invalidated();
        self.invalidated = false;
        invalidated
    }

    /// Whether a body's capture ended invalidated since the recording
    /// began, so that the stream's own capture must not be ended.
    fn invalidated(&self) -> bool {
        self.invalidated || self.open.iter().any(|frame| frame.invalidated)
    }

    /// Where the stream's next work goes: the innermost open body's side
    /// stream, else the stream itself.
    #[inline]
    pub(crate) fn target(&self, raw: CUstream) -> CUstream {
        self.open.last().map_or(raw, |frame| frame.side)
    }

    /// Why no work may be issued now, where a body's capture failed: it
    /// would run at once instead of being recorded.
    #[inline]
    pub(crate) fn refusal(&self, op: &'static str) -> Result<(), DriverError> {
        if self.invalidated() {
            return Err(refuse(
                op,
                "a conditional body's capture was invalidated, so the recording is abandoned",
            ));
        }
        match self.open.last() {
            Some(frame) if !frame.capturing => Err(refuse(
                op,
                "the conditional's body is no longer being captured (an earlier step failed), \
                 so nothing more can go in it",
            )),
            _ => Ok(()),
        }
    }

    /// What the innermost open body holds, else what `top` (the stream's
    /// own recording) does.
    #[inline]
    pub(crate) fn level<'a>(&'a mut self, top: &'a mut Level) -> &'a mut Level {
        match self
            .open
            .last_mut()
            .and_then(|frame| frame.levels.last_mut())
        {
            Some(level) => level,
            None => top,
        }
    }

    /// The trip-counter pages the recording being made uses.
    pub(crate) fn counters_of_recording(&self) -> Vec<Arc<DevicePage>> {
        if self.used == 0 {
            return Vec::new();
        }
        let mut pages = self.held.clone();
        pages.extend(self.counters.clone());
        pages
    }

    /// The address of a trip counter no other loop of the recording uses.
    /// The page may be allocated while the stream records, as a pool's may.
    fn trip_counter(&mut self, device: &Arc<Device>) -> Result<CUdeviceptr, DriverError> {
        let offset = self.used * 4;
        let fits = self
            .counters
            .as_ref()
            .is_some_and(|page| page.len() >= offset + 4);
        if !fits {
            let bytes = (offset + 4).next_power_of_two().max(COUNTER_PAGE_BYTES);
            let page = Arc::new(DevicePage::allocate(device, bytes)?);
            if let Some(old) = self.counters.replace(page) {
                self.held.push(old);
            }
            self.used = 0;
        }
        let page = self
            .counters
            .as_ref()
            .ok_or_else(|| refuse("open conditional", "no trip counter page"))?;
        let address = page.device_ptr() + self.used * 4;
        self.used += 1;
        Ok(address)
    }

    /// A side stream to capture a body or a foreign operation with.
    pub(crate) fn side_stream(
        &mut self,
        api: &Api,
        op: &'static str,
    ) -> Result<CUstream, DriverError> {
        if let Some(side) = self.spare.pop() {
            return Ok(side);
        }
        let mut side: CUstream = ptr::null_mut();
        // SAFETY: `side` is a valid place for the handle; the context is
        // current.
        api.check(op, unsafe {
            (api.stream_create)(&mut side, sys::CU_STREAM_NON_BLOCKING)
        })?;
        Ok(side)
    }

    /// Open a conditional of `kind` over the `u32` at `flag`, recorded by
    /// `raw` (or the innermost open body): its setter and node go in the
    /// graph being captured, and the stream's work from here in its first
    /// body.
    pub(crate) fn open(
        &mut self,
        device: &Arc<Device>,
        raw: CUstream,
        kind: Conditional,
        flag: CUdeviceptr,
    ) -> Result<(), DriverError> {
        const OP: &str = "open conditional";
        self.refusal(OP)?;
        let (functions, setters) = device.conditionals().map_err(|why| refuse(OP, why))?;
        let api = device.api();
        let _current = device.enter()?;
        let context = device.raw_context();
        let target = self.target(raw);
        let graph = functions.capture.capture_info(api, target, OP)?.graph;
        // An if/else has two bodies on one node from 12.8; before, it is
        // two `if` nodes whose handles one setter sets to the flag and to
        // its negation.
        let split = kind == Conditional::IfElse && device.driver_version() < IF_ELSE_DRIVER;
        let first = functions.handle(api, graph, context, OP)?;
        let second = if split {
            Some(functions.handle(api, graph, context, OP)?)
        } else {
            None
        };
        let mut next = None;
        match (kind, second) {
            (Conditional::IfElse, Some(second)) => {
                launch(
                    api,
                    setters,
                    Setter::IfElse,
                    target,
                    &[flag, first, second],
                    None,
                )?;
            }
            (Conditional::If | Conditional::IfElse, _) => {
                launch(api, setters, Setter::If, target, &[flag, first], None)?;
            }
            (Conditional::While { bound }, _) => {
                let trips = self.trip_counter(device)?;
                launch(
                    api,
                    setters,
                    Setter::WhileFirst,
                    target,
                    &[flag, first, trips],
                    Some(bound),
                )?;
                next = Some(LoopSetter {
                    flag,
                    handle: first,
                    trips,
                    bound,
                });
            }
        }
        let after = functions
            .capture
            .capture_info(api, target, OP)?
            .dependencies;
        let (node_kind, size) = match kind {
            Conditional::If => (sys::CU_GRAPH_COND_TYPE_IF, 1),
            Conditional::IfElse if split => (sys::CU_GRAPH_COND_TYPE_IF, 1),
            Conditional::IfElse => (sys::CU_GRAPH_COND_TYPE_IF, 2),
            Conditional::While { .. } => (sys::CU_GRAPH_COND_TYPE_WHILE, 1),
        };
        let (node, mut bodies) =
            functions.add_conditional(api, graph, &after, first, node_kind, size, context, OP)?;
        let mut last = node;
        if let Some(second) = second {
            let (otherwise, more) = functions.add_conditional(
                api,
                graph,
                &[node],
                second,
                sys::CU_GRAPH_COND_TYPE_IF,
                1,
                context,
                OP,
            )?;
            bodies.extend(more);
            last = otherwise;
        }
        functions.capture.follow(api, target, last, OP)?;
        let side = self.side_stream(api, OP)?;
        if let Err(e) = functions.capture_into(api, side, bodies[0], OP) {
            self.spare.push(side);
            return Err(e);
        }
        self.open.push(Frame {
            bodies,
            levels: vec![Level::default()],
            side,
            capturing: true,
            span: if split { 3 } else { 2 },
            next,
            invalidated: false,
        });
        Ok(())
    }

    /// The open conditional's current body is complete: the stream's work
    /// from here goes into its next one.
    pub(crate) fn next_body(&mut self, device: &Arc<Device>) -> Result<(), DriverError> {
        const OP: &str = "next body";
        let (functions, setters) = device.conditionals().map_err(|why| refuse(OP, why))?;
        let api = device.api();
        let _current = device.enter()?;
        let Some(frame) = self.open.last_mut() else {
            return Err(refuse(OP, "no conditional is open"));
        };
        let current = frame.levels.len() - 1;
        let Some(&body) = frame.bodies.get(current + 1) else {
            return Err(refuse(OP, "the conditional has no more bodies"));
        };
        let ended = frame.end_body(api, noop_for(device, setters), OP);
        frame.levels.push(Level::default());
        ended?;
        let started = functions.capture_into(api, frame.side, body, OP);
        frame.capturing = started.is_ok();
        started
    }

    /// Close the innermost open conditional, whose bodies keep `orders`:
    /// a loop's body gets its closing setter, every body's capture ends and
    /// is checked and given its order, and the conditional becomes one
    /// operation of the graph it was opened in (`top` where that is the
    /// stream's own). The side stream ends its capture on every path.
    pub(crate) fn close(
        &mut self,
        device: &Arc<Device>,
        top: &mut Level,
        orders: &[Order<'_>],
    ) -> Result<(), DriverError> {
        const OP: &str = "close conditional";
        let Some(mut frame) = self.open.pop() else {
            return Err(refuse(OP, "no conditional is open"));
        };
        let api = device.api();
        let current = device.enter();
        let mut result = match &current {
            Ok(_) => Ok(()),
            Err(e) => Err(e.clone()),
        };
        if let (Ok(()), Some(next), true) = (&result, frame.next, frame.capturing) {
            result = device
                .conditionals()
                .map_err(|why| refuse(OP, why))
                .and_then(|(_, setters)| {
                    launch(
                        api,
                        setters,
                        Setter::WhileNext,
                        frame.side,
                        &[next.flag, next.handle, next.trips],
                        Some(next.bound),
                    )
                });
            if let Some(level) = frame.levels.last_mut() {
                level.tail = true;
            }
        }
        let noop = device.conditionals().ok().map(|(_, setters)| setters);
        let ended = frame.end_body(api, noop.and_then(|setters| noop_for(device, setters)), OP);
        self.invalidated |= frame.invalidated;
        self.recycle(api, frame.side);
        self.level(top).add_conditional(frame.span);
        result?;
        ended?;
        if frame.levels.len() != frame.bodies.len() || orders.len() != frame.bodies.len() {
            return Err(refuse(
                OP,
                format!(
                    "a conditional of {} bodies closed after {} body(ies), with {} order(s)",
                    frame.bodies.len(),
                    frame.levels.len(),
                    orders.len()
                ),
            ));
        }
        let fill = device.driver_version() < IF_ELSE_DRIVER;
        for ((&body, level), &order) in frame.bodies.iter().zip(&frame.levels).zip(orders) {
            graph::finish_body(device, body, level, order, fill, OP)?;
        }
        Ok(())
    }

    /// End every open body's capture, innermost first: the recording they
    /// belong to is ending.
    pub(crate) fn abandon(&mut self, device: &Device) {
        let api = device.api();
        while let Some(mut frame) = self.open.pop() {
            if let Err(e) = frame.end_body(api, None, "end capture") {
                log::debug!("an open conditional's body: {e}");
            }
            self.invalidated |= frame.invalidated;
            self.recycle(api, frame.side);
        }
    }

    /// Keep `side` for the next body, or destroy it where the driver still
    /// counts it as capturing.
    pub(crate) fn recycle(&mut self, api: &Api, side: CUstream) {
        let mut status = sys::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the side stream is live; `status` is a valid place.
        let asked = unsafe { (api.stream_is_capturing)(side, &mut status) };
        if asked == sys::CUDA_SUCCESS && status == sys::CU_STREAM_CAPTURE_STATUS_NONE {
            self.spare.push(side);
            return;
        }
        // SAFETY: the side stream is the stream's own, holds no work that
        // ran (a capture runs nothing), and is destroyed once.
        let destroyed = unsafe { (api.stream_destroy)(side) };
        if let Err(e) = api.check("destroy a side stream left capturing", destroyed) {
            log::warn!("{e}");
        }
    }

    /// Destroy the side streams; the stream is going. The caller has made
    /// the context current.
    pub(crate) fn destroy(&mut self, device: &Device) {
        self.abandon(device);
        let api = device.api();
        for side in self.spare.drain(..) {
            // SAFETY: each spare side stream is the stream's own, not
            // capturing, and destroyed once.
            let destroyed = unsafe { (api.stream_destroy)(side) };
            if let Err(e) = api.check("destroy a side stream", destroyed) {
                log::warn!("{e}");
            }
        }
    }
}

/// The setters whose no-op an empty body gets on `device`: on a driver
/// before 12.8, which hangs on a body without a kernel.
fn noop_for<'a>(device: &Device, setters: &'a Setters) -> Option<&'a Setters> {
    (device.driver_version() < IF_ELSE_DRIVER).then_some(setters)
}

impl Frame {
    /// End the current body's capture, which must hand back its body
    /// graph; an empty body first gets `noop`'s no-op kernel, where given.
    /// The caller has made the context current.
    fn end_body(
        &mut self,
        api: &Api,
        noop: Option<&Setters>,
        op: &'static str,
    ) -> Result<(), DriverError> {
        if !std::mem::replace(&mut self.capturing, false) {
            return Err(refuse(op, "the body's capture had failed before"));
        }
        let empty = self.levels.last().is_some_and(|level| level.nodes() == 0);
        // Captured like the body's own work, so the body holds it as its one
        // node; the capture ends below whatever the launch answered.
        let filled = match (noop, empty) {
            (Some(setters), true) => launch(api, setters, Setter::Noop, self.side, &[], None),
            _ => Ok(()),
        };
        let expected = self.bodies.get(self.levels.len() - 1).copied();
        let mut graph: CUgraph = ptr::null_mut();
        // SAFETY: the side stream is live and capturing; `graph` is a valid
        // place for the handle, which the node owns (never destroyed here).
        let code = unsafe { (api.stream_end_capture)(self.side, &mut graph) };
        if code == sys::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED {
            // The driver has freed the body graph the parent's capture
            // still refers to: ending that capture would crash in the
            // driver, so the stream owning it abandons it instead.
            self.invalidated = true;
            return Err(refuse(
                op,
                format!(
                    "{}: the body's capture was invalidated (a context-wide synchronization, \
                     such as cuCtxSynchronize or cudarc's CudaContext::synchronize or first \
                     new_stream, ran while the window recorded), so the recording is abandoned",
                    api.describe(code)
                ),
            ));
        }
        api.check(op, code)?;
        filled?;
        if Some(graph) != expected {
            return Err(refuse(
                op,
                "the driver ended a body's capture with another graph than the body's",
            ));
        }
        Ok(())
    }
}

/// Launch `which` on `stream`, one thread, with the 64-bit `words` and, for
/// a loop, its bound. The caller has made the context current.
fn launch(
    api: &Api,
    setters: &Setters,
    which: Setter,
    stream: CUstream,
    words: &[u64],
    bound: Option<u32>,
) -> Result<(), DriverError> {
    const OP: &str = "launch a conditional's setter";
    let mut words: [u64; 3] = std::array::from_fn(|i| words.get(i).copied().unwrap_or(0));
    let count = which.params().len() - usize::from(bound.is_some());
    let mut bound = bound.unwrap_or(0);
    let mut args = [ptr::null_mut::<c_void>(); 4];
    for (arg, word) in args.iter_mut().zip(words.iter_mut()).take(count) {
        *arg = ptr::from_mut(word).cast::<c_void>();
    }
    if count < which.params().len() {
        args[count] = ptr::from_mut(&mut bound).cast::<c_void>();
    }
    // SAFETY: the function is a setter of the live module its device
    // holds; `args` has one entry per parameter it takes (`Setter::params`,
    // which the offline test checks against the assembled PTX), each
    // pointing at a local of that size that outlives the call, which copies
    // them; the flag and trip counter addresses are live device memory the
    // recording keeps.
    api.check(OP, unsafe {
        (api.launch_kernel)(
            setters.function(which),
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            stream,
            args.as_mut_ptr(),
            ptr::null_mut(),
        )
    })
}
