//! A capture window on one stream: arming the pools before it opens, opening
//! it, and instantiating what it recorded.
//!
//! The three steps are ordered and the stream's capture state refuses them
//! out of order; this type is where each step's shared half lives, written
//! once for every backend.

use std::sync::Arc;
use std::time::Instant;

use crate::capture::graph::{Graph, Refused};
use crate::driver::{GraphDriver, Order, Updated};
use crate::error::Error;
use crate::hashing::FastSet;
use crate::ids::{BufferId, GraphId, WindowId};
use crate::memory::pool::{Place, SliceHandle};
use crate::recorded::dependencies::Dependencies;
use crate::recorded::entries::{Entry, GraphInfo};
use crate::streams::capturing::KeptKernel;
use crate::streams::state::{ReplayOrder, StreamState};

/// How a re-capture reached its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// The executable was updated in place: same kernels in the same order.
    InPlace,
    /// The recording's shape differed, so a new executable was instantiated
    /// behind the same graph.
    Reinstantiated,
}

/// A closed window's recording and what its graph must keep.
struct Closed<D: GraphDriver> {
    recording: D::Recording,
    retained: Vec<SliceHandle>,
    kernels: Vec<KeptKernel>,
    written: Vec<BufferId>,
    renewed: Vec<BufferId>,
    read: Vec<BufferId>,
    log: Vec<Entry>,
    /// The recording's temporaries, each where it lies in the arena.
    temporaries: Vec<(BufferId, Place)>,
    /// Bytes they span.
    temporary_bytes: u64,
    /// Device bytes pinned (aligned spans), host bytes pinned, and the
    /// device bytes the recording's buffers asked for.
    bytes: (u64, u64, u64),
}

/// The bytes `device` and `host` pin, each slice once, and the device
/// bytes their buffers asked for.
fn pinned(device: &[SliceHandle], host: &[SliceHandle]) -> (u64, u64, u64) {
    let mut seen = FastSet::default();
    let mut spans = [0u64; 2];
    let mut asked = 0;
    for (i, slices) in [device, host].into_iter().enumerate() {
        for slice in slices {
            if seen.insert((i, slice.id())) {
                spans[i] += slice.span();
                if i == 0 {
                    asked += slice.len();
                }
            }
        }
    }
    (spans[0], spans[1], asked)
}

/// Pre-stage `exec` on `stream`: best-effort, a failure is counted and
/// logged. Whether it succeeded.
/// The dependency graph a recording's executable keeps, computed here once
/// where the stream replays by it.
fn dependencies_for(order: ReplayOrder, log: &[Entry]) -> Option<Dependencies> {
    match order {
        ReplayOrder::Dependencies => Some(Dependencies::of(log)),
        ReplayOrder::Chain => None,
    }
}

/// What the driver is told to keep of the issue order.
fn order(dependencies: Option<&Dependencies>) -> Order<'_> {
    dependencies.map_or(Order::Chain, Order::Dependencies)
}

fn upload<D: GraphDriver>(stream: &mut StreamState<D>, exec: &D::Executable, id: GraphId) -> bool {
    match D::upload(exec, &mut stream.raw) {
        Ok(()) => true,
        Err(err) => {
            stream.upload_failures += 1;
            log::warn!("{id}: upload failed, the first replay stages it instead: {err}");
            false
        }
    }
}

/// The capture window of one stream.
pub struct Window<'a, D: GraphDriver> {
    stream: &'a mut StreamState<D>,
}

impl<'a, D: GraphDriver> Window<'a, D> {
    /// The window of `stream`.
    pub fn on(stream: &'a mut StreamState<D>) -> Self {
        Self { stream }
    }

    /// Arm the pools for a window about to open, before the warmup run.
    ///
    /// From here every slice handed out is retained, so warmup grows both
    /// pools (device buffers and info, and the pinned host slices that stage
    /// bytes to the device) to everything the run holds at once; the recorded
    /// run then reuses them without asking the driver for a page, which
    /// mid-recording is a fault.
    pub fn prepare(&mut self, window: WindowId) -> Result<(), Error> {
        let stream = &mut *self.stream;
        stream
            .capture
            .prepare(window)
            .map_err(|reason| out_of_order("prepare", stream, reason))?;
        stream.device.capture_begin();
        stream.host.capture_begin();
        // What an earlier window learnt of its warmup, even one that
        // unwound without closing, predicts nothing of this one.
        if let Some(temporaries) = &mut stream.temporaries {
            temporaries.reset();
        }
        Ok(())
    }

    /// Open the window: from here the driver records every launch and copy
    /// issued on the stream.
    ///
    /// On the driver's refusal the stream is left as it was found (pools
    /// disarmed, info-cache pins discarded, state `None`), so the whole
    /// prepare-then-begin sequence can be retried.
    pub fn begin(
        &mut self,
        window: WindowId,
        ids: &mut impl FnMut() -> BufferId,
    ) -> Result<(), Error> {
        let stream = &mut *self.stream;
        // Checked before the drain below: a fenced flush on a stream that is
        // already recording would abort its live recording.
        stream
            .capture
            .begin(window, std::thread::current().id())
            .map_err(|reason| out_of_order("begin", stream, reason))?;
        // Reclaim deferred frees before the window opens. Warmup's staging
        // slices sit in the drop queue until drained; left there, the
        // recorded run would find no free staging slice and allocate one.
        if let Err(err) = stream.drain_drops() {
            self.unwind();
            return Err(err.into());
        }
        // A recorded launch may pass info bytes warmup never did; its entry
        // then needs a slice. Room for as many as warmup used, so a run that
        // changes every info content still records without a page, and a
        // window whose launches pass no info keeps none.
        let slots = stream.info.window_entries();
        if let Err(err) = stream.keep_info_room(window, slots, ids) {
            self.unwind();
            return Err(err);
        }
        // The warmup's run is over: an arena that holds what the recorded
        // run's temporaries need, taken before the driver records.
        let arena = match stream.arena_for_recording(ids()) {
            Ok(arena) => arena,
            Err(err) => {
                self.unwind();
                return Err(err);
            }
        };
        // Warmup is over: release what it retained so the recorded run
        // reuses those slices.
        stream.device.capture_priming_end();
        stream.host.capture_priming_end();
        if let Err(err) = D::begin(&mut stream.raw) {
            if let Some(arena) = arena {
                stream.release_arena(arena);
            }
            self.unwind();
            return Err(err.into());
        }
        if let (Some(arena), Some(temporaries)) = (arena, &mut stream.temporaries) {
            temporaries.arm(arena);
        }
        Ok(())
    }

    /// Close the window: end the driver's recording and gather what the
    /// graph must keep. The stream leaves capture mode first, so no path
    /// below can leave it recording. A window closed by a caller that does
    /// not own it is closed and torn down all the same, since nobody else
    /// will come back to close it; only its owner gets a recording out of
    /// it. A doomed recording is ended and dropped.
    fn close(&mut self, closer: WindowId) -> Result<Closed<D>, Refused> {
        let stream = &mut *self.stream;
        // The body's caller closes the conditional once the body returns;
        // the window stays open, untouched, for it.
        if stream.capture.depth() > 0 {
            let reason = "the call came from inside a conditional's body".to_string();
            return Err(Refused {
                error: out_of_order("instantiate", stream, reason),
                written: Vec::new(),
            });
        }
        let outcome = match stream.capture.end(closer) {
            Ok(outcome) => outcome,
            Err(reason) => {
                let error = out_of_order("instantiate", stream, reason);
                // Drained rather than assumed empty, so the claim stays right
                // even if a path ever records before `begin`.
                let written = stream.capture.take_recorded().written;
                // A window prepared but never opened still armed the pools,
                // and closing is the only call a caller whose warmup failed
                // has left: disarm, as a refused `begin` does.
                if stream.capture.is_active() {
                    self.unwind();
                }
                return Err(Refused { error, written });
            }
        };
        // A failed or skipped operation means the recording is missing work:
        // it must not seal, but the driver's recording is closed all the same.
        // The pools are where a page obtained while recording is noticed.
        if stream.device.grew_while_recording() || stream.host.grew_while_recording() {
            stream
                .capture
                .record_failure(Error::AllocationWhileRecording(stream.id));
        }
        // A stream that joined and was not joined back would miss from the
        // graph whatever it does next (rule 21); its join closes either way.
        if let Some(unjoined) = stream.capture.close_joins() {
            stream.capture.record_failure(Error::Unjoined {
                stream: unjoined,
                window: closer,
            });
        }
        let temporaries = match &mut stream.temporaries {
            Some(temporaries) => temporaries.close(stream.capture.log()),
            None => crate::memory::temporaries::Closed::default(),
        };
        if let Some((buffer, operation)) = temporaries.read_first {
            stream.capture.record_failure(Error::TemporaryReadFirst {
                stream: stream.id,
                buffer,
                operation,
            });
        }
        let doomed = stream
            .capture
            .take_failure()
            .map(|reason| Error::Doomed(Arc::new(reason)));
        let ended = D::end(&mut stream.raw);
        // Pin every slice the window handed out, device and host; on a
        // refusal they drop with `retained` and are free again.
        let mut device = stream.device.capture_end();
        // The host pool's pins include every staging slice a recorded copy
        // reads: each was handed out while recording.
        let host = stream.host.capture_end();
        stream.release_room();
        let recorded = stream.capture.take_recorded();
        device.extend(recorded.touched);
        let bytes = pinned(&device, &host);
        let mut retained = device;
        retained.extend(host);
        // Frees deferred while the window was open join the drop queue.
        stream.after_window();
        let refusal = if outcome.is_abandoned() {
            Some(outcome.abandoned_error(doomed))
        } else {
            doomed
        };
        let error = match (refusal, ended) {
            (Some(error), _) => error,
            (None, Err(err)) => err.into(),
            (None, Ok(recording)) => {
                return Ok(Closed {
                    recording,
                    retained,
                    kernels: recorded.kernels,
                    written: recorded.written,
                    renewed: recorded.renewed,
                    read: recorded.read,
                    log: recorded.log,
                    temporaries: temporaries.taken,
                    temporary_bytes: temporaries.bytes,
                    bytes,
                });
            }
        };
        stream.discard_window_info();
        Err(Refused {
            error,
            written: recorded.written,
        })
    }

    /// Close the window and instantiate what it recorded as graph `id`.
    ///
    /// # Errors
    ///
    /// [`Refused`], which every failure here becomes, with the buffers the
    /// caller must now claim (empty when nothing was recorded).
    pub fn instantiate(&mut self, closer: WindowId, id: GraphId) -> Result<Graph<D>, Refused> {
        let closed = self.close(closer)?;
        let stream = &mut *self.stream;
        let started = Instant::now();
        let dependencies = dependencies_for(stream.replay_order, &closed.log);
        match D::instantiate(
            &mut stream.raw,
            closed.recording,
            order(dependencies.as_ref()),
        ) {
            Ok(exec) => {
                let instantiate_time = started.elapsed();
                // Entries made while recording leave the cache; `retained`
                // already holds their slices for the graph.
                drop(stream.info.capture_commit(id));
                let uploaded = upload::<D>(stream, &exec, id);
                let (device_bytes, host_bytes, touched_bytes) = closed.bytes;
                let mut graph = Graph {
                    exec,
                    kernels: closed.kernels,
                    _retained: closed.retained,
                    written: closed.written,
                    renewed: closed.renewed,
                    read: closed.read,
                    log: closed.log,
                    temporaries: closed.temporaries,
                    clobbers: Vec::new(),
                    info: GraphInfo {
                        device_bytes,
                        host_bytes,
                        touched_bytes,
                        temporary_bytes: closed.temporary_bytes,
                        instantiate_time,
                        uploaded,
                        ..GraphInfo::default()
                    },
                    dependencies: std::sync::OnceLock::new(),
                };
                graph.measure(dependencies);
                Ok(graph)
            }
            Err(err) => {
                stream.discard_window_info();
                Err(Refused {
                    error: err.into(),
                    written: closed.written,
                })
            }
        }
    }

    /// Close the window and make `graph` (id `id`) run what it recorded:
    /// updated in place where the driver can, instantiated anew behind the
    /// same graph where the recording's shape differs.
    ///
    /// The old recording's pins, and an executable replaced, wait in the
    /// drop queue until the device is past every replay already enqueued.
    /// On any refusal the graph is left as it was, still replayable.
    ///
    /// # Errors
    ///
    /// [`Refused`]; its `written` is the new recording's, which a caller
    /// updating a graph does not claim: the graph it keeps still writes
    /// those buffers on its next replay.
    pub fn update(
        &mut self,
        closer: WindowId,
        graph: &mut Graph<D>,
        id: GraphId,
    ) -> Result<Update, Refused> {
        let closed = self.close(closer)?;
        let stream = &mut *self.stream;
        let written = closed.written;
        let started = Instant::now();
        let dependencies = dependencies_for(stream.replay_order, &closed.log);
        let order = order(dependencies.as_ref());
        let updated = D::update(&mut stream.raw, &mut graph.exec, closed.recording, order)
            .and_then(|updated| match updated {
                Updated::InPlace => Ok(None),
                Updated::Topology(recording) => {
                    D::instantiate(&mut stream.raw, recording, order).map(Some)
                }
            });
        // The driver's part alone, as `instantiate` times it.
        let update_time = started.elapsed();
        let how = match updated {
            Ok(None) => Update::InPlace,
            Ok(Some(exec)) => {
                // Replays enqueued before may still run the old one.
                let old = std::mem::replace(&mut graph.exec, exec);
                stream.queue_keep(Box::new(old));
                Update::Reinstantiated
            }
            Err(err) => {
                stream.discard_window_info();
                return Err(Refused {
                    error: err.into(),
                    written,
                });
            }
        };
        // The old recording's info entries: released while this window's
        // pins still hold what it shares with the old one, then the window's
        // pins become the graph's.
        for freed in stream.info.graph_release(id) {
            stream.queue_drop(freed);
        }
        drop(stream.info.capture_commit(id));
        let old = std::mem::replace(&mut graph._retained, closed.retained);
        for slice in old {
            stream.queue_drop(slice);
        }
        // The old work's kernels, after its executable if that was replaced:
        // a replay enqueued before may still launch them.
        let old = std::mem::replace(&mut graph.kernels, closed.kernels);
        stream.queue_keep(Box::new(old));
        graph.written = written;
        graph.renewed = closed.renewed;
        graph.read = closed.read;
        // The new temporaries lie in the arena as it is now, which no kept
        // temporary shares.
        graph.temporaries = closed.temporaries;
        graph.clobbers.clear();
        graph.info.temporary_bytes = closed.temporary_bytes;
        graph.log = closed.log;
        let (device_bytes, host_bytes, touched_bytes) = closed.bytes;
        graph.info.device_bytes = device_bytes;
        graph.info.host_bytes = host_bytes;
        graph.info.touched_bytes = touched_bytes;
        graph.info.instantiate_time = update_time;
        match how {
            Update::InPlace => graph.info.updates_in_place += 1,
            Update::Reinstantiated => graph.info.reinstantiations += 1,
        }
        graph.measure(dependencies);
        graph.info.uploaded = upload::<D>(stream, &graph.exec, id);
        Ok(how)
    }

    /// Close the window and drop what it recorded: for a window whose
    /// graph went away before it closed.
    pub fn discard(&mut self, closer: WindowId) {
        drop(self.close_unsealed(closer));
    }

    /// Close the window and drop its recording and its new info entries;
    /// what it would have written.
    fn close_unsealed(&mut self, closer: WindowId) -> Result<Vec<BufferId>, Refused> {
        let closed = self.close(closer)?;
        self.stream.discard_window_info();
        Ok(closed.written)
    }

    /// Close the window without sealing anything, because the run it
    /// recorded failed with `cause`: the recording is dropped, and what it
    /// would have written is handed back for the caller to claim (none of
    /// it ran). Answers `cause`, unless the window refused to close for a
    /// reason of its own that names a failed operation ([`Error::Doomed`]).
    pub fn abandon(&mut self, closer: WindowId, cause: Error) -> Refused {
        match self.close_unsealed(closer) {
            Ok(written) => Refused {
                error: cause,
                written,
            },
            Err(Refused { error, written }) => Refused {
                error: match error {
                    Error::Doomed(_) => error,
                    _ => cause,
                },
                written,
            },
        }
    }

    /// Return the stream to how it was before `prepare`: pools disarmed,
    /// allocation mode restored, info-cache pins discarded, state `None`.
    fn unwind(&mut self) {
        let stream = &mut *self.stream;
        drop(stream.device.capture_end());
        drop(stream.host.capture_end());
        stream.release_room();
        stream.discard_window_info();
        if let Some(temporaries) = &mut stream.temporaries {
            temporaries.reset();
        }
        stream.capture.abort();
    }
}

fn out_of_order<D: GraphDriver>(
    call: &'static str,
    stream: &StreamState<D>,
    reason: String,
) -> Error {
    Error::OutOfOrder {
        call,
        stream: stream.id,
        reason,
    }
}
