//! Capture calls out of order, host syncs inside a window, and bad input:
//! each refused with a clear error that changes nothing.

use crate::workload::{UserKernel, UserKernels, Workload};
use graph_capture::{Builtin, Config, Error, Phase, StreamId, WindowId};

use crate::ensure;
use crate::session::Session;
use crate::support::{
    Fixture, N, NU, Outcome, Step, back_to, expect, expect_all, in_use, ramp, refused, usable,
};

/// `begin` before `prepare`, a second `prepare`, `instantiate` with no
/// window, `begin` twice: each refused, state unchanged, and the right call
/// then succeeds.
pub fn rule_01_out_of_order_calls_change_nothing<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);

    let err = refused(client.begin(stream, WindowId(999)), "begin before prepare")?;
    ensure!(
        matches!(err, Error::OutOfOrder { call: "begin", .. }),
        "begin refused with {err}"
    );
    let err = refused(
        client.instantiate(stream, WindowId(999)),
        "instantiate with no window",
    )?;
    ensure!(
        matches!(
            err,
            Error::OutOfOrder {
                call: "instantiate",
                ..
            }
        ),
        "got {err}"
    );
    usable(client, stream)?;

    let window = client.prepare(stream).step("prepare")?;
    let err = refused(client.prepare(stream), "second prepare")?;
    ensure!(
        matches!(
            err,
            Error::OutOfOrder {
                call: "prepare",
                ..
            }
        ),
        "got {err}"
    );
    let err = refused(
        client.begin(stream, WindowId(window.0 + 100)),
        "begin of another window",
    )?;
    ensure!(matches!(err, Error::OutOfOrder { .. }), "got {err}");
    fx.add().step("warmup")?;
    client.begin(stream, window).step("the expected begin")?;
    let err = refused(client.begin(stream, window), "begin twice")?;
    ensure!(matches!(err, Error::OutOfOrder { .. }), "got {err}");
    let err = refused(client.prepare(stream), "prepare while recording")?;
    ensure!(matches!(err, Error::OutOfOrder { .. }), "got {err}");
    fx.add().step("recorded")?;
    let graph = client
        .instantiate(stream, window)
        .step("the expected instantiate")?;
    client.replay(&graph).step("replay")?;
    fx.expect_x(2.0, "warmup + one replay")
}

/// A window closed from `Prepared` (warmup failed, `begin` never ran)
/// disarms everything: pools, info pins, state.
pub fn rule_03_close_from_prepared_disarms<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    usable(&client, stream)?;
    let baseline = in_use(&client, stream)?;
    let window = client.prepare(stream).step("prepare")?;
    let warm = client
        .create_f32(stream, &[4.0; NU])
        .step("warmup allocation")?;
    drop(warm);
    let err = refused(
        client.instantiate(stream, window),
        "instantiate from Prepared",
    )?;
    ensure!(matches!(err, Error::OutOfOrder { .. }), "got {err}");
    // Disarmed: the warmup's slice is free again, nothing is retained.
    back_to(&client, stream, baseline, "after closing from Prepared")?;
    let window = client.prepare(stream).step("prepare again")?;
    client.begin(stream, window).step("begin")?;
    let graph = client
        .instantiate(stream, window)
        .step("an empty window instantiates")?;
    client.replay(&graph).step("replay of the empty graph")?;
    usable(&client, stream)
}

/// Info bytes first seen inside a window that yields no graph were staged
/// by a recorded copy that never ran: an eager launch passing the same
/// bytes afterwards stages its own instead of reading the unwritten slice.
pub fn a_doomed_windows_info_is_never_served<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    // 7.25 has not been filled before on this stream: its info is new.
    let recorded = client.run_builtin(stream, Builtin::Fill, &[&x], N, 7.25);
    let bad = client.run_builtin(stream, Builtin::Add, &[&x], N, 0.0);
    ensure!(bad.is_err(), "a launch with too few buffers is refused");
    refused(client.instantiate(stream, window), "the doomed window")?;
    drop(recorded);
    client
        .run_builtin(stream, Builtin::Fill, &[&x], N, 7.25)
        .step("the same fill, eagerly")?;
    expect_all(
        &client,
        &x,
        7.25,
        "x after an eager fill with the doomed window's info",
    )
}

/// No path out of `instantiate` leaves the stream recording: after a
/// refused, doomed, and successful close alike, a read works.
pub fn rule_04_instantiate_always_leaves_capture_mode<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    // Doomed by a bad launch inside the window: the recording would seal
    // without it.
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    let bad = client.run_builtin(stream, Builtin::Add, &[&x], N, 0.0);
    ensure!(bad.is_err(), "a launch with too few buffers is refused");
    let empty = client.allocate(stream, 0);
    ensure!(
        matches!(empty, Err(Error::EmptyBuffer)),
        "empty allocation refused"
    );
    let err = refused(client.instantiate(stream, window), "instantiate doomed")?;
    ensure!(
        matches!(&err, Error::Doomed(cause) if matches!(**cause, Error::BadLaunch(_))),
        "the first refusal explains it: {err}"
    );
    ensure!(client.phase(stream).step("phase")? == Phase::None, "closed");
    expect_all(&client, &x, 1.0, "nothing recorded wrote x")?;
    // A window doomed by a failed operation.
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    let grow = client
        .allocate(stream, 64 << 20)
        .step("allocate a page while recording")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&x], N, 9.0)
        .step("recorded fill")?;
    let err = refused(client.instantiate(stream, window), "instantiate doomed")?;
    ensure!(matches!(err, Error::Doomed(_)), "got {err}");
    drop(grow);
    ensure!(
        client.read(&x).is_err(),
        "x was to be written by the refused graph"
    );
    client.write_f32(&x, &[1.0; NU]).step("rewrite")?;
    expect_all(&client, &x, 1.0, "read after a refused window")?;
    usable(&client, stream)
}

/// A window closed by a caller that does not own it (a stale window id) is
/// closed all the same and yields no graph.
pub fn rule_06_foreign_close_yields_no_graph<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    let stale = client.prepare(stream).step("first prepare")?;
    refused(
        client.instantiate(stream, stale),
        "close the unopened window",
    )?;
    let window = client.prepare(stream).step("second prepare")?;
    client.begin(stream, window).step("begin")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&x], N, 5.0)
        .step("recorded fill")?;
    let err = refused(
        client.instantiate(stream, stale),
        "instantiate by the stale window",
    )?;
    ensure!(matches!(err, Error::Abandoned { .. }), "got {err}");
    ensure!(
        client.live_graphs() == 0,
        "an abandoned window made a graph"
    );
    let err = refused(
        client.instantiate(stream, window),
        "the owner's instantiate",
    )?;
    ensure!(
        matches!(err, Error::OutOfOrder { .. }),
        "the window is already closed: {err}"
    );
    crate::support::expect_claimed(&client, &x, "does not own it", "x was to be written")?;
    usable(&client, stream)
}

/// A read, a sync and a replay inside a recording window are refused on
/// the spot; the window is not harmed and seals afterwards.
pub fn rule_08_host_sync_refused_while_recording<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let earlier = fx.capture_add()?;
    let window = client.prepare(stream).step("prepare")?;
    fx.expect_x(1.0, "reads are fine during warmup")?;
    fx.add().step("warmup")?;
    client.begin(stream, window).step("begin")?;
    fx.add().step("recorded")?;
    let err = refused(client.read(&fx.x), "read while recording")?;
    ensure!(matches!(err, Error::SyncWhileRecording(_)), "got {err}");
    let err = refused(client.sync(stream), "sync while recording")?;
    ensure!(matches!(err, Error::SyncWhileRecording(_)), "got {err}");
    let err = refused(client.replay(&earlier), "replay while recording")?;
    ensure!(matches!(err, Error::ReplayWhileRecording(_)), "got {err}");
    // A host sync inside the recording invalidates it, as on CUDA.
    let err = refused(
        client.instantiate(stream, window),
        "instantiate after refusals",
    )?;
    ensure!(
        matches!(&err, Error::Doomed(cause) if matches!(**cause, Error::SyncWhileRecording(_))),
        "the sync dooms the window: {err}"
    );
    ensure!(
        matches!(client.read(&fx.x), Err(Error::Claimed { .. })),
        "the add it would have replayed claimed x"
    );
    client.write_f32(&fx.x, &[2.0; NU]).step("rewrite x")?;
    fx.expect_x(2.0, "after the rewrite")?;
    // A window without a sync seals.
    let window = client.prepare(stream).step("prepare")?;
    fx.add().step("warmup")?;
    client.begin(stream, window).step("begin")?;
    fx.add().step("recorded")?;
    let graph = client.instantiate(stream, window).step("instantiate")?;
    fx.expect_x(3.0, "after the warmup")?;
    client.replay(&graph).step("replay")?;
    fx.expect_x(4.0, "after one replay")
}

/// Empty, oversized and mis-sized buffers, bad launches, buffers of a
/// destroyed stream and unknown streams: clear errors, nothing lost.
pub fn bad_input_is_refused_and_loses_nothing<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client_with(Config {
        max_allocation_bytes: 1 << 20,
        ..Config::default()
    });
    let stream = client.create_stream().step("stream")?;
    let other = client.create_stream().step("other stream")?;
    let x = client.create_f32(stream, &ramp(NU, 1.0)).step("x")?;
    let y = client.create_f32(other, &ramp(NU, 1.0)).step("y")?;

    ensure!(
        matches!(client.allocate(stream, 0), Err(Error::EmptyBuffer)),
        "empty"
    );
    ensure!(
        matches!(
            client.allocate(stream, 2 << 20),
            Err(Error::TooLarge { .. })
        ),
        "oversized"
    );
    ensure!(
        matches!(client.write(&x, &[0u8; 3]), Err(Error::SizeMismatch { .. })),
        "short write"
    );
    // A buffer whose stream was destroyed: every later use is refused.
    let gone = client.create_stream().step("a stream to destroy")?;
    let orphan = client.create_f32(gone, &[1.0; NU]).step("orphan")?;
    client.destroy_stream(gone).step("destroy it")?;
    let err = refused(
        client.run_builtin(stream, Builtin::Add, &[&x, &orphan], N, 0.0),
        "a buffer of a destroyed stream",
    )?;
    ensure!(
        matches!(err, Error::UnknownStream(s) if s == gone),
        "got {err}"
    );
    let err = refused(
        client.run_builtin(stream, Builtin::Add, &[&x], N, 0.0),
        "one binding",
    )?;
    ensure!(matches!(err, Error::BadLaunch(_)), "got {err}");
    let err = refused(
        client.run_builtin(stream, Builtin::Fill, &[&x], 1000, 0.0),
        "n too big",
    )?;
    ensure!(matches!(err, Error::BadLaunch(_)), "got {err}");
    // One element past a buffer's end, with the kernel compiled already (a
    // launch's checks take their quickest path then): refused, nothing
    // written.
    let z = client.create_f32(stream, &[0.0; NU]).step("z")?;
    let short = client.create_f32(stream, &[1.0; NU - 1]).step("short")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&z], N, 5.0)
        .step("fill z")?;
    let err = refused(
        client.run_builtin(stream, Builtin::Fill, &[&z], N + 1, 7.0),
        "one element too many",
    )?;
    ensure!(matches!(err, Error::BadLaunch(_)), "got {err}");
    let err = refused(
        client.run_builtin(stream, Builtin::Add, &[&z, &z], 1, 0.0),
        "a written buffer bound twice",
    )?;
    ensure!(matches!(err, Error::KernelMismatch { .. }), "got {err}");
    let err = refused(
        client.run_builtin(stream, Builtin::Add, &[&z, &short], N, 0.0),
        "an addend one element short",
    )?;
    ensure!(matches!(err, Error::BadLaunch(_)), "got {err}");
    expect(&client, &z, &[5.0; NU], "z, after the refused launches")?;
    let workload = Workload::new(client.device()).step("kernels")?;
    // SAFETY: the one launch is refused (17 bindings) before any device.
    #[allow(unsafe_code)]
    let kernel = unsafe { workload.kernel(UserKernel::Scale) };
    let many: Vec<&graph_capture::Buffer> = (0..17).map(|_| &x).collect();
    let err = refused(
        client.launch(stream, kernel, [1, 1, 1], &many, &[], &[0; 12]),
        "17 bindings",
    )?;
    ensure!(matches!(err, Error::KernelMismatch { .. }), "got {err}");
    let ghost = StreamId(9999);
    ensure!(
        matches!(client.allocate(ghost, 4), Err(Error::UnknownStream(_))),
        "ghost"
    );
    ensure!(
        matches!(client.sync(ghost), Err(Error::UnknownStream(_))),
        "ghost sync"
    );

    expect(&client, &x, &ramp(NU, 1.0), "x is untouched")?;
    expect(&client, &y, &ramp(NU, 1.0), "y is untouched")?;
    ensure!(
        client.claimed_buffers() == 0,
        "refused input claimed nothing"
    );

    client.destroy_stream(other).step("destroy stream")?;
    ensure!(
        matches!(client.read(&y), Err(Error::UnknownStream(_))),
        "read after destroy"
    );
    ensure!(
        matches!(client.destroy_stream(other), Err(Error::UnknownStream(_))),
        "destroy twice"
    );
    usable(&client, stream)
}

/// Two clients over one device number their streams, buffers and graphs
/// alike: a buffer or graph of one, handed to the other, is refused instead
/// of naming the other's memory or graph.
pub fn handles_of_another_client_are_refused<D: UserKernels>(session: &Session<D>) -> Outcome {
    let mine = Fixture::new(session.client())?;
    let theirs = Fixture::new(session.client())?;
    ensure!(
        mine.stream == theirs.stream,
        "both clients number their first stream alike"
    );
    let (client, stream) = (&mine.client, mine.stream);
    let err = refused(
        client.run_builtin(stream, Builtin::Fill, &[&theirs.x], N, 9.0),
        "a launch on another client's buffer",
    )?;
    ensure!(matches!(err, Error::OtherClient(_)), "got {err}");
    let err = refused(
        client.write_f32(&theirs.x, &[9.0; NU]),
        "a write to another client's buffer",
    )?;
    ensure!(matches!(err, Error::OtherClient(_)), "got {err}");
    let err = refused(
        client.read(&theirs.one),
        "a read of another client's buffer",
    )?;
    ensure!(matches!(err, Error::OtherClient(_)), "got {err}");
    mine.expect_x(0.0, "this client's x")?;
    theirs.expect_x(0.0, "the other client's x")?;

    let my_graph = mine.capture_add()?;
    let their_graph = theirs.capture_add()?;
    ensure!(
        my_graph.id() == their_graph.id(),
        "both clients number their first graph alike"
    );
    let err = refused(
        client.replay(&their_graph),
        "a replay of another client's graph",
    )?;
    ensure!(matches!(err, Error::UnknownGraph(_)), "got {err}");
    client
        .destroy(&their_graph)
        .step("destroying another client's graph is a no-op")?;
    ensure!(
        client.is_live(&my_graph),
        "this client's graph is untouched"
    );
    ensure!(
        !client.is_live(&their_graph),
        "another client's graph is not this one's"
    );
    client.replay(&my_graph).step("replay")?;
    mine.expect_x(2.0, "warmup and one replay, on this client")?;
    theirs.expect_x(1.0, "the warmup only, on the other client")
}
