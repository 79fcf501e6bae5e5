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

use conformance::workload::Footprint;

use crate::alloc_counter;
use crate::backends::Backend;
use crate::failure::{Failure, Result};
use crate::fixture::{AddGraph, Fixture};
use crate::raw::{RawAdd, raw_sync};
use crate::sizes::SYNC_EVERY;

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
    /// The stream's pool and the last graph, after its replay: against the
    /// fixture's two buffers.
    pub footprint: Footprint,
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

/// What one measured op is, and where the sync that bounds the queue goes.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// One call; a sync after every [`SYNC_EVERY`] calls, outside the time
    /// and the allocation count.
    PerCall,
    /// A whole sequence: this many calls and then a sync, all inside the time
    /// and the allocation count.
    Sequence(u64),
}

impl Shape {
    /// Calls in one op.
    fn calls(self) -> u64 {
        match self {
            Shape::PerCall => 1,
            Shape::Sequence(calls) => calls,
        }
    }
}

/// Run `iters` ops of `shape` on `state`, an op being one `call` or, for a
/// sequence, its calls and then `sync`; time them and count their
/// allocations, leaving out the per-call syncs.
///
/// Every measurement but [`capture`] runs this loop, so per-call and
/// sequence measurements on the core and on the raw driver leave out (or
/// take in) exactly the same things. `call` and `sync` are monomorphized
/// into the timed loop: nothing is boxed or called through a pointer there.
fn measured<S: ?Sized, E>(
    state: &mut S,
    iters: u64,
    shape: Shape,
    mut call: impl FnMut(&mut S) -> std::result::Result<(), E>,
    mut sync: impl FnMut(&mut S) -> std::result::Result<(), E>,
) -> std::result::Result<Sample, E> {
    match shape {
        Shape::PerCall => timed_chunks(state, iters, SYNC_EVERY, call, sync),
        Shape::Sequence(calls) => timed_chunks(
            state,
            iters,
            iters,
            |s| {
                for _ in 0..calls {
                    call(s)?;
                }
                sync(s)
            },
            |_| Ok(()),
        ),
    }
}

/// Run `op` `iters` times on `state`, in chunks of at most `chunk` with
/// `between` after each; only the chunks are timed and counted.
fn timed_chunks<S: ?Sized, E>(
    state: &mut S,
    iters: u64,
    chunk: u64,
    mut op: impl FnMut(&mut S) -> std::result::Result<(), E>,
    mut between: impl FnMut(&mut S) -> std::result::Result<(), E>,
) -> std::result::Result<Sample, E> {
    let mut sample = Sample {
        ops: iters,
        ..Sample::default()
    };
    let mut left = iters;
    while left > 0 {
        let chunk = left.min(chunk);
        let allocations = alloc_counter::allocations();
        let start = Instant::now();
        for _ in 0..chunk {
            op(state)?;
        }
        sample.elapsed += start.elapsed();
        sample.allocations += alloc_counter::allocations() - allocations;
        between(state)?;
        left -= chunk;
    }
    Ok(sample)
}

/// What each call of a measured loop issues.
enum Call<'a, D: Backend> {
    /// A replay of the graph through capture-core (`Client::replay`).
    CoreReplay(&'a AddGraph<D>),
    /// A raw replay of the graph's executable on its stream, all under one
    /// hold of the client's lock.
    RawReplay(&'a AddGraph<D>),
    /// An eager `add` through capture-core (`Client::run_builtin`).
    CoreLaunch,
    /// A raw launch of `add` on the fixture's buffers, all under one hold of
    /// the client's lock.
    RawLaunch(&'a RawAdd<D>),
}

impl<D: Backend> Call<'_, D> {
    /// Adds one call issues.
    fn adds(&self) -> u64 {
        match self {
            Call::CoreReplay(graph) | Call::RawReplay(graph) => graph.launches,
            Call::CoreLaunch | Call::RawLaunch(_) => 1,
        }
    }
}

/// `iters` ops of `shape` made of `call`s, then the check of `x` against
/// every add they issued.
fn measure<D: Backend>(
    fixture: &mut Fixture<D>,
    call: Call<'_, D>,
    shape: Shape,
    iters: u64,
) -> Result<Sample> {
    let adds = iters * shape.calls() * call.adds();
    let sample = match call {
        Call::CoreReplay(graph) => measured(
            &mut *fixture,
            iters,
            shape,
            |fx| fx.client.replay(&graph.graph),
            |fx| fx.client.sync(fx.stream),
        )?,
        Call::RawReplay(graph) => fixture
            .client
            .with_raw_graph(&graph.graph, |exec, stream| {
                measured(stream, iters, shape, |s| D::replay(exec, s), raw_sync::<D>)
            })??,
        Call::CoreLaunch => measured(
            &mut *fixture,
            iters,
            shape,
            |fx| fx.add(),
            |fx| fx.client.sync(fx.stream).map_err(Failure::from),
        )?,
        Call::RawLaunch(raw) => {
            let buffers = [&fixture.x, &fixture.y, &raw.info];
            fixture
                .client
                .with_raw_stream(fixture.stream, &buffers, |stream, slices| {
                    let bindings = RawAdd::<D>::bindings(slices);
                    measured(
                        stream,
                        iters,
                        shape,
                        |s| D::launch(s, raw.launch(&bindings, slices[2])),
                        raw_sync::<D>,
                    )
                })??
        }
    };
    fixture.count(adds);
    fixture.check()?;
    Ok(sample)
}

/// `iters` replays of `graph` through capture-core (`Client::replay`).
pub fn replay_core<D: Backend>(
    fixture: &mut Fixture<D>,
    graph: &AddGraph<D>,
    iters: u64,
) -> Result<Sample> {
    measure(fixture, Call::CoreReplay(graph), Shape::PerCall, iters)
}

/// `iters` raw [`GraphDriver::replay`](graph_capture::GraphDriver::replay)s
/// of `graph`'s executable on its stream, all under one hold of the client's
/// lock.
pub fn replay_raw<D: Backend>(
    fixture: &mut Fixture<D>,
    graph: &AddGraph<D>,
    iters: u64,
) -> Result<Sample> {
    measure(fixture, Call::RawReplay(graph), Shape::PerCall, iters)
}

/// `iters` eager `add` launches through capture-core (`Client::run_builtin`).
pub fn eager_core<D: Backend>(fixture: &mut Fixture<D>, iters: u64) -> Result<Sample> {
    measure(fixture, Call::CoreLaunch, Shape::PerCall, iters)
}

/// `iters` raw [`Driver::launch`](graph_capture::Driver::launch)es of `add` on the fixture's buffers, all
/// under one hold of the client's lock.
pub fn eager_raw<D: Backend>(
    fixture: &mut Fixture<D>,
    raw: &RawAdd<D>,
    iters: u64,
) -> Result<Sample> {
    measure(fixture, Call::RawLaunch(raw), Shape::PerCall, iters)
}

/// `iters` times: replay `graph` through capture-core and sync. One op is
/// one whole sequence.
pub fn sequence_replay<D: Backend>(
    fixture: &mut Fixture<D>,
    graph: &AddGraph<D>,
    iters: u64,
) -> Result<Sample> {
    measure(fixture, Call::CoreReplay(graph), Shape::Sequence(1), iters)
}

/// `iters` times: `launches` eager adds through capture-core, then sync. One
/// op is one whole sequence.
pub fn sequence_eager<D: Backend>(
    fixture: &mut Fixture<D>,
    launches: u64,
    iters: u64,
) -> Result<Sample> {
    measure(fixture, Call::CoreLaunch, Shape::Sequence(launches), iters)
}

/// [`sequence_replay`] on the raw driver: `iters` times a raw replay and a
/// raw signal and fence.
pub fn sequence_raw_replay<D: Backend>(
    fixture: &mut Fixture<D>,
    graph: &AddGraph<D>,
    iters: u64,
) -> Result<Sample> {
    measure(fixture, Call::RawReplay(graph), Shape::Sequence(1), iters)
}

/// [`sequence_eager`] on the raw driver: `iters` times `launches` raw
/// launches and a raw signal and fence.
pub fn sequence_raw_eager<D: Backend>(
    fixture: &mut Fixture<D>,
    raw: &RawAdd<D>,
    launches: u64,
    iters: u64,
) -> Result<Sample> {
    measure(
        fixture,
        Call::RawLaunch(raw),
        Shape::Sequence(launches),
        iters,
    )
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
        let live = fixture.x.len() + fixture.y.len();
        sample.footprint = Footprint::of(&fixture.client, stream, &graph, live)?;
    }
    fixture.check()?;
    Ok(sample)
}
