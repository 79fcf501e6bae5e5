//! One replay through capture-core (`Client::replay`) against the raw
//! `GraphDriver::replay` of the same executable on the same stream, the raw
//! side under a single hold of the client's lock: the abstraction's own
//! cost. The stream is synced every `SYNC_EVERY` replays, outside the timing.

mod common;

use std::process::ExitCode;

use benches::{Backend, Fixture, measure};
use criterion::Criterion;

struct ReplayCoreVsRaw;

impl common::Bench for ReplayCoreVsRaw {
    fn bench<D: Backend>(c: &mut Criterion) {
        let mut fx = Fixture::<D>::open().expect("open the device");
        let graph = fx.graph(1).expect("capture one add");
        let mut group = c.benchmark_group(format!("replay_core_vs_raw/{}", D::NAME));
        group.bench_function("core", |b| {
            b.iter_custom(|iters| {
                measure::replay_core(&mut fx, &graph, iters)
                    .expect("replay through the core")
                    .elapsed
            });
        });
        group.bench_function("raw", |b| {
            b.iter_custom(|iters| {
                measure::replay_raw(&mut fx, &graph, iters)
                    .expect("replay through the raw driver")
                    .elapsed
            });
        });
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<ReplayCoreVsRaw>()
}
