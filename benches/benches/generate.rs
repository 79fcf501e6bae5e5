//! One generation step of the transformer at batch 1 and 8: issued eagerly
//! against replayed from its batch size's graph, each step timed through a
//! sync of the stream.

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use benches::Backend;
use benches::generate::BATCHES;
use conformance::workload::transformer::{Config, GraphSet, Transformer, Weights, starts};
use criterion::Criterion;
use graph_capture::{Client, Error};

struct Generate;

/// Steps between resets, so no sequence runs past its context.
const STEPS_PER_RESET: u64 = 128;

/// `iters` steps of `step` for `batch` sequences, timed through a sync,
/// the sequences restarted outside the timing every [`STEPS_PER_RESET`].
fn timed<D: Backend>(
    client: &Client<D>,
    model: &Transformer<D>,
    batch: u32,
    iters: u64,
    mut step: impl FnMut() -> Result<(), Error>,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        model.reset(&starts(batch, &model.config())).expect("reset");
        client.sync(model.stream()).expect("sync");
        let steps = (iters - done).min(STEPS_PER_RESET);
        let started = Instant::now();
        for _ in 0..steps {
            step().expect("step");
        }
        client.sync(model.stream()).expect("sync");
        total += started.elapsed();
        done += steps;
    }
    total
}

impl common::Bench for Generate {
    fn bench<D: Backend>(c: &mut Criterion) {
        let client = Client::<D>::open().expect("open the device");
        let stream = client.create_stream().expect("stream");
        let weights = Weights::new(Config::FULL);
        let max = BATCHES[BATCHES.len() - 1];
        let model = Transformer::new(&client, stream, &weights, max).expect("upload the model");
        let mut set = GraphSet::capture(&client, &model, &BATCHES).expect("capture the set");
        let mut group = c.benchmark_group(format!("generate/{}", D::NAME));
        for batch in [1, max] {
            group.bench_function(format!("eager/{batch}"), |b| {
                b.iter_custom(|iters| timed(&client, &model, batch, iters, || model.step(batch)));
            });
            group.bench_function(format!("replay/{batch}"), |b| {
                b.iter_custom(|iters| {
                    timed(&client, &model, batch, iters, || set.step(batch).map(drop))
                });
            });
        }
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<Generate>()
}
