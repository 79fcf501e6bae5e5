//! Launches: checked against the kernel's signature, then enqueued or
//! recorded, with the failure policy for what they read and write.
//!
//! An eager launch is the hot path of every step that is not replayed, so
//! it clones nothing and collects nothing: the bindings are checked where
//! they lie, the info bytes' device slice is found by content and used in
//! place, and the failure store is asked only when it holds a claim.

use arrayvec::ArrayVec;
use smallvec::SmallVec;

use std::any::Any;
use std::sync::Arc;

use super::shared::{Lanes, Shareable};
use super::{Bound, Lane, Server, Slot};
use crate::driver::{Binding, DeviceSlice, Driver, GraphDriver, Launch};
use crate::error::Error;
use crate::ids::{BufferId, StreamId};
use crate::interleave::{self, Point};
use crate::kernels::signature::{LaunchShape, MAX_BINDINGS, Signature};
use crate::kernels::span::Span;
use crate::memory::pool::{Place, SliceHandle};
use crate::phase::Phase;
use crate::recorded::entries::Entry;
use crate::streams::join::Join;
use crate::streams::state::StreamState;

/// One launch as its caller asked for it, with its kernel's signature.
struct Request<'a, D: Driver, B> {
    kernel: &'a Arc<D::Kernel>,
    signature: &'a Signature,
    groups: [u32; 3],
    args: &'a [B],
    info: &'a [u8],
    params: &'a [u8],
}

impl<D: Driver, B: Bound> Request<'_, D, B> {
    /// The launch as its signature checks it, on a device that allows
    /// `max_groups`.
    #[inline]
    fn shape(&self, max_groups: [u32; 3]) -> LaunchShape<'_, B> {
        LaunchShape {
            groups: self.groups,
            max_groups,
            buffers: self.args,
            info: self.info.len(),
            params: self.params.len(),
        }
    }

    /// The buffers the launch writes.
    fn written(&self) -> impl Iterator<Item = BufferId> + '_ {
        self.args
            .iter()
            .zip(self.signature.accesses())
            .filter(|(_, access)| access.writes())
            .map(|(buffer, _)| buffer.id())
    }

    /// The buffers the launch writes all of: only these lose a claim when
    /// it succeeds, since a write to a view leaves the rest as it was.
    fn renewed(&self) -> impl Iterator<Item = BufferId> + '_ {
        self.args
            .iter()
            .zip(self.signature.accesses())
            .filter(|(buffer, access)| access.writes() && buffer.is_whole())
            .map(|(buffer, _)| buffer.id())
    }
}

impl<D: GraphDriver> Server<D> {
    /// Enqueue (or, while recording, record) a launch of `kernel` over
    /// `args`, in its binding order, with `info` and `params` bytes.
    ///
    /// The launch is checked against the kernel's signature first; a
    /// mismatch reaches no driver and changes nothing, except that a window
    /// recording on the stream can no longer seal (it would miss the
    /// launch). Each binding's access is the signature's. A launch that
    /// reads a claimed buffer is not run: it would compute from bytes nobody
    /// wrote. It fails with that claim, and what it would have written is
    /// claimed in turn; inside a window it dooms the window.
    ///
    /// The caller has refused buffers of another client (see
    /// [`Client::launch`](crate::Client::launch)): their ids and streams
    /// would name this server's memory. `owned` says it found every buffer
    /// to be `stream`'s; a launch over another stream's buffer, or over a
    /// buffer another stream used, is ordered across streams first (rule
    /// 20, `server/shared.rs`).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch<B: Bound>(
        &self,
        stream: StreamId,
        kernel: &Arc<D::Kernel>,
        groups: [u32; 3],
        args: &[B],
        info: &[u8],
        params: &[u8],
        owned: bool,
    ) -> Result<(), Error> {
        let request = Request::<D, B> {
            kernel,
            signature: D::signature(kernel),
            groups,
            args,
            info,
            params,
        };
        if let Err(err) = check_launch(&request, self.max_groups) {
            return self.refuse_launch(stream, err);
        }
        if !owned {
            return self.launch_shared(stream, &request);
        }
        // The stream's slot, from the first buffer when it is the stream's
        // (the check above made every buffer the stream's).
        let mapped;
        let slot = match request
            .args
            .first()
            .and_then(|first| kept_slot::<D, B>(first))
        {
            Some(slot) => slot,
            None => {
                mapped = self.slot(stream)?;
                &*mapped
            }
        };
        // Not `Server::with_slot`: its closure would be a frame of its own.
        let mut guard = slot.lock()?;
        let lane = Self::open(slot, &mut guard, stream)?;
        // Asked under the stream's lock, where a buffer of it is marked
        // shared and the stream joins a window: a launch that saw neither
        // is ordered before them.
        if lane.state.joined.is_some() || request.args.iter().any(|b| b.shared().is_shared()) {
            drop(guard);
            return self.launch_shared(stream, &request);
        }
        lane.check_recorder()?;
        let state = &mut lane.state;
        let mut ids = || self.ids.buffer();
        let outcome = match read_claim(state, &request) {
            Some(err) => Err(err),
            None if state.capture.is_recording() => record_launch(state, &request, &mut ids),
            None => issue_launch(state, &request, &mut ids),
        };
        match outcome {
            Ok(()) => Ok(()),
            Err(err) => fail_launch(lane, &request, err),
        }
    }
}

/// A launch that failed with `err`: what it would have written is claimed,
/// and a window recording it is doomed.
#[cold]
fn fail_launch<D: GraphDriver, B: Bound>(
    lane: &mut Lane<D>,
    request: &Request<'_, D, B>,
    err: Error,
) -> Result<(), Error> {
    lane.state.failures.settle(request.written(), Some(&err));
    lane.refused(err)
}

impl<D: GraphDriver> Server<D> {
    /// A launch that does not match its kernel: refused on its stream, as
    /// [`Server::launch`] says.
    #[cold]
    fn refuse_launch(&self, stream: StreamId, err: Error) -> Result<(), Error> {
        self.with(stream, |lane| {
            lane.check_recorder()?;
            lane.refused(err)
        })
    }
}

/// The slot `buffer` keeps of its stream, if it keeps this server's kind.
/// The client refused every buffer of another client before the launch got
/// here (another client numbers its streams alike, so the owner check alone
/// would not tell), which makes the slot this server's own.
#[inline]
fn kept_slot<D: GraphDriver, B: Bound>(buffer: &B) -> Option<&Slot<D>> {
    let slot: &dyn Any = buffer.stream_slot()?;
    slot.downcast_ref()
}

/// The claim of the first buffer the launch reads that a failure claimed,
/// if any.
#[inline]
fn read_claim<D: Driver, B: Bound>(
    state: &StreamState<D>,
    request: &Request<'_, D, B>,
) -> Option<Error> {
    if state.failures.is_empty() {
        return None;
    }
    request
        .args
        .iter()
        .zip(request.signature.accesses())
        .filter(|(_, access)| access.reads())
        .find_map(|(buffer, _)| state.failures.read_error(buffer.id()))
}

/// An eager launch: issued now, its written buffers' claims cleared.
/// `inline(always)`: out of line, it costs the launch some sixty
/// instructions of calls and spills (callgrind).
#[inline(always)]
fn issue_launch<D: Driver, B: Bound>(
    state: &mut StreamState<D>,
    request: &Request<'_, D, B>,
    ids: &mut impl FnMut() -> BufferId,
) -> Result<(), Error> {
    let info_place = match request.info {
        [] => None,
        bytes => Some(state.info_place(bytes, ids)?),
    };
    enqueue_launch(state, request, info_place)?;
    state.issued();
    // `settle` asks the same, but only once the written buffers' iterator is
    // built (a dozen instructions a launch, callgrind), so it is asked first.
    if !state.failures.is_empty() {
        state.failures.settle(request.renewed(), None);
    }
    state.maybe_flush();
    Ok(())
}

/// A launch inside a recording: recorded into the driver's recording, and
/// logged with what it touches, reads and writes for the window.
fn record_launch<D: Driver, B: Bound>(
    state: &mut StreamState<D>,
    request: &Request<'_, D, B>,
    ids: &mut impl FnMut() -> BufferId,
) -> Result<(), Error> {
    let info_slice = match request.info {
        [] => None,
        bytes => Some(recorded_info(state, request, bytes, ids)?),
    };
    let info_place = info_slice.as_ref().map(|slice| slice.place());
    enqueue_launch(state, request, info_place)?;
    log_recorded(state, request, info_slice.as_ref());
    Ok(())
}

/// What a recorded launch leaves in its window: its kernel held, its entry
/// in the log, every slice it touches pinned, what it reads and writes.
fn log_recorded<D: Driver, B: Bound>(
    state: &mut StreamState<D>,
    request: &Request<'_, D, B>,
    info_slice: Option<&SliceHandle>,
) {
    let accesses = request.signature.accesses();
    let capture = &mut state.capture;
    capture.record_kernel(request.kernel);
    capture.record_entry(Entry::Launch {
        kernel: request.signature.shared_name(),
        groups: request.groups,
        bindings: request
            .args
            .iter()
            .zip(accesses)
            .map(|(buffer, access)| (buffer.span(), *access))
            .collect(),
        info: info_slice.map(|slice| Span::whole(slice.id(), slice.len())),
        info_bytes: request.info.len() as u32,
        param_bytes: request.params.len() as u32,
    });
    if let Some(info_slice) = info_slice {
        capture.record_touch(info_slice);
    }
    for (buffer, access) in request.args.iter().zip(accesses) {
        let slice = buffer.slice();
        capture.record_touch(slice);
        if access.reads() {
            capture.record_read(slice.id());
        }
        if access.writes() {
            capture.record_write(slice.id(), buffer.is_whole());
        }
    }
}

/// The device slice of a recorded launch's info `bytes`. Bytes the warmup
/// never passed take a new entry; when that needs a page, the window is
/// doomed with the launch named, rather than with the bare page count the
/// close would report.
fn recorded_info<D: Driver, B: Bound>(
    state: &mut StreamState<D>,
    request: &Request<'_, D, B>,
    bytes: &[u8],
    ids: &mut impl FnMut() -> BufferId,
) -> Result<crate::memory::pool::SliceHandle, Error> {
    let grown = |state: &StreamState<D>| {
        state.device.grew_while_recording() || state.host.grew_while_recording()
    };
    let before = grown(state);
    let slice = state.info_slice(bytes, ids)?;
    if !before && grown(state) {
        let operation = state.capture.logged();
        state
            .capture
            .record_failure(Error::InfoFirstSeenWhileRecording {
                stream: state.id,
                kernel: request.signature.name().to_string(),
                operation,
            });
    }
    Ok(slice)
}

/// Whether a launch matches its kernel's signature. A launch that does is
/// let through on one pass of compares; the others go to
/// [`explain_launch`], which names what is wrong.
#[inline]
fn check_launch<D: Driver, B: Bound>(
    request: &Request<'_, D, B>,
    max_groups: [u32; 3],
) -> Result<(), Error> {
    // `admits` also holds the bindings to `MAX_BINDINGS`.
    if request
        .signature
        .admits(&request.shape(max_groups), |buffer| buffer.span())
    {
        return Ok(());
    }
    explain_launch(request, max_groups)
}

/// [`check_launch`]'s checks one by one, in the order their errors are
/// reported.
#[cold]
fn explain_launch<D: Driver, B: Bound>(
    request: &Request<'_, D, B>,
    max_groups: [u32; 3],
) -> Result<(), Error> {
    let (signature, args) = (request.signature, request.args);
    if args.len() > MAX_BINDINGS {
        return Err(too_many_bindings(signature, args.len()));
    }
    match signature.mismatch(&request.shape(max_groups), |buffer| buffer.span()) {
        Some(reason) => Err(Error::KernelMismatch {
            kernel: signature.to_string(),
            reason,
        }),
        // The quick check and the explaining one disagree: the quick one
        // refused, so the launch is refused.
        None => Err(Error::KernelMismatch {
            kernel: signature.to_string(),
            reason: "the launch does not match".into(),
        }),
    }
}

#[cold]
fn too_many_bindings(signature: &Signature, bound: usize) -> Error {
    Error::KernelMismatch {
        kernel: signature.to_string(),
        reason: format!("{bound} buffers bound; at most {MAX_BINDINGS}"),
    }
}

/// Issue the driver launch of `request`, its info bytes at `info`; each
/// binding's access is the kernel signature's. `inline(always)`, as
/// [`issue_launch`] is.
#[inline(always)]
fn enqueue_launch<D: Driver, B: Bound>(
    state: &mut StreamState<D>,
    request: &Request<'_, D, B>,
    info: Option<Place>,
) -> Result<(), Error> {
    let missing = || Error::UnknownStream(state.id);
    let device_slice = |place: Place| {
        Some(DeviceSlice {
            page: state.device.page_at(place.slot)?,
            offset: place.offset,
            len: place.len,
        })
    };
    // Filled in place: the check allowed at most `MAX_BINDINGS`.
    let mut bindings: ArrayVec<Binding<'_, D>, MAX_BINDINGS> = ArrayVec::new();
    for (buffer, access) in request.args.iter().zip(request.signature.accesses()) {
        bindings.push(Binding {
            slice: device_slice(buffer.place()).ok_or_else(missing)?,
            access: *access,
        });
    }
    let info = match info {
        Some(place) => Some(device_slice(place).ok_or_else(missing)?),
        None => None,
    };
    D::launch(
        &mut state.raw,
        Launch {
            kernel: &**request.kernel,
            groups: request.groups,
            bindings: &bindings,
            info,
            params: request.params,
        },
    )
    .map_err(Error::from)
}

impl<D: GraphDriver> Server<D> {
    /// A launch on `stream` over buffers of other streams, or over buffers
    /// another stream used: each buffer is shared first, then the launch
    /// waits for the streams its accesses need and runs with every
    /// involved stream locked. What it binds of another stream's pool is
    /// kept in this stream's drop queue until the device is past the
    /// launch, so its memory is not reused before.
    #[cold]
    fn launch_shared<B: Bound>(
        &self,
        stream: StreamId,
        request: &Request<'_, D, B>,
    ) -> Result<(), Error> {
        if let Some(join) = self.with(stream, |lane| Ok(lane.state.join().cloned()))? {
            return self.launch_joined(stream, &join, request);
        }
        if let Some(err) = temporary_elsewhere(stream, request) {
            return Err(err);
        }
        let foreign: SmallVec<[(BufferId, StreamId, &dyn Shareable); MAX_BINDINGS]> = request
            .args
            .iter()
            .filter(|b| b.stream() != stream)
            .map(|b| (b.id(), b.stream(), b.shared() as &dyn Shareable))
            .collect();
        self.share(&foreign)?;
        let accesses: SmallVec<[(BufferId, crate::kernels::signature::Access); MAX_BINDINGS]> =
            request
                .args
                .iter()
                .zip(request.signature.accesses())
                .map(|(b, access)| (b.id(), *access))
                .collect();
        let mut homes: SmallVec<[StreamId; MAX_BINDINGS]> =
            request.args.iter().map(Bound::stream).collect();
        homes.sort_unstable();
        homes.dedup();
        self.ordered(stream, &accesses, &homes, |lanes, _, waited| {
            // A recorded launch has run nothing: it clears no claim.
            let recording = lanes.mine.state.capture.is_recording();
            let outcome = self.issue_shared(lanes, stream, request, waited);
            let failure = outcome.as_ref().err();
            // Another thread's call on a recording stream claims nothing, as
            // on the launch's quick path.
            let foreign = matches!(failure, Some(Error::NotRecorder { .. }));
            if !foreign && failure.is_some() {
                lanes.mine.state.failures.settle(request.written(), failure);
            } else if !foreign && !recording {
                lanes.mine.state.failures.settle(request.renewed(), None);
            }
            match outcome {
                Ok(()) => (Ok(()), true),
                Err(err) => (lanes.mine.refused(err), false),
            }
        })
    }

    /// [`Server::launch_shared`]'s launch, under the locks: recorded inside
    /// a window; refused after a failed wait or over a claimed input.
    fn issue_shared<B: Bound>(
        &self,
        lanes: &mut Lanes<'_, D>,
        stream: StreamId,
        request: &Request<'_, D, B>,
        waited: Result<(), Error>,
    ) -> Result<(), Error> {
        lanes.mine.check_recorder()?;
        if let Some(join) = lanes.mine.state.join() {
            // Joined since the launch looked: its work belongs to the window.
            return Err(Error::OutOfOrder {
                call: "launch",
                stream,
                reason: format!("{stream} joined the window of {} meanwhile", join.stream),
            });
        }
        // From here this stream's graphs may use shared buffers: its
        // replays are ordered.
        lanes.mine.state.shares = true;
        if lanes.mine.state.capture.is_recording() {
            return self.record_across(lanes, stream, None, request);
        }
        // A claimed input is the caller's to fix, whatever the device did:
        // it is reported before a failed wait.
        if let Some(err) = read_claim(&lanes.mine.state, request) {
            return Err(err);
        }
        waited?;
        let mut ids = || self.ids.buffer();
        let info = match request.info {
            [] => None,
            bytes => Some(lanes.mine.state.info_place(bytes, &mut ids)?),
        };
        launch_across(lanes, stream, request, info.map(|place| (place, stream)))?;
        let state = &mut lanes.mine.state;
        state.issued();
        // Another stream's memory this launch uses stays in use until the
        // device is past the launch, whatever its own stream frees.
        for buffer in request.args.iter().filter(|b| b.stream() != stream) {
            state.queue_drop(buffer.slice().clone());
        }
        state.maybe_flush();
        Ok(())
    }
}

/// A temporary of another stream than `stream` among `request`'s bindings:
/// refused, since that stream's graphs share its memory and nothing orders
/// `stream`'s work after theirs.
fn temporary_elsewhere<D: Driver, B: Bound>(
    stream: StreamId,
    request: &Request<'_, D, B>,
) -> Option<Error> {
    let buffer = request
        .args
        .iter()
        .find(|b| b.stream() != stream && b.slice().is_temporary())?;
    Some(Error::TemporaryElsewhere {
        buffer: buffer.id(),
        home: buffer.stream(),
        stream,
    })
}

/// Issue `request`'s driver launch on the stream of `lanes.mine` (which is
/// `stream`), each binding found in its buffer's own stream's pool, and the
/// info bytes at `info` in the pool of the stream it names.
fn launch_across<D: GraphDriver, B: Bound>(
    lanes: &mut Lanes<'_, D>,
    stream: StreamId,
    request: &Request<'_, D, B>,
    info: Option<(Place, StreamId)>,
) -> Result<(), Error> {
    let Lanes { mine, others } = lanes;
    let state = &mut mine.state;
    let missing = |id: StreamId| Error::UnknownStream(id);
    let slice_at = |place: Place, home: StreamId| -> Result<DeviceSlice<'_, D>, Error> {
        let pool = if home == stream {
            &state.device
        } else {
            &others
                .iter()
                .find(|(id, _)| *id == home)
                .ok_or_else(|| missing(home))?
                .1
                .state
                .device
        };
        Ok(DeviceSlice {
            page: pool.page_at(place.slot).ok_or_else(|| missing(home))?,
            offset: place.offset,
            len: place.len,
        })
    };
    let mut bindings: ArrayVec<Binding<'_, D>, MAX_BINDINGS> = ArrayVec::new();
    for (buffer, access) in request.args.iter().zip(request.signature.accesses()) {
        bindings.push(Binding {
            slice: slice_at(buffer.place(), buffer.stream())?,
            access: *access,
        });
    }
    let info = match info {
        Some((place, home)) => Some(slice_at(place, home)?),
        None => None,
    };
    let launched = D::launch(
        &mut state.raw,
        Launch {
            kernel: &**request.kernel,
            groups: request.groups,
            bindings: &bindings,
            info,
            params: request.params,
        },
    );
    drop(bindings);
    launched.map_err(Error::from)
}

impl<D: GraphDriver> Server<D> {
    /// A launch on `stream` while it is joined to another stream's window
    /// (`join`): recorded into that window, ordered by the recording like
    /// the window's own work (rule 21). Its buffers not of the recording
    /// stream are shared, so that the graph's replays are ordered after
    /// their other users.
    #[cold]
    fn launch_joined<B: Bound>(
        &self,
        stream: StreamId,
        join: &Arc<Join>,
        request: &Request<'_, D, B>,
    ) -> Result<(), Error> {
        if let Some(err) = temporary_elsewhere(join.stream, request) {
            return Err(err);
        }
        // Every buffer not of the recording stream is shared first, the
        // joined stream's own included: the graph replays on the recording
        // stream, ordered after their other users, and they after it.
        let outside: SmallVec<[(BufferId, StreamId, &dyn Shareable); MAX_BINDINGS]> = request
            .args
            .iter()
            .filter(|b| b.stream() != join.stream)
            .map(|b| (b.id(), b.stream(), b.shared() as &dyn Shareable))
            .collect();
        self.share(&outside)?;
        let mut homes: SmallVec<[StreamId; MAX_BINDINGS]> =
            request.args.iter().map(Bound::stream).collect();
        homes.push(stream);
        homes.sort_unstable();
        homes.dedup();
        interleave::reached(Point::LaunchJoined);
        self.ordered(join.stream, &[], &homes, |lanes, _, _| {
            let recorded = self.record_joined(lanes, stream, join, request);
            match recorded {
                Ok(()) => (Ok(()), false),
                // Another thread's call: refused, and nothing is claimed.
                Err(err @ Error::NotRecorder { .. }) => (Err(err), false),
                Err(err) => {
                    lanes
                        .mine
                        .state
                        .failures
                        .settle(request.written(), Some(&err));
                    (lanes.mine.refused(err), false)
                }
            }
        })
    }

    /// [`Server::launch_joined`]'s recording, under the locks.
    fn record_joined<B: Bound>(
        &self,
        lanes: &mut Lanes<'_, D>,
        stream: StreamId,
        join: &Arc<Join>,
        request: &Request<'_, D, B>,
    ) -> Result<(), Error> {
        let window_stream = join.stream;
        if !join.is_open() || lanes.mine.state.capture.recording_window() != Some(join.window) {
            return Err(Error::OutOfOrder {
                call: "launch",
                stream,
                reason: format!("the window {stream} joined on {window_stream} has closed"),
            });
        }
        lanes.mine.check_recorder()?;
        lanes.mine.state.shares = true;
        self.record_across(lanes, window_stream, Some(stream), request)
    }

    /// Record `request` into the window recording on `lanes.mine` (which
    /// is `window_stream`), over buffers of any stream: their pages come
    /// from their own streams' pools, and the graph pins their slices.
    fn record_across<B: Bound>(
        &self,
        lanes: &mut Lanes<'_, D>,
        window_stream: StreamId,
        joined: Option<StreamId>,
        request: &Request<'_, D, B>,
    ) -> Result<(), Error> {
        if let Some(err) = read_claim(&lanes.mine.state, request) {
            return Err(err);
        }
        // A joined stream's launch finds its info where its warmup left it,
        // in that stream's cache: an entry's bytes never change, so the
        // graph may pin its slice.
        let cached = match (request.info, joined) {
            ([], _) | (_, None) => None,
            (bytes, Some(joined)) => lanes
                .lane(joined)
                .and_then(|lane| lane.state.info.get(bytes, Phase::None).cloned())
                .map(|slice| (slice, joined)),
        };
        let mut ids = || self.ids.buffer();
        let info = match (request.info, cached) {
            ([], _) => None,
            (_, Some(cached)) => Some(cached),
            (bytes, None) => Some((
                recorded_info(&mut lanes.mine.state, request, bytes, &mut ids)?,
                window_stream,
            )),
        };
        let place = info.as_ref().map(|(slice, home)| (slice.place(), *home));
        launch_across(lanes, window_stream, request, place)?;
        log_recorded(
            &mut lanes.mine.state,
            request,
            info.as_ref().map(|(slice, _)| slice),
        );
        Ok(())
    }
}
