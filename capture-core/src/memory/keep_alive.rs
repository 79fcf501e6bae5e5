//! What a caller hands over beside a raw handle made elsewhere.

use std::sync::Mutex;

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::KeepAlive;

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
