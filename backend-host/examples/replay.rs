//! Capture a 100-launch sequence, replay it 1,000 times, check every result
//! against eager execution, and print eager vs replay time per launch.
//!
//! `cargo run --release -p backend-host --example replay`

use std::process::ExitCode;
use std::time::{Duration, Instant};

use backend_host::Host;
use capture_core::{Buffer, Builtin, Client, Error, StreamId};

const LAUNCHES: usize = 100;
const REPLAYS: usize = 1_000;
const N: u32 = 256;

/// The recorded sequence: an `axpy` chain over a ring of four buffers, so
/// every launch depends on the one before and a lost launch changes the end.
fn sequence(client: &Client<Host>, stream: StreamId, ring: &[Buffer]) -> Result<(), Error> {
    for i in 0..LAUNCHES {
        let x = &ring[i % ring.len()];
        let y = &ring[(i + 1) % ring.len()];
        client.run_builtin(stream, Builtin::Axpy, &[x, y], N, 0.5)?;
    }
    Ok(())
}

fn ring(client: &Client<Host>, stream: StreamId) -> Result<Vec<Buffer>, Error> {
    (0..4)
        .map(|k| client.create_f32(stream, &vec![1.0 + k as f32 * 0.25; N as usize]))
        .collect()
}

fn per_launch(total: Duration, runs: usize) -> f64 {
    total.as_nanos() as f64 / (runs * LAUNCHES) as f64
}

fn run() -> Result<(), String> {
    let client = Client::<Host>::open().map_err(|e| e.to_string())?;
    let stream = client.create_stream().map_err(|e| e.to_string())?;
    let eager = ring(&client, stream).map_err(|e| e.to_string())?;
    let graphed = ring(&client, stream).map_err(|e| e.to_string())?;

    let (graph, ()) = client
        .capture(stream, |_| sequence(&client, stream, &graphed))
        .map_err(|e| format!("capture: {e}"))?;
    // The capture's warmup ran the sequence once; so does the eager side.
    sequence(&client, stream, &eager).map_err(|e| e.to_string())?;

    let mut eager_time = Duration::ZERO;
    let mut replay_time = Duration::ZERO;
    for round in 0..REPLAYS {
        let start = Instant::now();
        sequence(&client, stream, &eager).map_err(|e| e.to_string())?;
        client.sync(stream).map_err(|e| e.to_string())?;
        eager_time += start.elapsed();

        let start = Instant::now();
        client.replay(&graph).map_err(|e| e.to_string())?;
        client.sync(stream).map_err(|e| e.to_string())?;
        replay_time += start.elapsed();

        for (k, (e, g)) in eager.iter().zip(&graphed).enumerate() {
            let want = client.read_f32(e).map_err(|e| e.to_string())?;
            let got = client.read_f32(g).map_err(|e| e.to_string())?;
            if want != got {
                return Err(format!(
                    "replay {round}: buffer {k} differs from eager execution"
                ));
            }
        }
    }

    let eager_ns = per_launch(eager_time, REPLAYS);
    let replay_ns = per_launch(replay_time, REPLAYS);
    println!("{LAUNCHES} launches of axpy over {N} floats, {REPLAYS} rounds, every result checked");
    println!("eager:  {eager_ns:>8.0} ns per launch (enqueue + execution + sync)");
    println!("replay: {replay_ns:>8.0} ns per launch (enqueue + execution + sync)");
    println!("eager / replay: {:.2}x", eager_ns / replay_ns);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("replay example failed: {err}");
            ExitCode::FAILURE
        }
    }
}
