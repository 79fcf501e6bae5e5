//! Another stream joined to a recording stream's window: whose refusals
//! doom the window, and whether the window still takes its work.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ThreadId;

use crate::error::Error;
use crate::ids::{StreamId, WindowId};

/// Another stream's membership in a recording stream's window (fork/join,
/// rule 21): while it is open, that stream's work is recorded into the
/// window. The window closes it, joined back or not.
#[derive(Debug)]
pub struct Join {
    /// The recording stream.
    pub stream: StreamId,
    /// Its window.
    pub window: WindowId,
    /// The thread whose work the window takes: its calls the joined stream
    /// refuses doom the window, as its calls on the recording stream do.
    recorder: ThreadId,
    open: AtomicBool,
    /// The first call on the joined stream the window's thread was refused.
    failure: Mutex<Option<Error>>,
}

impl Join {
    /// A join of `window` on `stream`, open, whose work `recorder` issues.
    pub fn new(stream: StreamId, window: WindowId, recorder: ThreadId) -> Self {
        Self {
            stream,
            window,
            recorder,
            open: AtomicBool::new(true),
            failure: Mutex::new(None),
        }
    }

    /// A call on the joined stream was refused with `err`: if the window's
    /// thread made it, the window can no longer seal.
    pub fn refused(&self, err: &Error) {
        if std::thread::current().id() == self.recorder
            && let Ok(mut failure) = self.failure.lock()
        {
            failure.get_or_insert_with(|| err.clone());
        }
    }

    /// Whether the window still takes the joined stream's work.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    pub(super) fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    pub(super) fn take_failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .ok()
            .and_then(|mut failure| failure.take())
    }
}
