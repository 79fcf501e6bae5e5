//! Executables: a closed [`Recording`] replayed from the primary that
//! executes its secondary command buffer.
//!
//! Both command buffers are simultaneous-use, so a replay may be submitted
//! while an earlier one is still pending. An executable is never updated:
//! a re-capture instantiates its new recording, and the old executable
//! waits for its replays when it drops.

use std::sync::{Arc, Mutex, MutexGuard};

use capture_core::DriverError;

use crate::device::Device;
use crate::error::error;
use crate::recording::Recording;
use crate::stream::{Stream, Uses, wait_past};

/// What replays change: the recording they run and the last timeline value
/// each stream's replay of it will signal.
struct State {
    recording: Recording,
    uses: Uses,
}

/// A recorded window, replayable any number of times.
///
/// Owns its [`Recording`]; dropping it waits for its last replay before
/// releasing it.
pub struct Executable {
    device: Arc<Device>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executable")
            .field("recording", &self.state().recording)
            .finish_non_exhaustive()
    }
}

/// Refuses a stream of another device than `device`.
fn same_device(device: &Arc<Device>, stream: &Stream, op: &'static str) -> Result<(), DriverError> {
    if Arc::ptr_eq(device, stream.device()) {
        Ok(())
    } else {
        Err(error(op, "the executable belongs to another device"))
    }
}

impl Executable {
    /// An executable replaying `recording`.
    pub(crate) fn new(recording: Recording) -> Executable {
        Executable {
            device: Arc::clone(recording.device()),
            state: Mutex::new(State {
                recording,
                uses: Vec::new(),
            }),
        }
    }

    /// The state, locked. A poisoned lock only means another thread
    /// panicked between two calls; the state is whole.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Diagnostics: the global memory barriers encoded between the
    /// recording's commands (see [`Recording::barriers`]).
    pub fn barriers(&self) -> usize {
        self.state().recording.barriers()
    }

    /// Records the primary now so the first replay does not.
    pub(crate) fn upload(&self, stream: &Stream) -> Result<(), DriverError> {
        same_device(&self.device, stream, "upload")?;
        self.state().recording.primary().map(|_| ())
    }

    /// Submits a replay on `stream`, after its pending eager work, in one
    /// submission.
    pub(crate) fn replay(&self, stream: &mut Stream) -> Result<(), DriverError> {
        same_device(&self.device, stream, "replay")?;
        let mut state = self.state();
        let primary = state.recording.primary()?;
        let value = stream.submit_with(Some(primary))?;
        let timeline = stream.timeline();
        match state
            .uses
            .iter_mut()
            .find(|(used, _)| Arc::ptr_eq(used, timeline))
        {
            Some((_, last)) => *last = value,
            None => state.uses.push((Arc::clone(timeline), value)),
        }
        Ok(())
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        wait_past(&state.uses);
        // The recording drops with the state, no replay of it pending.
    }
}
