//! Graphs kept as their dependency graphs: what runs side by side is what
//! no hazard orders, the values are those of the chain, and an update that
//! changes what a launch touches changes the edges with it.

use graph_capture::{Builtin, Update};

use crate::ensure;
use crate::session::Session;
use crate::support::{N, NU, Outcome, Step, expect_all};
use crate::workload::UserKernels;

/// Eight independent chains of launches make a dependency graph as deep as
/// one chain and eight wide, whatever order they were issued in.
pub fn eight_independent_chains_are_one_chain_deep_and_eight_wide<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const CHAINS: usize = 8;
    const STEPS: usize = 6;
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let xs: Vec<_> = (0..CHAINS)
        .map(|_| client.create_f32(stream, &[0.0; NU]))
        .collect::<Result<_, _>>()
        .step("chains")?;
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            // Interleaved: step by step across the chains.
            for _ in 0..STEPS {
                for x in &xs {
                    client.run_builtin(stream, Builtin::Add, &[x, &one], N, 0.0)?;
                }
            }
            Ok(())
        })
        .step("capture")?;
    let info = client.graph_info(&graph).step("info")?;
    ensure!(
        (info.launches, info.depth, info.width, info.edges)
            == (CHAINS * STEPS, STEPS, CHAINS, CHAINS * (STEPS - 1)),
        "launches, depth, width, edges: {:?}",
        (info.launches, info.depth, info.width, info.edges)
    );
    client.replay(&graph).step("replay")?;
    for x in &xs {
        expect_all(
            &client,
            x,
            2.0 * STEPS as f32,
            "a chain after warmup and a replay",
        )?;
    }
    Ok(())
}

/// Every kind of hazard in one graph, replayed a thousand times: reads after
/// writes, a write after two reads, writes after writes, beside independent
/// work. Each replay must leave what the same launches leave eagerly.
pub fn hazards_of_every_kind_replay_a_thousand_times_like_eager<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    // Large enough that the host backend spreads each level over its pool.
    const ELEMENTS: u32 = 1 << 15;
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let buffers: Vec<_> = (0..4)
        .map(|_| client.create_f32(stream, &vec![0.0; ELEMENTS as usize]))
        .collect::<Result<_, _>>()
        .step("buffers")?;
    let [a, b, c, d] = &buffers[..] else {
        unreachable!("four buffers")
    };
    let run = || -> Result<(), graph_capture::Error> {
        let builtin = |which, args: &[&graph_capture::Buffer], value| {
            client.run_builtin(stream, which, args, ELEMENTS, value)
        };
        builtin(Builtin::Fill, &[a], 1.0)?; // 0: a = 1
        builtin(Builtin::Fill, &[c], 3.0)?; // 1: c = 3, beside 0
        builtin(Builtin::Copy, &[a, b], 0.0)?; // 2: b = a (RAW on a)
        builtin(Builtin::Add, &[c, a], 0.0)?; // 3: c += a (RAW on a and c)
        builtin(Builtin::Fill, &[a], 2.0)?; // 4: a = 2 (WAR after 2 and 3, WAW after 0)
        builtin(Builtin::Copy, &[c, d], 0.0)?; // 5: d = c, beside 4
        builtin(Builtin::Add, &[b, a], 0.0) // 6: b += a (RAW on a and b)
    };
    let want = [2.0, 3.0, 4.0, 4.0];
    let poison = || {
        buffers
            .iter()
            .try_for_each(|buffer| client.write_f32(buffer, &vec![-1.0; ELEMENTS as usize]))
    };
    let check = |what: &str| {
        buffers
            .iter()
            .zip(want)
            .try_for_each(|(buffer, value)| expect_all(&client, buffer, value, what))
    };
    run().step("eager")?;
    check("eager")?;
    replays_like_eager(&client, stream, run, poison, check)
}

/// Capture `run` on `stream` (seven launches, four deep and two wide), then
/// `poison` what it writes and replay it a thousand times, `check`ing what
/// it leaves every 250.
fn replays_like_eager<D: UserKernels>(
    client: &graph_capture::Client<D>,
    stream: graph_capture::StreamId,
    run: impl Fn() -> Result<(), graph_capture::Error>,
    poison: impl Fn() -> Result<(), graph_capture::Error>,
    check: impl Fn(&str) -> Outcome,
) -> Outcome {
    const REPLAYS: usize = 1000;
    let (graph, ()) = client.capture(stream, |_| run()).step("capture")?;
    let info = client.graph_info(&graph).step("info")?;
    ensure!(
        (info.launches, info.depth, info.width) == (7, 4, 2),
        "launches, depth, width: {:?}",
        (info.launches, info.depth, info.width)
    );
    poison().step("poison")?;
    for replay in 1..=REPLAYS {
        client.replay(&graph).step("replay")?;
        if replay % 250 == 0 {
            check("after replays")?;
        }
    }
    Ok(())
}

/// Launches over views of one buffer, some disjoint and some overlapping:
/// the edges compare byte ranges, so work on disjoint parts runs side by
/// side while every read after write, write after read and write after
/// write between overlapping parts is kept. A thousand replays leave what
/// the same launches leave eagerly, and a launch that writes a view
/// overlapping another of its bindings is refused.
pub fn views_of_one_buffer_replay_a_thousand_times_like_eager<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    // A quarter of the buffer, in elements: large enough that the host
    // backend spreads each level over its pool.
    const Q: u32 = 1 << 14;
    const QUARTER: u64 = Q as u64 * 4;
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let buffer = client
        .create_f32(stream, &vec![0.0; 4 * Q as usize])
        .step("buffer")?;
    let view = |quarter: u64, quarters: u64| buffer.range(quarter * QUARTER, quarters * QUARTER);
    let quarters: Vec<_> = (0..4)
        .map(|q| view(q, 1))
        .collect::<Result<_, _>>()
        .step("quarters")?;
    let [q0, q1, q2, q3] = &quarters[..] else {
        unreachable!("four quarters")
    };
    let (lo, mid, hi) = (
        view(0, 2).step("lo")?,
        view(1, 2).step("mid")?,
        view(2, 2).step("hi")?,
    );
    let run = || -> Result<(), graph_capture::Error> {
        let builtin = |which, args: &[&graph_capture::Buffer], n, value| {
            client.run_builtin(stream, which, args, n, value)
        };
        builtin(Builtin::Fill, &[&lo], 2 * Q, 1.0)?; // 0: q0 = q1 = 1
        builtin(Builtin::Fill, &[&hi], 2 * Q, 2.0)?; // 1: q2 = q3 = 2, beside 0
        builtin(Builtin::Add, &[q1, q3], Q, 0.0)?; // 2: q1 += q3 (RAW on 0, 1)
        builtin(Builtin::Copy, &[q0, q2], Q, 0.0)?; // 3: q2 = q0 (RAW on 0, WAW on 1), beside 2
        builtin(Builtin::Add, &[q3, &mid], Q, 0.0)?; // 4: q3 += q1 (reads mid: RAW on 2, 3)
        builtin(Builtin::Fill, &[q0], Q, 7.0)?; // 5: q0 = 7 (WAR on 3, WAW on 0), beside 4
        builtin(Builtin::Copy, &[q2, q1], Q, 0.0) // 6: q1 = q2 (WAR on 4, WAW on 2)
    };
    let want = [7.0, 1.0, 1.0, 5.0];
    let check = |what: &str| -> Outcome {
        for (quarter, value) in quarters.iter().zip(want) {
            expect_all(&client, quarter, value, what)?;
        }
        let whole = client.read_f32(&buffer).step("read the whole")?;
        let of_views: Vec<f32> = want
            .iter()
            .flat_map(|&value| std::iter::repeat_n(value, Q as usize))
            .collect();
        ensure!(
            whole == of_views,
            "{what}: the whole buffer is not its views"
        );
        Ok(())
    };
    run().step("eager")?;
    check("eager")?;
    let aliased = client.run_builtin(stream, Builtin::Add, &[&lo, &mid], 2 * Q, 0.0);
    ensure!(
        matches!(aliased, Err(graph_capture::Error::KernelMismatch { .. })),
        "a written view overlapping a read one: {aliased:?}"
    );
    let poison = || client.write_f32(&buffer, &vec![-1.0; 4 * Q as usize]);
    replays_like_eager(&client, stream, run, poison, check)
}

/// An update in place that changes which buffers a launch reads changes
/// the graph's edges: a launch that read its neighbour's output now reads
/// an input of its own and runs beside it, and back again.
pub fn an_update_in_place_keeps_the_edges_of_the_new_work<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
    let ten = client.create_f32(stream, &[10.0; NU]).step("ten")?;
    let a = client.create_f32(stream, &[0.0; NU]).step("a")?;
    let b = client.create_f32(stream, &[0.0; NU]).step("b")?;
    // a = one; b += (a or ten): one launch's input is the other's output,
    // or not.
    let step = |input: &graph_capture::Buffer| -> Result<(), graph_capture::Error> {
        client.run_builtin(stream, Builtin::Copy, &[&one, &a], N, 0.0)?;
        client.run_builtin(stream, Builtin::Add, &[&b, input], N, 0.0)
    };
    let shape = |graph| -> Result<(usize, usize, usize), String> {
        let info = client.graph_info(graph).step("info")?;
        Ok((info.edges, info.depth, info.width))
    };
    let (graph, ()) = client.capture(stream, |_| step(&a)).step("capture")?;
    ensure!(shape(&graph)? == (1, 2, 1), "chained: {:?}", shape(&graph)?);
    let mut total = 1.0; // the warmup ran; the recorded run only recorded
    for (input, added, edges) in [(&ten, 10.0, (0, 1, 2)), (&a, 1.0, (1, 2, 1))] {
        let (how, ()) = client
            .recapture(&graph, |_| step(input))
            .step("recapture")?;
        total += added;
        ensure!(
            shape(&graph)? == edges,
            "after the update ({how:?}): {:?}",
            shape(&graph)?
        );
        ensure!(
            matches!(how, Update::InPlace | Update::Reinstantiated),
            "an update"
        );
        for _ in 0..50 {
            client.replay(&graph).step("replay")?;
            total += added;
        }
        expect_all(&client, &b, total, "replays of the updated graph")?;
    }
    Ok(())
}
