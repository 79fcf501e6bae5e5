//! One eager `add` launch through capture-core (`Client::run_builtin`)
//! against the raw `Driver::launch` of the same kernel on the same memory,
//! the raw side under a single hold of the client's lock. The stream is
//! synced every `SYNC_EVERY` launches, outside the timing.

mod common;

use std::process::ExitCode;

use benches::{Backend, Fixture, RawAdd, measure};
use criterion::Criterion;

struct EagerCoreVsRaw;

impl common::Bench for EagerCoreVsRaw {
    fn bench<D: Backend>(c: &mut Criterion) {
        let mut fx = Fixture::<D>::open().expect("open the device");
        let raw = RawAdd::new(&fx).expect("compile add for the raw driver");
        let mut group = c.benchmark_group(format!("eager_core_vs_raw/{}", D::NAME));
        group.bench_function("core", |b| {
            b.iter_custom(|iters| {
                measure::eager_core(&mut fx, iters)
                    .expect("launch through the core")
                    .elapsed
            });
        });
        group.bench_function("raw", |b| {
            b.iter_custom(|iters| {
                measure::eager_raw(&mut fx, &raw, iters)
                    .expect("launch through the raw driver")
                    .elapsed
            });
        });
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<EagerCoreVsRaw>()
}
