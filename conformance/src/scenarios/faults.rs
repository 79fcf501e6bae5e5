//! The rules about refusals, proven with faults injected into the real
//! driver: after each, the stream is usable, no executable leaks, pool usage
//! returns to baseline, and what was to be written fails its reads.

use crate::workload::UserKernels;
use std::sync::Arc;

use graph_capture::{Builtin, Error, GraphDriver, GraphHandle};

use crate::ensure;
use crate::faulty::{FaultPlan, Faulty, Primitive};
use crate::session::Session;
use crate::support::{
    Fixture, N, NU, Outcome, SENTINEL, Step, back_to, expect_all, expect_claimed, in_use, refused,
    usable,
};

/// A fixture on a faulty client, proven usable, with its pool usage then.
struct Faulted<D: GraphDriver> {
    fx: Fixture<Faulty<D>>,
    plan: Arc<FaultPlan>,
    baseline: (u64, u64),
}

impl<D: UserKernels> Faulted<D> {
    fn new(session: &Session<D>) -> Result<Self, String> {
        let (client, plan) = session.faulty();
        let fx = Fixture::new(client)?;
        usable(&fx.client, fx.stream)?;
        let baseline = in_use(&fx.client, fx.stream)?;
        Ok(Self { fx, plan, baseline })
    }

    /// A graph of `x += one` whose first replay the driver refused, with
    /// the baseline taken once it held its pins, and the refusal.
    fn after_a_failed_replay(&mut self) -> Result<(GraphHandle<Faulty<D>>, Error), String> {
        let graph = self.fx.capture_add()?;
        self.baseline = in_use(&self.fx.client, self.fx.stream)?;
        self.plan.fail(Primitive::Replay, 1);
        let err = refused(self.fx.client.replay(&graph), "replay")?;
        Ok((graph, err))
    }

    /// The checks every fault scenario ends with: the fault fired, no
    /// executable outlives its graph, the stream works, usage is back.
    fn recovered(&self, live_graphs: usize) -> Outcome {
        ensure!(self.plan.injected() > 0, "the fault was never injected");
        ensure!(
            self.plan.live_executables() == live_graphs,
            "{} executables alive for {live_graphs} live graphs",
            self.plan.live_executables()
        );
        usable(&self.fx.client, self.fx.stream)?;
        back_to(
            &self.fx.client,
            self.fx.stream,
            self.baseline,
            "after the fault",
        )
    }
}

/// A driver that refuses to begin leaves the stream as it was found, so
/// prepare-then-begin can be retried.
pub fn rule_02_refused_begin_leaves_stream_as_found<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let f = Faulted::new(session)?;
    f.plan.fail(Primitive::Begin, 1);
    let err = refused(f.fx.capture_add(), "capture with a refused begin")?;
    ensure!(err.contains("injected"), "the driver's refusal: {err}");
    f.fx.expect_x(1.0, "the warmup ran; nothing else")?;
    f.recovered(0)?;
    let graph = f.fx.capture_add().map_err(|e| format!("the retry: {e}"))?;
    f.fx.client.replay(&graph).step("replay")?;
    f.fx.expect_x(3.0, "retry's warmup and one replay")
}

/// A driver that refuses to instantiate: the recording is still closed,
/// no executable leaks, and the written set is claimed.
pub fn rule_05_refused_instantiate_closes_the_recording<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let f = Faulted::new(session)?;
    f.plan.fail(Primitive::Instantiate, 1);
    let err = refused(f.fx.capture_add(), "capture with a refused instantiate")?;
    ensure!(err.contains("injected"), "the driver's refusal: {err}");
    expect_claimed(
        &f.fx.client,
        &f.fx.x,
        "injected",
        "the refused graph's output",
    )?;
    f.fx.client.write_f32(&f.fx.x, &[0.0; NU]).step("rewrite")?;
    f.recovered(0)
}

/// A launch the driver refuses inside the window dooms it; the refusal
/// claims everything the recording would have written.
pub fn rule_09_refused_launch_in_window_claims_everything<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, stream) = (&f.fx.client, f.fx.stream);
    let (a, b) = (&f.fx.x, &f.fx.one);
    let window = client.prepare(stream).step("prepare")?;
    client
        .run_builtin(stream, Builtin::Fill, &[a], N, 1.0)
        .step("warmup a")?;
    client
        .run_builtin(stream, Builtin::Fill, &[b], N, 2.0)
        .step("warmup b")?;
    client.begin(stream, window).step("begin")?;
    client
        .run_builtin(stream, Builtin::Fill, &[a], N, 1.0)
        .step("recorded a")?;
    f.plan.fail(Primitive::Launch, 1);
    ensure!(
        client
            .run_builtin(stream, Builtin::Fill, &[b], N, 2.0)
            .is_err(),
        "the injected launch failure is reported"
    );
    let err = refused(client.instantiate(stream, window), "instantiate")?;
    ensure!(matches!(err, Error::Doomed(_)), "got {err}");
    expect_claimed(client, a, "injected", "a, recorded before the failure")?;
    expect_claimed(client, b, "injected", "b, the failed launch's output")?;
    f.recovered(0)
}

/// A replay the driver refuses claims the graph's written set; the next
/// good replay clears it.
pub fn rule_12_refused_replay_claims_then_good_replay_clears<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let mut f = Faulted::new(session)?;
    let (graph, err) = f.after_a_failed_replay()?;
    ensure!(matches!(err, Error::ReplayFailed { .. }), "got {err}");
    expect_claimed(&f.fx.client, &f.fx.x, "injected", "the graph's output")?;
    f.fx.client.replay(&graph).step("the next replay")?;
    f.fx.expect_x(2.0, "warmup and one good replay")?;
    ensure!(
        f.fx.client.claimed_buffers() == 0,
        "the good replay cleared the claim"
    );
    let replays = f.fx.client.graph_info(&graph).step("graph info")?.replays;
    ensure!(
        replays == 1,
        "the good replay counts, the refused one not: {replays}"
    );
    f.recovered(1)
}

/// A failure after a failed replay replaces its claim: the graph may retry
/// only over bytes its own failure alone left, so a write the driver then
/// refuses makes the retry refuse too, until the buffer is written again.
pub fn a_failure_after_a_failed_replay_refuses_its_retry<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let mut f = Faulted::new(session)?;
    let (graph, _) = f.after_a_failed_replay()?;
    f.plan.fail(Primitive::Copy, 1);
    refused(f.fx.client.write_f32(&f.fx.x, &[7.0; NU]), "write")?;
    let err = refused(f.fx.client.replay(&graph), "the retry over a failed write")?;
    ensure!(matches!(err, Error::Claimed { .. }), "got {err}");
    f.fx.client
        .write_f32(&f.fx.x, &[7.0; NU])
        .step("write again")?;
    f.fx.client.replay(&graph).step("the retry")?;
    f.fx.expect_x(8.0, "the write and one good replay")?;
    f.recovered(1)
}

/// `upload` is best-effort: a failure is counted and logged, the graph is
/// made and replays right.
pub fn rule_14_upload_failure_is_not_fatal<D: UserKernels>(session: &Session<D>) -> Outcome {
    let mut f = Faulted::new(session)?;
    f.plan.fail(Primitive::Upload, 1);
    let graph = f.fx.capture_add()?;
    let usage = f.fx.client.usage(f.fx.stream).step("usage")?;
    ensure!(
        usage.upload_failures == 1,
        "the failure is counted: {}",
        usage.upload_failures
    );
    f.baseline = in_use(&f.fx.client, f.fx.stream)?;
    f.fx.client.replay(&graph).step("replay")?;
    f.fx.expect_x(2.0, "the graph replays without its upload")?;
    f.recovered(1)
}

/// A page the driver refuses: a clear error, nothing lost, the next
/// allocation works.
pub fn refused_page_allocation_loses_nothing<D: UserKernels>(session: &Session<D>) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, stream) = (&f.fx.client, f.fx.stream);
    let pages = client.usage(stream).step("usage")?.device.pages;
    f.plan.fail(Primitive::Allocate, 1);
    let err = refused(
        client.allocate(stream, 64 << 20),
        "a page the driver refuses",
    )?;
    ensure!(matches!(err, Error::Driver(_)), "got {err}");
    ensure!(
        client.usage(stream).step("usage")?.device.pages == pages,
        "no page was added"
    );
    expect_all(client, &f.fx.one, 1.0, "existing buffers are intact")?;
    drop(
        client
            .allocate(stream, 64 << 20)
            .step("the next allocation")?,
    );
    f.recovered(0)
}

/// An eager launch the driver refuses claims its outputs; rewriting them
/// clears the claim.
pub fn refused_eager_launch_claims_its_outputs<D: UserKernels>(session: &Session<D>) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, stream, x, y) = (&f.fx.client, f.fx.stream, &f.fx.one, &f.fx.x);
    f.plan.fail(Primitive::Launch, 1);
    refused(
        client.run_builtin(stream, Builtin::Axpy, &[x, y], N, 1.0),
        "axpy",
    )?;
    expect_claimed(client, y, "injected", "axpy's output")?;
    expect_all(client, x, 1.0, "axpy's input is not claimed")?;
    // A launch reading the claimed buffer is refused and spreads the claim.
    let z = client.create_f32(stream, &[0.0; NU]).step("z")?;
    refused(
        client.run_builtin(stream, Builtin::Copy, &[y, &z], N, 0.0),
        "copy from y",
    )?;
    expect_claimed(client, &z, "injected", "copy's output")?;
    client.write_f32(y, &[2.0; NU]).step("rewrite y")?;
    client
        .run_builtin(stream, Builtin::Copy, &[y, &z], N, 0.0)
        .step("copy again")?;
    expect_all(client, &z, 2.0, "the claim is cleared")?;
    drop(z);
    client.write_f32(y, &[0.0; NU]).step("reset y")?;
    f.recovered(0)
}

/// A host-to-device copy the driver refuses claims its destination.
pub fn refused_copy_claims_its_destination<D: UserKernels>(session: &Session<D>) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, x) = (&f.fx.client, &f.fx.x);
    f.plan.fail(Primitive::Copy, 1);
    refused(client.write_f32(x, &[5.0; NU]), "write")?;
    expect_claimed(client, x, "injected", "the write's destination")?;
    client.write_f32(x, &[5.0; NU]).step("write again")?;
    f.fx.expect_x(5.0, "the second write")?;
    f.recovered(0)
}

/// A fence that fails keeps the frees waiting for it; the next good sync
/// releases them.
pub fn refused_fence_keeps_deferred_frees<D: UserKernels>(session: &Session<D>) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, stream) = (&f.fx.client, f.fx.stream);
    drop(
        client
            .create_f32(stream, &[1.0; NU])
            .step("a buffer to free")?,
    );
    f.plan.fail(Primitive::Fence, 1);
    refused(client.sync(stream), "sync with a failing fence")?;
    let usage = client.usage(stream).step("usage")?;
    ensure!(usage.pending_drops > 0, "the frees still wait for a fence");
    f.recovered(0)
}

/// A read whose fence fails leaves its copy possibly still running into the
/// pinned staging slice: that slice waits in the drop queue for a good fence
/// instead of going straight back to the pool, where the next write would
/// stage its bytes into it and the late copy would overwrite them.
pub fn refused_fence_on_read_keeps_its_staging<D: UserKernels>(session: &Session<D>) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, stream) = (&f.fx.client, f.fx.stream);
    let y = client.create_f32(stream, &[0.0; NU]).step("y")?;
    client.sync(stream).step("sync")?;
    f.plan.fail(Primitive::Fence, 1);
    refused(client.read(&f.fx.one), "a read whose fence fails")?;
    let usage = client.usage(stream).step("usage")?;
    ensure!(
        usage.pending_drops > 0,
        "the read's staging slice went back to the pool without a fence"
    );
    client.write_f32(&y, &[6.0; NU]).step("write y")?;
    expect_all(client, &y, 6.0, "a write staged after the failed read")?;
    expect_all(client, &f.fx.one, 1.0, "the read, retried")?;
    drop(y);
    f.recovered(0)
}

/// A refusal or failed replay that claims a buffer the user already dropped
/// (an intermediate of the recorded run) leaves no claim behind once the
/// buffer's memory is free: nobody can read it then, so nothing would ever
/// clear it.
pub fn claims_on_dropped_buffers_are_not_kept<D: UserKernels>(session: &Session<D>) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, stream, x) = (&f.fx.client, f.fx.stream, &f.fx.x);
    let body = |_| f.fx.add_through_intermediate().map(drop);
    f.plan.fail(Primitive::Instantiate, 1);
    refused(client.capture(stream, body), "a refused instantiate")?;
    expect_claimed(client, x, "injected", "the refused graph's output")?;
    client.write_f32(x, &[0.0; NU]).step("rewrite x")?;
    // The intermediate's queued free is the last hold on its memory.
    client.sync(stream).step("sync")?;
    ensure!(
        client.claimed_buffers() == 0,
        "{} claims left after the refusal's live output was rewritten",
        client.claimed_buffers()
    );
    let (graph, ()) = client.capture(stream, body).step("capture")?;
    f.plan.fail(Primitive::Replay, 1);
    refused(client.replay(&graph), "a refused replay")?;
    client.destroy(&graph).step("destroy")?;
    client.write_f32(x, &[0.0; NU]).step("rewrite x")?;
    ensure!(
        client.claimed_buffers() == 0,
        "{} claims left after the failed replay's live output was rewritten",
        client.claimed_buffers()
    );
    drop(graph);
    f.recovered(0)
}

/// A destroy whose sync fails cannot know the graph's replays finished: the
/// memory it pinned waits for a good fence, so no allocation made meanwhile
/// shares memory a replay may still write.
pub fn destroy_with_a_failed_sync_keeps_the_pins_fenced<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, stream, x) = (&f.fx.client, f.fx.stream, &f.fx.x);
    let (graph, tmp) = client
        .capture(stream, |_| {
            f.fx.add_through_intermediate().map(|tmp| tmp.placement())
        })
        .step("capture")?;
    // The intermediate's own handle is gone and fenced: only the graph's
    // pins hold its slice now.
    client.sync(stream).step("sync after the capture")?;
    client.replay(&graph).step("replay")?;
    // Read without a sync, which would prove the replays done.
    let held =
        |what| -> Result<u64, String> { Ok(client.usage(stream).step(what)?.device.in_use_bytes) };
    let pinned = held("usage before the destroy")?;
    f.plan.fail(Primitive::Fence, 1);
    client.destroy(&graph).step("destroy with a failing sync")?;
    let after = held("usage after the destroy")?;
    ensure!(
        after == pinned,
        "the destroyed graph's pins went back to the pool ({after} bytes in use, {pinned} \
         before) with no fence to prove its replays done"
    );
    let checks_before = f.plan.calls(Primitive::Fence);
    let fresh = client
        .create_f32(stream, &[SENTINEL; NU])
        .step("an allocation after the destroy")?;
    // Reuse is right once a later fence (or a query that the device passed
    // the pins' signal) succeeded; none is armed to fail any more.
    let proven = f.plan.calls(Primitive::Fence) > checks_before;
    ensure!(
        proven || !fresh.placement().overlaps(&tmp),
        "a new buffer {:?} shares the destroyed graph's intermediate {tmp:?} before any \
         fence proved its replays done",
        fresh.placement()
    );
    expect_all(client, &fresh, SENTINEL, "the new buffer")?;
    expect_all(client, x, 2.0, "warmup and one replay")?;
    drop(fresh);
    client.write_f32(x, &[0.0; NU]).step("reset x")?;
    f.recovered(0)
}

/// Faults at every step of a capture in turn: whichever call fails, no
/// stream is left recording, no executable leaks, and the stream captures
/// right afterwards.
pub fn every_capture_fault_recovers<D: UserKernels>(session: &Session<D>) -> Outcome {
    let f = Faulted::new(session)?;
    let (client, stream, x) = (&f.fx.client, f.fx.stream, &f.fx.x);
    let body = |_| f.fx.add_through_intermediate().map(drop);
    for primitive in [
        Primitive::Begin,
        Primitive::Instantiate,
        Primitive::Launch,
        Primitive::Fence,
        Primitive::Upload,
    ] {
        for k in 1..=3 {
            client.write_f32(x, &[0.0; NU]).step("reset x")?;
            f.plan.fail(primitive, k);
            let first = client.capture(stream, body);
            f.plan.disarm();
            match first {
                Ok((graph, ())) => client.replay(&graph).step("replay")?,
                Err(_) => {
                    // The refusal may have claimed x; a good write clears it.
                    client.write_f32(x, &[0.0; NU]).step("reset x")?;
                    let retry = client.capture(stream, body);
                    drop(retry.step(&format!("capture after a {primitive:?} fault at call {k}"))?);
                }
            }
            ensure!(
                f.plan.live_executables() == 0,
                "{primitive:?}@{k}: executables leaked"
            );
            usable(client, stream)?;
        }
    }
    client.write_f32(x, &[0.0; NU]).step("reset x")?;
    back_to(client, stream, f.baseline, "after every fault")
}

/// A failure writing a view claims its whole buffer, every view of it
/// included: what is tracked per allocation stays so. A write of a view
/// that succeeds, eager or replayed, leaves the rest claimed; one that
/// writes every byte clears the claim.
pub fn a_failed_write_to_a_view_claims_the_buffer_until_all_of_it_is_written<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const HALF: u32 = 64;
    let f = Faulted::new(session)?;
    let (client, stream) = (&f.fx.client, f.fx.stream);
    let buffer = client
        .create_f32(stream, &[0.0; 2 * HALF as usize])
        .step("buffer")?;
    let low = buffer.range(0, u64::from(HALF) * 4).step("low")?;
    let high = buffer
        .range(u64::from(HALF) * 4, u64::from(HALF) * 4)
        .step("high")?;
    f.plan.fail(Primitive::Copy, 1);
    refused(client.write_f32(&low, &[1.0; HALF as usize]), "write low")?;
    expect_claimed(client, &buffer, "injected", "the whole buffer")?;
    expect_claimed(client, &high, "injected", "the other view")?;
    client
        .write_f32(&high, &[2.0; HALF as usize])
        .step("write high")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&high], HALF, 3.0)
        .step("fill high")?;
    expect_claimed(client, &low, "injected", "after writes of the other view")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.run_builtin(stream, Builtin::Fill, &[&low], HALF, 4.0)
        })
        .step("capture")?;
    client.replay(&graph).step("replay")?;
    expect_claimed(client, &high, "injected", "after a replay writing low")?;
    client
        .write_f32(&buffer, &[5.0; 2 * HALF as usize])
        .step("write all")?;
    expect_all(client, &buffer, 5.0, "written whole")?;
    client.replay(&graph).step("replay")?;
    expect_all(client, &low, 4.0, "low, replayed")?;
    expect_all(client, &high, 5.0, "high, as written")?;
    client.destroy(&graph).step("destroy")?;
    drop((graph, low, high, buffer));
    client.sync(stream).step("sync")?;
    f.recovered(0)
}
