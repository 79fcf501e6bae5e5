//! Graph lifetimes and refusals: what is claimed, what is pinned, what is
//! released and when.

use crate::workload::UserKernels;
use graph_capture::{Builtin, Error, GraphId};

use crate::ensure;
use crate::session::Session;
use crate::support::{
    Fixture, N, NU, Outcome, SENTINEL, Step, back_to, claim_by_refused_window, expect_all,
    expect_claimed, in_use, refused, usable,
};

/// A capture that needs a new page mid-recording is refused, its written
/// set claimed, and the stream captures fine right after.
pub fn rule_07_page_allocated_while_recording_is_refused<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream, x) = (&fx.client, fx.stream, &fx.x);
    claim_by_refused_window(client, stream, &[x])?;
    ensure!(client.live_graphs() == 0, "no graph came out");
    expect_claimed(client, x, "allocated while", "the refused graph's output")?;
    // The same capture, warmed, works.
    let (graph, ()) = client
        .capture(stream, |_| {
            drop(client.allocate(stream, 32 << 20)?);
            client.run_builtin(stream, Builtin::Fill, &[x], N, 3.0)
        })
        .step("warmed capture")?;
    client.write_f32(x, &[0.0; NU]).step("reset")?;
    client.replay(&graph).step("replay")?;
    fx.expect_x(3.0, "replay of the warmed capture")
}

/// A recorded run may pass info bytes its warmup never passed: the window
/// keeps room for as many new contents as warmup used. Past that room, the
/// refusal names the launch and why.
pub fn a_recording_may_pass_info_its_warmup_did_not<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    use graph_capture::Pass;
    let fx = Fixture::new(session.client())?;
    let (client, stream, x) = (&fx.client, fx.stream, &fx.x);
    // Warmup fills with 1, the recording with 2: another info content.
    let (graph, ()) = client
        .capture(stream, |pass| {
            let value = if pass == Pass::Warmup { 1.0 } else { 2.0 };
            client.run_builtin(stream, Builtin::Fill, &[x], N, value)
        })
        .step("capture with new info in the recording")?;
    fx.expect_x(1.0, "the warmup's fill")?;
    client.replay(&graph).step("replay")?;
    fx.expect_x(2.0, "the recorded info")?;
    drop(graph);
    // Every launch of the recording passes a content of its own.
    const LAUNCHES: usize = 64;
    let err = refused(
        client.capture(stream, |pass| {
            for i in 0..LAUNCHES {
                let value = match pass {
                    Pass::Warmup => 0.0,
                    Pass::Record => 100.0 + i as f32,
                };
                client.run_builtin(stream, Builtin::Fill, &[x], N, value)?;
            }
            Ok(())
        }),
        "a recording of 64 new info contents",
    )?;
    match err.root() {
        Error::InfoFirstSeenWhileRecording {
            kernel, operation, ..
        } => ensure!(
            kernel == "fill" && (1..LAUNCHES).contains(operation),
            "named {kernel} at operation {operation}: {err}"
        ),
        other => return Err(format!("refused for {other}, expected the launch named")),
    }
    expect_claimed(
        client,
        x,
        "warmup never passed",
        "the refused recording's output",
    )?;
    usable(client, stream)
}

/// A launch inside the window on a claimed input dooms the window, and the
/// refusal carries both reasons: the doom and the original failure.
pub fn rule_05_claimed_input_dooms_the_window<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream, poisoned, out) = (&fx.client, fx.stream, &fx.one, &fx.x);
    claim_by_refused_window(client, stream, &[poisoned])?;
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    let launch = client.run_builtin(stream, Builtin::Copy, &[poisoned, out], N, 0.0);
    ensure!(
        launch.is_err(),
        "a launch reading a claimed buffer is not run"
    );
    let err = refused(client.instantiate(stream, window), "instantiate")?;
    let text = err.to_string();
    ensure!(matches!(err, Error::Doomed(_)), "refused for {text}");
    ensure!(text.contains("cannot seal"), "the doom is named: {text}");
    ensure!(
        text.contains("allocated while"),
        "the original cause is carried: {text}"
    );
    expect_claimed(client, out, "allocated while", "the doomed window's output")?;
    usable(client, stream)
}

/// Every refusal claims what the never-run work would have written; a good
/// write or launch clears the claim.
pub fn rule_09_refusal_claims_the_written_set<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream, a, read_only) = (&fx.client, fx.stream, &fx.x, &fx.one);
    let b = client.create_f32(stream, &[1.0; NU]).step("b")?;
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    // Unwarmed: the page this takes is what the window is refused for.
    let grow = client.allocate(stream, 32 << 20).step("grow")?;
    client
        .run_builtin(stream, Builtin::Add, &[a, read_only], N, 0.0)
        .step("add")?;
    client
        .run_builtin(stream, Builtin::Axpy, &[read_only, &b], N, 1.0)
        .step("axpy")?;
    refused(client.instantiate(stream, window), "instantiate")?;
    drop(grow);
    expect_claimed(client, a, "allocated while", "a")?;
    expect_claimed(client, &b, "allocated while", "b")?;
    expect_all(client, read_only, 1.0, "a buffer only read stays readable")?;
    client.write_f32(a, &[7.0; NU]).step("rewrite a")?;
    fx.expect_x(7.0, "a good write clears the claim")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&b], N, 8.0)
        .step("fill b")?;
    expect_all(client, &b, 8.0, "a good launch clears the claim")?;
    ensure!(
        client.claimed_buffers() == 0,
        "{} claims left",
        client.claimed_buffers()
    );
    Ok(())
}

/// Replay of a destroyed graph is an error and enqueues nothing.
pub fn rule_11_replay_of_a_destroyed_graph_is_refused<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let graph = fx.capture_add()?;
    fx.client.destroy(&graph).step("destroy")?;
    let err = refused(fx.client.replay(&graph), "replay after destroy")?;
    ensure!(matches!(err, Error::UnknownGraph(_)), "got {err}");
    let err = refused(
        fx.client.replay_id(GraphId(123_456)),
        "replay of a made-up id",
    )?;
    ensure!(matches!(err, Error::UnknownGraph(_)), "got {err}");
    fx.expect_x(1.0, "nothing was enqueued")?;
    ensure!(
        fx.client.claimed_buffers() == 0,
        "an unknown graph claims nothing"
    );
    Ok(())
}

/// Destroying twice is a no-op, and dropping the last handle destroys too.
pub fn rule_13_double_destroy_is_a_no_op<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let client = &fx.client;
    let graph = fx.capture_add()?;
    let clone = graph.clone();
    client.destroy(&graph).step("destroy")?;
    client.destroy(&graph).step("destroy again")?;
    client.destroy(&clone).step("destroy through a clone")?;
    drop((graph, clone));
    ensure!(
        client.live_graphs() == 0,
        "graphs left: {}",
        client.live_graphs()
    );
    let graph = fx.capture_add()?;
    ensure!(client.live_graphs() == 1, "one graph");
    drop(graph);
    ensure!(
        client.live_graphs() == 0,
        "dropping the last handle destroys the graph"
    );
    usable(client, fx.stream)
}

/// Destroy while replays are in flight: the stream is synced first, the
/// replays finish with the right result, and the pins are released.
pub fn rule_13_destroy_while_replay_in_flight<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let n = 1 << 16;
    let x = client
        .create_f32(stream, &vec![0.0; n as usize])
        .step("x")?;
    let one = client
        .create_f32(stream, &vec![1.0; n as usize])
        .step("one")?;
    let baseline = in_use(&client, stream)?;
    let (graph, ()) = client
        .capture(stream, |_| {
            for _ in 0..8 {
                client.run_builtin(stream, Builtin::Add, &[&x, &one], n, 0.0)?;
            }
            Ok(())
        })
        .step("capture")?;
    for _ in 0..50 {
        client.replay(&graph).step("replay")?;
    }
    client.destroy(&graph).step("destroy while in flight")?;
    expect_all(&client, &x, 8.0 * 51.0, "every enqueued replay ran")?;
    back_to(&client, stream, baseline, "after destroy")
}

/// Destroy releases the graph's pins and the info entries only it pinned.
pub fn rule_13_destroy_releases_pins<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let baseline = in_use(client, stream)?;
    let info_before = client.usage(stream).step("usage")?.info_entries;
    let (graph, ()) = client
        .capture(stream, |_| {
            let tmp = client.allocate(stream, 4096)?;
            client.run_builtin(stream, Builtin::Fill, &[&tmp], 1024, 1.0)?;
            client.run_builtin(stream, Builtin::Fill, &[&fx.x], 77, 4.25)
        })
        .step("capture")?;
    let pinned = in_use(client, stream)?;
    ensure!(pinned.0 > baseline.0, "the graph pins its intermediate");
    client.destroy(&graph).step("destroy")?;
    back_to(client, stream, baseline, "after destroy")?;
    let info_after = client.usage(stream).step("usage")?.info_entries;
    ensure!(
        info_after == info_before,
        "info entries only the graph pinned are freed: {info_before} before, {info_after} after"
    );
    Ok(())
}

/// Two live graphs share info-cache entries: destroying one leaves the
/// other replaying right.
pub fn shared_info_entries_outlive_one_graph<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let y = client.create_f32(stream, &[0.0; NU]).step("y")?;
    let first = fx.capture_add()?;
    let (second, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&y, &fx.one], N, 0.0)
        })
        .step("second capture")?;
    client.destroy(&first).step("destroy first")?;
    // Allocations that could land on a freed info slice, filled with junk.
    let junk: Vec<_> = (0..8)
        .map(|_| client.create_f32(stream, &[SENTINEL; 4]))
        .collect::<Result<_, _>>()
        .step("junk")?;
    for k in 1..=3u8 {
        client.replay(&second).step("replay second")?;
        expect_all(client, &y, 1.0 + f32::from(k), "the surviving graph")?;
    }
    drop(junk);
    Ok(())
}

/// The last handle dropped while its stream records another window: the
/// destroy (a sync) waits for the window to close, which still seals.
pub fn destroy_during_recording_is_deferred<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let old = fx.capture_add()?;
    let window = client.prepare(stream).step("prepare")?;
    fx.add().step("warmup")?;
    client.begin(stream, window).step("begin")?;
    drop(old);
    ensure!(
        client.live_graphs() == 1,
        "the destroy waits for the window"
    );
    fx.add().step("recorded")?;
    let graph = client.instantiate(stream, window).step("instantiate")?;
    ensure!(
        client.live_graphs() == 1,
        "the deferred destroy ran at the close"
    );
    client.replay(&graph).step("replay")?;
    fx.expect_x(3.0, "warmups and one replay")
}

/// A graph whose input is claimed refuses to replay rather than compute
/// from stale bytes, and claims its outputs; a good write revives it.
pub fn claimed_input_refuses_replay<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream, input, output) = (&fx.client, fx.stream, &fx.one, &fx.x);
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Copy, &[input, output], N, 0.0)
        })
        .step("capture")?;
    claim_by_refused_window(client, stream, &[input])?;
    let err = refused(client.replay(&graph), "replay over a claimed input")?;
    ensure!(matches!(err, Error::Claimed { .. }), "got {err}");
    expect_claimed(client, output, "allocated while", "the output")?;
    client.write_f32(input, &[5.0; NU]).step("rewrite input")?;
    client.replay(&graph).step("replay")?;
    fx.expect_x(5.0, "replay after the rewrite")
}

/// A graph that reads and rewrites its accumulator (`x += one`) refuses to
/// replay over an `x` another failure claimed: only its own failed replay's
/// claim is one a retry repairs.
pub fn replay_refuses_an_accumulator_claimed_elsewhere<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let graph = fx.capture_add()?;
    claim_by_refused_window(client, stream, &[&fx.x])?;
    let err = refused(
        client.replay(&graph),
        "replay over an accumulator claimed elsewhere",
    )?;
    ensure!(matches!(err, Error::Claimed { .. }), "got {err}");
    expect_claimed(client, &fx.x, "allocated while", "x stays claimed")?;
    client.write_f32(&fx.x, &[10.0; NU]).step("rewrite x")?;
    client.replay(&graph).step("replay after the rewrite")?;
    fx.expect_x(11.0, "the rewrite and one replay")
}
