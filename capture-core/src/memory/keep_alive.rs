//! What a caller hands over beside a raw handle made elsewhere.

use std::sync::Mutex;

use crate::error::Error;

/// A value moved in beside a raw handle (memory, a stream, a pipeline, a
/// context made elsewhere) and dropped once the library is past its last
/// use of the handle: an owner whose drop frees or destroys what the handle
/// names, or `()` when the caller keeps that alive itself.
///
/// Behind a mutex only so that it is `Sync` whatever it holds; nothing
/// reads it.
pub struct KeepAlive(#[allow(dead_code)] Mutex<Box<dyn Send>>);

impl KeepAlive {
    /// Keep `value` until this is dropped.
    pub fn new(value: impl Send + 'static) -> Self {
        Self(Mutex::new(Box::new(value)))
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepAlive")
    }
}

/// Why a constructor over raw handles (or [`Client::import`]) refused,
/// with what the caller handed over given back untouched: a keep-alive
/// whose drop destroys the caller's buffer or pipeline is never dropped by
/// a refusal. One type for every backend's constructors, so `?` reaches
/// [`Error`] from each of them (dropping what was handed back).
///
/// [`Client::import`]: crate::Client::import
pub struct Rejected<K> {
    /// Why.
    pub error: Error,
    /// What the caller handed over, as it was.
    pub handed_back: K,
}

impl<K> Rejected<K> {
    /// A refusal of `error`, handing `handed_back` back.
    pub fn new(error: impl Into<Error>, handed_back: K) -> Self {
        Self {
            error: error.into(),
            handed_back,
        }
    }

    /// The error and what was handed back.
    pub fn into_parts(self) -> (Error, K) {
        (self.error, self.handed_back)
    }

    /// The same refusal handing back `f` of what this one hands back.
    pub fn map<L>(self, f: impl FnOnce(K) -> L) -> Rejected<L> {
        Rejected {
            error: self.error,
            handed_back: f(self.handed_back),
        }
    }
}

impl<K> From<Rejected<K>> for Error {
    fn from(rejected: Rejected<K>) -> Self {
        rejected.error
    }
}

impl<K> std::fmt::Debug for Rejected<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rejected")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<K> std::fmt::Display for Rejected<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl<K> std::error::Error for Rejected<K> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{KeepAlive, Rejected};
    use crate::error::Error;

    #[test]
    fn a_refusal_hands_back_what_it_was_given_and_converts_to_the_error() {
        let value = Arc::new(());
        let rejected = Rejected::new(Error::EmptyBuffer, value.clone());
        assert_eq!(rejected.to_string(), Error::EmptyBuffer.to_string());
        assert!(format!("{rejected:?}").contains("EmptyBuffer"));
        let mapped = rejected.map(|kept| (kept, 1));
        assert_eq!(Arc::strong_count(&value), 2, "nothing dropped");
        let (error, (kept, one)) = mapped.into_parts();
        assert_eq!((error, one), (Error::EmptyBuffer, 1));
        assert!(Arc::ptr_eq(&kept, &value));
        let err: Error = Rejected::new(Error::Poisoned, ()).into();
        assert_eq!(err, Error::Poisoned);
        let source =
            std::error::Error::source(&Rejected::new(Error::Poisoned, ())).map(ToString::to_string);
        assert_eq!(source, Some(Error::Poisoned.to_string()));
    }

    #[test]
    fn the_value_lives_as_long_as_the_keep_alive() {
        let value = Arc::new(());
        let kept = KeepAlive::new(value.clone());
        assert_eq!(Arc::strong_count(&value), 2);
        assert_eq!(format!("{kept:?}"), "KeepAlive", "names no caller's type");
        drop(kept);
        assert_eq!(Arc::strong_count(&value), 1);
    }
}
