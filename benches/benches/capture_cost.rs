//! The cost of recording N `add` launches into a graph, N in 10, 100, 1000,
//! 10,000, reported per launch (`Throughput::Elements(N)`) so that growth
//! with N shows.
//!
//! Each iteration is a three-step capture: prepare, a warmup run of the N
//! launches, begin, the N recorded launches, instantiate. Only the recorded
//! launches are timed; instantiation and the rest are not.

mod common;

use std::process::ExitCode;

use benches::{Backend, CAPTURE_LENGTHS, Fixture, measure};
use criterion::{BenchmarkId, Criterion, Throughput};

struct CaptureCost;

impl common::Bench for CaptureCost {
    fn bench<D: Backend>(c: &mut Criterion) {
        let mut fx = Fixture::<D>::open().expect("open the device");
        let mut group = c.benchmark_group(format!("capture_cost/{}", D::NAME));
        for launches in CAPTURE_LENGTHS.map(|n| n as u64) {
            group.throughput(Throughput::Elements(launches));
            group.bench_with_input(BenchmarkId::new("record", launches), &launches, |b, &n| {
                b.iter_custom(|iters| {
                    measure::capture(&mut fx, n, iters)
                        .expect("capture the adds")
                        .record
                });
            });
        }
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<CaptureCost>()
}
