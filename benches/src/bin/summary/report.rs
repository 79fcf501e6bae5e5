//! One backend's measurements, at fixed counts.

use conformance::workload::Footprint;
use graph_capture::DeviceInfo;

use benches::{Backend, Fixture, RawAdd, Result, Sample, measure};
use benches::{CAPTURE_LENGTHS, SEQUENCE_LENGTHS};

/// Repetitions of the sequence measurements; times are their median.
pub const REPETITIONS: usize = 9;

/// Repetitions of the per-call measurements; times are their median, and
/// the time the core adds is judged fastest repetition to fastest.
/// Repetitions are short ([`CALLS`] calls, a fraction of a millisecond on
/// the host) and many. A long one is rarely undisturbed from end to end on a
/// shared machine, the less so for the side whose calls take longer, so that
/// the difference of the fastest would measure the disturbance; among many
/// short ones each side has undisturbed ones.
pub const PER_CALL_REPETITIONS: usize = 1600;

/// Calls per repetition of the per-call measurements.
pub const CALLS: u64 = 1024;

/// Rounds of the allocation count, each side's fewest taken: enough that an
/// allocation the driver makes every so many calls (a queue growing in
/// blocks) falls at every offset in the rounds of both sides.
pub const ALLOCATION_ROUNDS: usize = 64;

/// Calls per round of the allocation count.
pub const ALLOCATION_CALLS: u64 = 1000;

/// Launches per repetition of the replay-against-eager sequences, at least
/// two sequences each.
const SEQUENCE_LAUNCHES: u64 = 2000;

/// The sequence length also measured on the raw driver.
pub const RAW_SEQUENCE: u64 = 100;

/// Repetitions of the capture measurement, whose median is taken.
const CAPTURE_REPETITIONS: usize = 5;

/// Launches per repetition of the capture measurement, at least two
/// captures each.
const CAPTURE_LAUNCHES: u64 = 10_000;

/// One figure: median nanoseconds per op, and (for per-call figures) the
/// fewest allocations of any round of [`ALLOCATION_CALLS`] calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figure {
    /// Median of the repetitions' nanoseconds per op.
    pub ns: f64,
    /// The fastest repetition's nanoseconds per op: the one least disturbed
    /// by other work on the machine (a driver's own threads included),
    /// which is what a cost the code itself adds is judged on.
    pub fastest: f64,
    /// Fewest allocations in a round of [`ALLOCATION_CALLS`] calls.
    pub allocations: u64,
}

impl Figure {
    fn of(samples: &[Sample]) -> Self {
        Self {
            ns: median(samples.iter().map(Sample::ns_per_op).collect()),
            fastest: samples
                .iter()
                .map(Sample::ns_per_op)
                .min_by(f64::total_cmp)
                .unwrap_or(0.0),
            allocations: 0,
        }
    }

    /// Allocations per call.
    pub fn allocations_per_call(&self) -> f64 {
        self.allocations as f64 / ALLOCATION_CALLS as f64
    }
}

/// N launches replayed as a graph against issued eagerly, whole sequences
/// through their final sync.
#[derive(Debug, Clone, Copy)]
pub struct Sequence {
    /// Launches in the sequence.
    pub launches: u64,
    /// The graph's replay and sync.
    pub replay: Figure,
    /// The eager launches and sync.
    pub eager: Figure,
}

/// The cost of capturing N launches, per launch.
#[derive(Debug, Clone, Copy)]
pub struct Capture {
    /// Launches recorded.
    pub launches: u64,
    /// Median nanoseconds per recorded launch.
    pub record_ns: f64,
    /// Median nanoseconds of `instantiate`, per recorded launch.
    pub instantiate_ns: f64,
    /// The pool and the graph after the last repetition.
    pub footprint: Footprint,
}

/// Everything measured on one backend.
pub struct Report {
    /// The device measured.
    pub device: DeviceInfo,
    /// One replay of a one-launch graph, through the core.
    pub replay_core: Figure,
    /// The same, through the raw driver.
    pub replay_raw: Figure,
    /// One eager launch, through the core.
    pub eager_core: Figure,
    /// The same, through the raw driver.
    pub eager_raw: Figure,
    /// Replay against eager, per N.
    pub sequences: Vec<Sequence>,
    /// Replay against eager at N = [`RAW_SEQUENCE`] on the raw driver.
    pub raw_sequence: Sequence,
    /// Capture cost, per N.
    pub captures: Vec<Capture>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Measure backend `D`.
pub fn measure<D: Backend>(device: DeviceInfo) -> Result<Report> {
    let mut fx = Fixture::<D>::open()?;
    let fx = &mut fx;
    let raw_add = RawAdd::new(fx)?;
    let one = fx.graph(1)?;

    // Warm both sides (first replays stage, first launches fill caches).
    measure::replay_core(fx, &one, 64)?;
    measure::replay_raw(fx, &one, 64)?;
    measure::eager_core(fx, 64)?;
    measure::eager_raw(fx, &raw_add, 64)?;

    let (mut replay_core, mut replay_raw) = paired(
        fx,
        PER_CALL_REPETITIONS,
        |fx| measure::replay_core(fx, &one, CALLS),
        |fx| measure::replay_raw(fx, &one, CALLS),
    )?;
    (replay_core.allocations, replay_raw.allocations) = fewest_allocations(
        fx,
        |fx| measure::replay_core(fx, &one, ALLOCATION_CALLS),
        |fx| measure::replay_raw(fx, &one, ALLOCATION_CALLS),
    )?;
    let (mut eager_core, mut eager_raw) = paired(
        fx,
        PER_CALL_REPETITIONS,
        |fx| measure::eager_core(fx, CALLS),
        |fx| measure::eager_raw(fx, &raw_add, CALLS),
    )?;
    (eager_core.allocations, eager_raw.allocations) = fewest_allocations(
        fx,
        |fx| measure::eager_core(fx, ALLOCATION_CALLS),
        |fx| measure::eager_raw(fx, &raw_add, ALLOCATION_CALLS),
    )?;

    let mut sequences = Vec::new();
    for launches in SEQUENCE_LENGTHS.map(|n| n as u64) {
        let graph = fx.graph(launches)?;
        let iters = (SEQUENCE_LAUNCHES / launches).max(2);
        let (replay, eager) = paired(
            fx,
            REPETITIONS,
            |fx| measure::sequence_replay(fx, &graph, iters),
            |fx| measure::sequence_eager(fx, launches, iters),
        )?;
        sequences.push(Sequence {
            launches,
            replay,
            eager,
        });
    }
    let raw_sequence = {
        let launches = RAW_SEQUENCE;
        let graph = fx.graph(launches)?;
        let iters = (SEQUENCE_LAUNCHES / launches).max(2);
        let (replay, eager) = paired(
            fx,
            REPETITIONS,
            |fx| measure::sequence_raw_replay(fx, &graph, iters),
            |fx| measure::sequence_raw_eager(fx, &raw_add, launches, iters),
        )?;
        Sequence {
            launches,
            replay,
            eager,
        }
    };

    let mut captures = Vec::new();
    for launches in CAPTURE_LENGTHS.map(|n| n as u64) {
        let iters = (CAPTURE_LAUNCHES / launches).max(2);
        measure::capture(fx, launches, 1)?;
        let (mut record, mut instantiate) = (Vec::new(), Vec::new());
        let mut footprint = Footprint::default();
        for _ in 0..CAPTURE_REPETITIONS {
            let sample = measure::capture(fx, launches, iters)?;
            record.push(sample.record_ns_per_launch());
            instantiate.push(sample.instantiate_ns_per_launch());
            footprint = sample.footprint;
        }
        captures.push(Capture {
            launches,
            record_ns: median(record),
            instantiate_ns: median(instantiate),
            footprint,
        });
    }

    Ok(Report {
        device,
        replay_core,
        replay_raw,
        eager_core,
        eager_raw,
        sequences,
        raw_sequence,
        captures,
    })
}

/// Run `a` and `b` alternately on `fx`, `repetitions` times each, each
/// going first every other time: whatever a repetition leaves behind for
/// the next (a queue still draining, a cache the other side filled) falls on
/// both sides alike.
fn paired<D: Backend>(
    fx: &mut Fixture<D>,
    repetitions: usize,
    mut a: impl FnMut(&mut Fixture<D>) -> Result<Sample>,
    mut b: impl FnMut(&mut Fixture<D>) -> Result<Sample>,
) -> Result<(Figure, Figure)> {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for repetition in 0..repetitions {
        if repetition % 2 == 0 {
            first.push(a(fx)?);
            second.push(b(fx)?);
        } else {
            second.push(b(fx)?);
            first.push(a(fx)?);
        }
    }
    Ok((Figure::of(&first), Figure::of(&second)))
}

/// Run `a` and `b` alternately on `fx`, [`ALLOCATION_ROUNDS`] times each;
/// the fewest allocations each made in a round.
fn fewest_allocations<D: Backend>(
    fx: &mut Fixture<D>,
    mut a: impl FnMut(&mut Fixture<D>) -> Result<Sample>,
    mut b: impl FnMut(&mut Fixture<D>) -> Result<Sample>,
) -> Result<(u64, u64)> {
    let (mut first, mut second) = (u64::MAX, u64::MAX);
    for _ in 0..ALLOCATION_ROUNDS {
        first = first.min(a(fx)?.allocations);
        second = second.min(b(fx)?.allocations);
    }
    Ok((first, second))
}
