//! Replays compute what eager execution computes, and never touch memory the
//! graph does not own.

use crate::workload::UserKernels;
use graph_capture::{Buffer, Builtin, Client, Error, Pass, StreamId};

use crate::ensure;
use crate::session::Session;
use crate::support::{Fixture, N, NU, Outcome, SENTINEL, Step, expect, expect_all, ramp};

/// fill, axpy, copy, add on three buffers: the same on every backend.
fn sequence<D: UserKernels>(
    client: &Client<D>,
    stream: StreamId,
    x: &Buffer,
    y: &Buffer,
    z: &Buffer,
) -> Result<(), Error> {
    client.run_builtin(stream, Builtin::Fill, &[z], N, 0.5)?;
    client.run_builtin(stream, Builtin::Axpy, &[x, y], N, 2.0)?;
    client.run_builtin(stream, Builtin::Copy, &[y, z], N, 0.0)?;
    client.run_builtin(stream, Builtin::Add, &[z, x], N, 0.0)
}

/// Capture then replay twice and more: each replay equals eager execution.
pub fn replay_matches_eager<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let make = |c: &Client<D>| -> Result<(Buffer, Buffer, Buffer), String> {
        Ok((
            c.create_f32(stream, &ramp(NU, 1.0)).step("x")?,
            c.create_f32(stream, &ramp(NU, 10.0)).step("y")?,
            c.allocate(stream, u64::from(N) * 4).step("z")?,
        ))
    };
    let (ex, ey, ez) = make(&client)?;
    let (gx, gy, gz) = make(&client)?;
    let (graph, ()) = client
        .capture(stream, |_| sequence(&client, stream, &gx, &gy, &gz))
        .step("capture")?;
    // The warmup ran once for real; the eager reference runs once here.
    sequence(&client, stream, &ex, &ey, &ez).step("eager")?;
    for round in 2..=4 {
        client.replay(&graph).step("replay")?;
        sequence(&client, stream, &ex, &ey, &ez).step("eager")?;
        for (g, e, name) in [(&gx, &ex, "x"), (&gy, &ey, "y"), (&gz, &ez, "z")] {
            let want = client.read_f32(e).step("eager read")?;
            expect(&client, g, &want, &format!("{name} after {round} runs"))?;
        }
    }
    Ok(())
}

/// An `add` chain makes the replay count visible: x = x0 + k·y.
pub fn replay_count_visible_in_add_chain<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let window = fx.client.prepare(fx.stream).step("prepare")?;
    fx.add().step("warmup")?;
    fx.client.begin(fx.stream, window).step("begin")?;
    fx.add().step("recorded add")?;
    let graph = fx
        .client
        .instantiate(fx.stream, window)
        .step("instantiate")?;
    fx.expect_x(1.0, "the recorded run did not execute")?;
    for k in 1..=5u8 {
        fx.client.replay(&graph).step("replay")?;
        fx.expect_x(1.0 + f32::from(k), &format!("after {k} replays"))?;
    }
    Ok(())
}

/// The input rewritten in place between replays is read fresh.
pub fn input_rewritten_between_replays_is_read_fresh<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let input = client.create_f32(stream, &[1.0; NU]).step("input")?;
    let output = client.create_f32(stream, &[0.0; NU]).step("output")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Copy, &[&input, &output], N, 0.0)?;
            client.run_builtin(stream, Builtin::Add, &[&output, &input], N, 0.0)
        })
        .step("capture")?;
    for value in [3.0f32, -2.0, 40.0] {
        client
            .write_f32(&input, &[value; NU])
            .step("rewrite input")?;
        client.replay(&graph).step("replay")?;
        expect_all(
            &client,
            &output,
            2.0 * value,
            &format!("replay after input = {value}"),
        )?;
    }
    Ok(())
}

/// The one-call form runs the body twice: warmup for real, then recorded.
pub fn one_call_capture_warms_up_then_records<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let mut passes = Vec::new();
    let (graph, last) = fx
        .client
        .capture(fx.stream, |pass| {
            passes.push(pass);
            fx.add()?;
            Ok(pass)
        })
        .step("capture")?;
    ensure!(
        passes == [Pass::Warmup, Pass::Record],
        "passes were {passes:?}"
    );
    ensure!(
        last == Pass::Record,
        "the value returned is the recorded pass's"
    );
    fx.expect_x(1.0, "only the warmup executed")?;
    fx.client.replay(&graph).step("replay")?;
    fx.expect_x(2.0, "replay executed the recording")
}

/// A host write recorded in the window replays its bytes every time, even
/// after the caller's slice is gone, and an eager rewrite afterwards is not
/// undone until the next replay.
pub fn recorded_write_replays_its_bytes<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
    let (graph, ()) = {
        let bytes: Vec<f32> = ramp(NU, 5.0);
        client
            .capture(stream, |_| client.write_f32(&x, &bytes))
            .step("capture")?
    };
    client.write_f32(&x, &[0.0; NU]).step("eager overwrite")?;
    expect_all(&client, &x, 0.0, "eager overwrite")?;
    for _ in 0..3 {
        client.replay(&graph).step("replay")?;
        expect(&client, &x, &ramp(NU, 5.0), "the recorded copy's bytes")?;
    }
    Ok(())
}

/// Intermediates freed inside the captured closure stay the graph's: buffers
/// allocated after the capture are never overwritten by a replay.
pub fn rule_10_intermediates_freed_in_capture_stay_pinned<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let input = client.create_f32(stream, &ramp(NU, 1.0)).step("input")?;
    let output = client.create_f32(stream, &[0.0; NU]).step("output")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            let tmp = client.allocate(stream, u64::from(N) * 4)?;
            client.run_builtin(stream, Builtin::Copy, &[&input, &tmp], N, 0.0)?;
            client.run_builtin(stream, Builtin::Add, &[&tmp, &input], N, 0.0)?;
            client.run_builtin(stream, Builtin::Copy, &[&tmp, &output], N, 0.0)
            // `tmp` drops here, inside the window.
        })
        .step("capture")?;
    let sentinels: Vec<Buffer> = (0..8)
        .map(|_| client.create_f32(stream, &[SENTINEL; NU]))
        .collect::<Result<_, _>>()
        .step("sentinels")?;
    for _ in 0..3 {
        client.replay(&graph).step("replay")?;
    }
    let want: Vec<f32> = ramp(NU, 1.0).iter().map(|v| v * 2.0).collect();
    expect(&client, &output, &want, "output")?;
    for sentinel in &sentinels {
        expect_all(
            &client,
            sentinel,
            SENTINEL,
            "a buffer allocated after the capture",
        )?;
    }
    Ok(())
}

/// The user drops every buffer the graph uses; later allocations are filled
/// with sentinels; replays still compute right and the sentinels survive.
pub fn rule_10_graph_pins_buffers_the_user_dropped<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    let y = client.create_f32(stream, &[2.0; NU]).step("y")?;
    let probe = client.create_f32(stream, &[0.0; NU]).step("probe")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &y], N, 0.0)?;
            client.run_builtin(stream, Builtin::Copy, &[&x, &probe], N, 0.0)
        })
        .step("capture")?;
    drop((x, y));
    client.sync(stream).step("sync")?;
    let sentinels: Vec<Buffer> = (0..16)
        .map(|_| client.create_f32(stream, &[SENTINEL; NU]))
        .collect::<Result<_, _>>()
        .step("sentinels")?;
    for k in 1..=3u8 {
        client.replay(&graph).step("replay")?;
        // x was 3 after the warmup: each replay adds 2.
        expect_all(
            &client,
            &probe,
            3.0 + 2.0 * f32::from(k),
            "the graph's own buffers",
        )?;
    }
    for sentinel in &sentinels {
        expect_all(&client, sentinel, SENTINEL, "a sentinel after replays")?;
    }
    Ok(())
}
