//! One captured step per batch size, held in a graph cache and picked per
//! step by the number of live sequences, as a server does: the set and the
//! memory it holds, the graphs sharing their temporaries.

use std::time::{Duration, Instant};

use graph_capture::{Client, Error, GraphCache};

use super::device::{Transformer, starts};
use crate::workload::UserKernels;

/// Most the graph set may hold beyond the model's buffers, against the
/// largest graph's temporaries.
pub const SET_TARGET: f64 = 1.3;

/// The smallest of `batches` (sorted) holding `live` sequences; the
/// largest when none does.
pub fn bucket(batches: &[u32], live: u32) -> u32 {
    batches
        .iter()
        .copied()
        .find(|&b| b >= live)
        .unwrap_or(batches[batches.len() - 1])
}

/// What the graph set holds in the stream's device pool.
#[derive(Debug, Clone, PartialEq)]
pub struct SetMemory {
    /// Bytes in use before the first capture: the model's buffers and the
    /// launches' info.
    pub before: u64,
    /// Bytes in use once every graph is captured, more than `before` by
    /// what the set holds.
    pub after: u64,
    /// Each graph's temporaries, by batch size, smallest first.
    pub temporaries: Vec<(u32, u64)>,
    /// The arena they share.
    pub arena: u64,
}

impl SetMemory {
    /// Bytes the set holds beyond what the model holds.
    pub fn held(&self) -> u64 {
        self.after.saturating_sub(self.before)
    }

    /// The largest graph's temporaries.
    pub fn largest(&self) -> u64 {
        self.temporaries.iter().map(|t| t.1).max().unwrap_or(0)
    }

    /// What the graphs' temporaries would hold, each its own.
    pub fn sum(&self) -> u64 {
        self.temporaries.iter().map(|t| t.1).sum()
    }

    /// What the set holds against the largest graph's temporaries.
    pub fn ratio(&self) -> f64 {
        self.held() as f64 / self.largest().max(1) as f64
    }

    /// Whether the set holds at most [`SET_TARGET`] times the largest
    /// graph's temporaries.
    pub fn holds(&self) -> bool {
        self.ratio() <= SET_TARGET
    }

    /// One line for a person.
    pub fn describe(&self) -> String {
        let kib = |bytes: u64| bytes as f64 / 1024.0;
        format!(
            "the {} graphs hold {:.1} KiB beyond the model's buffers ({:.1} KiB of them the \
             arena their temporaries share); their temporaries, each its own, would be {:.1} \
             KiB; the largest's are {:.1} KiB: {:.2}x of it (target ≤ {SET_TARGET}x)",
            self.temporaries.len(),
            kib(self.held()),
            kib(self.arena),
            kib(self.sum()),
            kib(self.largest()),
            self.ratio()
        )
    }
}

/// The graph set of one model, keyed by batch size.
pub struct GraphSet<'m, D: UserKernels> {
    model: &'m Transformer<D>,
    cache: GraphCache<u32, D>,
    batches: Vec<u32>,
    /// How long capturing each batch size's step took, by batch size.
    pub captures: Vec<(u32, Duration)>,
    /// What the set holds.
    pub memory: SetMemory,
}

impl<'m, D: UserKernels> GraphSet<'m, D> {
    /// Capture a step of each of `batches` (sorted) for `model`, the
    /// largest first so the others' temporaries fit in the arena its own
    /// made. Each capture's warmup runs a step, from fresh sequences.
    pub fn capture(
        client: &Client<D>,
        model: &'m Transformer<D>,
        batches: &[u32],
    ) -> Result<Self, Error> {
        let stream = model.stream();
        let config = model.config();
        client.sync(stream)?;
        let before = client.usage(stream)?.device.in_use_bytes;
        let mut cache = GraphCache::new(client, stream, batches.len(), None);
        let mut captures = Vec::new();
        for &batch in batches.iter().rev() {
            model.reset(&starts(batch, &config))?;
            let started = Instant::now();
            cache.run(batch, u64::from(batch), |_| model.step(batch))?;
            client.sync(stream)?;
            captures.push((batch, started.elapsed()));
        }
        captures.reverse();
        let usage = client.usage(stream)?;
        let mut temporaries = Vec::new();
        for &batch in batches {
            let graph = cache
                .graph(&batch)
                .ok_or_else(|| Error::BadLaunch(format!("no graph for batch {batch}")))?;
            temporaries.push((batch, client.graph_info(graph)?.temporary_bytes));
        }
        let memory = SetMemory {
            before,
            after: usage.device.in_use_bytes,
            temporaries,
            arena: usage.temporary_arena_bytes,
        };
        Ok(Self {
            model,
            cache,
            batches: batches.to_vec(),
            captures,
            memory,
        })
    }

    /// One step for `live` sequences: the smallest graph that holds them
    /// replayed. Which batch size it was.
    pub fn step(&mut self, live: u32) -> Result<u32, Error> {
        let key = bucket(&self.batches, live);
        let model = self.model;
        self.cache.run(key, u64::from(key), |_| model.step(key))?;
        Ok(key)
    }
}
