//! Streams driven from several threads: independent, never silently
//! recording another thread's work, dooming a window on every refusal, and
//! panic-safe in the one-call capture.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use graph_capture::{Builtin, Config, Error, Pass, Phase};

use crate::ensure;
use crate::session::Session;
use crate::stress;
use crate::support::{
    DELIBERATE, Fixture, N, NU, Outcome, Step, back_to, expect_all, in_use,
    quiet_deliberate_panics, refused, usable,
};
use crate::workload::UserKernels;
use crate::workload::decode::{Decoder, Model, Shape};

/// A read waiting for a busy stream does not hold up an enqueue on another
/// stream from another thread: the enqueue, issued while the read waits,
/// finishes long before it.
pub fn a_read_on_a_busy_stream_does_not_block_another_stream<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let busy = client.create_stream().step("busy stream")?;
    let other = client.create_stream().step("other stream")?;
    let model = Model::new(Shape::DECODE);
    let decoder = Decoder::new(&client, busy, &model).step("model")?;
    let x = client.create_f32(other, &[0.0; NU]).step("x")?;
    let one = client.create_f32(other, &[1.0; NU]).step("one")?;
    client
        .run_builtin(other, Builtin::Add, &[&x, &one], N, 0.0)
        .step("warm the other stream")?;
    client.sync(other).step("sync")?;
    client.sync(busy).step("sync")?;
    // A queue of work the read must wait for.
    for _ in 0..4 {
        decoder.step().step("queue a step")?;
    }
    let reading = AtomicBool::new(false);
    let (read, enqueue) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            reading.store(true, Ordering::SeqCst);
            let started = Instant::now();
            let result = decoder.read();
            (started.elapsed(), Instant::now(), result.map(|_| ()))
        });
        let enqueuer = scope.spawn(|| {
            while !reading.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            // Let the read reach its wait.
            std::thread::sleep(Duration::from_millis(2));
            let started = Instant::now();
            let result = client.run_builtin(other, Builtin::Add, &[&x, &one], N, 0.0);
            (started.elapsed(), Instant::now(), result)
        });
        (reader.join(), enqueuer.join())
    });
    let (read_took, read_done, read) = read.map_err(|_| "the reader panicked")?;
    let (enqueue_took, enqueue_done, enqueue) = enqueue.map_err(|_| "the enqueuer panicked")?;
    read.step("read on the busy stream")?;
    enqueue.step("enqueue on the other stream")?;
    let ratio = enqueue_took.as_secs_f64() / read_took.as_secs_f64().max(1e-9);
    ensure!(
        enqueue_done < read_done && ratio < 0.5,
        "the enqueue took {enqueue_took:?} against the read's {read_took:?} (ratio {ratio:.2}): \
         it waited for the other stream"
    );
    expect_all(&client, &x, 2.0, "the other stream's adds")
}

/// Two threads on one stream, one capturing and replaying, the other
/// filling and reading its own buffer: every answer either thread gets is
/// right or an error, never a silent wrong value; the other thread's work
/// is never recorded into the window.
pub fn two_threads_on_one_stream_never_record_silently<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const ROUNDS: usize = 500;
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let b = client.create_f32(stream, &[0.0; NU]).step("b")?;
    let refused_b = std::sync::atomic::AtomicUsize::new(0);
    let outcome = std::thread::scope(|scope| {
        let capturer = scope.spawn(|| -> Outcome {
            // x counts the adds that ran: warmups, replays.
            let mut want = 0.0f32;
            for round in 0..ROUNDS / 5 {
                let window = client.prepare(stream).step("prepare")?;
                fx.add().step("warmup")?;
                client.begin(stream, window).step("begin")?;
                fx.add().step("recorded")?;
                let graph = client.instantiate(stream, window).step("instantiate")?;
                want += 1.0;
                for _ in 0..3 {
                    client.replay(&graph).step("replay")?;
                    want += 1.0;
                }
                if round % 5 == 0 {
                    let x = client.read_f32(&fx.x).step("read x")?;
                    ensure!(x.iter().all(|&v| v == want), "x is {} not {want}", x[0]);
                }
            }
            fx.expect_x(want, "x at the end")
        });
        let other = scope.spawn(|| -> Outcome {
            for k in 0..ROUNDS * 3 {
                let value = (k % 1000) as f32;
                match client.run_builtin(stream, Builtin::Fill, &[&b], N, value) {
                    Ok(()) => {}
                    Err(Error::NotRecorder { .. }) => {
                        refused_b.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(err) => return Err(format!("fill b: {err}")),
                }
                // The fill ran (it was not recorded), so a read that
                // succeeds sees it: unless the capturer's graph had it.
                loop {
                    match client.read_f32(&b) {
                        Ok(got) => {
                            ensure!(
                                got.iter().all(|&v| v == value),
                                "b reads {} after a fill of {value}",
                                got[0]
                            );
                            break;
                        }
                        Err(Error::SyncWhileRecording(_)) => std::thread::yield_now(),
                        Err(err) => return Err(format!("read b: {err}")),
                    }
                }
            }
            Ok(())
        });
        let a = capturer
            .join()
            .unwrap_or_else(|_| Err("the capturer panicked".into()));
        let b = other
            .join()
            .unwrap_or_else(|_| Err("the other thread panicked".into()));
        a.and(b)
    });
    outcome?;
    ensure!(client.claimed_buffers() == 0, "nothing was claimed");
    // Both threads' work interleaved at least sometimes.
    let _ = refused_b.load(Ordering::Relaxed);
    usable(client, stream)
}

/// Work from another thread on a recording stream is refused, not recorded,
/// and does not doom the window; the window's token hands the recording to
/// another thread, after which the first thread is the one refused.
pub fn a_recording_takes_only_its_threads_work<D: UserKernels>(session: &Session<D>) -> Outcome {
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let b = client.create_f32(stream, &[0.0; NU]).step("b")?;
    let window = client.prepare(stream).step("prepare")?;
    fx.add().step("warmup")?;
    client.begin(stream, window).step("begin")?;
    fx.add().step("recorded")?;
    let foreign = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let fill = client.run_builtin(stream, Builtin::Fill, &[&b], N, 42.0);
                let write = client.write_f32(&b, &[1.0; NU]);
                let alloc = client.allocate(stream, 64);
                (fill.err(), write.err(), alloc.err())
            })
            .join()
    })
    .map_err(|_| "the other thread panicked")?;
    for (what, err) in [
        ("fill", foreign.0),
        ("write", foreign.1),
        ("allocate", foreign.2),
    ] {
        ensure!(
            matches!(err, Some(Error::NotRecorder { .. })),
            "another thread's {what} must be refused, got {err:?}"
        );
    }
    // Handed over: the second thread records, this one is refused.
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Outcome {
                client.adopt(stream, window).step("adopt")?;
                fx.add().step("recorded by the adopter")
            })
            .join()
            .unwrap_or_else(|_| Err("the adopter panicked".into()))
    })?;
    let err = refused(fx.add(), "the first thread after the hand-over")?;
    ensure!(matches!(err, Error::NotRecorder { .. }), "got {err}");
    let err = refused(
        client.adopt(stream, graph_capture::WindowId(window.0 + 99)),
        "a wrong token",
    )?;
    ensure!(matches!(err, Error::OutOfOrder { .. }), "got {err}");
    client.adopt(stream, window).step("adopt back")?;
    let graph = client.instantiate(stream, window).step("instantiate")?;
    fx.expect_x(1.0, "the warmup's add")?;
    expect_all(
        client,
        &b,
        0.0,
        "b: nothing of the other thread ran or was recorded",
    )?;
    client.replay(&graph).step("replay")?;
    fx.expect_x(3.0, "two recorded adds")?;
    expect_all(client, &b, 0.0, "b after a replay")
}

/// Every kind of call the recording thread makes that the stream refuses
/// dooms the window: the recording would seal without that operation.
pub fn every_refused_call_dooms_its_window<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client_with(Config {
        max_allocation_bytes: 1 << 20,
        ..Config::default()
    });
    let fx = Fixture::new(client.clone())?;
    let stream = fx.stream;
    let gone = client.create_stream().step("a stream to destroy")?;
    let orphan = client.create_f32(gone, &[0.0; NU]).step("orphan")?;
    client.destroy_stream(gone).step("destroy it")?;
    let earlier = fx.capture_add()?;
    let elsewhere =
        crate::session::Session::<D>::keeping(session.device().clone(), session.order()).client();
    let outsider = {
        let s = elsewhere.create_stream().step("other client's stream")?;
        elsewhere
            .create_f32(s, &[0.0; NU])
            .step("other client's buffer")?
    };
    type Call<'a, D> = (
        &'static str,
        Box<dyn Fn(&Fixture<D>) -> Result<(), Error> + 'a>,
    );
    let calls: Vec<Call<'_, D>> = vec![
        (
            "a launch short of a binding",
            Box::new(|fx| {
                fx.client
                    .run_builtin(fx.stream, Builtin::Add, &[&fx.x], N, 0.0)
            }),
        ),
        (
            "a launch past its buffers",
            Box::new(|fx| {
                fx.client
                    .run_builtin(fx.stream, Builtin::Fill, &[&fx.x], 10 * N, 0.0)
            }),
        ),
        (
            "a launch over a buffer of a destroyed stream",
            Box::new(|fx| {
                fx.client
                    .run_builtin(fx.stream, Builtin::Add, &[&fx.x, &orphan], N, 0.0)
            }),
        ),
        (
            "a launch over another client's buffer",
            Box::new(|fx| {
                fx.client
                    .run_builtin(fx.stream, Builtin::Add, &[&fx.x, &outsider], N, 0.0)
            }),
        ),
        (
            "a write of the wrong size",
            Box::new(|fx| fx.client.write(&fx.x, &[0; 3])),
        ),
        (
            "an empty allocation",
            Box::new(|fx| fx.client.allocate(fx.stream, 0).map(drop)),
        ),
        (
            "an oversized allocation",
            Box::new(|fx| fx.client.allocate(fx.stream, 2 << 20).map(drop)),
        ),
        ("a read", Box::new(|fx| fx.client.read(&fx.one).map(drop))),
        ("a sync", Box::new(|fx| fx.client.sync(fx.stream))),
        ("a trim", Box::new(|fx| fx.client.trim(fx.stream).map(drop))),
        ("a replay", Box::new(|fx| fx.client.replay(&earlier))),
    ];
    for (what, call) in &calls {
        let window = client.prepare(stream).step("prepare")?;
        fx.add().step("warmup")?;
        client.begin(stream, window).step("begin")?;
        fx.add().step("recorded")?;
        let err = refused(call(&fx), what)?;
        let sealed = client.instantiate(stream, window);
        match sealed {
            Err(Error::Doomed(cause)) => ensure!(
                *cause == err,
                "{what}: the window names {cause}, the call was refused with {err}"
            ),
            Err(other) => return Err(format!("{what}: refused with {other}, expected doomed")),
            Ok(_) => {
                return Err(format!(
                    "{what}: the window sealed without the refused call"
                ));
            }
        }
        ensure!(
            client.phase(stream).step("phase")? == Phase::None,
            "{what}: closed"
        );
        client.write_f32(&fx.x, &[0.0; NU]).step("reset x")?;
    }
    usable(&client, stream)
}

/// A panic in either pass of a one-call capture leaves no graph behind and
/// the pools where they were.
pub fn a_panicking_capture_leaves_nothing<D: UserKernels>(session: &Session<D>) -> Outcome {
    quiet_deliberate_panics();
    let fx = Fixture::new(session.client())?;
    let (client, stream) = (&fx.client, fx.stream);
    let graphs = client.live_graphs();
    let baseline = in_use(client, stream)?;
    for panicking in [Pass::Warmup, Pass::Record] {
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = client.capture(stream, |pass| -> Result<(), Error> {
                let tmp = fx.add_through_intermediate()?;
                if pass == panicking {
                    panic!("{DELIBERATE} in a capture body ({pass:?})");
                }
                drop(tmp);
                Ok(())
            });
        }));
        ensure!(
            unwound.is_err(),
            "{panicking:?}: the panic reached the caller"
        );
        ensure!(
            client.phase(stream).step("phase")? == Phase::None,
            "{panicking:?}: the window is closed"
        );
        ensure!(
            client.live_graphs() == graphs,
            "{panicking:?}: {} live graphs, {graphs} before",
            client.live_graphs()
        );
        back_to(client, stream, baseline, "after the panic")?;
    }
    ensure!(client.claimed_buffers() <= 1, "at most x is claimed");
    client.write_f32(&fx.x, &[0.0; NU]).step("reset x")?;
    let graph = fx.capture_add()?;
    client.replay(&graph).step("replay")?;
    fx.expect_x(2.0, "a capture after the panics works")
}

/// A stream destroyed while another thread works on it: the other thread's
/// calls either complete or fail with `UnknownStream`, never panic or hang,
/// and the client's other streams go on.
pub fn destroying_a_stream_another_thread_uses<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let doomed = client.create_stream().step("stream")?;
    let other = client.create_stream().step("other stream")?;
    let x = client.create_f32(doomed, &[0.0; NU]).step("x")?;
    let one = client.create_f32(doomed, &[1.0; NU]).step("one")?;
    let started = AtomicBool::new(false);
    let worker = std::thread::scope(|scope| {
        let worker = scope.spawn(|| -> Result<usize, String> {
            let mut done = 0;
            for _ in 0..10_000 {
                started.store(true, Ordering::SeqCst);
                match client.run_builtin(doomed, Builtin::Add, &[&x, &one], N, 0.0) {
                    Ok(()) => done += 1,
                    Err(Error::UnknownStream(_)) => return Ok(done),
                    Err(err) => return Err(format!("a launch failed otherwise: {err}")),
                }
            }
            Ok(done)
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let destroyed = client.destroy_stream(doomed);
        let done = worker
            .join()
            .unwrap_or_else(|_| Err("the worker panicked".into()));
        destroyed.step("destroy")?;
        done
    })?;
    let _ = worker;
    ensure!(
        matches!(client.read(&x), Err(Error::UnknownStream(_))),
        "a buffer of the destroyed stream fails its reads"
    );
    usable(&client, other)
}

fn stress_on<D: UserKernels>(session: &Session<D>, config: Config, what: &str) -> Outcome {
    const THREADS: usize = 4;
    const OPERATIONS: usize = 2000;
    let client = session.client_with(config);
    let runs =
        stress::run_threads(&client, THREADS, OPERATIONS).map_err(|e| format!("{what}: {e}"))?;
    for (t, run) in runs.iter().enumerate() {
        ensure!(
            run.operations == OPERATIONS && run.reads > 100 && run.replays > 50,
            "{what}: thread {t} ran {run:?}"
        );
    }
    ensure!(client.live_graphs() == 0, "{what}: graphs left behind");
    ensure!(client.claimed_buffers() == 0, "{what}: claims left behind");
    Ok(())
}

/// Four threads, each with its own stream on one client, 2,000 mixed
/// operations each, every read checked against a CPU model.
pub fn stress_four_threads_against_a_model<D: UserKernels>(session: &Session<D>) -> Outcome {
    stress_on(session, Config::default(), "default pages")
}

/// The same with pages so small that the pools grow and shrink under it.
pub fn stress_four_threads_with_tiny_pages<D: UserKernels>(session: &Session<D>) -> Outcome {
    stress_on(
        session,
        Config {
            device_page_bytes: 1024,
            host_page_bytes: 1024,
            drop_queue_threshold: 4,
            ..Config::default()
        },
        "tiny pages",
    )
}
