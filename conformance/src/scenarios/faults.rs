//! The rules about refusals, proven with faults injected into the real
//! driver: after each, the stream is usable, no executable leaks, pool usage
//! returns to baseline, and what was to be written fails its reads.

use capture_core::{Builtin, Builtins, Client, Error, GraphDriver, StreamId};

use crate::ensure;
use crate::faulty::{FaultPlan, Faulty, Primitive};
use crate::session::Session;
use crate::support::{Outcome, Step, back_to, expect_all, expect_claimed, in_use, refused, usable};

const N: u32 = 100;
const NU: usize = N as usize;

/// The checks every fault scenario ends with.
fn recovered<D: GraphDriver + Builtins>(
    client: &Client<Faulty<D>>,
    plan: &FaultPlan,
    stream: StreamId,
    baseline: (u64, u64),
    live_graphs: usize,
) -> Outcome {
    ensure!(plan.injected() > 0, "the fault was never injected");
    ensure!(
        plan.live_executables() == live_graphs,
        "{} executables alive for {live_graphs} live graphs",
        plan.live_executables()
    );
    usable(client, stream)?;
    back_to(client, stream, baseline, "after the fault")
}

/// A driver that refuses to begin leaves the stream as it was found, so
/// prepare-then-begin can be retried.
pub fn rule_02_refused_begin_leaves_stream_as_found<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    plan.fail(Primitive::Begin, 1);
    let err = refused(
        client.capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)
        }),
        "capture with a refused begin",
    )?;
    ensure!(
        err.to_string().contains("injected"),
        "the driver's refusal: {err}"
    );
    expect_all(&client, &x, 1.0, "the warmup ran; nothing else")?;
    recovered(&client, &plan, stream, baseline, 0)?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)
        })
        .step("the retry")?;
    client.replay(&graph).step("replay")?;
    expect_all(&client, &x, 3.0, "retry's warmup and one replay")
}

/// A driver that refuses to instantiate: the recording is still closed,
/// no executable leaks, and the written set is claimed.
pub fn rule_05_refused_instantiate_closes_the_recording<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    plan.fail(Primitive::Instantiate, 1);
    let err = refused(
        client.capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)
        }),
        "capture with a refused instantiate",
    )?;
    ensure!(
        err.to_string().contains("injected"),
        "the driver's refusal: {err}"
    );
    expect_claimed(&client, &x, "injected", "the refused graph's output")?;
    client.write_f32(&x, &[0.0; NU]).step("rewrite")?;
    recovered(&client, &plan, stream, baseline, 0)
}

/// A launch the driver refuses inside the window dooms it; the refusal
/// claims everything the recording would have written.
pub fn rule_09_refused_launch_in_window_claims_everything<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let a = client.create_f32(stream, &[0.0; NU]).step("a")?;
    let b = client.create_f32(stream, &[0.0; NU]).step("b")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    let window = client.prepare(stream).step("prepare")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&a], N, 1.0)
        .step("warmup a")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&b], N, 2.0)
        .step("warmup b")?;
    client.begin(stream, window).step("begin")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&a], N, 1.0)
        .step("recorded a")?;
    plan.fail(Primitive::Launch, 1);
    ensure!(
        client
            .run_builtin(stream, Builtin::Fill, &[&b], N, 2.0)
            .is_err(),
        "the injected launch failure is reported"
    );
    let err = refused(client.instantiate(stream, window), "instantiate")?;
    ensure!(matches!(err, Error::Doomed(_)), "got {err}");
    expect_claimed(&client, &a, "injected", "a, recorded before the failure")?;
    expect_claimed(&client, &b, "injected", "b, the failed launch's output")?;
    recovered(&client, &plan, stream, baseline, 0)
}

/// A replay the driver refuses claims the graph's written set; the next
/// good replay clears it.
pub fn rule_12_refused_replay_claims_then_good_replay_clears<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    usable(&client, stream)?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)
        })
        .step("capture")?;
    let baseline = in_use(&client, stream)?;
    plan.fail(Primitive::Replay, 1);
    let err = refused(client.replay(&graph), "replay")?;
    ensure!(matches!(err, Error::ReplayFailed { .. }), "got {err}");
    expect_claimed(&client, &x, "injected", "the graph's output")?;
    client.replay(&graph).step("the next replay")?;
    expect_all(&client, &x, 2.0, "warmup and one good replay")?;
    ensure!(
        client.claimed_buffers() == 0,
        "the good replay cleared the claim"
    );
    recovered(&client, &plan, stream, baseline, 1)
}

/// `upload` is best-effort: a failure is counted and logged, the graph is
/// made and replays right.
pub fn rule_14_upload_failure_is_not_fatal<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    usable(&client, stream)?;
    plan.fail(Primitive::Upload, 1);
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Add, &[&x, &one], N, 0.0)
        })
        .step("capture with a failed upload")?;
    let usage = client.usage(stream).step("usage")?;
    ensure!(
        usage.upload_failures == 1,
        "the failure is counted: {}",
        usage.upload_failures
    );
    let baseline = in_use(&client, stream)?;
    client.replay(&graph).step("replay")?;
    expect_all(&client, &x, 2.0, "the graph replays without its upload")?;
    recovered(&client, &plan, stream, baseline, 1)
}

/// A page the driver refuses: a clear error, nothing lost, the next
/// allocation works.
pub fn refused_page_allocation_loses_nothing<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[3.0; NU]).step("x")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    let pages = client.usage(stream).step("usage")?.device.pages;
    plan.fail(Primitive::Allocate, 1);
    let err = refused(
        client.allocate(stream, 64 << 20),
        "a page the driver refuses",
    )?;
    ensure!(matches!(err, Error::Driver(_)), "got {err}");
    ensure!(
        client.usage(stream).step("usage")?.device.pages == pages,
        "no page was added"
    );
    expect_all(&client, &x, 3.0, "existing buffers are intact")?;
    let big = client
        .allocate(stream, 64 << 20)
        .step("the next allocation")?;
    drop(big);
    recovered(&client, &plan, stream, baseline, 0)
}

/// An eager launch the driver refuses claims its outputs; rewriting them
/// clears the claim.
pub fn refused_eager_launch_claims_its_outputs<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    let y = client.create_f32(stream, &[2.0; NU]).step("y")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    plan.fail(Primitive::Launch, 1);
    refused(
        client.run_builtin(stream, Builtin::Axpy, &[&x, &y], N, 1.0),
        "axpy",
    )?;
    expect_claimed(&client, &y, "injected", "axpy's output")?;
    expect_all(&client, &x, 1.0, "axpy's input is not claimed")?;
    // A launch reading the claimed buffer is refused and spreads the claim.
    let z = client.create_f32(stream, &[0.0; NU]).step("z")?;
    refused(
        client.run_builtin(stream, Builtin::Copy, &[&y, &z], N, 0.0),
        "copy from y",
    )?;
    expect_claimed(&client, &z, "injected", "copy's output")?;
    client.write_f32(&y, &[2.0; NU]).step("rewrite y")?;
    client
        .run_builtin(stream, Builtin::Copy, &[&y, &z], N, 0.0)
        .step("copy again")?;
    expect_all(&client, &z, 2.0, "the claim is cleared")?;
    drop(z);
    recovered(&client, &plan, stream, baseline, 0)
}

/// A host-to-device copy the driver refuses claims its destination.
pub fn refused_copy_claims_its_destination<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    plan.fail(Primitive::Copy, 1);
    refused(client.write_f32(&x, &[5.0; NU]), "write")?;
    expect_claimed(&client, &x, "injected", "the write's destination")?;
    client.write_f32(&x, &[5.0; NU]).step("write again")?;
    expect_all(&client, &x, 5.0, "the second write")?;
    recovered(&client, &plan, stream, baseline, 0)
}

/// A fence that fails keeps the frees waiting for it; the next good sync
/// releases them.
pub fn refused_fence_keeps_deferred_frees<D: GraphDriver + Builtins>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    drop(x);
    plan.fail(Primitive::Fence, 1);
    refused(client.sync(stream), "sync with a failing fence")?;
    let usage = client.usage(stream).step("usage")?;
    ensure!(usage.pending_drops > 0, "the frees still wait for a fence");
    recovered(&client, &plan, stream, baseline, 0)
}

/// Faults at every step of a capture in turn: whichever call fails, no
/// stream is left recording, no executable leaks, and the stream captures
/// right afterwards.
pub fn every_capture_fault_recovers<D: GraphDriver + Builtins>(session: &Session<D>) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    let body = |_| {
        let tmp = client.allocate(stream, 400)?;
        client.run_builtin(stream, Builtin::Copy, &[&one, &tmp], N, 0.0)?;
        client.run_builtin(stream, Builtin::Add, &[&x, &tmp], N, 0.0)
    };
    for primitive in [
        Primitive::Begin,
        Primitive::Instantiate,
        Primitive::Launch,
        Primitive::Fence,
        Primitive::Upload,
    ] {
        for k in 1..=3 {
            plan.disarm();
            client.write_f32(&x, &[0.0; NU]).step("reset x")?;
            plan.fail(primitive, k);
            match client.capture(stream, body) {
                Ok((graph, ())) => {
                    client.replay(&graph).step("replay")?;
                }
                Err(_) => {
                    // The refusal may have claimed x; a good write clears it.
                    plan.disarm();
                    client.write_f32(&x, &[0.0; NU]).step("reset x")?;
                    let graph = client.capture(stream, body);
                    drop(graph.step(&format!("capture after a {primitive:?} fault at call {k}"))?);
                }
            }
            plan.disarm();
            ensure!(
                plan.live_executables() == 0,
                "{primitive:?}@{k}: executables leaked"
            );
            usable(&client, stream)?;
        }
    }
    back_to(&client, stream, baseline, "after every fault")
}
