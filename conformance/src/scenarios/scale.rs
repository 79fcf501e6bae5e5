//! Many launches, many replays, several streams.

use crate::workload::UserKernels;
use graph_capture::{Builtin, Config};

use crate::ensure;
use crate::session::Session;
use crate::support::{Fixture, N, NU, Outcome, Step, expect, expect_all, in_use, ramp, usable};

/// Another stream's eager work during a window is neither recorded nor
/// blocked.
pub fn rule_15_other_streams_are_not_recorded_or_blocked<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let recording = client.create_stream().step("stream a")?;
    let other = client.create_stream().step("stream b")?;
    let x = client.create_f32(recording, &[0.0; NU]).step("x")?;
    let one = client.create_f32(recording, &[1.0; NU]).step("one")?;
    let y = client.create_f32(other, &[0.0; NU]).step("y")?;
    let two = client.create_f32(other, &[2.0; NU]).step("two")?;
    let window = client.prepare(recording).step("prepare")?;
    client
        .run_builtin(recording, Builtin::Add, &[&x, &one], N, 0.0)
        .step("warmup")?;
    client.begin(recording, window).step("begin")?;
    client
        .run_builtin(recording, Builtin::Add, &[&x, &one], N, 0.0)
        .step("recorded")?;
    // Eager work on the other stream runs now, reads and all.
    client
        .run_builtin(other, Builtin::Add, &[&y, &two], N, 0.0)
        .step("other stream")?;
    expect_all(&client, &y, 2.0, "the other stream is not blocked")?;
    let scratch = client
        .create_f32(other, &ramp(NU, 0.0))
        .step("allocate on the other stream")?;
    client.sync(other).step("sync the other stream")?;
    let graph = client.instantiate(recording, window).step("instantiate")?;
    for _ in 0..3 {
        client.replay(&graph).step("replay")?;
    }
    expect_all(&client, &x, 4.0, "the recording stream")?;
    expect_all(&client, &y, 2.0, "the other stream's work was not recorded")?;
    expect(&client, &scratch, &ramp(NU, 0.0), "scratch")
}

/// 150 launches in one capture, each with a buffer freed inside the window:
/// past the drop queue's flush threshold, no flush runs while recording and
/// the graph still replays right.
pub fn capture_past_the_drop_queue_threshold<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client_with(Config {
        drop_queue_threshold: 16,
        ..Config::default()
    }))?;
    let (graph, ()) = fx
        .client
        .capture(fx.stream, |_| {
            for _ in 0..150 {
                drop(fx.add_through_intermediate()?);
            }
            Ok(())
        })
        .step("capture")?;
    fx.client.replay(&graph).step("replay")?;
    fx.client.replay(&graph).step("replay")?;
    fx.expect_x(450.0, "warmup and two replays of 150 adds")
}

/// A 10,000-launch capture instantiates and replays right.
pub fn ten_thousand_launch_capture<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[0.0; 64]).step("x")?;
    let one = client.create_f32(stream, &[1.0; 64]).step("one")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            for _ in 0..10_000 {
                client.run_builtin(stream, Builtin::Add, &[&x, &one], 64, 0.0)?;
            }
            Ok(())
        })
        .step("capture")?;
    client.replay(&graph).step("replay")?;
    expect_all(
        &client,
        &x,
        20_000.0,
        "warmup and one replay of 10,000 adds",
    )
}

/// A thousand replays leave pool usage and page counts where one left them.
pub fn rule_16_thousand_replays_keep_usage_flat<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let (graph, ()) = client
        .capture(stream, |_| fx.add_through_intermediate().map(drop))
        .step("capture")?;
    client.replay(&graph).step("first replay")?;
    let after_one = in_use(client, stream)?;
    let usage_one = client.usage(stream).step("usage")?;
    for _ in 0..999 {
        client.replay(&graph).step("replay")?;
    }
    let after_many = in_use(client, stream)?;
    let usage_many = client.usage(stream).step("usage")?;
    ensure!(
        after_one == after_many,
        "in use {after_one:?} after one replay, {after_many:?} after 1000"
    );
    ensure!(
        usage_one.device.pages == usage_many.device.pages
            && usage_one.host.pages == usage_many.host.pages,
        "pages grew: {usage_one:?} vs {usage_many:?}"
    );
    fx.expect_x(1001.0, "warmup and 1000 replays")?;
    usable(client, stream)
}

/// The client may be called from any thread: `prepare` on one, the
/// recorded run on another, `instantiate` and replays on a third, while a
/// fourth works another stream. (CUDA and HIP capture in relaxed mode for
/// exactly this.)
pub fn capture_across_threads<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let other = client.create_stream().step("other stream")?;
    let on_thread = |f: &(dyn Fn() -> Outcome + Sync)| {
        std::thread::scope(|scope| {
            scope
                .spawn(f)
                .join()
                .unwrap_or_else(|_| Err("a thread panicked".into()))
        })
    };
    let window = std::thread::scope(|scope| scope.spawn(|| client.prepare(stream)).join())
        .map_err(|_| "prepare panicked".to_string())?
        .step("prepare on thread 1")?;
    on_thread(&|| {
        fx.add().step("warmup on thread 2")?;
        client.begin(stream, window).step("begin on thread 2")?;
        fx.add().step("record on thread 2")
    })?;
    let busy = std::thread::scope(|scope| {
        let worker = scope.spawn(|| -> Outcome {
            let y = client.create_f32(other, &[0.0; NU]).step("y")?;
            let two = client.create_f32(other, &[2.0; NU]).step("two")?;
            for _ in 0..50 {
                client
                    .run_builtin(other, Builtin::Add, &[&y, &two], N, 0.0)
                    .step("other stream")?;
            }
            expect_all(client, &y, 100.0, "the other stream, meanwhile")
        });
        let graph = client
            .instantiate(stream, window)
            .step("instantiate on thread 3")?;
        for _ in 0..4 {
            client.replay(&graph).step("replay on thread 3")?;
        }
        worker
            .join()
            .unwrap_or_else(|_| Err("the worker panicked".into()))
    });
    busy?;
    fx.expect_x(5.0, "warmup and four replays")
}

/// Capture and destroy cycles leave the pools as the first cycle left them:
/// what a destroy frees after its sync is reclaimable by the next warmup,
/// which so takes no page although the device is idle.
pub fn capture_destroy_cycles_keep_usage_flat<D: UserKernels>(session: &Session<D>) -> Outcome {
    const CYCLES: usize = 10_000;
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let mut after_first = None;
    for cycle in 1..=CYCLES {
        // The graph's info entry is the only slice its destroy frees: no
        // other slice's room hides a free the next warmup cannot reclaim.
        let graph = fx.capture_add()?;
        client.replay(&graph).step("replay")?;
        client.destroy(&graph).step("destroy")?;
        let usage = client.usage(stream).step("usage")?;
        let pools = (usage.device, usage.host);
        match &after_first {
            None => after_first = Some(pools),
            Some(first) => ensure!(
                *first == pools,
                "after cycle {cycle} the pools (device, host) are {pools:?}, after cycle 1 {first:?}"
            ),
        }
    }
    fx.expect_x(2.0 * CYCLES as f32, "a warmup and a replay per cycle")?;
    usable(client, stream)
}
