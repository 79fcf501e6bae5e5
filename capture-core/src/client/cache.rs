//! A keyed cache of graphs over one stream: what a framework wraps around a
//! decode step keyed by shape.
//!
//! A miss captures the step (its warmup run is this call's work), a hit
//! replays it, and a key whose recording changed (the caller's fingerprint
//! of what the step runs on differs) is captured again into the same graph,
//! updated in place where the driver can. The cache is bounded by a number
//! of graphs and, optionally, by how long a graph may sit unused; the least
//! recently used goes first, destroyed as any graph is (after its stream is
//! synced).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::capture::window::Update;
use crate::client::calls::{Client, Pass};
use crate::client::graph_handle::GraphHandle;
use crate::driver::GraphDriver;
use crate::error::Error;
use crate::ids::StreamId;

/// How [`GraphCache::run`] served a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The key's graph was replayed.
    Hit,
    /// The key had no graph: the step was captured (and ran once, as the
    /// capture's warmup).
    Miss,
    /// The key's recording changed and its graph was updated in place.
    UpdatedInPlace,
    /// The key's recording changed shape and its graph was instantiated
    /// anew behind the same handle.
    Reinstantiated,
}

/// What a cache has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Calls served by a replay.
    pub hits: u64,
    /// Calls that captured a new graph.
    pub misses: u64,
    /// Calls that updated a graph in place.
    pub updates_in_place: u64,
    /// Calls that instantiated a changed graph anew.
    pub reinstantiations: u64,
    /// Graphs evicted (by capacity or idle time).
    pub evictions: u64,
}

struct Cached<D: GraphDriver> {
    graph: GraphHandle<D>,
    fingerprint: u64,
    last_used: Instant,
    /// Orders entries by last use: the smallest goes first.
    tick: u64,
}

/// Graphs of one stream, by key.
pub struct GraphCache<K, D: GraphDriver> {
    client: Client<D>,
    stream: StreamId,
    entries: HashMap<K, Cached<D>>,
    capacity: usize,
    idle: Option<Duration>,
    tick: u64,
    stats: CacheStats,
}

impl<K: Eq + Hash + Clone, D: GraphDriver> GraphCache<K, D> {
    /// A cache of at most `capacity` graphs (at least one) on `stream`,
    /// evicting any unused for longer than `idle`.
    pub fn new(
        client: &Client<D>,
        stream: StreamId,
        capacity: usize,
        idle: Option<Duration>,
    ) -> Self {
        Self {
            client: client.clone(),
            stream,
            entries: HashMap::new(),
            capacity: capacity.max(1),
            idle,
            tick: 0,
            stats: CacheStats::default(),
        }
    }

    /// Run the step for `key`: replay its graph when its `fingerprint` (the
    /// caller's summary of what the step runs on: buffers, sizes) is the
    /// one it was captured with; otherwise capture `body` (a miss) or
    /// capture it again into the key's graph (a change).
    ///
    /// `body` must issue the same work in both of its passes, as for
    /// [`Client::capture`].
    ///
    /// # Errors
    ///
    /// As [`Client::capture`], [`Client::recapture`] and
    /// [`Client::replay`]. A failed re-capture leaves the key's old graph
    /// in place with its old fingerprint.
    pub fn run<T>(
        &mut self,
        key: K,
        fingerprint: u64,
        body: impl FnMut(Pass) -> Result<T, Error>,
    ) -> Result<Served, Error> {
        self.evict_idle();
        self.tick += 1;
        let tick = self.tick;
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.last_used = Instant::now();
            entry.tick = tick;
            if entry.fingerprint == fingerprint {
                self.client.replay(&entry.graph)?;
                self.stats.hits += 1;
                return Ok(Served::Hit);
            }
            let (how, _) = self.client.recapture(&entry.graph, body)?;
            entry.fingerprint = fingerprint;
            return Ok(match how {
                Update::InPlace => {
                    self.stats.updates_in_place += 1;
                    Served::UpdatedInPlace
                }
                Update::Reinstantiated => {
                    self.stats.reinstantiations += 1;
                    Served::Reinstantiated
                }
            });
        }
        let (graph, _) = self.client.capture(self.stream, body)?;
        self.stats.misses += 1;
        while self.entries.len() >= self.capacity {
            self.evict_oldest();
        }
        self.entries.insert(
            key,
            Cached {
                graph,
                fingerprint,
                last_used: Instant::now(),
                tick,
            },
        );
        Ok(Served::Miss)
    }

    fn evict_oldest(&mut self) {
        let oldest = self
            .entries
            .iter()
            .min_by_key(|(_, entry)| entry.tick)
            .map(|(key, _)| key.clone());
        if let Some(key) = oldest {
            self.entries.remove(&key);
            self.stats.evictions += 1;
        }
    }

    /// Drop every graph unused for longer than the idle time.
    pub fn evict_idle(&mut self) {
        let Some(idle) = self.idle else {
            return;
        };
        let before = self.entries.len();
        self.entries
            .retain(|_, entry| entry.last_used.elapsed() <= idle);
        self.stats.evictions += (before - self.entries.len()) as u64;
    }

    /// The graph cached for `key`, if any.
    pub fn graph(&self, key: &K) -> Option<&GraphHandle<D>> {
        self.entries.get(key).map(|entry| &entry.graph)
    }

    /// Graphs cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no graph is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What the cache has done so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// The stream the cache's graphs replay on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{GraphCache, Served};
    use crate::Buffer;
    use crate::client::{Client, Kernel};
    use crate::driver::Access;
    use crate::error::Error;
    use crate::ids::StreamId;
    use crate::kernels::signature::Signature;
    use crate::streams::state::Config;
    use crate::test_driver::TestDriver;

    /// A stream with `src` (sixteen 5s), `dst` (sixteen 0s) and a kernel
    /// copying its first binding into its second.
    struct Fixture {
        client: Client<TestDriver>,
        stream: StreamId,
        src: Buffer,
        dst: Buffer,
        kernel: Kernel<TestDriver>,
    }

    impl Fixture {
        fn new() -> Self {
            let client = Client::with_device(Arc::default(), Config::default());
            let stream = client.create_stream().expect("stream");
            let src = client.create(stream, &[5; 16]).expect("src");
            let dst = client.create(stream, &[0; 16]).expect("dst");
            let signature = Signature::new("copy").bindings(&[Access::Read, Access::Write]);
            Self {
                client,
                stream,
                src,
                dst,
                kernel: Kernel::new(signature),
            }
        }

        fn cache(&self, capacity: usize, idle: Option<Duration>) -> GraphCache<u32, TestDriver> {
            GraphCache::new(&self.client, self.stream, capacity, idle)
        }

        /// Run `key` with a step of `launches` copies from `src` to `dst`.
        fn run(
            &self,
            cache: &mut GraphCache<u32, TestDriver>,
            key: u32,
            fingerprint: u64,
            launches: usize,
        ) -> Served {
            let buffers = [&self.src, &self.dst];
            cache
                .run(key, fingerprint, |_| -> Result<(), Error> {
                    for _ in 0..launches {
                        self.client.launch(
                            self.stream,
                            &self.kernel,
                            [1, 1, 1],
                            &buffers,
                            &[],
                            &[],
                        )?;
                    }
                    Ok(())
                })
                .expect("run")
        }
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_used_key_not_the_first_inserted() {
        let fx = Fixture::new();
        let mut cache = fx.cache(4, None);
        let mut cached: Vec<u32> = (0..4).collect();
        for &key in &cached {
            assert_eq!(fx.run(&mut cache, key, 0, 1), Served::Miss);
        }
        // Each round the newest key is left unused while the older ones hit,
        // so it is the one a new key pushes out, whatever order the map keeps.
        for new in 4..12 {
            let victim = cached.pop().expect("a cached key");
            for &key in &cached {
                assert_eq!(fx.run(&mut cache, key, 0, 1), Served::Hit, "key {key}");
            }
            assert_eq!(fx.run(&mut cache, new, 0, 1), Served::Miss);
            assert!(cache.graph(&victim).is_none(), "{victim} was evicted");
            for key in &cached {
                assert!(cache.graph(key).is_some(), "{key} was kept");
            }
            cached.push(new);
        }
        assert_eq!(cache.stats().evictions, 8);
    }

    #[test]
    fn a_recording_with_more_launches_reinstantiates_and_is_counted() {
        let fx = Fixture::new();
        let mut cache = fx.cache(2, None);
        assert_eq!(fx.run(&mut cache, 1, 0, 1), Served::Miss);
        // The test driver updates in place only a recording of the same
        // length; a longer one is instantiated anew.
        assert_eq!(fx.run(&mut cache, 1, 1, 2), Served::Reinstantiated);
        assert_eq!(cache.stats().reinstantiations, 1);
        assert_eq!(fx.run(&mut cache, 1, 2, 3), Served::Reinstantiated);
        assert_eq!(cache.stats().reinstantiations, 2);
        assert_eq!(fx.run(&mut cache, 1, 3, 3), Served::UpdatedInPlace);
        let stats = cache.stats();
        assert_eq!((stats.updates_in_place, stats.reinstantiations), (1, 2));
        let graph = cache.graph(&1).expect("cached");
        assert_eq!(fx.client.graph_info(graph).expect("info").launches, 3);
    }

    #[test]
    fn idle_entries_are_evicted_and_recently_used_ones_kept() {
        let fx = Fixture::new();
        let mut cache = fx.cache(4, Some(Duration::from_millis(50)));
        assert_eq!(fx.run(&mut cache, 1, 0, 1), Served::Miss);
        std::thread::sleep(Duration::from_millis(80));
        // The run of key 2 first drops key 1, unused for longer than allowed.
        assert_eq!(fx.run(&mut cache, 2, 0, 1), Served::Miss);
        assert!(cache.graph(&1).is_none(), "idle key 1 was evicted");
        cache.evict_idle();
        assert!(cache.graph(&2).is_some(), "key 2, just used, was kept");
        assert_eq!(cache.stats().evictions, 1);
    }

    #[test]
    fn graph_hands_back_the_keys_graph_which_replays_its_step() {
        let fx = Fixture::new();
        let mut cache = fx.cache(2, None);
        assert!(cache.graph(&7).is_none());
        assert_eq!(fx.run(&mut cache, 7, 0, 1), Served::Miss);
        let graph = cache.graph(&7).expect("the graph captured for key 7");
        fx.client.write(&fx.dst, &[0; 16]).expect("reset");
        graph.replay().expect("replay");
        assert_eq!(fx.client.read(&fx.dst).expect("read"), vec![5; 16]);
        assert!(cache.graph(&8).is_none(), "no graph for another key");
    }

    #[test]
    fn hits_and_misses_are_counted() {
        let fx = Fixture::new();
        let mut cache = fx.cache(4, None);
        for key in [1, 2, 1, 1, 2, 3] {
            fx.run(&mut cache, key, 0, 1);
        }
        let stats = cache.stats();
        assert_eq!((stats.misses, stats.hits), (3, 3));
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn a_cache_is_empty_until_it_holds_a_graph() {
        let fx = Fixture::new();
        let mut cache = fx.cache(2, None);
        assert!(cache.is_empty());
        fx.run(&mut cache, 1, 0, 1);
        assert!(!cache.is_empty());
        assert_eq!(cache.len(), 1);
    }
}
