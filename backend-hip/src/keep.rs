//! What the caller hands over with a handle made elsewhere, to keep the
//! memory, stream, code or context behind it alive.

use std::sync::Mutex;

/// A value moved in beside a raw handle and dropped once the library is past
/// its last use of the handle: an owner whose drop frees or destroys what
/// the handle names, or `()` when the caller keeps that alive itself.
///
/// Behind a mutex only so that it may be shared between threads whatever
/// it is; nothing reads it.
pub(crate) struct KeepAlive(#[allow(dead_code)] Mutex<Box<dyn Send>>);

impl KeepAlive {
    pub(crate) fn new(value: impl Send + 'static) -> Self {
        Self(Mutex::new(Box::new(value)))
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepAlive")
    }
}
