//! A graph kept as a chain against the same graph kept as its dependency
//! graph: eight independent matrix-vector products and their sum, and the
//! decode step. Each iteration is one replay, timed through its sync.

mod common;

use std::process::ExitCode;
use std::time::Duration;

use benches::{Backend, wide};
use criterion::Criterion;
use graph_capture::ReplayOrder;

struct DependencyGraph;

impl common::Bench for DependencyGraph {
    fn bench<D: Backend>(c: &mut Criterion) {
        let mut group = c.benchmark_group(format!("dependency_graph/{}", D::NAME));
        group.sample_size(10);
        for (name, order) in [
            ("chain", ReplayOrder::Chain),
            ("dependencies", ReplayOrder::Dependencies),
        ] {
            group.bench_function(format!("wide/{name}"), |b| {
                b.iter_custom(|iters| {
                    let seconds: f64 = (0..iters)
                        .map(|_| wide::wide_seconds::<D>(order).expect("wide").0)
                        .sum();
                    Duration::from_secs_f64(seconds)
                });
            });
            group.bench_function(format!("decode/{name}"), |b| {
                b.iter_custom(|iters| {
                    let seconds: f64 = (0..iters)
                        .map(|_| wide::decode_seconds::<D>(order).expect("decode"))
                        .sum();
                    Duration::from_secs_f64(seconds)
                });
            });
        }
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<DependencyGraph>()
}
