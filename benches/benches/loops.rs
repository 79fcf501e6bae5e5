//! A loop of 64 steps in one replay against 64 replays of a step, each
//! followed by a read of the loop's flag: the host round trip a loop in a
//! graph removes. Each iteration is a whole generation, through its sync.

mod common;

use std::process::ExitCode;

use benches::{Backend, looped::Loop};
use criterion::Criterion;

struct Loops;

impl common::Bench for Loops {
    fn bench<D: Backend>(c: &mut Criterion) {
        let fixture = match Loop::<D>::open().expect("open the device") {
            Ok(fixture) => fixture,
            Err(reason) => {
                eprintln!("loops/{}: {reason}", D::NAME);
                return;
            }
        };
        let mut group = c.benchmark_group(format!("loops/{}", D::NAME));
        group.bench_function("step_by_step", |b| {
            b.iter(|| fixture.stepwise().expect("replays and reads"));
        });
        group.bench_function("one_replay", |b| {
            b.iter(|| fixture.looped().expect("replay and sync"));
        });
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<Loops>()
}
