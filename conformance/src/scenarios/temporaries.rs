//! Temporaries shared between the graphs of one stream: what a capture's
//! run allocates and drops inside itself lies in one arena per stream, so a
//! set of graphs holds the largest one's temporaries, not their sum; what
//! the caller keeps stays each graph's own, and nothing crosses streams.

use std::cell::RefCell;

use graph_capture::{Buffer, Builtin, Client, Error, GraphHandle, Pass, Placement, StreamId};

use crate::ensure;
use crate::session::Session;
use crate::support::{N, NU, Outcome, Step, expect_all, in_use};
use crate::workload::UserKernels;

/// Bytes a buffer of `elements` floats spans in its pool.
fn spanned(elements: u32) -> u64 {
    (u64::from(elements) * 4).next_multiple_of(graph_capture::SLICE_ALIGN)
}

/// A step that fills a temporary of `elements` with `value`, adds `x` to
/// it and adds the sum to `out` (`out += value + x`), noting where its
/// recorded run's temporary lay.
fn accumulate<D: UserKernels>(
    client: &Client<D>,
    stream: StreamId,
    (x, out): (&Buffer, &Buffer),
    elements: u32,
    value: f32,
    placed: &RefCell<Vec<Placement>>,
    pass: Pass,
) -> Result<(), Error> {
    let temporary = client.allocate(stream, u64::from(elements) * 4)?;
    client.run_builtin(stream, Builtin::Fill, &[&temporary], elements, value)?;
    client.run_builtin(stream, Builtin::Add, &[&temporary, x], N, 0.0)?;
    client.run_builtin(stream, Builtin::Add, &[out, &temporary], N, 0.0)?;
    if pass == Pass::Record {
        placed.borrow_mut().push(temporary.placement());
    }
    Ok(())
}

/// Capture [`accumulate`] on `stream`.
fn capture_accumulate<D: UserKernels>(
    client: &Client<D>,
    stream: StreamId,
    buffers: (&Buffer, &Buffer),
    elements: u32,
    value: f32,
    placed: &RefCell<Vec<Placement>>,
) -> Result<GraphHandle<D>, String> {
    let (graph, ()) = client
        .capture(stream, |pass| {
            accumulate(client, stream, buffers, elements, value, placed, pass)
        })
        .step("capture")?;
    Ok(graph)
}

/// Two graphs of one stream, each with a temporary: the two lie in the same
/// memory, the stream holds the larger one's bytes once, and a thousand
/// replays taken in turn give what the same steps give eagerly.
pub fn two_graphs_share_their_temporaries_and_replay_in_turn_like_eager<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const REPLAYS: usize = 1000;
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    let a = client.create_f32(stream, &[0.0; NU]).step("a")?;
    let b = client.create_f32(stream, &[0.0; NU]).step("b")?;
    let baseline = in_use(&client, stream)?.0;
    let placed = RefCell::new(Vec::new());
    // The larger first, so the second fits in its arena.
    let big = capture_accumulate(&client, stream, (&x, &b), 4 * N, 5.0, &placed)?;
    let small = capture_accumulate(&client, stream, (&x, &a), N, 2.0, &placed)?;
    let placed = placed.into_inner();
    ensure!(
        placed.len() == 2 && placed[0].overlaps(&placed[1]),
        "the temporaries lie apart: {placed:?}"
    );
    let info = |graph| client.graph_info(graph).step("info");
    let (big_bytes, small_bytes) = (info(&big)?.temporary_bytes, info(&small)?.temporary_bytes);
    ensure!(
        (big_bytes, small_bytes) == (spanned(4 * N), spanned(N)),
        "temporary bytes: {big_bytes}, {small_bytes}"
    );
    let usage = client.usage(stream).step("usage")?;
    ensure!(
        usage.temporary_arena_bytes == big_bytes,
        "the arena holds {} bytes, the larger graph's temporaries {big_bytes}",
        usage.temporary_arena_bytes
    );
    let held = in_use(&client, stream)?.0 - baseline;
    ensure!(
        held < big_bytes + small_bytes,
        "the graphs hold {held} bytes, no less than their temporaries' sum"
    );
    // What eager steps leave: the warmups ran each once.
    let (mut want_a, mut want_b) = (3.0, 6.0);
    for replay in 0..REPLAYS {
        if replay % 2 == 0 {
            client.replay(&small).step("replay small")?;
            want_a += 3.0;
        } else {
            client.replay(&big).step("replay big")?;
            want_b += 6.0;
        }
    }
    expect_all(&client, &a, want_a, "the small graph's sum")?;
    expect_all(&client, &b, want_b, "the big graph's sum")?;
    let eager = RefCell::new(Vec::new());
    for _ in 0..2 {
        accumulate(&client, stream, (&x, &a), N, 2.0, &eager, Pass::Warmup).step("eager")?;
    }
    expect_all(&client, &a, want_a + 6.0, "eager steps on top")
}

/// A buffer the capture's body returns is the caller's, not a temporary: no
/// other graph's replay touches it. A temporary the recorded run kept
/// though its warmup twin was dropped is claimed whenever a graph sharing
/// its memory overwrites it, and the next window takes a fresh arena.
pub fn what_the_caller_keeps_is_not_shared<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    let sink = client.create_f32(stream, &[0.0; NU]).step("sink")?;
    let placed = RefCell::new(Vec::new());
    let other = capture_accumulate(&client, stream, (&x, &sink), N, 8.0, &placed)?;
    // Returned: kept in both runs.
    let (returns, kept) = client
        .capture(stream, |_| {
            let out = client.allocate(stream, u64::from(N) * 4)?;
            client.run_builtin(stream, Builtin::Fill, &[&out], N, 7.0)?;
            Ok(out)
        })
        .step("capture a graph returning its output")?;
    ensure!(
        !kept.placement().overlaps(&placed.borrow()[0]),
        "the returned buffer lies in the arena"
    );
    ensure!(
        client.graph_info(&returns).step("info")?.temporary_bytes == 0,
        "a kept buffer counted as a temporary"
    );
    client.replay(&returns).step("replay")?;
    client.replay(&other).step("replay the other")?;
    expect_all(&client, &kept, 7.0, "the kept output after another graph")?;
    // Kept only by the recorded run: a temporary the caller holds.
    let late = RefCell::new(None);
    let (keeps_late, ()) = client
        .capture(stream, |pass| {
            let t = client.allocate(stream, u64::from(N) * 4)?;
            client.run_builtin(stream, Builtin::Fill, &[&t], N, 3.0)?;
            if pass == Pass::Record {
                *late.borrow_mut() = Some(t);
            }
            Ok(())
        })
        .step("capture a graph keeping a temporary")?;
    let late = late.into_inner().ok_or("the recorded run kept nothing")?;
    ensure!(
        late.placement().overlaps(&placed.borrow()[0]),
        "the late temporary was not in the arena"
    );
    client.replay(&keeps_late).step("replay")?;
    expect_all(
        &client,
        &late,
        3.0,
        "the kept temporary, its graph replayed",
    )?;
    client.replay(&other).step("replay the other")?;
    match client.read(&late) {
        Err(err @ Error::Claimed { .. }) => ensure!(
            err.to_string().contains("overwrote"),
            "the claim names the overwrite: {err}"
        ),
        other => return Err(format!("a read after the overwrite: {other:?}")),
    }
    client.replay(&keeps_late).step("replay again")?;
    expect_all(&client, &late, 3.0, "rewritten by its own graph")?;
    let fresh = RefCell::new(Vec::new());
    let _next = capture_accumulate(&client, stream, (&x, &sink), N, 1.0, &fresh)?;
    ensure!(
        !fresh.borrow()[0].overlaps(&late.placement()),
        "a later window cut over the kept temporary"
    );
    Ok(())
}

/// Destroying one graph of a set that shares temporaries leaves the others
/// replaying right; once the last is gone, so is their arena.
pub fn destroying_one_graph_of_a_set_keeps_the_others<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    let outs: Vec<_> = (0..3)
        .map(|_| client.create_f32(stream, &[0.0; NU]))
        .collect::<Result<_, _>>()
        .step("outputs")?;
    let baseline = in_use(&client, stream)?.0;
    let placed = RefCell::new(Vec::new());
    let graphs: Vec<_> = outs
        .iter()
        .zip([3, 2, 1])
        .map(|(out, size)| {
            capture_accumulate(&client, stream, (&x, out), size * N, size as f32, &placed)
        })
        .collect::<Result<_, _>>()?;
    client.destroy(&graphs[0]).step("destroy the largest")?;
    for _ in 0..10 {
        client.replay(&graphs[1]).step("replay")?;
        client.replay(&graphs[2]).step("replay")?;
    }
    expect_all(&client, &outs[1], 3.0 * 11.0, "the second graph")?;
    expect_all(&client, &outs[2], 2.0 * 11.0, "the third graph")?;
    let arena = client.usage(stream).step("usage")?.temporary_arena_bytes;
    ensure!(
        arena == spanned(3 * N),
        "the arena went with one graph: {arena}"
    );
    drop(graphs);
    client.sync(stream).step("sync")?;
    let arena = client.usage(stream).step("usage")?.temporary_arena_bytes;
    ensure!(
        arena == spanned(3 * N),
        "the stream keeps its arena for its next window: {arena}"
    );
    client.trim(stream).step("trim")?;
    let usage = client.usage(stream).step("usage")?;
    ensure!(
        usage.temporary_arena_bytes == 0,
        "a trim lets go of an arena no graph holds"
    );
    let held = in_use(&client, stream)?.0;
    ensure!(held == baseline, "{held} bytes held, {baseline} before");
    Ok(())
}

/// Temporaries are a stream's own: another stream's graphs cut theirs from
/// an arena of their own, and a launch on another stream refuses to bind
/// one.
pub fn temporaries_stay_on_their_stream<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let (s1, s2) = (
        client.create_stream().step("stream 1")?,
        client.create_stream().step("stream 2")?,
    );
    let x = client.create_f32(s1, &[1.0; NU]).step("x")?;
    let (o1, o2) = (
        client.create_f32(s1, &[0.0; NU]).step("o1")?,
        client.create_f32(s2, &[0.0; NU]).step("o2")?,
    );
    let placed = RefCell::new(Vec::new());
    let refused = RefCell::new(None);
    let (g1, ()) = client
        .capture(s1, |pass| {
            accumulate(&client, s1, (&x, &o1), N, 1.0, &placed, pass)?;
            let t = client.allocate(s1, u64::from(N) * 4)?;
            client.run_builtin(s1, Builtin::Fill, &[&t], N, 1.0)?;
            if pass == Pass::Record {
                *refused.borrow_mut() =
                    Some(client.run_builtin(s2, Builtin::Add, &[&o2, &t], N, 0.0));
            }
            Ok(())
        })
        .step("capture on stream 1")?;
    match refused.into_inner() {
        Some(Err(Error::TemporaryElsewhere { home, stream, .. })) if (home, stream) == (s1, s2) => {
        }
        other => return Err(format!("another stream bound a temporary: {other:?}")),
    }
    // Stream 2's graph reads x, a buffer of stream 1, like any shared one.
    let g2 = capture_accumulate(&client, s2, (&x, &o2), N, 1.0, &placed)?;
    let placed = placed.into_inner();
    ensure!(
        placed.len() == 2 && placed[0].stream == s1 && placed[1].stream == s2,
        "each stream's temporaries in its own pool: {placed:?}"
    );
    ensure!(
        client.usage(s1).step("usage")?.temporary_arena_bytes > 0
            && client.usage(s2).step("usage")?.temporary_arena_bytes > 0,
        "an arena per stream"
    );
    for _ in 0..20 {
        client.replay(&g1).step("replay on 1")?;
        client.replay(&g2).step("replay on 2")?;
    }
    expect_all(&client, &o1, 2.0 * 21.0, "stream 1's sum")?;
    expect_all(&client, &o2, 2.0 * 21.0, "stream 2's sum")
}

/// A temporary the recording reads before writing all of it would read
/// another graph's: the capture is refused, saying so.
pub fn a_temporary_read_before_written_is_refused<D: UserKernels>(session: &Session<D>) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    let captured = client.capture(stream, |_| {
        let t = client.allocate(stream, u64::from(N) * 4)?;
        client.run_builtin(stream, Builtin::Add, &[&t, &x], N, 0.0)
    });
    match captured {
        Err(Error::Doomed(cause)) if matches!(*cause, Error::TemporaryReadFirst { .. }) => Ok(()),
        Err(other) => Err(format!("refused, but for {other}")),
        Ok(_) => Err("a graph reading another's temporaries was made".into()),
    }
}

/// A replay refused over a claimed input claims what the graph writes, its
/// temporaries included; those are written whole before they are read, so
/// they are no input of the next replay, which runs once its real input is
/// rewritten.
pub fn a_refused_replay_leaves_its_temporaries_no_obstacle<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let x = client.create_f32(stream, &[1.0; NU]).step("x")?;
    let (graph, ()) = client
        .capture(stream, |_| {
            let tmp = client.allocate(stream, u64::from(N) * 4)?;
            client.run_builtin(stream, Builtin::Fill, &[&tmp], N, 2.0)?;
            client.run_builtin(stream, Builtin::Add, &[&x, &tmp], N, 0.0)
        })
        .step("capture with a temporary")?;
    // A window that cannot seal claims x.
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    client
        .run_builtin(stream, Builtin::Fill, &[&x], N, 5.0)
        .step("recorded")?;
    crate::support::refused(client.read(&x), "a read while recording")?;
    crate::support::refused(client.instantiate(stream, window), "the doomed window")?;
    let err = crate::support::refused(client.replay(&graph), "a replay over claimed x")?;
    ensure!(matches!(err, Error::Claimed { .. }), "{err}");
    client.write_f32(&x, &[1.0; NU]).step("x rewritten")?;
    client
        .replay(&graph)
        .step("a replay once its input is valid again")?;
    expect_all(&client, &x, 3.0, "x after the replay")
}
