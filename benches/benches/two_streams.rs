//! Uploading the next input on one stream while another computes over the
//! current one, against the same work on one stream: the buffers shared
//! between the two streams, every step ordered on the device.
//!
//! Each iteration is a whole pipeline of `pipeline::STEPS` steps, timed
//! through its final syncs, its sum checked.

mod common;

use std::process::ExitCode;
use std::time::Duration;

use benches::{Backend, pipeline};
use criterion::Criterion;
use graph_capture::Client;

struct TwoStreams;

impl common::Bench for TwoStreams {
    fn bench<D: Backend>(c: &mut Criterion) {
        let client = Client::<D>::open().expect("open the device");
        let upload = client.create_stream().expect("upload stream");
        let compute = client.create_stream().expect("compute stream");
        let mut group = c.benchmark_group(format!("two_streams/{}", D::NAME));
        group.sample_size(10);
        for (name, first) in [("one_stream", compute), ("two_streams", upload)] {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let seconds: f64 = (0..iters)
                        .map(|_| pipeline::seconds(&client, first, compute).expect("pipeline"))
                        .sum();
                    Duration::from_secs_f64(seconds)
                });
            });
        }
        group.finish();
    }
}

fn main() -> ExitCode {
    common::main::<TwoStreams>()
}
