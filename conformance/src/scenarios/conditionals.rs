//! Conditionals and loops inside a graph: each replay decides on the device
//! what its eager twin decided on the host, the bound stops a loop whose
//! flag never clears, and what a body cannot hold is refused.

use graph_capture::{Buffer, Builtin, Client, Error, GraphHandle, Pass, Ran, StreamId};

use crate::ensure;
use crate::faulty::Primitive;
use crate::session::Session;
use crate::support::{N, NU, Outcome, Step, expect_all, refused, same};
use crate::workload::{UserKernels, Workload};

/// The most iterations the scenarios' loops make.
const BOUND: u32 = 5;

/// What every scenario works on: a loop's counter (`f32`) and flag
/// (`u32`), an accumulator and the values added to it.
struct Loop<D: UserKernels> {
    client: Client<D>,
    stream: StreamId,
    kernels: Workload<D>,
    counter: Buffer,
    flag: Buffer,
    x: Buffer,
    ones: Buffer,
    twos: Buffer,
}

impl<D: UserKernels> Loop<D> {
    fn new(client: Client<D>) -> Result<Self, String> {
        let stream = client.create_stream().step("stream")?;
        let kernels = Workload::new(client.device()).step("kernels")?;
        Ok(Self {
            counter: client.create_f32(stream, &[0.0]).step("counter")?,
            flag: client.create(stream, &0u32.to_le_bytes()).step("flag")?,
            x: client.create_f32(stream, &[0.0; NU]).step("x")?,
            ones: client.create_f32(stream, &[1.0; NU]).step("ones")?,
            twos: client.create_f32(stream, &[2.0; NU]).step("twos")?,
            client,
            stream,
            kernels,
        })
    }

    /// Set the loop to run `k` times: the counter to `k`, the flag to
    /// whether `k > 0`, the accumulator to 0.
    fn arm(&self, k: u32) -> Result<(), Error> {
        self.client.write_f32(&self.counter, &[k as f32])?;
        self.client
            .write(&self.flag, &u32::from(k > 0).to_le_bytes())?;
        self.client.write_f32(&self.x, &[0.0; NU])
    }

    fn add(&self, what: &Buffer) -> Result<(), Error> {
        self.client
            .run_builtin(self.stream, Builtin::Add, &[&self.x, what], N, 0.0)
    }

    fn countdown(&self) -> Result<(), Error> {
        self.kernels
            .countdown(&self.client, self.stream, &self.counter, &self.flag)
    }

    /// `x += 1` and count down, while the flag is set, at most `bound` times.
    fn counted_loop(&self, bound: u32) -> Result<Ran, Error> {
        self.client.while_flag(self.stream, &self.flag, bound, || {
            self.add(&self.ones)?;
            self.countdown()
        })
    }

    fn flag_value(&self) -> Result<u32, String> {
        let bytes = self.client.read(&self.flag).step("read the flag")?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// Capture `body` (warmup, then the recorded run).
    fn capture(&self, body: impl Fn() -> Result<(), Error>) -> Result<GraphHandle<D>, Error> {
        self.client
            .capture(self.stream, |_pass: Pass| body())
            .map(|(graph, ())| graph)
    }

    /// The stream still captures a loop and replays it, after refusals.
    fn captures_again(&self) -> Outcome {
        self.arm(2).step("arm")?;
        let again = self
            .capture(|| self.counted_loop(BOUND).map(drop))
            .step("capture again")?;
        self.arm(2).step("arm")?;
        self.client.replay(&again).step("replay")?;
        expect_all(&self.client, &self.x, 2.0, "after the refusals")
    }

    /// Whether this backend records conditionals: where it does not, the
    /// refusal must name it and leave the stream usable, and eager
    /// conditionals must still run.
    fn recordable(&self) -> Result<bool, String> {
        self.arm(2).step("arm")?;
        let said = self.client.conditionals(self.stream);
        let refusal = match self.capture(|| self.counted_loop(BOUND).map(drop)) {
            Ok(_) => {
                ensure!(said.is_ok(), "recorded where the client said {said:?}");
                return Ok(true);
            }
            Err(err) => err,
        };
        ensure!(
            matches!(&said, Err(Error::NoConditionals { .. })),
            "refused where the client said {said:?}"
        );
        match refusal.root() {
            Error::NoConditionals { reason, .. } => {
                ensure!(!reason.is_empty(), "a refusal without a reason");
                self.arm(3).step("arm")?;
                let ran = self.counted_loop(BOUND).step("eager loop")?;
                ensure!(
                    ran == Ran::Loop {
                        iterations: 3,
                        bound_reached: false
                    },
                    "{ran:?}"
                );
                expect_all(&self.client, &self.x, 3.0, "eager loop after the refusal")?;
                Ok(false)
            }
            _ => Err(format!("capturing a loop: {refusal}")),
        }
    }
}

/// An `if` and an `if/else`, replayed with the flag set and clear, do
/// what they do eagerly.
pub fn if_true_and_false_replay_like_eager<D: UserKernels>(session: &Session<D>) -> Outcome {
    let l = Loop::new(session.client())?;
    if !l.recordable()? {
        return Ok(());
    }
    let both = || {
        l.client
            .if_else_flag(l.stream, &l.flag, || l.add(&l.ones), || l.add(&l.twos))?;
        l.client.if_flag(l.stream, &l.flag, || l.add(&l.twos))?;
        Ok(())
    };
    let graph = l.capture(both).step("capture")?;
    let info = l.client.graph_info(&graph).step("info")?;
    ensure!(
        info.conditionals == 2 && info.launches == 3,
        "{} conditionals and {} launches",
        info.conditionals,
        info.launches
    );
    for set in [1u32, 0, 7, 0] {
        // Eagerly first, then the same through the graph.
        l.client.write_f32(&l.x, &[0.0; NU]).step("reset")?;
        l.client.write(&l.flag, &set.to_le_bytes()).step("flag")?;
        let ran = l
            .client
            .if_else_flag(l.stream, &l.flag, || l.add(&l.ones), || l.add(&l.twos))
            .step("eager if/else")?;
        let want_branch = if set != 0 { Some(0) } else { Some(1) };
        ensure!(ran == Ran::Branch(want_branch), "{ran:?} with {set}");
        let ran = l
            .client
            .if_flag(l.stream, &l.flag, || l.add(&l.twos))
            .step("eager if")?;
        ensure!(ran == Ran::Branch((set != 0).then_some(0)), "{ran:?}");
        let eager = l.client.read_f32(&l.x).step("eager x")?;
        l.client.write_f32(&l.x, &[0.0; NU]).step("reset")?;
        l.client.replay(&graph).step("replay")?;
        let replayed = l.client.read_f32(&l.x).step("replayed x")?;
        same(&replayed, &eager, &format!("flag {set}"))?;
        let want = if set != 0 { 3.0 } else { 2.0 };
        same(&replayed, &[want; NU], &format!("flag {set}"))?;
    }
    Ok(())
}

/// A loop whose body counts its flag down runs 0, 1, k and the bound's
/// iterations per replay, as eagerly; past the bound it stops with the
/// flag still set, which is how the caller learns the bound stopped it.
pub fn while_runs_zero_one_k_and_bound_iterations<D: UserKernels>(session: &Session<D>) -> Outcome {
    let l = Loop::new(session.client())?;
    if !l.recordable()? {
        return Ok(());
    }
    l.arm(1).step("arm")?;
    let graph = l
        .capture(|| l.counted_loop(BOUND).map(drop))
        .step("capture")?;
    for k in [0, 1, 3, BOUND, BOUND + 3, 1000] {
        let runs = k.min(BOUND);
        l.arm(k).step("arm")?;
        let ran = l.counted_loop(BOUND).step("eager")?;
        ensure!(
            ran == Ran::Loop {
                iterations: runs,
                bound_reached: k > BOUND
            },
            "eagerly {k}: {ran:?}"
        );
        let eager = l.client.read_f32(&l.x).step("eager x")?;
        let eager_flag = l.flag_value()?;
        l.arm(k).step("arm")?;
        l.client.replay(&graph).step("replay")?;
        let replayed = l.client.read_f32(&l.x).step("replayed x")?;
        same(&replayed, &eager, &format!("{k} iterations asked"))?;
        same(&replayed, &[runs as f32; NU], &format!("{k} asked"))?;
        let flag = l.flag_value()?;
        ensure!(
            flag == eager_flag && (flag != 0) == (k > BOUND),
            "after {k} asked the flag is {flag} (eagerly {eager_flag})"
        );
        let counter = l.client.read_f32(&l.counter).step("counter")?;
        same(&counter, &[(k - runs) as f32], "the counter left")?;
    }
    Ok(())
}

/// A loop inside an `if`, two deep, with a loop inside the loop's body too:
/// three deep where the inner loop runs on its own flag.
pub fn a_loop_nested_in_an_if_replays_like_eager<D: UserKernels>(session: &Session<D>) -> Outcome {
    let l = Loop::new(session.client())?;
    if !l.recordable()? {
        return Ok(());
    }
    let outer = l
        .client
        .create(l.stream, &1u32.to_le_bytes())
        .step("outer")?;
    let nested = || {
        l.client
            .if_flag(l.stream, &outer, || {
                l.client
                    .while_flag(l.stream, &l.flag, BOUND, || {
                        l.add(&l.ones)?;
                        l.client.if_flag(l.stream, &outer, || l.add(&l.twos))?;
                        l.countdown()
                    })
                    .map(drop)
            })
            .map(drop)
    };
    l.arm(2).step("arm")?;
    let graph = l.capture(nested).step("capture")?;
    let info = l.client.graph_info(&graph).step("info")?;
    ensure!(info.conditionals == 3, "{} conditionals", info.conditionals);
    let dot = l.client.graph_dot(&graph).step("dot")?;
    ensure!(
        dot.contains("subgraph cluster_n0_0 {") && dot.contains("cluster_n0_0_0_0 {"),
        "the bodies are not drawn as clusters:\n{dot}"
    );
    for (set, k) in [(1u32, 3u32), (0, 3), (1, 0), (1, 9)] {
        l.client
            .write(&outer, &set.to_le_bytes())
            .step("outer flag")?;
        l.arm(k).step("arm")?;
        nested().step("eager")?;
        let eager = l.client.read_f32(&l.x).step("eager x")?;
        l.arm(k).step("arm")?;
        l.client.replay(&graph).step("replay")?;
        let replayed = l.client.read_f32(&l.x).step("replayed x")?;
        same(&replayed, &eager, &format!("outer {set}, {k} iterations"))?;
        let want = if set != 0 { 3 * k.min(BOUND) } else { 0 };
        same(&replayed, &[want as f32; NU], &format!("outer {set}, {k}"))?;
    }
    Ok(())
}

/// A body's independent launches form a dependency graph of their own, the
/// node's accesses are its body's and its flag's, and a hundred replays
/// whose loop is reset by kernels before it match a hundred eager runs.
pub fn a_hundred_replays_reset_by_kernels_and_independent_bodies<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const REPLAYS: usize = 100;
    let l = Loop::new(session.client())?;
    if !l.recordable()? {
        return Ok(());
    }
    let y = l.client.create_f32(l.stream, &[0.0; NU]).step("y")?;
    let step = || {
        // Reset by kernels: the counter to 3, the flag to a non-zero word.
        l.client
            .run_builtin(l.stream, Builtin::Fill, &[&l.counter], 1, 3.0)?;
        l.client
            .run_builtin(l.stream, Builtin::Fill, &[&l.flag], 1, 1.0)?;
        l.client
            .while_flag(l.stream, &l.flag, BOUND, || {
                l.add(&l.ones)?;
                l.client
                    .run_builtin(l.stream, Builtin::Add, &[&y, &l.twos], N, 0.0)?;
                l.add(&l.ones)?;
                l.countdown()
            })
            .map(drop)?;
        l.add(&y)
    };
    let graph = l.capture(step).step("capture")?;
    let info = l.client.graph_info(&graph).step("info")?;
    ensure!(
        info.launches == 7 && info.conditionals == 1,
        "{} launches, {} conditionals",
        info.launches,
        info.conditionals
    );
    let dot = l.client.graph_dot(&graph).step("dot")?;
    if session.order() == graph_capture::ReplayOrder::Dependencies {
        // Inside the body: y's add depends on nothing before it there.
        ensure!(
            dot.contains("n2_0_0 -> n2_0_2") && !dot.contains("n2_0_0 -> n2_0_1"),
            "the body's edges:\n{dot}"
        );
    }
    ensure!(
        dot.contains("n2 -> n3") && dot.contains("n1 -> n2"),
        "the node's edges:\n{dot}"
    );
    for buffer in [&l.x, &y] {
        l.client.write_f32(buffer, &[0.0; NU]).step("reset")?;
    }
    for _ in 0..REPLAYS {
        step().step("eager")?;
    }
    let eager = (
        l.client.read_f32(&l.x).step("x")?,
        l.client.read_f32(&y).step("y")?,
    );
    for buffer in [&l.x, &y] {
        l.client.write_f32(buffer, &[0.0; NU]).step("reset")?;
    }
    for _ in 0..REPLAYS {
        l.client.replay(&graph).step("replay")?;
    }
    same(&l.client.read_f32(&y).step("y")?, &eager.1, "y")?;
    same(&l.client.read_f32(&l.x).step("x")?, &eager.0, "x")?;
    // Each run: x += 2 per iteration, three iterations, then x += y.
    let ys: f32 = (1..=REPLAYS).map(|r| 6.0 * r as f32).sum();
    same(&eager.0, &[6.0 * REPLAYS as f32 + ys; NU], "the sum")?;
    Ok(())
}

/// A graph with a loop re-captured with another bound and body gives the
/// new work's results, whether updated in place or reinstantiated.
pub fn recapture_of_a_graph_with_conditionals<D: UserKernels>(session: &Session<D>) -> Outcome {
    let l = Loop::new(session.client())?;
    if !l.recordable()? {
        return Ok(());
    }
    l.arm(2).step("arm")?;
    let graph = l
        .capture(|| l.counted_loop(BOUND).map(drop))
        .step("capture")?;
    for (bound, by) in [(BOUND, &l.twos), (2, &l.twos), (2, &l.ones)] {
        l.arm(2).step("arm")?;
        l.client
            .recapture(&graph, |_pass| {
                l.client
                    .while_flag(l.stream, &l.flag, bound, || {
                        l.add(by)?;
                        l.countdown()
                    })
                    .map(drop)
            })
            .step("recapture")?;
        let per = l.client.read_f32(by).step("by")?[0];
        l.arm(4).step("arm")?;
        l.client.replay(&graph).step("replay")?;
        let runs = 4u32.min(bound);
        same(
            &l.client.read_f32(&l.x).step("x")?,
            &[per * runs as f32; NU],
            &format!("bound {bound}, adding {per}"),
        )?;
    }
    Ok(())
}

/// A body that allocates and drops a buffer replays from the warmup's
/// memory; a body that fails, or returns an error, dooms its window, which
/// seals nothing and claims what the body would have written.
pub fn failing_bodies_seal_nothing_and_allocating_ones_replay<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let l = Loop::new(session.client())?;
    if !l.recordable()? {
        return Ok(());
    }
    // The warmup must run the body for its allocation to be warmed.
    l.arm(1).step("arm")?;
    let allocating = || {
        l.client
            .while_flag(l.stream, &l.flag, BOUND, || {
                let scratch = l.client.allocate(l.stream, 4 * u64::from(N))?;
                l.client
                    .run_builtin(l.stream, Builtin::Fill, &[&scratch], N, 2.0)?;
                l.add(&scratch)?;
                l.countdown()
            })
            .map(drop)
    };
    let graph = l.capture(allocating).step("capture")?;
    l.arm(3).step("arm")?;
    l.client.replay(&graph).step("replay")?;
    expect_all(&l.client, &l.x, 6.0, "three iterations of x += 2")?;

    let z = l.client.create_f32(l.stream, &[5.0; NU]).step("z")?;
    // A launch that does not match its kernel, inside the body.
    let mismatched = || {
        l.client
            .while_flag(l.stream, &l.flag, BOUND, || {
                l.client
                    .run_builtin(l.stream, Builtin::Add, &[&z, &l.ones], N, 0.0)?;
                l.client.run_builtin(l.stream, Builtin::Add, &[&z], N, 0.0)
            })
            .map(drop)
    };
    l.arm(0).step("arm")?;
    refused(l.capture(mismatched), "a body with a refused launch")?;
    let err = refused(l.client.read_f32(&z), "z, which the doomed body writes")?;
    ensure!(matches!(err, Error::Claimed { .. }), "z: {err}");
    // A body whose own code fails.
    l.arm(0).step("arm")?;
    let mut calls = 0;
    let failing = l.client.capture(l.stream, |pass| {
        l.client.if_flag(l.stream, &l.flag, || {
            calls += 1;
            l.add(&l.twos)?;
            if pass == Pass::Record {
                return Err(Error::BadLaunch("the body's own failure".into()));
            }
            Ok(())
        })
    });
    let err = refused(failing, "a body that fails")?;
    ensure!(calls == 1, "the recorded body was called {calls} times");
    ensure!(
        err.to_string().contains("the body's own failure"),
        "the body's error: {err}"
    );
    l.captures_again()
}

/// Info bytes first met inside a body are staged by a copy the replay skips
/// with that body, so nothing outside it may reuse them: two `if`s that
/// pass the same info, an `if/else` whose branches do, a launch after the
/// conditional, and a nested body under the one that staged them each
/// replay what eager work computes, for every combination of flags.
pub fn info_first_met_in_a_skipped_body_is_never_reused_outside_it<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let l = Loop::new(session.client())?;
    if !l.recordable()? {
        return Ok(());
    }
    let (c, s) = (&l.client, l.stream);
    // Views of one buffer would do, but separate buffers name each result.
    let [f0, f1] = [0, 1].map(|_| c.create(s, &0u32.to_le_bytes()));
    let (f0, f1) = (f0.step("f0")?, f1.step("f1")?);
    let z = c.create_f32(s, &[0.0; 96]).step("z")?;
    let outs: Vec<Buffer> = (0..6)
        .map(|_| c.create_f32(s, &[0.0; 24]))
        .collect::<Result<_, _>>()
        .step("outputs")?;
    let fill = |buffer: &Buffer| c.run_builtin(s, Builtin::Fill, &[buffer], 24, 3.5);
    let step = || -> Result<(), Error> {
        c.run_builtin(s, Builtin::Fill, &[&z], 96, 1.0)?;
        c.if_flag(s, &f0, || fill(&outs[0]))?;
        c.if_flag(s, &f1, || fill(&outs[1]))?;
        c.if_else_flag(s, &f0, || Ok(()), || fill(&outs[2]))?;
        c.if_flag(s, &f1, || {
            fill(&outs[3])?;
            c.if_flag(s, &f0, || fill(&outs[4])).map(drop)
        })?;
        fill(&outs[5])
    };
    // The warmup runs other info (which keeps room for new info in the
    // recording), so (24, 3.5) is first met while recording, inside the
    // first body.
    let graph = c
        .capture(s, |pass| match pass {
            Pass::Warmup => outs
                .iter()
                .enumerate()
                .try_for_each(|(at, out)| c.run_builtin(s, Builtin::Fill, &[out], 24, at as f32)),
            Pass::Record => step(),
        })
        .step("capture")?
        .0;
    for (a, b) in [(0u32, 1u32), (1, 0), (0, 0), (1, 1)] {
        for out in &outs {
            c.write_f32(out, &[0.0; 24]).step("reset")?;
        }
        c.write(&f0, &a.to_le_bytes()).step("f0")?;
        c.write(&f1, &b.to_le_bytes()).step("f1")?;
        c.replay(&graph).step("replay")?;
        let on = |set: bool| if set { 3.5 } else { 0.0 };
        let want = [
            on(a != 0),
            on(b != 0),
            on(a == 0),
            on(b != 0),
            on(a != 0 && b != 0),
            3.5,
        ];
        for (at, (out, want)) in outs.iter().zip(want).enumerate() {
            expect_all(c, out, want, &format!("output {at} with flags {a}, {b}"))?;
        }
    }
    Ok(())
}

/// What a body cannot hold is refused with the reason, and the stream
/// records again afterwards: a wait between streams, a close from inside a
/// body, a flag that is not a `u32` of the stream, and (where the backend
/// cannot skip one) a write; a write it takes is skipped with its body.
pub fn what_a_body_cannot_hold_is_refused<D: UserKernels>(session: &Session<D>) -> Outcome {
    let l = Loop::new(session.client())?;
    if !l.recordable()? {
        return Ok(());
    }
    let other = l.client.create_stream().step("other stream")?;
    let short = l.client.create(l.stream, &[1, 0]).step("two bytes")?;
    let theirs = l.client.create(other, &1u32.to_le_bytes()).step("theirs")?;
    for flag in [&short, &theirs] {
        let err = refused(l.client.if_flag(l.stream, flag, || Ok(())), "a bad flag")?;
        ensure!(matches!(err, Error::BadFlag { .. }), "{err}");
    }

    // A wait inside a body.
    l.arm(1).step("arm")?;
    let waiting = l.capture(|| {
        l.client
            .if_flag(l.stream, &l.flag, || l.client.wait(l.stream, other))
            .map(drop)
    });
    let err = refused(waiting, "a wait in a body")?;
    ensure!(
        matches!(err.root(), Error::InBody { .. }),
        "a wait in a body: {err}"
    );
    // A close from inside a body leaves the window open for the body's end.
    let window = l.client.prepare(l.stream).step("prepare")?;
    l.counted_loop(BOUND).step("warmup")?;
    l.client.begin(l.stream, window).step("begin")?;
    let mut inside = None;
    l.client
        .if_flag(l.stream, &l.flag, || {
            inside = Some(l.client.instantiate(l.stream, window));
            Ok(())
        })
        .step("the body")?;
    ensure!(
        matches!(inside, Some(Err(Error::OutOfOrder { .. }))),
        "a close inside a body: {inside:?}"
    );
    let graph = l
        .client
        .instantiate(l.stream, window)
        .step("the close after")?;
    l.arm(1).step("arm")?;
    l.client.replay(&graph).step("replay")?;

    // A write inside a body: skipped with it, or refused.
    l.client.write_f32(&l.x, &[0.0; NU]).step("reset")?;
    let writing = l.capture(|| {
        l.client
            .if_flag(l.stream, &l.flag, || l.client.write_f32(&l.x, &[9.0; NU]))
            .map(drop)
    });
    let bodies = l.client.conditionals(l.stream).step("what bodies hold")?;
    ensure!(
        writing.is_ok() == bodies.copies,
        "a write in a body {} where the client says bodies {} hold copies",
        if writing.is_ok() {
            "recorded"
        } else {
            "refused"
        },
        if bodies.copies { "may" } else { "may not" }
    );
    match writing {
        Ok(graph) => {
            for set in [0u32, 1] {
                l.client.write_f32(&l.x, &[1.0; NU]).step("reset")?;
                l.client.write(&l.flag, &set.to_le_bytes()).step("flag")?;
                l.client.replay(&graph).step("replay")?;
                let want = if set != 0 { 9.0 } else { 1.0 };
                expect_all(
                    &l.client,
                    &l.x,
                    want,
                    &format!("a write in a body, flag {set}"),
                )?;
            }
        }
        Err(err) => ensure!(
            matches!(err.root(), Error::InBody { .. }),
            "a write in a body: {err}"
        ),
    }
    l.captures_again()
}

/// A driver that refuses to create the node: the capture is refused with
/// its error and the stream captures the same loop next time.
pub fn a_refused_node_creation_loses_nothing<D: UserKernels>(session: &Session<D>) -> Outcome {
    let (client, plan) = session.faulty();
    let l = Loop::new(client)?;
    if !l.recordable()? {
        return Ok(());
    }
    l.arm(1).step("arm")?;
    plan.fail(Primitive::Conditional, 1);
    let err = refused(
        l.capture(|| l.counted_loop(BOUND).map(drop)),
        "a capture whose node is refused",
    )?;
    ensure!(
        matches!(err.root(), Error::Driver(_)),
        "the driver's refusal: {err}"
    );
    l.arm(1).step("arm")?;
    let graph = l
        .capture(|| l.counted_loop(BOUND).map(drop))
        .step("capture again")?;
    l.arm(4).step("arm")?;
    l.client.replay(&graph).step("replay")?;
    expect_all(&l.client, &l.x, 4.0, "four iterations")
}
