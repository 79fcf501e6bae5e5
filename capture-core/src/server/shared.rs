//! Work on buffers more than one stream uses (rule 20): the streams it
//! involves locked together, and the waits it needs made on the device
//! before it is issued.
//!
//! A buffer becomes *shared* when a second stream first touches it; from
//! then on every operation on it takes this path, and [`StreamOrder`] says
//! who waits for whom. Buffers never shared never come here. The locks are
//! taken in ascending stream id, then the order's, so no two calls wait for
//! each other, and an event is recorded only for work somebody waits on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use smallvec::SmallVec;

use super::{Lane, Server, Slot};
use crate::driver::GraphDriver;
use crate::error::Error;
use crate::ids::{BufferId, StreamId};
use crate::interleave::{self, Point};
use crate::kernels::signature::Access;
use crate::streams::join::Join;
use crate::streams::order::{StreamOrder, lock as lock_order};

/// The lanes of the streams a shared operation involves, locked: the
/// operation's own stream apart, the others by id.
pub(super) struct Lanes<'g, D: GraphDriver> {
    pub(super) mine: &'g mut Lane<D>,
    pub(super) others: Vec<(StreamId, &'g mut Lane<D>)>,
}

impl<D: GraphDriver> Lanes<'_, D> {
    /// The lane of `stream`, which this operation locked.
    pub(super) fn lane(&mut self, stream: StreamId) -> Option<&mut Lane<D>> {
        if self.mine.state.id == stream {
            return Some(&mut *self.mine);
        }
        self.others
            .iter_mut()
            .find(|(id, _)| *id == stream)
            .map(|(_, lane)| &mut **lane)
    }
}

impl<D: GraphDriver> Server<D> {
    /// Run `op` on `stream`, an operation making `accesses`, once the waits
    /// they need are made: every stream of `homes` (where the buffers lie)
    /// and every stream `stream` must wait for is locked, in id order, for
    /// the whole of it. `op` is told whether the waits failed, so it can
    /// claim what it would have written. What it made is then recorded in
    /// the order, if `op` says it was issued.
    pub(super) fn ordered<R>(
        &self,
        stream: StreamId,
        accesses: &[(BufferId, Access)],
        homes: &[StreamId],
        op: impl FnOnce(
            &mut Lanes<'_, D>,
            &mut StreamOrder,
            Result<(), Error>,
        ) -> (Result<R, Error>, bool),
    ) -> Result<R, Error> {
        let mut involved: BTreeSet<StreamId> = homes.iter().copied().collect();
        involved.insert(stream);
        let mut op = Some(op);
        loop {
            for wait in lock_order(&self.order).needs(stream, accesses.iter().copied()) {
                involved.insert(wait.stream);
            }
            interleave::reached(Point::OrderLocking);
            let mut slots: Vec<(StreamId, Arc<Slot<D>>)> = Vec::with_capacity(involved.len());
            let mut gone = None;
            for &id in &involved {
                match self.slot(id) {
                    Ok(slot) => slots.push((id, slot)),
                    // A stream to wait for that was destroyed meanwhile took
                    // its place in the order with it: look again.
                    Err(Error::UnknownStream(_)) if id != stream && !homes.contains(&id) => {
                        gone = Some(id);
                    }
                    Err(err) => return Err(err),
                }
            }
            if let Some(id) = gone {
                // Its destroy forgets it too; doing it here assures progress.
                lock_order(&self.order).forget_stream(id);
                involved.remove(&id);
                continue;
            }
            let mut guards = Vec::with_capacity(slots.len());
            for (_, slot) in &slots {
                guards.push(slot.lock()?);
            }
            let mut mine = None;
            let mut others = Vec::with_capacity(slots.len());
            for ((id, slot), guard) in slots.iter().zip(guards.iter_mut()) {
                let lane = Self::open(slot, guard, *id)?;
                if *id == stream {
                    mine = Some(lane);
                } else {
                    others.push((*id, lane));
                }
            }
            let Some(mine) = mine else {
                return Err(Error::UnknownStream(stream));
            };
            let mut lanes = Lanes { mine, others };
            let mut order = lock_order(&self.order);
            // Work a window records runs only when its graph replays, and
            // the replay is ordered then: nothing to wait for now.
            let recording = lanes.mine.state.capture.is_recording();
            let waits = if recording {
                SmallVec::new()
            } else {
                order.needs(stream, accesses.iter().copied())
            };
            if waits.iter().any(|wait| !involved.contains(&wait.stream)) {
                // Another call shared the buffers further meanwhile: lock
                // the streams it brought in too, and look again.
                continue;
            }
            let mut waited = Ok(());
            for wait in &waits {
                waited = self.wait_in(&mut lanes, &mut order, stream, wait.stream);
                if waited.is_err() {
                    break;
                }
            }
            let Some(op) = op.take() else {
                return Err(Error::Poisoned);
            };
            let (result, issued) = op(&mut lanes, &mut order, waited);
            if issued && !recording {
                // This work is the stream's new point, not work after it.
                lanes.mine.state.take_unordered();
                order.issue(stream, accesses.iter().copied());
            }
            return result;
        }
    }

    /// Make `stream` wait on the device for everything `other` issued so
    /// far: an event recorded at `other`'s end. Neither may be recording.
    fn wait_in(
        &self,
        lanes: &mut Lanes<'_, D>,
        order: &mut StreamOrder,
        stream: StreamId,
        other: StreamId,
    ) -> Result<(), Error> {
        let producer = lanes.lane(other).ok_or(Error::UnknownStream(other))?;
        if producer.state.capture.is_recording() {
            return Err(Error::WaitOnRecording {
                stream,
                recording: other,
            });
        }
        // The event covers the producer's work the order did not see too.
        if producer.state.take_unordered() {
            order.advance(other);
        }
        let event = D::record_event(&mut producer.state.raw)?;
        D::wait_event(&mut lanes.mine.state.raw, &event)?;
        order.waited(stream, other);
        Ok(())
    }

    /// Make `stream`'s later work wait for all of `other`'s work so far, on
    /// the device: what [`crate::Client::wait`] does. Where `other` records
    /// a window, `stream` joins it instead (fork); where `stream` records
    /// and `other` joined its window, `other` is joined back (join).
    pub fn wait(&self, stream: StreamId, other: StreamId) -> Result<(), Error> {
        if stream == other {
            return self.slot(stream).map(drop);
        }
        self.ordered(stream, &[], &[other], |lanes, order, _| {
            let waited = self.wait_or_join(lanes, order, stream, other);
            match waited {
                Ok(()) => (Ok(()), false),
                Err(err) => (lanes.mine.refused(err), false),
            }
        })
    }

    /// [`Server::wait`] under the locks of both streams.
    fn wait_or_join(
        &self,
        lanes: &mut Lanes<'_, D>,
        order: &mut StreamOrder,
        stream: StreamId,
        other: StreamId,
    ) -> Result<(), Error> {
        let recorder = std::thread::current().id();
        // A body's work is one node of its window: no other stream's work
        // can enter or leave it partway.
        let depth = lanes.lane(other).map(|lane| lane.state.capture.depth());
        for (depth, id) in [
            (depth, other),
            (Some(lanes.mine.state.capture.depth()), stream),
        ] {
            if depth.unwrap_or(0) > 0 {
                return Err(Error::InBody {
                    stream: id,
                    what: "a wait between streams",
                    reason: "a join or join back would cross the body's edge; wait before the \
                             conditional or after it"
                        .into(),
                });
            }
        }
        let theirs = lanes.lane(other).ok_or(Error::UnknownStream(other))?;
        if let Some(window) = theirs.state.capture.recording_window() {
            // Fork: the recording stream's thread makes `stream` join.
            if !theirs.state.capture.records_for(recorder) {
                return Err(Error::NotRecorder {
                    stream: other,
                    window,
                });
            }
            let mine = &mut lanes.mine.state;
            let active = mine.capture.is_active();
            let refusal = match mine.join() {
                // Joined already: a second fork changes nothing.
                Some(joined) if joined.window == window => return Ok(()),
                Some(_) => Some("it is joined to another window"),
                None if active => Some("it has a capture window of its own open"),
                None => None,
            };
            if let Some(reason) = refusal {
                return Err(Error::OutOfOrder {
                    call: "wait",
                    stream,
                    reason: format!("{stream} cannot join {other}'s window: {reason}"),
                });
            }
            let join = Arc::new(Join::new(other, window, recorder));
            mine.joined = Some(join.clone());
            if let Some(theirs) = lanes.lane(other) {
                theirs.state.capture.join(stream, join);
            }
            return Ok(());
        }
        let theirs_joined = theirs.state.join().cloned();
        if let Some(window) = lanes.mine.state.capture.recording_window() {
            // Join: the recording stream's thread waits for a stream of its
            // window.
            if !lanes.mine.state.capture.records_for(recorder) {
                return Err(Error::NotRecorder { stream, window });
            }
            if theirs_joined.is_some_and(|join| join.window == window) {
                if let Some(theirs) = lanes.lane(other) {
                    theirs.state.joined = None;
                }
                lanes.mine.state.capture.join_back(other);
                return Ok(());
            }
            return Err(Error::WaitOutsideWindow { stream, other });
        }
        if let Some(mine) = lanes.mine.state.join().cloned() {
            // Both in one recording: its order is its issue order.
            let same = mine.stream == other
                || theirs_joined.is_some_and(|join| join.window == mine.window);
            if same {
                return Ok(());
            }
            return Err(Error::WaitOutsideWindow { stream, other });
        }
        if let Some(join) = theirs_joined {
            return Err(Error::WaitOnRecording {
                stream,
                recording: join.stream,
            });
        }
        self.wait_in(lanes, order, stream, other)
    }

    /// Mark `buffers` (with their streams) shared, each under its own
    /// stream's lock: from here every operation on them is ordered. Its
    /// stream's work so far counts as a write of it, which whoever uses it
    /// next waits for, unless already past it. A stream that records cannot be waited for, so a
    /// buffer of it is not shared meanwhile.
    pub(super) fn share(
        &self,
        buffers: &[(BufferId, StreamId, &dyn Shareable)],
    ) -> Result<(), Error> {
        for &(buffer, home, shareable) in buffers {
            if shareable.is_shared() {
                continue;
            }
            let slot = self.slot(home)?;
            let mut guard = slot.lock()?;
            let lane = Self::open(&slot, &mut guard, home)?;
            if shareable.is_shared() {
                continue;
            }
            if lane.state.capture.is_recording() {
                return Err(Error::SharedWhileRecording {
                    buffer,
                    stream: home,
                });
            }
            lane.state.shares = true;
            shareable.mark_shared();
            let mut order = lock_order(&self.order);
            if lane.state.take_unordered() {
                order.advance(home);
            }
            order.adopt(home, buffer);
        }
        Ok(())
    }
}

/// What a buffer keeps of whether it is shared: set once, under its stream's
/// lock, and read by every operation on it.
pub(crate) trait Shareable {
    /// Whether the buffer has been used on another stream than its own.
    fn is_shared(&self) -> bool;
    /// From here the buffer is shared.
    fn mark_shared(&self);
}

impl Shareable for AtomicBool {
    #[inline]
    fn is_shared(&self) -> bool {
        self.load(std::sync::atomic::Ordering::Acquire)
    }

    fn mark_shared(&self) {
        self.store(true, std::sync::atomic::Ordering::Release);
    }
}
