//! A capture window on one stream: arming the pools before it opens, opening
//! it, and instantiating what it recorded.
//!
//! The three steps are ordered and the stream's capture state refuses them
//! out of order; this type is where each step's shared half lives, written
//! once for every backend.

use std::sync::Arc;

use crate::driver::GraphDriver;
use crate::error::Error;
use crate::graph::{Graph, Refused};
use crate::ids::{GraphId, WindowId};
use crate::stream::StreamState;

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
        stream.info.capture_start();
        Ok(())
    }

    /// Open the window: from here the driver records every launch and copy
    /// issued on the stream.
    ///
    /// On the driver's refusal the stream is left as it was found (pools
    /// disarmed, info-cache pins discarded, state `None`), so the whole
    /// prepare-then-begin sequence can be retried.
    pub fn begin(&mut self, window: WindowId) -> Result<(), Error> {
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
        // Warmup is over: release what it retained so the recorded run
        // reuses those slices.
        stream.device.capture_priming_end();
        stream.host.capture_priming_end();
        stream.info.capture_recording();
        if let Err(err) = D::begin(&mut stream.raw) {
            self.unwind();
            return Err(err.into());
        }
        Ok(())
    }

    /// Close the window and instantiate what it recorded as graph `id`.
    ///
    /// The stream leaves capture mode first, so no path below can leave it
    /// recording. A window closed by a caller that does not own it is closed
    /// and torn down all the same, since nobody else will come back to close
    /// it; only its owner gets a graph out of it.
    ///
    /// # Errors
    ///
    /// [`Refused`], which every failure here becomes, with the buffers the
    /// caller must now claim (empty when nothing was recorded).
    pub fn instantiate(&mut self, closer: WindowId, id: GraphId) -> Result<Graph<D>, Refused> {
        let stream = &mut *self.stream;
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
        let doomed = stream
            .capture
            .take_failure()
            .map(|reason| Error::Doomed(Arc::new(reason)));
        let exec = D::instantiate(&mut stream.raw, doomed.clone());
        // Pin every slice the window handed out, device and host; on a
        // refusal they drop with `retained` below and are free again.
        let mut retained = stream.device.capture_end();
        retained.extend(stream.host.capture_end());
        let recorded = stream.capture.take_recorded();
        retained.extend(recorded.touched);
        retained.extend(recorded.host);
        // Reclaim what was dropped while recording, whose fenced flushes
        // were deferred for as long as the window was open.
        if let Err(err) = stream.drain_drops() {
            log::warn!(
                "{}: frees deferred by the window stay queued: {err}",
                stream.id
            );
        }
        let exec = if outcome.is_abandoned() {
            Err(outcome.abandoned_error(doomed))
        } else {
            exec
        };
        match exec {
            Ok(exec) => {
                // Entries made while recording leave the cache; `retained`
                // already holds their slices for the graph.
                drop(stream.info.capture_commit(id));
                if let Err(err) = D::upload(&exec, &mut stream.raw) {
                    stream.upload_failures += 1;
                    log::warn!("{id}: upload failed, the first replay stages it instead: {err}");
                }
                Ok(Graph {
                    exec,
                    stream: stream.id,
                    _retained: retained,
                    written: recorded.written,
                    read: recorded.read,
                })
            }
            Err(error) => {
                for never_written in stream.info.capture_discard() {
                    stream.drops.push(never_written);
                }
                Err(Refused {
                    error,
                    written: recorded.written,
                })
            }
        }
    }

    /// Return the stream to how it was before `prepare`: pools disarmed,
    /// allocation mode restored, info-cache pins discarded, state `None`.
    fn unwind(&mut self) {
        let stream = &mut *self.stream;
        drop(stream.device.capture_end());
        drop(stream.host.capture_end());
        for never_written in stream.info.capture_discard() {
            stream.drops.push(never_written);
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
