//! Two streams that overlap uploading the next step's input with computing
//! over the current one, against the same work on one stream.

use std::time::Instant;

use graph_capture::{Builtin, Builtins, Client, Error, GraphDriver, StreamId};

/// Steps each way.
pub const STEPS: usize = 40;
/// Elements of each input (1 MiB).
const ELEMENTS: u32 = 1 << 18;
/// Launches over the current input per step.
const PASSES: usize = 4;

/// Seconds `STEPS` steps take, through the final syncs: each step uploads
/// the next input on `upload` and adds the current one into an accumulator
/// `PASSES` times on `compute` (the same stream, for the baseline). The
/// two inputs take turns; sharing them orders each upload after the adds
/// that read the input last, and each add after its upload.
pub fn seconds<D: GraphDriver + Builtins>(
    client: &Client<D>,
    upload: StreamId,
    compute: StreamId,
) -> Result<f64, Error> {
    let n = ELEMENTS as usize;
    let bytes = |value: f32| -> Vec<u8> { value.to_le_bytes().repeat(n) };
    let contents = [bytes(1.0), bytes(2.0)];
    let inputs = [
        client.create(upload, &contents[0])?,
        client.create(upload, &contents[1])?,
    ];
    let sum = client.create_f32(compute, &vec![0.0; n])?;
    client.sync(upload)?;
    client.sync(compute)?;
    let started = Instant::now();
    for step in 0..STEPS {
        let (current, next) = (step % 2, (step + 1) % 2);
        client.write(&inputs[next], &contents[next])?;
        for _ in 0..PASSES {
            client.run_builtin(
                compute,
                Builtin::Add,
                &[&sum, &inputs[current]],
                ELEMENTS,
                0.0,
            )?;
        }
    }
    client.sync(compute)?;
    client.sync(upload)?;
    let seconds = started.elapsed().as_secs_f64();
    let want: f32 = (0..STEPS)
        .map(|s| PASSES as f32 * ((s % 2) + 1) as f32)
        .sum();
    let got = client.read_f32(&sum)?;
    if got.iter().any(|&v| v != want) {
        return Err(Error::BadLaunch(format!(
            "the pipeline summed {} where {want} was due",
            got[0]
        )));
    }
    Ok(seconds)
}

/// The pipeline on one stream and on two, fastest of three each: seconds
/// (one, two).
pub fn measure<D: GraphDriver + Builtins>() -> Result<(f64, f64), Error> {
    let client = Client::<D>::open()?;
    let (upload, compute) = (client.create_stream()?, client.create_stream()?);
    let mut one = f64::MAX;
    let mut two = f64::MAX;
    for _ in 0..3 {
        one = one.min(seconds(&client, compute, compute)?);
        two = two.min(seconds(&client, upload, compute)?);
    }
    Ok((one, two))
}
