//! One decode step of the workload's model (40 layers, 200 launches of user
//! kernels): issued eagerly against replayed from its graph, each step timed
//! through a sync of the stream so both sides do the same work.

mod common;

use std::process::ExitCode;

use benches::Backend;
use conformance::workload::decode::{Decoder, Model, Shape};
use criterion::Criterion;
use graph_capture::Client;

struct Decode;

impl common::Bench for Decode {
    fn bench<D: Backend>(c: &mut Criterion) {
        let client = Client::<D>::open().expect("open the device");
        let stream = client.create_stream().expect("stream");
        let model = Model::new(Shape::DECODE);
        let decoder = Decoder::new(&client, stream, &model).expect("upload the model");
        let graph = decoder.capture().expect("capture a step");
        let mut group = c.benchmark_group(format!("decode/{}", D::NAME));
        group.bench_function("eager", |b| {
            b.iter(|| {
                decoder.step().expect("eager step");
                client.sync(stream).expect("sync");
            });
        });
        group.bench_function("replay", |b| {
            b.iter(|| {
                client.replay(&graph).expect("replay");
                client.sync(stream).expect("sync");
            });
        });
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<Decode>()
}
