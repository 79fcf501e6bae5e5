//! Foreign operations: other libraries' work, issued with its declared
//! accesses, kept by the same bookkeeping as a launch of ours: replays,
//! order across streams, dependency edges, pins, claims, refusals.

use graph_capture::{Buffer, Builtin, Client, Error, Kernel, Ran};

use crate::ensure;
use crate::faulty::Primitive;
use crate::session::Session;
use crate::support::{
    Outcome, SENTINEL, Step, expect, expect_all, expect_claimed, quiet_deliberate_panics, ramp,
    refused, usable,
};
use crate::workload::foreign::{FOREIGN_FAILURE, ForeignWork};
use crate::workload::{UserKernel, UserKernels, Workload, grid};

/// A refused call: what it was, what it answered, and whether that is the
/// error it must be.
type Refusal<'a> = (&'a str, Result<(), Error>, fn(&Error) -> bool);

/// Elements of every buffer here.
const N: usize = 100;
const NU: u32 = N as u32;

/// `work` as a foreign operation of `D` on `device`; `None` where `D` has
/// none yet.
fn op<D: UserKernels>(
    device: &std::sync::Arc<D::Device>,
    work: ForeignWork,
) -> Result<Option<Kernel<D>>, String> {
    match D::foreign_op(device, &work) {
        None => Ok(None),
        Some(built) => built
            .map(|raw| Some(Kernel::new(raw)))
            .map_err(|e| format!("building {}: {e}", work.name())),
    }
}

fn read<D: UserKernels>(
    client: &Client<D>,
    buffer: &Buffer,
    what: &str,
) -> Result<Vec<f32>, String> {
    client.read_f32(buffer).step(what)
}

/// A foreign copy between two user kernels, captured and replayed, leaves
/// what the same three operations leave eagerly.
pub fn foreign_copy_between_kernels_replays_like_eager<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let Some(copy) = op::<D>(session.device(), ForeignWork::Copy)? else {
        return Ok(());
    };
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let k = Workload::<D>::new(session.device()).step("kernels")?;
    let pass = |x: &Buffer, y: &Buffer| -> Result<(), Error> {
        k.scale(&client, stream, grid(NU), x, NU, 2.0, 1.0)?;
        client.foreign(stream, &copy, &[x, y])?;
        k.scale(&client, stream, grid(NU), y, NU, 3.0, 0.0)
    };
    let xe = client.create_f32(stream, &ramp(N, 1.0)).step("eager x")?;
    let ye = client.create_f32(stream, &[0.0; N]).step("eager y")?;
    let xr = client
        .create_f32(stream, &ramp(N, 1.0))
        .step("replayed x")?;
    let yr = client.create_f32(stream, &[0.0; N]).step("replayed y")?;
    for _ in 0..3 {
        pass(&xe, &ye).step("eager pass")?;
    }
    let (graph, ()) = client.capture(stream, |_| pass(&xr, &yr)).step("capture")?;
    client.replay(&graph).step("replay 1")?;
    client.replay(&graph).step("replay 2")?;
    expect(&client, &xr, &read(&client, &xe, "eager x")?, "x")?;
    let ye = read(&client, &ye, "eager y")?;
    let want: Vec<f32> = ramp(N, 1.0)
        .into_iter()
        .map(|v| ((v * 2.0 + 1.0) * 2.0 + 1.0) * 2.0 + 1.0)
        .map(|v| v * 3.0)
        .collect();
    ensure!(ye == want, "eager y is not (((x*2+1)*2+1)*2+1)*3");
    expect(&client, &yr, &ye, "y")
}

/// A foreign fill on one stream is waited for by a launch on another that
/// reads its buffer, eagerly and when a graph of it replays.
pub fn foreign_writes_are_ordered_across_streams<D: UserKernels>(session: &Session<D>) -> Outcome {
    let (Some(five), Some(seven)) = (
        op::<D>(session.device(), ForeignWork::Fill(5.0))?,
        op::<D>(session.device(), ForeignWork::Fill(7.0))?,
    ) else {
        return Ok(());
    };
    let client = session.client();
    let a = client.create_stream().step("stream a")?;
    let b = client.create_stream().step("stream b")?;
    let y = client.create_f32(a, &[0.0; N]).step("y")?;
    let x = client.create_f32(b, &[1.0; N]).step("x")?;
    client.foreign(a, &five, &[&y]).step("foreign fill on a")?;
    client
        .run_builtin(b, Builtin::Add, &[&x, &y], NU, 0.0)
        .step("add on b")?;
    expect_all(&client, &x, 6.0, "b's add saw a's fill")?;
    let (graph, ()) = client
        .capture(a, |_| client.foreign(a, &seven, &[&y]))
        .step("capture")?;
    client.write_f32(&y, &[0.0; N]).step("clear y")?;
    client.replay(&graph).step("replay")?;
    client
        .run_builtin(b, Builtin::Add, &[&x, &y], NU, 0.0)
        .step("add after the replay")?;
    expect_all(&client, &x, 13.0, "b's add saw the replayed fill")
}

/// Foreign operations are nodes of the dependency graph like launches: two
/// independent fills, an add over both, a copy of its result.
pub fn foreign_operations_take_their_place_in_the_dependency_graph<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let (Some(two), Some(three), Some(copy)) = (
        op::<D>(session.device(), ForeignWork::Fill(2.0))?,
        op::<D>(session.device(), ForeignWork::Fill(3.0))?,
        op::<D>(session.device(), ForeignWork::Copy)?,
    ) else {
        return Ok(());
    };
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let [a, b, c] = [0; 3].map(|_| client.create_f32(stream, &[0.0; N]));
    let (a, b, c) = (a.step("a")?, b.step("b")?, c.step("c")?);
    let (graph, ()) = client
        .capture(stream, |_| {
            client.foreign(stream, &two, &[&a])?;
            client.foreign(stream, &three, &[&b])?;
            client.run_builtin(stream, Builtin::Add, &[&a, &b], NU, 0.0)?;
            client.foreign(stream, &copy, &[&a, &c])
        })
        .step("capture")?;
    let info = client.graph_info(&graph).step("info")?;
    ensure!(
        (info.launches, info.depth, info.width, info.edges) == (4, 3, 2, 3),
        "launches, depth, width, edges: {:?}",
        (info.launches, info.depth, info.width, info.edges)
    );
    client
        .write_f32(&c, &[SENTINEL; N])
        .step("c to the sentinel")?;
    for i in 0..100 {
        client.replay(&graph).step(&format!("replay {i}"))?;
    }
    expect_all(&client, &c, 5.0, "c after the replays")
}

/// A graph keeps the buffers its foreign operations declared after their
/// handles are dropped, and replays over them.
pub fn foreign_operations_keep_their_buffers_in_a_graph<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let values = ramp(N, 3.0);
    let (Some(update), Some(copy)) = (
        op::<D>(session.device(), ForeignWork::Update(values.clone()))?,
        op::<D>(session.device(), ForeignWork::Copy)?,
    ) else {
        return Ok(());
    };
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let src = client.create_f32(stream, &[0.0; N]).step("src")?;
    let dst = client.create_f32(stream, &[0.0; N]).step("dst")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            client.foreign(stream, &update, &[&src])?;
            client.foreign(stream, &copy, &[&src, &dst])
        })
        .step("capture")?;
    drop(src);
    drop((update, copy));
    client
        .write_f32(&dst, &[SENTINEL; N])
        .step("dst to the sentinel")?;
    client.replay(&graph).step("replay")?;
    expect(&client, &dst, &values, "dst after the replay")
}

/// A foreign operation the driver refuses claims what it declared written,
/// eagerly and inside a window, and a rewrite makes the buffer usable.
pub fn foreign_refusals_claim_what_they_write<D: UserKernels>(session: &Session<D>) -> Outcome {
    let (client, plan) = session.faulty();
    let Some(copy) = op(client.device(), ForeignWork::Copy)? else {
        return Ok(());
    };
    let stream = client.create_stream().step("stream")?;
    let src = client.create_f32(stream, &ramp(N, 1.0)).step("src")?;
    let dst = client.create_f32(stream, &[0.0; N]).step("dst")?;
    plan.fail(Primitive::Launch, 1);
    let err = refused(
        client.foreign(stream, &copy, &[&src, &dst]),
        "a refused foreign copy",
    )?;
    ensure!(err.to_string().contains("injected"), "the refusal: {err}");
    expect_claimed(&client, &dst, "injected", "dst after the refusal")?;
    expect(&client, &src, &ramp(N, 1.0), "src, only read")?;
    client.write_f32(&dst, &[0.0; N]).step("rewrite dst")?;
    client
        .foreign(stream, &copy, &[&src, &dst])
        .step("the retry")?;
    expect(&client, &dst, &ramp(N, 1.0), "dst after the retry")?;
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    plan.fail(Primitive::Launch, 1);
    refused(
        client.foreign(stream, &copy, &[&src, &dst]),
        "a refused recorded copy",
    )?;
    refused(
        client.instantiate(stream, window),
        "the doomed window's instantiate",
    )?;
    expect_claimed(&client, &dst, "injected", "dst after the doomed window")?;
    usable(&client, stream)
}

/// A foreign call that does not match what it declared, or that hands
/// over a kernel, another client's buffer or a written buffer twice, is
/// refused before any driver, and leaves every buffer as it was; so is one
/// on another stream over what a recording window writes, which leaves the
/// window to seal.
pub fn foreign_bad_input_is_refused_and_loses_nothing<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let Some(copy) = op::<D>(session.device(), ForeignWork::Copy)? else {
        return Ok(());
    };
    let client = session.client();
    let other = session.client();
    let stream = client.create_stream().step("stream")?;
    let theirs_stream = other.create_stream().step("their stream")?;
    let k = Workload::<D>::new(session.device()).step("kernels")?;
    let src = client.create_f32(stream, &ramp(N, 1.0)).step("src")?;
    let dst = client.create_f32(stream, &[SENTINEL; N]).step("dst")?;
    let theirs = other.create_f32(theirs_stream, &[0.0; N]).step("theirs")?;
    let cases: [Refusal; 4] = [
        (
            "a kernel as a foreign operation",
            client.foreign(stream, k.get(UserKernel::Scale), &[&src]),
            |e| matches!(e, Error::BadLaunch(_)),
        ),
        (
            "a buffer too few",
            client.foreign(stream, &copy, &[&src]),
            |e| matches!(e, Error::KernelMismatch { .. }),
        ),
        (
            "the written buffer declared twice",
            client.foreign(stream, &copy, &[&dst, &dst]),
            |e| matches!(e, Error::KernelMismatch { .. }),
        ),
        (
            "another client's buffer",
            client.foreign(stream, &copy, &[&src, &theirs]),
            |e| matches!(e, Error::OtherClient(_)),
        ),
    ];
    for (what, got, expected) in cases {
        let err = refused(got, what)?;
        ensure!(expected(&err), "{what}: refused with {err}");
    }
    // On another stream, over buffers of the stream whose window records:
    // sharing them would order that stream after work that has not run.
    let side = client.create_stream().step("side stream")?;
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    client
        .foreign(stream, &copy, &[&src, &dst])
        .step("the recorded copy")?;
    let err = refused(
        client.foreign(side, &copy, &[&dst, &src]),
        "another stream reading what the window writes",
    )?;
    ensure!(
        matches!(err, Error::SharedWhileRecording { .. }),
        "another stream: {err}"
    );
    let graph = client
        .instantiate(stream, window)
        .step("the window still seals")?;
    client
        .write_f32(&dst, &[SENTINEL; N])
        .step("dst to the sentinel")?;
    client.replay(&graph).step("replay")?;
    expect(&client, &dst, &ramp(N, 1.0), "dst after the replay")?;
    expect(&client, &src, &ramp(N, 1.0), "src")?;
    expect_all(&other, &theirs, 0.0, "theirs")?;
    usable(&client, stream)
}

/// An operation whose own code fails or panics: on a backend that runs it
/// while recording, the call (inside a window, the call or the
/// instantiate) is refused and what it declared written is claimed; on one where it is the
/// work itself, the next sync reports it.
pub fn foreign_code_that_fails_or_panics_is_reported<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let (Some(fail), Some(panic)) = (
        op::<D>(session.device(), ForeignWork::Fail)?,
        op::<D>(session.device(), ForeignWork::Panic)?,
    ) else {
        return Ok(());
    };
    quiet_deliberate_panics();
    let client = session.client();
    for (which, op, says) in [
        ("failing", &fail, FOREIGN_FAILURE),
        ("panicking", &panic, "panic"),
    ] {
        let stream = client.create_stream().step("stream")?;
        let dst = client.create_f32(stream, &[0.0; N]).step("dst")?;
        if !D::FOREIGN_FAILS_WHILE_RECORDING {
            client.foreign(stream, op, &[&dst]).step(which)?;
            let err = refused(client.sync(stream), "the sync after it")?;
            ensure!(
                err.to_string().contains(says),
                "{which}: the sync said {err}"
            );
            continue;
        }
        let err = refused(client.foreign(stream, op, &[&dst]), which)?;
        ensure!(
            err.to_string().contains(says),
            "{which}: refused with {err}"
        );
        expect_claimed(&client, &dst, says, which)?;
        client.write_f32(&dst, &[0.0; N]).step("rewrite dst")?;
        let window = client.prepare(stream).step("prepare")?;
        client.begin(stream, window).step("begin")?;
        // Run when the graph is made (Vulkan), or as it is recorded (CUDA,
        // HIP), which refuses the call and dooms the window.
        if let Err(err) = client.foreign(stream, op, &[&dst]) {
            ensure!(
                err.to_string().contains(says),
                "{which}, recorded: refused with {err}"
            );
        }
        let err = refused(
            client.instantiate(stream, window),
            "its window's instantiate",
        )?;
        ensure!(err.to_string().contains(says), "{which} in a window: {err}");
        expect_claimed(&client, &dst, says, "dst after the window")?;
        usable(&client, stream)?;
    }
    Ok(())
}

/// Inside a conditional body: held and run on the flag's word where the
/// backend can hold it, refused (dooming the window) where it cannot.
pub fn foreign_operations_in_a_conditional_body<D: UserKernels>(session: &Session<D>) -> Outcome {
    let Some(seven) = op::<D>(session.device(), ForeignWork::Fill(7.0))? else {
        return Ok(());
    };
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let y = client.create_f32(stream, &[0.0; N]).step("y")?;
    let flag = client.create(stream, &1u32.to_le_bytes()).step("flag")?;
    let captured = client.capture(stream, |_| {
        client
            .if_flag(stream, &flag, || client.foreign(stream, &seven, &[&y]))
            .map(|_: Ran| ())
    });
    if !D::FOREIGN_IN_BODIES {
        let err = refused(captured, "a foreign operation in a body")?;
        ensure!(
            err.to_string().contains("conditional body"),
            "refused with {err}"
        );
        return usable(&client, stream);
    }
    let (graph, ()) = captured.step("capture")?;
    client.write_f32(&y, &[0.0; N]).step("clear y")?;
    client.replay(&graph).step("replay, flag set")?;
    expect_all(&client, &y, 7.0, "the body ran")?;
    client.write_f32(&y, &[0.0; N]).step("clear y")?;
    client
        .write(&flag, &0u32.to_le_bytes())
        .step("clear the flag")?;
    client.replay(&graph).step("replay, flag clear")?;
    expect_all(&client, &y, 0.0, "the body was skipped")
}

/// Several threads, each on a stream of its own, issue the same foreign
/// operations at once, eagerly and as replays of their own graphs: each
/// stream's results are its own, and none is lost.
pub fn foreign_operations_from_several_threads<D: UserKernels>(session: &Session<D>) -> Outcome {
    const THREADS: usize = 4;
    const ROUNDS: usize = 25;
    let (Some(copy), Some(two)) = (
        op::<D>(session.device(), ForeignWork::Copy)?,
        op::<D>(session.device(), ForeignWork::Fill(2.0))?,
    ) else {
        return Ok(());
    };
    let client = session.client();
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (client, copy, two) = (&client, &copy, &two);
                scope.spawn(move || -> Outcome {
                    let stream = client.create_stream().step("stream")?;
                    let x = client.create_f32(stream, &[t as f32; N]).step("x")?;
                    let y = client.create_f32(stream, &[0.0; N]).step("y")?;
                    let step = || -> Result<(), Error> {
                        client.foreign(stream, two, &[&y])?;
                        client.run_builtin(stream, Builtin::Add, &[&x, &y], NU, 0.0)?;
                        client.foreign(stream, copy, &[&x, &y])
                    };
                    for _ in 0..ROUNDS {
                        step().step("an eager step")?;
                    }
                    let (graph, ()) = client.capture(stream, |_| step()).step("capture")?;
                    for _ in 1..ROUNDS {
                        graph.replay().step("a replay")?;
                    }
                    // Each step adds two: the eager rounds, the warmup and
                    // the replays.
                    let want = t as f32 + 2.0 * (2 * ROUNDS) as f32;
                    expect_all(client, &x, want, &format!("thread {t}'s x"))?;
                    expect_all(client, &y, want, &format!("thread {t}'s y"))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    outcomes.into_iter().collect()
}
