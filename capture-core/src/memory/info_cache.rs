//! Launch info bytes, cached on the device by content.
//!
//! A decode step repeats a few element counts and scalars, so each content
//! is copied to the device once and reused. While a window is open every
//! entry it uses is pinned; `capture_commit` seals the pins under the new
//! graph, and an entry goes once no live graph pins it. An entry first made
//! while recording is written only when the graph replays, so it leaves the
//! cache when the window closes and no eager launch ever reads it first.
//! One made inside a conditional's body is written by a copy the replay
//! skips with the body, so it leaves the cache when that body is recorded:
//! nothing after the body may rely on it.

use smallvec::SmallVec;

use crate::hashing::FastMap;
use crate::ids::GraphId;
use crate::memory::pool::{Place, SliceHandle};
use crate::phase::Phase;

struct Entry {
    slice: SliceHandle,
    /// Live graphs whose recordings point at this entry.
    graphs: SmallVec<[GraphId; 2]>,
    /// Used by the window now open.
    window: bool,
    /// Made while recording: valid only inside that recording.
    recorded: bool,
    /// How many conditionals were open around the copy that wrote it: an
    /// entry made inside a body is valid only until that body is recorded.
    depth: usize,
}

/// The info cache of one stream.
pub struct InfoCache {
    entries: FastMap<Box<[u8]>, Entry>,
    capacity: usize,
    /// The entry an eager launch found last: most launches pass the same
    /// info as the one before, so the next compares bytes before it hashes.
    /// Forgotten whenever an entry leaves the cache.
    last: Option<Last>,
    /// Entries made inside bodies recorded since: out of reach, kept until
    /// the window closes as the other recorded ones are.
    from_bodies: Vec<SliceHandle>,
}

/// Longest info the last-used memo keeps.
const LAST_BYTES: usize = 32;

/// The last entry an eager launch used: its bytes and where they lie.
struct Last {
    len: usize,
    bytes: [u8; LAST_BYTES],
    place: Place,
}

impl Last {
    /// Whether `bytes` are the bytes kept, compared a word at a time: a
    /// launch's info is a few words, where a call to `memcmp` costs more
    /// than the comparison.
    #[inline]
    fn holds(&self, bytes: &[u8]) -> bool {
        let Some(kept) = self.bytes.get(..self.len) else {
            return false;
        };
        if bytes.len() != kept.len() {
            return false;
        }
        let (words, rest) = bytes.as_chunks::<8>();
        let (kept_words, kept_rest) = kept.as_chunks::<8>();
        words
            .iter()
            .zip(kept_words)
            .all(|(a, b)| u64::from_ne_bytes(*a) == u64::from_ne_bytes(*b))
            && rest.iter().zip(kept_rest).all(|(a, b)| a == b)
    }
}

impl InfoCache {
    /// A cache that evicts unpinned entries beyond `capacity`.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: FastMap::default(),
            capacity: capacity.max(1),
            last: None,
            from_bodies: Vec::new(),
        }
    }

    /// Where the device slice holding `bytes` lies, if cached, for an eager
    /// launch (outside any window: nothing is pinned).
    #[inline]
    pub fn eager_place(&mut self, bytes: &[u8]) -> Option<Place> {
        if let Some(last) = &self.last
            && last.holds(bytes)
        {
            return Some(last.place);
        }
        let place = self.entries.get(bytes)?.slice.place();
        if bytes.len() <= LAST_BYTES {
            let mut kept = [0; LAST_BYTES];
            kept[..bytes.len()].copy_from_slice(bytes);
            self.last = Some(Last {
                len: bytes.len(),
                bytes: kept,
                place,
            });
        }
        Some(place)
    }

    /// The device slice holding `bytes`, if cached; pins it for an open window.
    #[inline]
    pub fn get(&mut self, bytes: &[u8], phase: Phase) -> Option<&SliceHandle> {
        let entry = self.entries.get_mut(bytes)?;
        entry.window |= phase != Phase::None;
        Some(&entry.slice)
    }

    /// Cache `slice` as holding `bytes`, written by a copy `depth`
    /// conditionals deep. Returns the slices evicted to make room; they go
    /// to the drop queue, since launches may still read them.
    pub fn insert(
        &mut self,
        bytes: &[u8],
        slice: SliceHandle,
        phase: Phase,
        depth: usize,
    ) -> Vec<SliceHandle> {
        let mut evicted = Vec::new();
        if phase == Phase::None && self.entries.len() >= self.capacity {
            self.last = None;
            self.entries.retain(|_, entry| {
                let keep = !entry.graphs.is_empty() || entry.window;
                if !keep {
                    evicted.push(entry.slice.clone());
                }
                keep
            });
        }
        self.entries.insert(
            bytes.into(),
            Entry {
                slice,
                graphs: SmallVec::new(),
                window: phase != Phase::None,
                recorded: matches!(phase, Phase::Recording(_)),
                depth,
            },
        );
        evicted
    }

    /// The body recorded `depth` conditionals deep is done: a replay may
    /// skip the copies that wrote the entries made inside it, so no later
    /// launch may find them.
    pub fn body_closed(&mut self, depth: usize) {
        if depth == 0 {
            return;
        }
        let from_bodies = &mut self.from_bodies;
        self.entries.retain(|_, entry| {
            let inside = entry.depth >= depth;
            if inside {
                from_bodies.push(entry.slice.clone());
            }
            !inside
        });
    }

    /// The window became graph `id`: its pins become that graph's. Returns
    /// the entries made while recording, which leave the cache; the graph
    /// keeps their slices.
    pub fn capture_commit(&mut self, id: GraphId) -> Vec<SliceHandle> {
        let recorded = self.close_window();
        for entry in self.entries.values_mut() {
            if std::mem::take(&mut entry.window) {
                entry.graphs.push(id);
            }
        }
        recorded
    }

    /// The window yielded no graph: drop its pins, keeping the entries made
    /// outside the recording as ordinary cached values. Returns the entries
    /// made while recording, whose bytes were never written.
    pub fn capture_discard(&mut self) -> Vec<SliceHandle> {
        let recorded = self.close_window();
        for entry in self.entries.values_mut() {
            entry.window = false;
        }
        recorded
    }

    fn close_window(&mut self) -> Vec<SliceHandle> {
        // The last-used memo stays: only eager launches fill it, and they
        // never use an entry made while recording.
        let mut recorded = std::mem::take(&mut self.from_bodies);
        self.entries.retain(|_, entry| {
            if entry.recorded {
                recorded.push(entry.slice.clone());
            }
            !entry.recorded
        });
        recorded
    }

    /// Graph `id` is gone: free every entry it pinned that no other live
    /// graph pins. Returns their slices for the drop queue.
    pub fn graph_release(&mut self, id: GraphId) -> Vec<SliceHandle> {
        let mut freed = Vec::new();
        self.last = None;
        self.entries.retain(|_, entry| {
            let Some(at) = entry.graphs.iter().position(|g| *g == id) else {
                return true;
            };
            entry.graphs.swap_remove(at);
            let keep = !entry.graphs.is_empty() || entry.window;
            if !keep {
                freed.push(entry.slice.clone());
            }
            keep
        });
        freed
    }

    /// Drop every entry (the stream is going away).
    pub fn clear(&mut self) {
        self.last = None;
        self.entries.clear();
    }

    /// Entries cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Distinct info contents the open window has used so far.
    pub fn window_entries(&self) -> usize {
        self.entries.values().filter(|entry| entry.window).count()
    }

    /// Graphs pinning the entry for `bytes` (0 when uncached).
    #[cfg(test)]
    pub fn pins(&self, bytes: &[u8]) -> usize {
        self.entries
            .get(bytes)
            .map_or(0, |entry| entry.graphs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BufferId, WindowId};
    use crate::memory::pool::Pool;

    const OUT: Phase = Phase::None;
    const WARMUP: Phase = Phase::Prepared(WindowId(1));
    const RECORDING: Phase = Phase::Recording(WindowId(1));

    fn slice(pool: &mut Pool<()>, id: u64) -> SliceHandle {
        pool.reserve(BufferId(id), 16, true, OUT, |_| Ok(()))
            .ok()
            .flatten()
            .expect("grows")
    }

    #[test]
    fn content_is_the_key() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(8);
        let s = slice(&mut pool, 1);
        assert!(cache.insert(b"abc", s.clone(), OUT, 0).is_empty());
        assert!(cache.get(b"abc", OUT).is_some_and(|got| got.same(&s)));
        assert!(cache.get(b"abd", OUT).is_none());
        assert_eq!(cache.pins(b"abc"), 0, "no window, no pin");
        assert!(cache.capture_commit(GraphId(1)).is_empty());
        assert_eq!(cache.pins(b"abc"), 0, "used outside the window");
    }

    #[test]
    fn shared_entries_live_until_the_last_graph_goes() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(8);
        cache.insert(b"n=4", slice(&mut pool, 1), WARMUP, 0);
        assert!(cache.capture_commit(GraphId(1)).is_empty());
        assert!(cache.get(b"n=4", WARMUP).is_some());
        assert!(cache.capture_commit(GraphId(2)).is_empty());
        assert_eq!(cache.pins(b"n=4"), 2);

        assert!(
            cache.graph_release(GraphId(1)).is_empty(),
            "graph 2 still pins it"
        );
        assert!(cache.get(b"n=4", OUT).is_some());
        assert_eq!(cache.graph_release(GraphId(2)).len(), 1);
        assert!(cache.get(b"n=4", OUT).is_none());
        assert!(
            cache.graph_release(GraphId(2)).is_empty(),
            "a double release is a no-op"
        );
    }

    #[test]
    fn the_memo_matches_only_the_very_bytes_it_keeps() {
        // Two words and three bytes: both halves of the comparison count.
        let kept: Vec<u8> = (1..=19).collect();
        let mut bytes = [0; LAST_BYTES];
        bytes[..kept.len()].copy_from_slice(&kept);
        let place = Place {
            slot: 0,
            offset: 0,
            len: 19,
        };
        let last = Last {
            len: kept.len(),
            bytes,
            place,
        };
        assert!(last.holds(&kept));
        for i in 0..kept.len() {
            let mut other = kept.clone();
            other[i] ^= 0x80;
            assert!(!last.holds(&other), "byte {i} differs");
        }
        assert!(!last.holds(&kept[..18]), "a prefix");
        assert!(!last.holds(&kept[..16]), "the words alone");
        let mut longer = kept.clone();
        longer.push(0);
        assert!(
            !last.holds(&longer),
            "one byte more, of the zeros kept after"
        );
        assert!(!last.holds(&[]));
        let none = Last {
            len: 0,
            bytes: [0; LAST_BYTES],
            place,
        };
        assert!(none.holds(&[]));
        assert!(!none.holds(&[0]));
    }

    #[test]
    fn the_last_used_entry_is_found_without_hashing_and_forgotten_when_it_goes() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(1);
        let a = slice(&mut pool, 1);
        cache.insert(b"n=1", a.clone(), OUT, 0);
        assert_eq!(cache.eager_place(b"n=1"), Some(a.place()));
        assert_eq!(cache.eager_place(b"n=1"), Some(a.place()), "from the memo");
        assert_eq!(cache.eager_place(b"n=2"), None);
        // Evicting the remembered entry forgets it too.
        let b = slice(&mut pool, 2);
        assert_eq!(cache.insert(b"n=2", b.clone(), OUT, 0).len(), 1);
        assert_eq!(cache.eager_place(b"n=1"), None, "evicted");
        assert_eq!(cache.eager_place(b"n=2"), Some(b.place()));
        // So does a graph's release, and a clear.
        cache.insert(b"n=3", slice(&mut pool, 3), WARMUP, 0);
        assert!(cache.capture_commit(GraphId(1)).is_empty());
        assert!(cache.eager_place(b"n=3").is_some());
        assert_eq!(cache.graph_release(GraphId(1)).len(), 1);
        assert_eq!(cache.eager_place(b"n=3"), None, "released");
        cache.clear();
        assert_eq!(cache.eager_place(b"n=2"), None, "cleared");
        // Info longer than the memo holds is still found, by hash.
        let long = [7u8; 40];
        let c = slice(&mut pool, 4);
        cache.insert(&long, c.clone(), OUT, 0);
        assert_eq!(cache.eager_place(&long), Some(c.place()));
        assert_eq!(cache.eager_place(&long[..39]), None);
    }

    #[test]
    fn a_window_closing_keeps_the_eager_entries_found() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(8);
        cache.insert(b"recorded", slice(&mut pool, 1), RECORDING, 0);
        cache.insert(b"eager", slice(&mut pool, 2), OUT, 0);
        assert!(cache.eager_place(b"eager").is_some());
        assert_eq!(cache.capture_commit(GraphId(1)).len(), 1);
        assert!(cache.eager_place(b"recorded").is_none());
        assert!(cache.eager_place(b"eager").is_some());
    }

    #[test]
    fn an_entry_made_in_a_body_is_out_of_reach_once_the_body_is_recorded() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(8);
        cache.insert(b"outside", slice(&mut pool, 1), RECORDING, 0);
        cache.insert(b"outer body", slice(&mut pool, 2), RECORDING, 1);
        cache.insert(b"inner body", slice(&mut pool, 3), RECORDING, 2);
        cache.body_closed(0);
        assert_eq!(cache.len(), 3, "no body closes at depth 0");
        cache.body_closed(2);
        assert!(cache.get(b"inner body", RECORDING).is_none());
        assert!(
            cache.get(b"outer body", RECORDING).is_some(),
            "its body is still recorded"
        );
        cache.body_closed(1);
        assert!(cache.get(b"outer body", RECORDING).is_none());
        assert!(cache.get(b"outside", RECORDING).is_some());
        assert_eq!(
            cache.capture_discard().len(),
            3,
            "the bodies' entries were never written either"
        );
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn releasing_another_graph_keeps_the_pin() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(8);
        cache.insert(b"n=4", slice(&mut pool, 1), WARMUP, 0);
        assert!(cache.capture_commit(GraphId(1)).is_empty());
        assert!(cache.graph_release(GraphId(2)).is_empty());
        assert_eq!(cache.pins(b"n=4"), 1, "graph 1 still pins it");
        cache.clear();
        assert_eq!(cache.len(), 0);
        assert!(cache.get(b"n=4", OUT).is_none());
    }

    #[test]
    fn a_discarded_window_leaves_ordinary_entries() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(8);
        cache.insert(b"x", slice(&mut pool, 1), WARMUP, 0);
        assert!(cache.capture_discard().is_empty());
        assert_eq!(cache.pins(b"x"), 0);
        assert!(cache.get(b"x", OUT).is_some());
    }

    #[test]
    fn entries_made_while_recording_never_serve_eager_launches() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(8);
        cache.insert(b"recorded", slice(&mut pool, 1), RECORDING, 0);
        assert!(
            cache.get(b"recorded", RECORDING).is_some(),
            "the recording reuses it"
        );
        assert_eq!(cache.capture_commit(GraphId(1)).len(), 1);
        assert!(
            cache.get(b"recorded", OUT).is_none(),
            "eager launches make their own"
        );

        cache.insert(b"refused", slice(&mut pool, 2), RECORDING, 0);
        assert_eq!(cache.capture_discard().len(), 1);
        assert!(
            cache.get(b"refused", OUT).is_none(),
            "its bytes were never written"
        );
    }

    #[test]
    fn eviction_spares_pinned_entries() {
        let mut pool = Pool::new(4096);
        let mut cache = InfoCache::new(2);
        cache.insert(b"pinned", slice(&mut pool, 1), WARMUP, 0);
        assert!(cache.capture_commit(GraphId(7)).is_empty());
        let a = slice(&mut pool, 2);
        cache.insert(b"a", a.clone(), OUT, 0);
        let evicted = cache.insert(b"b", slice(&mut pool, 3), OUT, 0);
        assert_eq!(evicted.len(), 1);
        assert!(evicted[0].same(&a), "the unpinned entry goes, for a fence");
        assert!(cache.get(b"pinned", OUT).is_some());
        assert!(cache.get(b"b", OUT).is_some());
        // Inside a window nothing is evicted: the window may use it all.
        let kept = cache.insert(b"c", slice(&mut pool, 4), WARMUP, 0);
        assert!(kept.is_empty());
        assert_eq!(cache.len(), 3);
    }
}
