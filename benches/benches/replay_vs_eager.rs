//! A graph of N `add` launches replayed against the same N launches issued
//! eagerly through capture-core, N in 1, 10, 100, 1000.
//!
//! Each iteration is one whole sequence up to and including a sync of the
//! stream: a replay returns as soon as its work is enqueued, so timing only
//! the enqueue would compare one call against N; with the sync both sides
//! are timed for the same work done.

mod common;

use std::process::ExitCode;

use benches::{Backend, Fixture, SEQUENCE_LENGTHS, measure};
use criterion::{BenchmarkId, Criterion};

struct ReplayVsEager;

impl common::Bench for ReplayVsEager {
    fn bench<D: Backend>(c: &mut Criterion) {
        let mut fx = Fixture::<D>::open().expect("open the device");
        let mut group = c.benchmark_group(format!("replay_vs_eager/{}", D::NAME));
        for launches in SEQUENCE_LENGTHS.map(|n| n as u64) {
            let graph = fx.graph(launches).expect("capture the adds");
            group.bench_with_input(BenchmarkId::new("replay", launches), &graph, |b, graph| {
                b.iter_custom(|iters| {
                    measure::sequence_replay(&mut fx, graph, iters)
                        .expect("replay and sync")
                        .elapsed
                });
            });
            group.bench_with_input(BenchmarkId::new("eager", launches), &launches, |b, &n| {
                b.iter_custom(|iters| {
                    measure::sequence_eager(&mut fx, n, iters)
                        .expect("launch and sync")
                        .elapsed
                });
            });
        }
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<ReplayVsEager>()
}
