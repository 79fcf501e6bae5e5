//! The measured loops, each run for a given number of iterations and each
//! ending with a check of `x` (see [`Fixture::check`]).
//!
//! The criterion benches hand these their iteration counts (`iter_custom`);
//! the summary runs them for fixed counts.
//!
//! Per-call measurements ([`replay_core`], [`replay_raw`], [`eager_core`],
//! [`eager_raw`]) sync every [`SYNC_EVERY`] calls so the queue stays bounded,
//! and leave the sync out of both the time and the allocation count: what is
//! measured is the host's cost of issuing work, on both sides alike.
//!
//! Sequence measurements ([`sequence_replay`], [`sequence_eager`] and their
//! raw counterparts) time a whole sequence up to and including its final
//! sync, so that a replay and the eager launches it stands for are compared
//! on the same work done, not on how soon each call returns.

use std::time::{Duration, Instant};

use crate::backends::Backend;
use crate::failure::{Failure, Result};
use crate::fixture::{AddGraph, Fixture};
use crate::raw::{RawAdd, raw_sync};
use crate::{SYNC_EVERY, alloc_counter};

/// What one measured loop took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// Time spent in the measured calls.
    pub elapsed: Duration,
    /// Heap allocations the calling thread made in them (zero unless the
    /// binary installs [`alloc_counter::CountingAlloc`]).
    pub allocations: u64,
    /// Calls (or sequences) measured.
    pub ops: u64,
}

impl Sample {
    /// Nanoseconds per call (or sequence).
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.ops.max(1) as f64
    }

    /// Heap allocations per call (or sequence).
    pub fn allocations_per_op(&self) -> f64 {
        self.allocations as f64 / self.ops.max(1) as f64
    }
}

/// What capturing took, split into its recorded launches and the
/// instantiation that closes the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaptureSample {
    /// Time spent issuing the recorded launches.
    pub record: Duration,
    /// Time spent in `instantiate`.
    pub instantiate: Duration,
    /// Graphs captured.
    pub captures: u64,
    /// Launches recorded into each.
    pub launches: u64,
}

impl CaptureSample {
    fn per_launch(&self, time: Duration) -> f64 {
        time.as_nanos() as f64 / (self.captures * self.launches).max(1) as f64
    }

    /// Nanoseconds per recorded launch.
    pub fn record_ns_per_launch(&self) -> f64 {
        self.per_launch(self.record)
    }

    /// Nanoseconds of `instantiate`, per recorded launch.
    pub fn instantiate_ns_per_launch(&self) -> f64 {
        self.per_launch(self.instantiate)
    }
}

/// Run `op` `iters` times on `state`, in chunks of [`SYNC_EVERY`] with `sync`
/// after each; only the chunks are timed and counted.
fn chunked<S: ?Sized, E>(
    state: &mut S,
    iters: u64,
    mut op: impl FnMut(&mut S) -> std::result::Result<(), E>,
    mut sync: impl FnMut(&mut S) -> std::result::Result<(), E>,
) -> std::result::Result<Sample, E> {
    let mut sample = Sample {
        ops: iters,
        ..Sample::default()
    };
    let mut left = iters;
    while left > 0 {
        let chunk = left.min(SYNC_EVERY);
        let allocations = alloc_counter::allocations();
        let start = Instant::now();
        for _ in 0..chunk {
            op(state)?;
        }
        sample.elapsed += start.elapsed();
        sample.allocations += alloc_counter::allocations() - allocations;
        sync(state)?;
        left -= chunk;
    }
    Ok(sample)
}

/// `iters` replays of `graph` through capture-core (`Client::replay`).
pub fn replay_core<D: Backend>(
    fixture: &mut Fixture<D>,
    graph: &AddGraph<D>,
    iters: u64,
) -> Result<Sample> {
    let sample = chunked(
        &mut *fixture,
        iters,
        |fx| fx.client.replay(&graph.graph),
        |fx| fx.client.sync(fx.stream),
    )?;
    fixture.count(iters * graph.launches);
    fixture.check()?;
    Ok(sample)
}

/// `iters` raw [`GraphDriver::replay`](capture_core::GraphDriver::replay)s
/// of `graph`'s executable on its stream, all under one hold of the client's
/// lock.
pub fn replay_raw<D: Backend>(
    fixture: &mut Fixture<D>,
    graph: &AddGraph<D>,
    iters: u64,
) -> Result<Sample> {
    let sample = fixture
        .client
        .with_raw_graph(&graph.graph, |exec, stream| {
            chunked(stream, iters, |s| D::replay(exec, s), raw_sync::<D>)
        })??;
    fixture.count(iters * graph.launches);
    fixture.check()?;
    Ok(sample)
}

/// `iters` eager `add` launches through capture-core (`Client::run_builtin`).
pub fn eager_core<D: Backend>(fixture: &mut Fixture<D>, iters: u64) -> Result<Sample> {
    let sample = chunked(
        &mut *fixture,
        iters,
        |fx| fx.add(),
        |fx| fx.client.sync(fx.stream).map_err(Failure::from),
    )?;
    fixture.count(iters);
    fixture.check()?;
    Ok(sample)
}

/// `iters` raw [`Driver::launch`](capture_core::Driver::launch)es of `add` on the fixture's buffers, all
/// under one hold of the client's lock.
pub fn eager_raw<D: Backend>(
    fixture: &mut Fixture<D>,
    raw: &RawAdd<D>,
    iters: u64,
) -> Result<Sample> {
    let buffers = [&fixture.x, &fixture.y, &raw.info];
    let sample =
        fixture
            .client
            .with_raw_stream(fixture.stream, &buffers, |stream, slices| {
                let bindings = RawAdd::<D>::bindings(slices);
                chunked(
                    stream,
                    iters,
                    |s| D::launch(s, raw.launch(&bindings, slices[2])),
                    raw_sync::<D>,
                )
            })??;
    fixture.count(iters);
    fixture.check()?;
    Ok(sample)
}

/// `iters` times: replay `graph` through capture-core and sync. One op is
/// one whole sequence.
pub fn sequence_replay<D: Backend>(
    fixture: &mut Fixture<D>,
    graph: &AddGraph<D>,
    iters: u64,
) -> Result<Sample> {
    let sample = timed(iters, || {
        fixture.client.replay(&graph.graph)?;
        fixture.client.sync(fixture.stream)
    })?;
    fixture.count(iters * graph.launches);
    fixture.check()?;
    Ok(sample)
}

/// `iters` times: `launches` eager adds through capture-core, then sync. One
/// op is one whole sequence.
pub fn sequence_eager<D: Backend>(
    fixture: &mut Fixture<D>,
    launches: u64,
    iters: u64,
) -> Result<Sample> {
    let sample = timed(iters, || {
        for _ in 0..launches {
            fixture.add()?;
        }
        fixture.client.sync(fixture.stream).map_err(Failure::from)
    })?;
    fixture.count(iters * launches);
    fixture.check()?;
    Ok(sample)
}

/// [`sequence_replay`] on the raw driver: `iters` times a raw replay and a
/// raw signal and fence.
pub fn sequence_raw_replay<D: Backend>(
    fixture: &mut Fixture<D>,
    graph: &AddGraph<D>,
    iters: u64,
) -> Result<Sample> {
    let sample = fixture
        .client
        .with_raw_graph(&graph.graph, |exec, stream| {
            timed(iters, || {
                D::replay(exec, stream)?;
                raw_sync::<D>(stream)
            })
        })??;
    fixture.count(iters * graph.launches);
    fixture.check()?;
    Ok(sample)
}

/// [`sequence_eager`] on the raw driver: `iters` times `launches` raw
/// launches and a raw signal and fence.
pub fn sequence_raw_eager<D: Backend>(
    fixture: &mut Fixture<D>,
    raw: &RawAdd<D>,
    launches: u64,
    iters: u64,
) -> Result<Sample> {
    let buffers = [&fixture.x, &fixture.y, &raw.info];
    let sample =
        fixture
            .client
            .with_raw_stream(fixture.stream, &buffers, |stream, slices| {
                let bindings = RawAdd::<D>::bindings(slices);
                timed(iters, || {
                    for _ in 0..launches {
                        D::launch(stream, raw.launch(&bindings, slices[2]))?;
                    }
                    raw_sync::<D>(stream)
                })
            })??;
    fixture.count(iters * launches);
    fixture.check()?;
    Ok(sample)
}

/// Run `op` `iters` times, timing and counting the whole loop.
fn timed<E>(
    iters: u64,
    mut op: impl FnMut() -> std::result::Result<(), E>,
) -> std::result::Result<Sample, E> {
    let allocations = alloc_counter::allocations();
    let start = Instant::now();
    for _ in 0..iters {
        op()?;
    }
    Ok(Sample {
        elapsed: start.elapsed(),
        allocations: alloc_counter::allocations() - allocations,
        ops: iters,
    })
}

/// Capture `iters` graphs of `launches` adds each, in three steps: prepare,
/// a warmup run of the same launches (for real), begin, the recorded
/// launches, instantiate. Only the recorded launches and the instantiation
/// are timed, each on its own. The last graph is replayed once and checked.
pub fn capture<D: Backend>(
    fixture: &mut Fixture<D>,
    launches: u64,
    iters: u64,
) -> Result<CaptureSample> {
    let mut sample = CaptureSample {
        captures: iters,
        launches,
        ..CaptureSample::default()
    };
    // A clone shares the device; it lets `fixture` count adds meanwhile.
    let (client, stream) = (fixture.client.clone(), fixture.stream);
    let mut last = None;
    for _ in 0..iters {
        // Destroying the previous graph syncs the stream: not measured.
        drop(last.take());
        let window = client.prepare(stream)?;
        let warmup = (0..launches).try_for_each(|_| fixture.add());
        fixture.count(launches);
        if let Err(err) = warmup {
            // Closing the window is all that is left to do; the warmup's
            // error says what went wrong.
            let _closed = client.instantiate(stream, window);
            return Err(err);
        }
        client.begin(stream, window)?;
        let start = Instant::now();
        let recorded = (0..launches).try_for_each(|_| fixture.add());
        let recorded_at = Instant::now();
        let graph = client.instantiate(stream, window);
        sample.instantiate += recorded_at.elapsed();
        sample.record += recorded_at - start;
        recorded?;
        last = Some(graph?);
    }
    if let Some(graph) = last {
        fixture.client.replay(&graph)?;
        fixture.count(launches);
    }
    fixture.check()?;
    Ok(sample)
}
