//! Which buffers hold no valid bytes, and why.
//!
//! An operation that was to write a buffer and did not (it failed, it was
//! refused, its graph never became one) leaves whatever bytes were there
//! before. Reading them back as if fresh is the silent error this store
//! exists to prevent: the buffer carries the failure, every read of it on any
//! stream fails with it, and a later successful write clears it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::Error;
use crate::hashing::{FastMap, FastSet};
use crate::ids::BufferId;

/// The record of claimed buffers, behind [`Claims`].
#[derive(Debug, Default)]
pub struct FailureStore {
    claims: FastMap<BufferId, Arc<Error>>,
    /// Buffers a caller still holds. A graph's written set and a refused
    /// window's outlive the buffers in them (an intermediate the recorded
    /// run dropped), and a claim on a buffer nobody can read again would
    /// never be cleared.
    live: FastSet<BufferId>,
}

impl FailureStore {
    /// `buffer` was handed to a caller: from here it can be claimed.
    pub fn track(&mut self, buffer: BufferId) {
        self.live.insert(buffer);
    }

    /// The caller dropped `buffer`: nothing can read it any more, so its
    /// claim goes and no later one is kept.
    pub fn forget(&mut self, buffer: BufferId) {
        self.live.remove(&buffer);
        self.clear(buffer);
    }

    /// Mark `buffer` as holding no valid bytes because of `cause`. A buffer
    /// already claimed keeps its first cause, the one that explains it,
    /// unless that is a failed replay: a graph may retry only over bytes
    /// its own failure alone left. A buffer no caller holds is not claimed.
    pub fn claim(&mut self, buffer: BufferId, cause: &Arc<Error>) {
        if !self.live.contains(&buffer) {
            return;
        }
        let claim = self.claims.entry(buffer).or_insert_with(|| cause.clone());
        if matches!(**claim, Error::ReplayFailed { .. }) {
            *claim = cause.clone();
        }
    }

    /// Why `buffer` holds no valid bytes, if it does not.
    pub fn check(&self, buffer: BufferId) -> Option<&Arc<Error>> {
        if self.claims.is_empty() {
            return None;
        }
        self.claims.get(&buffer)
    }

    /// The error a read of `buffer` fails with, if it is claimed.
    pub fn read_error(&self, buffer: BufferId) -> Option<Error> {
        self.check(buffer).map(|cause| Error::Claimed {
            buffer,
            cause: cause.clone(),
        })
    }

    /// The failure policy, in one place: an operation that was to write
    /// `written` succeeded (`None`: their claims go, the bytes are fresh) or
    /// failed with `failure` (each is claimed with it, since it holds bytes
    /// nobody wrote).
    #[inline]
    pub fn settle(&mut self, written: impl IntoIterator<Item = BufferId>, failure: Option<&Error>) {
        match failure {
            None if self.claims.is_empty() => {}
            None => written.into_iter().for_each(|buffer| self.clear(buffer)),
            Some(error) => {
                let cause = Arc::new(error.clone());
                written
                    .into_iter()
                    .for_each(|buffer| self.claim(buffer, &cause));
            }
        }
    }

    /// `buffer` was written successfully.
    pub fn clear(&mut self, buffer: BufferId) {
        if !self.claims.is_empty() {
            self.claims.remove(&buffer);
        }
    }

    /// Claimed buffers.
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    /// Whether no buffer is claimed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }
}

/// The device's [`FailureStore`], shared by its streams: a claim made on one
/// stream fails a read on any other. Asking whether any buffer is claimed
/// takes no lock, which is all a launch or a replay asks when none is.
#[derive(Debug, Default)]
pub struct Claims {
    any: AtomicBool,
    store: Mutex<FailureStore>,
}

impl Claims {
    /// The store, locked. A panic under the lock leaves it whole: each of
    /// its operations is a single map update.
    fn store(&self) -> MutexGuard<'_, FailureStore> {
        self.store
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Run `f` on the store, then note whether anything is claimed.
    fn update<R>(&self, f: impl FnOnce(&mut FailureStore) -> R) -> R {
        let mut store = self.store();
        let result = f(&mut store);
        // Stored only on a change: every stream's launch reads this line.
        let any = !store.is_empty();
        if self.any.load(Ordering::Relaxed) != any {
            self.any.store(any, Ordering::Release);
        }
        result
    }

    /// See [`FailureStore::track`].
    pub fn track(&self, buffer: BufferId) {
        self.store().track(buffer);
    }

    /// See [`FailureStore::forget`].
    pub fn forget(&self, buffer: BufferId) {
        self.update(|store| store.forget(buffer));
    }

    /// Why `buffer` holds no valid bytes, if it does not.
    pub fn check(&self, buffer: BufferId) -> Option<Arc<Error>> {
        if self.is_empty() {
            return None;
        }
        self.store().check(buffer).cloned()
    }

    /// See [`FailureStore::read_error`].
    pub fn read_error(&self, buffer: BufferId) -> Option<Error> {
        if self.is_empty() {
            return None;
        }
        self.store().read_error(buffer)
    }

    /// See [`FailureStore::settle`].
    #[inline]
    pub fn settle(&self, written: impl IntoIterator<Item = BufferId>, failure: Option<&Error>) {
        if failure.is_none() && self.is_empty() {
            return;
        }
        self.update(|store| store.settle(written, failure));
    }

    /// Claimed buffers.
    pub fn len(&self) -> usize {
        self.store().len()
    }

    /// Whether no buffer is claimed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settling_clears_on_success_and_claims_on_failure() {
        let mut store = FailureStore::default();
        store.track(BufferId(1));
        store.track(BufferId(2));
        store.settle([BufferId(1), BufferId(2)], Some(&Error::EmptyBuffer));
        assert_eq!(store.len(), 2);
        assert!(matches!(
            store.read_error(BufferId(2)),
            Some(Error::Claimed { .. })
        ));
        store.settle([BufferId(1)], None);
        assert_eq!(store.len(), 1);
        assert!(store.read_error(BufferId(1)).is_none());
        store.settle([BufferId(3)], Some(&Error::EmptyBuffer));
        assert_eq!(store.len(), 1, "an untracked buffer is not claimed");
        assert!(!store.is_empty());
        store.settle([BufferId(2)], None);
        assert!(store.is_empty());
    }

    #[test]
    fn claim_check_clear() {
        let mut store = FailureStore::default();
        let cause = Arc::new(Error::EmptyBuffer);
        store.track(BufferId(3));
        store.claim(BufferId(3), &cause);
        store.claim(BufferId(3), &Arc::new(Error::Poisoned));
        assert_eq!(
            store.check(BufferId(3)).map(|c| &**c),
            Some(&Error::EmptyBuffer)
        );
        assert!(matches!(
            store.read_error(BufferId(3)),
            Some(Error::Claimed {
                buffer: BufferId(3),
                ..
            })
        ));
        assert!(store.check(BufferId(4)).is_none());
        store.clear(BufferId(3));
        assert!(store.is_empty());
    }

    #[test]
    fn a_later_failure_replaces_a_failed_replays_claim() {
        let mut store = FailureStore::default();
        store.track(BufferId(5));
        let replay = Arc::new(Error::ReplayFailed {
            graph: crate::ids::GraphId(1),
            cause: Arc::new(Error::Poisoned),
        });
        store.claim(BufferId(5), &replay);
        store.claim(BufferId(5), &Arc::new(Error::EmptyBuffer));
        assert_eq!(
            store.check(BufferId(5)).map(|c| &**c),
            Some(&Error::EmptyBuffer),
            "the graph's retry would read bytes another failure left"
        );
        store.claim(BufferId(5), &replay);
        assert_eq!(
            store.check(BufferId(5)).map(|c| &**c),
            Some(&Error::EmptyBuffer),
            "any other claim keeps its first cause"
        );
    }

    #[test]
    fn dropped_buffers_are_never_claimed_again() {
        let mut store = FailureStore::default();
        let cause = Arc::new(Error::EmptyBuffer);
        store.track(BufferId(1));
        store.claim(BufferId(1), &cause);
        store.forget(BufferId(1));
        assert!(store.is_empty(), "the drop clears the claim");
        store.claim(BufferId(1), &cause);
        store.claim(BufferId(2), &cause);
        assert!(store.is_empty(), "nobody can read them to clear a claim");
    }

    fn refusal() -> Error {
        Error::EmptyBuffer
    }

    #[test]
    fn claims_follow_settles_and_forgets_of_tracked_buffers() {
        let claims = Claims::default();
        let (a, b, untracked) = (BufferId(1), BufferId(2), BufferId(3));
        claims.track(a);
        claims.track(b);
        assert!(claims.is_empty());
        assert_eq!(
            (claims.len(), claims.check(a), claims.read_error(a)),
            (0, None, None)
        );
        // A failure claims what it was to write, of the buffers a caller holds.
        claims.settle([a, untracked], Some(&refusal()));
        assert!(!claims.is_empty());
        assert_eq!(claims.len(), 1, "an untracked buffer is never claimed");
        assert!(claims.check(a).is_some_and(|cause| *cause == refusal()));
        assert!(matches!(
            claims.read_error(a),
            Some(Error::Claimed { buffer, .. }) if buffer == a
        ));
        assert_eq!((claims.check(b), claims.read_error(b)), (None, None));
        // A success on another buffer leaves the claim; on it, clears it.
        claims.settle([b], None);
        assert_eq!(claims.len(), 1);
        claims.settle([a], None);
        assert!(claims.is_empty());
        assert_eq!(claims.len(), 0);
        // A forgotten buffer loses its claim and is never claimed again.
        claims.settle([b], Some(&refusal()));
        assert_eq!(claims.len(), 1);
        claims.forget(b);
        assert!(claims.is_empty());
        claims.settle([b], Some(&refusal()));
        assert!(claims.is_empty(), "a forgotten buffer was claimed");
        // The flag follows the store both ways, over several changes.
        claims.settle([a], Some(&refusal()));
        assert!(!claims.is_empty());
        claims.settle([a], Some(&refusal()));
        assert!(!claims.is_empty());
        claims.forget(a);
        assert!(claims.is_empty());
    }
}
