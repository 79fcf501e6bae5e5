//! The thread that runs a stream's work in order, asynchronously to the
//! caller, as a GPU runs a stream: nothing is done when a call returns, only
//! when a fence says so.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::op::Op;
use crate::program::Program;

/// Commands a stream's queue holds before the caller waits for the worker.
const QUEUE_DEPTH: usize = 1024;

/// What the worker is sent.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Command {
    Op(Op),
    Replay(Arc<Program>),
    /// A program an update replaced: dropped on the worker, after the
    /// replays queued before it, so the update does not pay for it.
    Release(Arc<Program>),
    Signal(u64),
    /// Wait until another stream's worker has passed a signal.
    Wait(Shared, u64),
}

/// How far the worker got, and the first error it met (sticky, as a GPU's
/// fault is: every later fence reports it).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub completed: u64,
    pub error: Option<String>,
    /// The worker's thread has ended: nothing more will complete.
    pub stopped: bool,
}

/// Progress shared between the worker and fences.
pub(crate) type Shared = Arc<(Mutex<Progress>, Condvar)>;

/// A running worker; dropping it lets the work drain and joins the thread.
pub(crate) struct Worker {
    sender: Option<SyncSender<Command>>,
    thread: Option<JoinHandle<()>>,
    pub(crate) progress: Shared,
}

impl Worker {
    pub(crate) fn spawn(name: String) -> std::io::Result<Self> {
        // Bounded and allocated once: sending a command allocates nothing,
        // and a full queue makes the caller wait, as a GPU's does.
        let (sender, receiver) = sync_channel(QUEUE_DEPTH);
        let progress: Shared = Arc::default();
        let shared = progress.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(receiver, shared))?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
            progress,
        })
    }

    /// Enqueue `command`; false when the worker is gone.
    pub(crate) fn send(&self, command: Command) -> bool {
        self.sender
            .as_ref()
            .is_some_and(|sender| sender.send(command).is_ok())
    }

    /// Whether the worker has passed signal `value`, without waiting; its
    /// first error if it met one.
    pub(crate) fn passed(&self, value: u64) -> Result<bool, String> {
        let (lock, _) = &*self.progress;
        let progress = lock
            .lock()
            .map_err(|_| "worker state poisoned".to_string())?;
        match &progress.error {
            Some(err) => Err(err.clone()),
            None => Ok(progress.completed >= value),
        }
    }

    /// Block until the worker has passed signal `value`; its first error if
    /// it met one.
    pub(crate) fn wait(&self, value: u64) -> Result<(), String> {
        let (lock, ready) = &*self.progress;
        let mut progress = lock
            .lock()
            .map_err(|_| "worker state poisoned".to_string())?;
        while progress.completed < value && progress.error.is_none() {
            if self.thread.as_ref().is_none_or(JoinHandle::is_finished) {
                return Err("the stream's worker thread has stopped".into());
            }
            progress = ready
                .wait_timeout(progress, std::time::Duration::from_millis(50))
                .map_err(|_| "worker state poisoned".to_string())?
                .0;
        }
        match &progress.error {
            Some(err) => Err(err.clone()),
            None => Ok(()),
        }
    }
}

/// Block until the worker sharing `progress` has passed signal `value`; its
/// first error if it met one. That worker passes every signal it was sent,
/// even after an error or once its stream is dropped (it drains its queue).
fn wait_for(progress: &Shared, value: u64) -> Result<(), String> {
    let (lock, ready) = &**progress;
    let mut progress = lock
        .lock()
        .map_err(|_| "worker state poisoned".to_string())?;
    while progress.completed < value && progress.error.is_none() {
        if progress.stopped {
            return Err("its worker thread stopped before the event".into());
        }
        progress = ready
            .wait(progress)
            .map_err(|_| "worker state poisoned".to_string())?;
    }
    match &progress.error {
        Some(err) => Err(err.clone()),
        None => Ok(()),
    }
}

/// Marks its worker stopped when the worker's loop ends, by return or by
/// unwinding, and wakes whoever waits for it.
struct Stopping<'a>(&'a Shared);

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        let (lock, ready) = &**self.0;
        let mut progress = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        progress.stopped = true;
        ready.notify_all();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _finished = thread.join();
        }
    }
}

fn run(receiver: Receiver<Command>, progress: Shared) {
    let _stopping = Stopping(&progress);
    let (lock, ready) = &*progress;
    let fail = |err: String| {
        if let Ok(mut progress) = lock.lock() {
            progress.error.get_or_insert(err);
        }
        ready.notify_all();
    };
    for command in receiver {
        match command {
            Command::Op(op) => {
                if let Err(err) = op.run() {
                    fail(err);
                }
            }
            Command::Replay(program) => {
                if let Err(err) = program.run() {
                    fail(err);
                }
            }
            Command::Release(program) => drop(program),
            Command::Wait(other, value) => {
                if let Err(err) = wait_for(&other, value) {
                    fail(format!("a stream this one waited for failed: {err}"));
                }
            }
            Command::Signal(value) => {
                if let Ok(mut progress) = lock.lock() {
                    progress.completed = progress.completed.max(value);
                }
                ready.notify_all();
            }
        }
    }
}
