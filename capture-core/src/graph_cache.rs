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

use crate::client::{Client, GraphHandle, Pass};
use crate::driver::GraphDriver;
use crate::error::Error;
use crate::ids::StreamId;
use crate::window::Update;

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
