//! Buffers shared across streams (rule 20): work on one stream that uses
//! what another wrote, or overwrites what another reads, is ordered after
//! it on the device; memory another stream still uses is not reused; claims
//! follow a buffer to every stream.

use graph_capture::{Buffer, Builtin, Client, Error, StreamId};

use crate::ensure;
use crate::faulty::Primitive;
use crate::session::Session;
use crate::support::{N, NU, Outcome, Step, claim_by_refused_window, expect_all, refused, usable};
use crate::workload::{UserKernels, Workload};

/// Two fresh streams of `client`.
fn two_streams<D: UserKernels>(client: &Client<D>) -> Result<(StreamId, StreamId), String> {
    Ok((
        client.create_stream().step("a stream")?,
        client.create_stream().step("another stream")?,
    ))
}

/// Rows and columns of the matrix whose product makes a stream busy.
const BUSY: u32 = 512;

/// Work that keeps a stream busy for a while (a matrix-vector product of
/// its own buffers), so that a stream that is not ordered after it runs
/// ahead of it.
pub(super) struct Busy<D: UserKernels> {
    kernels: Workload<D>,
    w: Buffer,
    x: Buffer,
    y: Buffer,
}

impl<D: UserKernels> Busy<D> {
    pub(super) fn on(
        session: &Session<D>,
        client: &Client<D>,
        stream: StreamId,
    ) -> Result<Self, String> {
        let kernels = Workload::new(session.device()).map_err(|e| format!("kernels: {e}"))?;
        let n = (BUSY * BUSY) as usize;
        Ok(Self {
            kernels,
            w: client.create_f32(stream, &vec![0.5; n]).step("busy w")?,
            x: client
                .create_f32(stream, &vec![1.0; BUSY as usize])
                .step("busy x")?,
            y: client
                .allocate(stream, u64::from(BUSY) * 4)
                .step("busy y")?,
        })
    }

    pub(super) fn run(&self, client: &Client<D>, stream: StreamId) -> Result<(), Error> {
        self.kernels
            .matvec(client, stream, &self.w, &self.x, &self.y, BUSY, BUSY)
    }
}

/// A producer on one stream and a consumer on another, 1,000 rounds, no
/// host wait between them: each round the producer overwrites what the
/// consumer read the round before (after busy work of its own), and the
/// consumer adds it up. The sum is the model's only if every read saw its
/// round's write and no write overtook a read.
pub fn rule_20_producer_and_consumer_on_two_streams<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const ROUNDS: u32 = 1000;
    let client = session.client();
    let (producer, consumer) = two_streams(&client)?;
    let busy = Busy::on(session, &client, producer)?;
    let p = client.create_f32(producer, &[0.0; NU]).step("p")?;
    let sum = client.create_f32(consumer, &[0.0; NU]).step("sum")?;
    for round in 1..=ROUNDS {
        if round % 100 == 1 {
            busy.run(&client, producer).step("busy work")?;
        }
        client
            .run_builtin(producer, Builtin::Fill, &[&p], N, round as f32)
            .step("produce")?;
        client
            .run_builtin(consumer, Builtin::Add, &[&sum, &p], N, 0.0)
            .step("consume")?;
    }
    let want = (ROUNDS * (ROUNDS + 1) / 2) as f32;
    expect_all(&client, &sum, want, "the sum of every round")?;
    usable(&client, consumer)?;
    usable(&client, producer)
}

/// A stream that overwrites what another still reads waits for the read:
/// the reader copies the old values, however busy it was before.
pub fn rule_20_write_after_read_across_streams<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let (owner, reader) = two_streams(&client)?;
    let busy = Busy::on(session, &client, reader)?;
    for round in 0..20 {
        let old = round as f32;
        let p = client.create_f32(owner, &[old; NU]).step("p")?;
        let copy = client.allocate(reader, u64::from(N) * 4).step("copy")?;
        // Shared before the race: the reader's first use orders it after
        // the write that filled it.
        client
            .run_builtin(reader, Builtin::Fill, &[&copy], N, -1.0)
            .step("clear the copy")?;
        busy.run(&client, reader).step("busy reader")?;
        client
            .run_builtin(reader, Builtin::Copy, &[&p, &copy], N, 0.0)
            .step("read p")?;
        client
            .run_builtin(owner, Builtin::Fill, &[&p], N, 1000.0)
            .step("overwrite p")?;
        expect_all(&client, &copy, old, "the reader's copy")?;
        expect_all(&client, &p, 1000.0, "the overwrite")?;
    }
    usable(&client, owner)
}

/// A buffer dropped on its stream while another stream's launch over it is
/// still queued: its memory is not handed out again before that launch ran.
pub fn rule_20_memory_another_stream_uses_is_not_reused<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let (owner, user) = two_streams(&client)?;
    let busy = Busy::on(session, &client, user)?;
    let copy = client.allocate(user, u64::from(N) * 4).step("copy")?;
    client
        .run_builtin(user, Builtin::Fill, &[&copy], N, 0.0)
        .step("clear")?;
    for _ in 0..20 {
        let p = client.create_f32(owner, &[7.0; NU]).step("p")?;
        busy.run(&client, user).step("busy user")?;
        client
            .run_builtin(user, Builtin::Copy, &[&p, &copy], N, 0.0)
            .step("copy p")?;
        drop(p);
        // Whatever the owner allocates next is not p's memory while the
        // copy may still read it: what it writes there would reach the copy.
        let next = client.allocate(owner, u64::from(N) * 4).step("next")?;
        client
            .run_builtin(owner, Builtin::Fill, &[&next], N, -5.0)
            .step("fill next")?;
        expect_all(&client, &copy, 7.0, "the copy")?;
    }
    usable(&client, owner)
}

/// A buffer a failure claimed fails a read with that claim on any stream,
/// and what the refused launch would have written is claimed in turn.
pub fn rule_20_claims_follow_a_buffer_to_every_stream<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let (owner, other) = two_streams(&client)?;
    let p = client.create_f32(owner, &[1.0; NU]).step("p")?;
    let q = client.create_f32(other, &[2.0; NU]).step("q")?;
    claim_by_refused_window(&client, owner, &[&p])?;
    let err = refused(
        client.run_builtin(other, Builtin::Add, &[&q, &p], N, 0.0),
        "a launch on another stream reading the claimed buffer",
    )?;
    ensure!(
        err.to_string().contains("allocated while"),
        "refused with {err}, not the claim"
    );
    ensure!(
        matches!(client.read(&q), Err(Error::Claimed { .. })),
        "what the refused launch would have written is claimed"
    );
    client
        .run_builtin(other, Builtin::Fill, &[&p], N, 4.0)
        .step("a write on the other stream clears the claim")?;
    client.write_f32(&q, &[2.0; NU]).step("rewrite q")?;
    client
        .run_builtin(other, Builtin::Add, &[&q, &p], N, 0.0)
        .step("the launch again")?;
    expect_all(&client, &q, 6.0, "q")?;
    expect_all(&client, &p, 4.0, "p, read on its own stream")?;
    ensure!(client.claimed_buffers() == 0, "claims left");
    Ok(())
}

/// A stream that waited for another asks no event for what it is already
/// ordered after; one that did not asks one, once, whatever it reads.
pub fn rule_20_no_wait_for_what_a_stream_already_waited_past<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let (a, b) = two_streams(&client)?;
    let p = client.create_f32(a, &[3.0; NU]).step("p")?;
    let q = client.create_f32(a, &[4.0; NU]).step("q")?;
    let sum = client.create_f32(b, &[0.0; NU]).step("sum")?;
    let events = || plan.calls(Primitive::RecordEvent);
    let before = events();
    client
        .run_builtin(b, Builtin::Add, &[&sum, &p], N, 0.0)
        .step("b reads p")?;
    client
        .run_builtin(b, Builtin::Add, &[&sum, &p], N, 0.0)
        .step("b reads p again")?;
    ensure!(
        events() == before + 1,
        "{} events for one producer",
        events() - before
    );
    client.wait(b, a).step("b waits for a")?;
    ensure!(events() == before + 2, "the explicit wait is one event");
    client
        .run_builtin(b, Builtin::Add, &[&sum, &q], N, 0.0)
        .step("b reads q, written before the wait")?;
    ensure!(
        events() == before + 2,
        "a read of what b already waited past asked for an event"
    );
    expect_all(&client, &sum, 10.0, "sum")?;
    ensure!(
        matches!(client.wait(b, b), Ok(())),
        "a stream is ordered after itself"
    );
    Ok(())
}

/// A graph over a buffer another stream writes: each replay waits for the
/// write before it and each write for the replay before it, with no host
/// wait; the sum is the model's. A buffer of a stream that records is
/// shared only once its window closes.
pub fn rule_20_a_graph_over_another_streams_buffer_replays_in_order<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const ROUNDS: u32 = 100;
    let client = session.client();
    let (upload, compute) = two_streams(&client)?;
    let busy = Busy::on(session, &client, upload)?;
    let p = client.create_f32(upload, &[0.0; NU]).step("p")?;
    let sum = client.create_f32(compute, &[0.0; NU]).step("sum")?;
    let (graph, ()) = client
        .capture(compute, |_| {
            client.run_builtin(compute, Builtin::Add, &[&sum, &p], N, 0.0)
        })
        .step("a capture reading the upload stream's buffer")?;
    for round in 1..=ROUNDS {
        if round % 10 == 1 {
            busy.run(&client, upload).step("busy upload")?;
        }
        client
            .run_builtin(upload, Builtin::Fill, &[&p], N, round as f32)
            .step("upload")?;
        client.replay(&graph).step("replay")?;
    }
    let want = (ROUNDS * (ROUNDS + 1) / 2) as f32;
    expect_all(&client, &sum, want, "the sum of every round")?;
    let y = client.create_f32(upload, &[5.0; NU]).step("y")?;
    let x = client.create_f32(compute, &[0.0; NU]).step("x")?;
    let window = client.prepare(upload).step("prepare")?;
    client.begin(upload, window).step("begin")?;
    let err = refused(
        client.run_builtin(compute, Builtin::Add, &[&x, &y], N, 0.0),
        "sharing a buffer of a stream that records",
    )?;
    ensure!(
        matches!(err, Error::SharedWhileRecording { .. }),
        "refused with {err}"
    );
    drop(client.instantiate(upload, window));
    client
        .run_builtin(compute, Builtin::Add, &[&x, &y], N, 0.0)
        .step("shared once the window closed")?;
    expect_all(&client, &x, 5.0, "x")?;
    usable(&client, compute)
}

/// Fork and join inside a capture (rule 21): the recording stream's thread
/// makes another stream wait for it, which joins the window; that stream's
/// launches are recorded into the same graph; the recording stream waits
/// for it again before the window closes. The graph replays what eager
/// runs compute, 100 times, and holds every branch's launches.
pub fn rule_21_fork_join_capture_replays_like_eager<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const REPLAYS: usize = 100;
    let client = session.client();
    let (a, b) = two_streams(&client)?;
    let x = client.create_f32(a, &[0.0; NU]).step("x")?;
    let z = client.create_f32(a, &[0.0; NU]).step("z")?;
    let one = client.create_f32(a, &[1.0; NU]).step("one")?;
    let y = client.create_f32(b, &[0.0; NU]).step("y")?;
    let step = |_| -> Result<(), Error> {
        client.run_builtin(a, Builtin::Fill, &[&x], N, 2.0)?;
        client.wait(b, a)?; // fork: b joins a's window while a records
        client.run_builtin(b, Builtin::Add, &[&y, &x], N, 0.0)?;
        client.run_builtin(a, Builtin::Add, &[&z, &one], N, 0.0)?;
        client.wait(a, b)?; // join: b's work is a's again
        client.run_builtin(a, Builtin::Add, &[&z, &y], N, 0.0)
    };
    let (graph, ()) = client.capture(a, step).step("fork/join capture")?;
    for _ in 0..REPLAYS {
        client.replay(&graph).step("replay")?;
    }
    // The model: each run (the warmup and every replay) does the same.
    let (mut model_y, mut model_z) = (0.0f32, 0.0f32);
    for _ in 0..=REPLAYS {
        model_y += 2.0;
        model_z += 1.0;
        model_z += model_y;
    }
    expect_all(&client, &y, model_y, "y, written by b's branch")?;
    expect_all(&client, &z, model_z, "z, after the join")?;
    let info = client.graph_info(&graph).step("info")?;
    ensure!(
        info.launches == 4,
        "every branch's launch in the graph: {info:?}"
    );
    let dot = client.graph_dot(&graph).step("dot")?;
    ensure!(dot.contains("n3 ["), "the DOT holds every launch:\n{dot}");
    usable(&client, b)?;
    usable(&client, a)
}

/// A window that closes while a stream it joined was not joined back is
/// refused, naming that stream; the driver's recording is closed all the
/// same, and the joined stream runs eagerly again.
pub fn rule_21_an_unjoined_close_is_refused<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let (a, b) = two_streams(&client)?;
    let x = client.create_f32(a, &[1.0; NU]).step("x")?;
    let y = client.create_f32(b, &[0.0; NU]).step("y")?;
    let window = client.prepare(a).step("prepare")?;
    client
        .run_builtin(b, Builtin::Add, &[&y, &x], N, 0.0)
        .step("warmup, eager")?;
    client.begin(a, window).step("begin")?;
    client.wait(b, a).step("fork")?;
    client
        .run_builtin(b, Builtin::Add, &[&y, &x], N, 0.0)
        .step("recorded on b's branch")?;
    let err = refused(client.instantiate(a, window), "closing with b still joined")?;
    ensure!(
        matches!(err.root(), Error::Unjoined { stream, .. } if *stream == b),
        "refused with {err}"
    );
    ensure!(client.live_graphs() == 0, "no graph");
    ensure!(
        client.phase(a).step("phase")? == graph_capture::Phase::None,
        "a left capture mode"
    );
    client
        .write_f32(&y, &[0.0; NU])
        .step("b writes eagerly again")?;
    client
        .run_builtin(b, Builtin::Add, &[&y, &x], N, 0.0)
        .step("b launches eagerly again")?;
    expect_all(&client, &y, 1.0, "y")?;
    usable(&client, a)
}

/// A recording never waits for work from outside its window: the wait is
/// refused (a graph could not wait for it when it replays) and the window
/// is doomed; order such streams before the window opens.
pub fn rule_21_a_recording_never_waits_for_outside_work<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let (a, c) = two_streams(&client)?;
    let w = client.create_f32(c, &[3.0; NU]).step("w")?;
    client
        .run_builtin(c, Builtin::Fill, &[&w], N, 4.0)
        .step("c's own work")?;
    client.wait(a, c).step("ordered before the window opens")?;
    let window = client.prepare(a).step("prepare")?;
    client.begin(a, window).step("begin")?;
    let err = refused(client.wait(a, c), "a recording stream waiting for c")?;
    ensure!(
        matches!(err, Error::WaitOutsideWindow { stream, other } if stream == a && other == c),
        "refused with {err}"
    );
    let err = refused(client.instantiate(a, window), "the doomed window")?;
    ensure!(matches!(err, Error::Doomed(_)), "refused with {err}");
    usable(&client, a)?;
    usable(&client, c)
}

/// Four threads, a stream each, add one to the same buffer, 250 times
/// each, with work on their own buffers between: every add is ordered after
/// the others' (none lost), and the own work is untouched by the sharing.
pub fn rule_20_four_threads_share_a_buffer_across_four_streams<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const THREADS: usize = 4;
    const ROUNDS: usize = 250;
    let client = session.client();
    let streams: Vec<StreamId> = (0..THREADS)
        .map(|_| client.create_stream())
        .collect::<Result<_, _>>()
        .step("streams")?;
    let shared = client.create_f32(streams[0], &[0.0; NU]).step("shared")?;
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = streams
            .iter()
            .enumerate()
            .map(|(t, &stream)| {
                let (client, shared) = (&client, &shared);
                scope.spawn(move || -> Outcome {
                    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
                    let own = client.create_f32(stream, &[0.0; NU]).step("own")?;
                    for _ in 0..ROUNDS {
                        client
                            .run_builtin(stream, Builtin::Add, &[shared, &one], N, 0.0)
                            .step("add to the shared buffer")?;
                        client
                            .run_builtin(stream, Builtin::Add, &[&own, &one], N, 0.0)
                            .step("add to its own")?;
                    }
                    expect_all(client, &own, ROUNDS as f32, &format!("thread {t}'s own"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    for outcome in outcomes {
        outcome?;
    }
    expect_all(&client, &shared, (THREADS * ROUNDS) as f32, "no add lost")?;
    for &stream in &streams {
        usable(&client, stream)?;
    }
    Ok(())
}

/// An event that fails to record or to be waited for fails the launch that
/// needed it: what the launch would have written is claimed, nothing reads
/// a value the order did not make, and the next launch goes through.
pub fn rule_20_a_failed_event_leaves_no_wrong_answer<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let (a, b) = two_streams(&client)?;
    for primitive in [Primitive::RecordEvent, Primitive::WaitEvent] {
        let p = client.create_f32(a, &[3.0; NU]).step("p")?;
        let sum = client.create_f32(b, &[1.0; NU]).step("sum")?;
        plan.fail(primitive, 1);
        let err = refused(
            client.run_builtin(b, Builtin::Add, &[&sum, &p], N, 0.0),
            &format!("{primitive:?} failing"),
        )?;
        plan.disarm();
        ensure!(err.to_string().contains("injected"), "refused with {err}");
        ensure!(
            matches!(client.read(&sum), Err(Error::Claimed { .. })),
            "{primitive:?}: what the launch would have written is claimed"
        );
        client.write_f32(&sum, &[1.0; NU]).step("rewrite sum")?;
        client
            .run_builtin(b, Builtin::Add, &[&sum, &p], N, 0.0)
            .step("the launch again")?;
        expect_all(&client, &sum, 4.0, "sum")?;
    }
    Ok(())
}

/// A launch over an input a failure claimed, which also needs an event the
/// driver refuses, answers the claim: that is the caller's to fix, whatever
/// the device did, and every backend says the same.
pub fn a_claimed_input_is_reported_before_a_failed_wait<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let (a, b) = two_streams(&client)?;
    for primitive in [Primitive::RecordEvent, Primitive::WaitEvent] {
        let p = client.create_f32(a, &[3.0; NU]).step("p")?;
        let sum = client.create_f32(b, &[1.0; NU]).step("sum")?;
        // Work on `a` that `b` must wait for, then a claim on `p`.
        client
            .run_builtin(a, Builtin::Fill, &[&p], N, 4.0)
            .step("fill p")?;
        plan.fail(Primitive::Copy, 1);
        refused(client.write_f32(&p, &[5.0; NU]), "a write whose copy fails")?;
        plan.fail(primitive, 1);
        let err = refused(
            client.run_builtin(b, Builtin::Add, &[&sum, &p], N, 0.0),
            &format!("an add over claimed p with {primitive:?} failing"),
        )?;
        plan.disarm();
        ensure!(
            matches!(err, Error::Claimed { .. }),
            "{primitive:?}: the claim is reported, got {err}"
        );
    }
    usable(&client, b)
}

/// What a joined stream wrote of its own buffers in a window is ordered
/// like any shared buffer: a read right after a replay sees the replay's
/// write, and the stream's own later writes follow the replay. Forking twice
/// and joining once is one fork; a refused call of the window's thread on
/// the joined stream dooms the window; another thread can neither join a
/// stream back nor claim buffers by a refused launch.
pub fn rule_21_a_joined_streams_own_work_stays_ordered<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let (a, b) = two_streams(&client)?;
    let busy = Busy::on(session, &client, a)?;
    let x = client.create_f32(a, &[1.0; NU]).step("x")?;
    let y = client.create_f32(b, &[0.0; NU]).step("y")?;
    let (graph, ()) = client
        .capture(a, |_| {
            busy.run(&client, a)?;
            client.wait(b, a)?;
            client.wait(b, a)?; // a second fork is the same join
            client.run_builtin(b, Builtin::Add, &[&y, &x], N, 0.0)?;
            client.wait(a, b)
        })
        .step("capture")?;
    for round in 2..12 {
        client.replay(&graph).step("replay")?;
        expect_all(&client, &y, round as f32, "y right after the replay")?;
    }
    client.write_f32(&y, &[100.0; NU]).step("b's own write")?;
    client.replay(&graph).step("replay after it")?;
    expect_all(&client, &y, 101.0, "the replay after b's write")?;

    // The window's thread is refused a sync of the joined stream: the
    // window is doomed. Another thread cannot join it back.
    let window = client.prepare(a).step("prepare")?;
    client.begin(a, window).step("begin")?;
    client.wait(b, a).step("fork")?;
    ensure!(
        matches!(client.sync(b), Err(Error::SyncWhileRecording(s)) if s == b),
        "a sync of a joined stream is refused"
    );
    let from_elsewhere = std::thread::scope(|scope| {
        scope
            .spawn(|| client.wait(a, b))
            .join()
            .unwrap_or(Err(Error::Poisoned))
    });
    ensure!(
        matches!(from_elsewhere, Err(Error::NotRecorder { .. })),
        "another thread joined the stream back: {from_elsewhere:?}"
    );
    client.wait(a, b).step("join")?;
    let err = refused(client.instantiate(a, window), "the doomed window")?;
    ensure!(
        matches!(err.root(), Error::SyncWhileRecording(s) if *s == b),
        "refused with {err}"
    );
    // Another thread's launch over a shared buffer, refused on the
    // recording stream, claims nothing.
    let window = client.prepare(a).step("prepare")?;
    client.begin(a, window).step("begin")?;
    let z = client.create_f32(b, &[0.0; NU]).step("z")?;
    let refused_launch = std::thread::scope(|scope| {
        scope
            .spawn(|| client.run_builtin(a, Builtin::Add, &[&x, &z], N, 0.0))
            .join()
            .unwrap_or(Err(Error::Poisoned))
    });
    ensure!(
        matches!(refused_launch, Err(Error::NotRecorder { .. })),
        "another thread's launch: {refused_launch:?}"
    );
    drop(client.instantiate(a, window));
    ensure!(
        client.claimed_buffers() == 0,
        "a refused thread's launch claimed"
    );
    usable(&client, a)
}

/// A destroyed stream's memory that another stream's graph, or queued
/// launch, still uses is kept until they are done with it: the graph keeps
/// replaying right, the launch reads what was there.
pub fn rule_20_a_destroyed_streams_memory_stays_while_others_use_it<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let (a, b) = two_streams(&client)?;
    let busy = Busy::on(session, &client, b)?;
    let x = client.create_f32(a, &[3.0; NU]).step("x")?;
    let sum = client.create_f32(b, &[0.0; NU]).step("sum")?;
    let (graph, ()) = client
        .capture(b, |_| {
            client.run_builtin(b, Builtin::Add, &[&sum, &x], N, 0.0)
        })
        .step("a graph on b over a's buffer")?;
    busy.run(&client, b).step("busy b")?;
    client
        .run_builtin(b, Builtin::Add, &[&sum, &x], N, 0.0)
        .step("a queued launch over x")?;
    drop(x);
    client.destroy_stream(a).step("destroy a")?;
    for _ in 0..3 {
        client.replay(&graph).step("replay after a is gone")?;
    }
    expect_all(
        &client,
        &sum,
        3.0 * 5.0,
        "warmup, the launch and three replays",
    )?;
    drop(graph);
    usable(&client, b)?;
    // Another stream made and destroyed lets the kept memory go.
    let c = client.create_stream().step("c")?;
    client.destroy_stream(c).step("destroy c")?;
    Ok(())
}
