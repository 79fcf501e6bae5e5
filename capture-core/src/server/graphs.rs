//! Capture windows and the graphs they make: prepare, begin, adopt,
//! instantiate or update, replay, destroy, and what a graph shows of itself.

use std::sync::Arc;

use super::{Ids, Lane, Server, Slot, StreamRef};
use crate::capture::graph::{Captures, Graph, GraphKey, Refused};
use crate::capture::window::{Update, Window};
use crate::driver::GraphDriver;
use crate::error::Error;
use crate::ids::{BufferId, GraphId, StreamId, WindowId};
use crate::interleave::{self, Point};
use crate::kernels::signature::Access;
use crate::recorded::dot;
use crate::recorded::entries::GraphInfo;
use crate::streams::state::StreamState;

impl<D: GraphDriver> Server<D> {
    /// Open a capture window on `stream`: arm its pools for the warmup run.
    pub fn prepare(&self, stream: StreamId) -> Result<WindowId, Error> {
        self.with(stream, |lane| {
            lane.check_recorder()?;
            if let Some(join) = lane.state.join() {
                return Err(Error::OutOfOrder {
                    call: "prepare",
                    stream,
                    reason: format!("it is joined to the capture window of {}", join.stream),
                });
            }
            // A capture call out of order changes nothing (rule 1), so it
            // does not doom the window it was refused in.
            let window = WindowId(Ids::next(&self.ids.window));
            Window::on(&mut lane.state).prepare(window)?;
            Ok(window)
        })
    }

    /// The warmup run of `window` on `stream` returned: what it dropped so
    /// far were its temporaries. Nothing, if the window is not prepared.
    pub(crate) fn warmed(&self, stream: StreamId, window: WindowId) {
        let marked = self.with(stream, |lane| {
            if lane.state.capture.phase() == crate::phase::Phase::Prepared(window)
                && let Some(temporaries) = &mut lane.state.temporaries
            {
                temporaries.warmup_ended();
            }
            Ok(())
        });
        // A stream destroyed meanwhile: `begin` says so.
        drop(marked);
    }

    /// Start recording `window` on `stream`, taking the calling thread's
    /// work.
    pub fn begin(&self, stream: StreamId, window: WindowId) -> Result<(), Error> {
        self.with(stream, |lane| {
            lane.check_recorder()?;
            Window::on(&mut lane.state).begin(window, &mut || self.ids.buffer())
        })
    }

    /// Make the calling thread the one whose work `window`'s recording
    /// takes.
    pub fn adopt(&self, stream: StreamId, window: WindowId) -> Result<(), Error> {
        self.with(stream, |lane| {
            lane.state
                .capture
                .adopt(window, std::thread::current().id())
                .map_err(|reason| Error::OutOfOrder {
                    call: "adopt",
                    stream,
                    reason,
                })
        })
    }

    /// Close `window` on `stream` and make a graph of what it recorded.
    ///
    /// A refusal claims every buffer the recording would have written, so a
    /// later read of one fails with the refusal instead of returning bytes
    /// nobody wrote. Answers the graph's id, and where its stream holds it
    /// (for its handle).
    pub(crate) fn instantiate(
        &self,
        stream: StreamId,
        window: WindowId,
    ) -> Result<(GraphId, GraphKey), Error> {
        self.with(stream, |lane| {
            let id = GraphId(Ids::next(&self.ids.graph));
            let result = Window::on(&mut lane.state).instantiate(window, id);
            let result = match result {
                Ok(graph) => {
                    let key = lane.graphs.insert(id, graph);
                    self.graph_registry().insert(id, stream);
                    Ok((id, key))
                }
                Err(Refused { error, written }) => {
                    lane.state.failures.settle(written, Some(&error));
                    Err(error)
                }
            };
            self.after_close(lane);
            result
        })
    }

    /// Close `window` on `stream` and make graph `id` (of the same stream)
    /// run what it recorded: updated in place where the driver can,
    /// instantiated anew behind the same id otherwise.
    ///
    /// A refusal leaves the graph as it was and claims nothing: the graph
    /// still writes what it wrote, on its next replay.
    pub fn update(&self, stream: StreamId, window: WindowId, id: GraphId) -> Result<Update, Error> {
        self.with(stream, |lane| {
            let Lane { state, graphs, .. } = lane;
            let result = match graphs.get_mut(id) {
                Some(graph) => Window::on(state)
                    .update(window, graph, id)
                    .map_err(|refused| refused.error),
                None => {
                    Window::on(state).discard(window);
                    Err(Error::UnknownGraph(id))
                }
            };
            self.after_close(lane);
            result
        })
    }

    /// Close `window` on `stream`, keeping nothing it recorded.
    pub(crate) fn discard(&self, stream: StreamId, window: WindowId) {
        let closed = self.with(stream, |lane| {
            Window::on(&mut lane.state).discard(window);
            self.after_close(lane);
            Ok(())
        });
        drop(closed);
    }

    /// Close `window` on `stream` without sealing anything, because the run
    /// it recorded failed with `cause`. What the recording would have
    /// written is claimed, as for any refused window. Answers the error
    /// the caller reports: `cause`, or the window's own refusal when the
    /// window was doomed.
    pub(crate) fn abandon(&self, stream: StreamId, window: WindowId, cause: Error) -> Error {
        let mut cause = Some(cause);
        let closed = self.with(stream, |lane| {
            let cause = cause.take().unwrap_or(Error::UnknownStream(stream));
            let Refused { error, written } = Window::on(&mut lane.state).abandon(window, cause);
            lane.state.failures.settle(written, Some(&error));
            self.after_close(lane);
            Ok(error)
        });
        match (closed, cause) {
            (Ok(error), _) => error,
            // The stream went before the window could close: the body's
            // error still says what the caller did wrong.
            (Err(_), Some(cause)) => cause,
            (Err(err), None) => err,
        }
    }

    /// After a window closed, however it closed: mark the temporaries it
    /// saw kept on the graphs that share their memory, then run the
    /// destroys that waited for it.
    fn after_close(&self, lane: &mut Lane<D>) {
        // A close refused from inside a conditional's body left the window
        // recording: what waits for its close waits on.
        if lane.state.capture.is_recording() {
            return;
        }
        mark_kept(lane);
        for graph in std::mem::take(&mut lane.state.deferred_destroys) {
            self.destroy_in(lane, graph);
        }
    }

    /// Enqueue graph `id`'s recorded work on its stream, found from the id.
    ///
    /// Allocation-free on the success path: a replay is what graphs exist to
    /// make cheap, and the core must add nothing the driver does not.
    pub fn replay(&self, id: GraphId) -> Result<(), Error> {
        let stream = self.stream_of(id).ok_or(Error::UnknownGraph(id))?;
        let slot = match self.slot(stream) {
            Ok(slot) => slot,
            // Destroyed since it was looked up, and its graphs with it.
            Err(Error::UnknownStream(_)) => return Err(Error::UnknownGraph(id)),
            Err(err) => return Err(err),
        };
        if Self::replay_on(&slot, id, stream, |graphs| graphs.get_mut(id))? {
            return Ok(());
        }
        self.replay_ordered(id, stream)
    }

    /// [`Server::replay`] of a handle's graph: on the stream it kept, at
    /// the place it kept. Neither the device's map of streams nor the
    /// stream's map of graphs is asked.
    #[inline]
    pub(crate) fn replay_at(
        &self,
        id: GraphId,
        key: GraphKey,
        stream: StreamId,
        at: &StreamRef<D>,
    ) -> Result<(), Error> {
        let replayed = match &at.0 {
            Some(slot) => Self::replay_on(slot, id, stream, |graphs| graphs.at_mut(key, id))?,
            None => return Err(Error::UnknownGraph(id)),
        };
        if replayed {
            return Ok(());
        }
        self.replay_ordered(id, stream)
    }

    /// Replay graph `id` on `stream`, whose slot is `slot`, the graph being
    /// what `find` finds among the stream's. A stream destroyed since the
    /// graph was made took the graph with it. `false`, with nothing done,
    /// when the replay must first wait for other streams that used its
    /// buffers, or the stream's work is being recorded: both for
    /// [`Server::replay_ordered`].
    #[inline]
    fn replay_on(
        slot: &Slot<D>,
        id: GraphId,
        stream: StreamId,
        find: impl FnOnce(&mut Captures<D>) -> Option<&mut Graph<D>>,
    ) -> Result<bool, Error> {
        let mut guard = slot.lock()?;
        // `open` refuses only a destroyed stream.
        let Ok(lane) = Self::open(slot, &mut guard, stream) else {
            return Err(Error::UnknownGraph(id));
        };
        lane.check_recorder()?;
        if lane.state.capture.is_recording() || lane.state.joined.is_some() {
            // Refused on the ordered path, which looks again under the
            // locks: a join whose window closed since no longer counts.
            return Ok(false);
        }
        let Lane { state, graphs, .. } = lane;
        // Not `ok_or`: the error would be built, and dropped, on every
        // replay.
        let Some(graph) = find(graphs) else {
            return Err(Error::UnknownGraph(id));
        };
        if state.shares {
            // A buffer of this stream was used on another: the replay is
            // ordered after that use, and counted for the next one.
            let mut order = crate::streams::order::lock(&slot.order);
            if !order.needs(stream, graph.accesses()).is_empty() {
                return Ok(false);
            }
            replay_graph(state, graph, id)?;
            order.issue_tracked(stream, graph.accesses());
            return Ok(true);
        }
        replay_graph(state, graph, id).map(|()| true)
    }

    /// Replay graph `id` on `stream` once it waited for the streams that
    /// used its buffers since, with those streams locked.
    #[cold]
    fn replay_ordered(&self, id: GraphId, stream: StreamId) -> Result<(), Error> {
        let accesses: Vec<(BufferId, Access)> =
            self.with(stream, |lane| match lane.graphs.get(id) {
                Some(graph) => Ok(graph.accesses().collect()),
                None => Err(Error::UnknownGraph(id)),
            })?;
        self.ordered(stream, &accesses, &[stream], |lanes, _, waited| {
            let lane = &mut *lanes.mine;
            if let Err(err) = lane.check_recorder() {
                return (Err(err), false);
            }
            if lane.state.capture.is_recording() || lane.state.join().is_some() {
                return (lane.refused(Error::ReplayWhileRecording(stream)), false);
            }
            let Lane { state, graphs, .. } = lane;
            let Some(graph) = graphs.get_mut(id) else {
                return (Err(Error::UnknownGraph(id)), false);
            };
            if let Err(err) = waited {
                return (Err(claim_written(state, graph, err)), false);
            }
            let replayed = replay_graph(state, graph, id);
            let issued = replayed.is_ok();
            (replayed, issued)
        })
    }

    /// Destroy graph `id`: sync its stream (a replay may still run), drop the
    /// executable and its pins, and free the info-cache entries no other
    /// graph pins. A no-op for an unknown id. Deferred to the window's close
    /// if its stream is recording, since the sync would abort the recording.
    pub fn destroy_graph(&self, id: GraphId) {
        let Some(stream) = self.stream_of(id) else {
            return;
        };
        interleave::reached(Point::DestroyFound);
        let destroyed = self.with(stream, |lane| {
            self.destroy_in(lane, id);
            Ok(())
        });
        if let Err(err) = destroyed {
            log::warn!("{id}: destroy on {stream} failed: {err}");
        }
    }

    fn destroy_in(&self, lane: &mut Lane<D>, id: GraphId) {
        if !lane.graphs.contains(id) {
            return;
        }
        let state = &mut lane.state;
        if state.capture.is_recording() {
            if !state.deferred_destroys.contains(&id) {
                state.deferred_destroys.push(id);
            }
            return;
        }
        let synced = state.sync();
        let mut graph = lane.graphs.remove(id);
        self.graph_registry().remove(&id);
        if let Err(err) = synced {
            log::warn!("{id}: sync before destroy failed, destroying anyway: {err}");
            // A replay may still be running, so what the graph pinned waits
            // in the drop queue for a fence that succeeds instead of going
            // straight back to the pool.
            if let Some(graph) = graph.take() {
                for slice in graph._retained {
                    state.queue_drop(slice);
                }
                state.queue_keep(Box::new(graph.kernels));
            }
        }
        for slice in state.info.graph_release(id) {
            state.queue_drop(slice);
        }
        // The graph's pins are gone: buffers dropped before it may be too.
        drop(graph);
        self.sweep_lingering();
    }

    /// Graph `id`'s log drawn as Graphviz DOT.
    pub fn graph_dot(&self, id: GraphId, stream: StreamId) -> Result<String, Error> {
        self.with(stream, |lane| {
            let graph = lane.graphs.get(id).ok_or(Error::UnknownGraph(id))?;
            Ok(dot::dot(&id.to_string(), graph.log()))
        })
    }

    /// What graph `id` is and has done.
    pub fn graph_info(&self, id: GraphId, stream: StreamId) -> Result<GraphInfo, Error> {
        self.with(stream, |lane| {
            let graph = lane.graphs.get(id).ok_or(Error::UnknownGraph(id))?;
            Ok(graph.info())
        })
    }
}

/// Replay `graph` (id `id`) on `state`'s stream: refused over a claimed
/// input, claiming what it writes when the driver refuses.
#[inline]
fn replay_graph<D: GraphDriver>(
    state: &mut StreamState<D>,
    graph: &mut Graph<D>,
    id: GraphId,
) -> Result<(), Error> {
    if !state.failures.is_empty() {
        refuse_claimed_input(state, graph, id)?;
    }
    match D::replay(&graph.exec, &mut state.raw) {
        Ok(()) => {
            state.issued();
            graph.info.replays += 1;
            state.failures.settle(graph.renewed.iter().copied(), None);
            if !graph.clobbers.is_empty() {
                claim_clobbered(state, graph, id);
            }
            Ok(())
        }
        Err(cause) => {
            let err = Error::ReplayFailed {
                graph: id,
                cause: Arc::new(cause.into()),
            };
            Err(claim_written(state, graph, err))
        }
    }
}

/// Graph `id`'s replay overwrote the kept temporaries of other graphs that
/// share its temporaries' memory: each is claimed by it.
#[cold]
fn claim_clobbered<D: GraphDriver>(state: &mut StreamState<D>, graph: &Graph<D>, id: GraphId) {
    for &buffer in &graph.clobbers {
        let cause = Error::Overwritten { buffer, graph: id };
        state.failures.settle([buffer], Some(&cause));
    }
}

/// Mark each temporary kept past its window since the last close on the
/// live graphs whose temporaries share its memory: their replays overwrite
/// it. The graph that recorded it writes it as its own.
fn mark_kept<D: GraphDriver>(lane: &mut Lane<D>) {
    let Some(temporaries) = &mut lane.state.temporaries else {
        return;
    };
    for (buffer, place) in temporaries.take_kept() {
        for graph in lane.graphs.iter_mut() {
            let own = graph.temporaries.iter().any(|&(id, _)| id == buffer);
            let shared = graph
                .temporaries
                .iter()
                .any(|(_, other)| other.overlaps(&place));
            if shared && !own && !graph.clobbers.contains(&buffer) {
                graph.clobbers.push(buffer);
                graph.written.push(buffer);
            }
        }
    }
}

/// A replay of graph `id` that would read a claimed buffer is refused: it
/// would compute from bytes nobody wrote. Two claims are not the replay's
/// inputs: one this graph's own failed replay left on a buffer it reads and
/// rewrites (`x += y`), since retrying is how that claim is repaired and the
/// design's rule for a failed replay; and one on the graph's temporaries,
/// each written whole before it is read (the window refuses any other), so
/// that a refused replay cannot refuse every later one.
#[cold]
fn refuse_claimed_input<D: GraphDriver>(
    state: &mut StreamState<D>,
    graph: &Graph<D>,
    id: GraphId,
) -> Result<(), Error> {
    let failures = &state.failures;
    let claimed = graph.read.iter().find_map(|buffer| {
        let own_failed_replay = failures.check(*buffer).is_some_and(
            |cause| matches!(*cause, Error::ReplayFailed { graph, .. } if graph == id),
        );
        let temporary = graph.temporaries.iter().any(|&(t, _)| t == *buffer);
        if own_failed_replay || temporary {
            None
        } else {
            failures.read_error(*buffer)
        }
    });
    match claimed {
        Some(err) => Err(claim_written(state, graph, err)),
        None => Ok(()),
    }
}

/// A replay of `graph` that does not run, failing with `err`: what it
/// writes is claimed by the failure. Returns `err`.
#[cold]
fn claim_written<D: GraphDriver>(
    state: &mut StreamState<D>,
    graph: &Graph<D>,
    err: Error,
) -> Error {
    state
        .failures
        .settle(graph.written.iter().copied(), Some(&err));
    err
}
