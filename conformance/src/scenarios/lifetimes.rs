//! What is kept of a buffer lives as long as its memory, not as its last
//! handle: a graph that still reads or writes a dropped buffer is ordered
//! after the other streams' work on it, and refused by a claim on it, for
//! as long as the graph lives.

use graph_capture::{Buffer, Builtin, Client, Error, GraphHandle, StreamId};

use super::streams::Busy;
use crate::ensure;
use crate::faulty::Primitive;
use crate::session::Session;
use crate::support::{N, NU, Outcome, Step, expect, expect_all, expect_claimed, refused};
use crate::workload::UserKernels;
use crate::workload::rng::Rng;

/// A graph on stream `g` copies `x`, a buffer of stream `p`; `p` adds into
/// `x` (after busy work of its own) and drops it; the replay that follows
/// must still wait for `p`'s adds.
pub fn rule_20_a_graph_over_a_dropped_buffer_stays_ordered<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let p = client.create_stream().step("p")?;
    let g = client.create_stream().step("g")?;
    let busy = Busy::on(session, &client, p)?;
    let x = client.create_f32(p, &[1.0; NU]).step("x")?;
    let ones = client.create_f32(p, &[1.0; NU]).step("ones")?;
    let out = client.create_f32(g, &[0.0; NU]).step("out")?;
    let (graph, ()) = client
        .capture(g, |_| {
            client.run_builtin(g, Builtin::Copy, &[&x, &out], N, 0.0)
        })
        .step("a capture reading p's buffer")?;
    for round in 0..4 {
        busy.run(&client, p).step("busy p")?;
        client
            .run_builtin(p, Builtin::Add, &[&x, &ones], N, 0.0)
            .step(&format!("add {round}"))?;
    }
    drop(x);
    client.replay(&graph).step("replay after the drop")?;
    expect_all(&client, &out, 5.0, "the replay after p's four adds")?;
    ensure!(
        client.lingering_buffers() > 0,
        "the graph still uses the dropped buffer's memory"
    );
    drop(graph);
    client.sync(p).step("sync p")?;
    client.sync(g).step("sync g")?;
    ensure!(
        client.lingering_buffers() == 0,
        "{} dropped buffers kept after their graph went",
        client.lingering_buffers()
    );
    Ok(())
}

/// A graph writes `x`, another reads it, and the user dropped `x`: a
/// failed replay of the writer claims `x`, so the reader's replay is
/// refused instead of copying bytes nobody wrote, until a good replay of
/// the writer renews them.
pub fn a_claim_on_a_dropped_buffer_stays_while_a_graph_reads_it<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let (client, plan) = session.faulty();
    let stream = client.create_stream().step("stream")?;
    let src = client.create_f32(stream, &[3.0; NU]).step("src")?;
    let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
    let out = client.create_f32(stream, &[0.0; NU]).step("out")?;
    let copy = |from: &Buffer, to: &Buffer| {
        client
            .capture(stream, |_| {
                client.run_builtin(stream, Builtin::Copy, &[from, to], N, 0.0)
            })
            .map(|(graph, ())| graph)
    };
    let writer = copy(&src, &x).step("capture the writer")?;
    let reader = copy(&x, &out).step("capture the reader")?;
    drop(x);
    plan.fail(Primitive::Replay, 1);
    refused(client.replay(&writer), "a refused replay of the writer")?;
    let err = refused(client.replay(&reader), "the reader over a claimed buffer")?;
    ensure!(matches!(err, Error::Claimed { .. }), "refused with {err}");
    expect_claimed(&client, &out, "injected", "the refused reader's output")?;
    client.replay(&writer).step("a good replay of the writer")?;
    client.replay(&reader).step("the reader")?;
    expect_all(&client, &out, 3.0, "the writer's bytes")?;
    drop((writer, reader));
    client.sync(stream).step("sync")?;
    ensure!(
        client.claimed_buffers() == 0 && client.lingering_buffers() == 0,
        "{} claims and {} dropped buffers kept after the graphs went",
        client.claimed_buffers(),
        client.lingering_buffers()
    );
    Ok(())
}

/// Streams the random programs use.
const STREAMS: usize = 3;
/// Programs run, and steps in each.
const PROGRAMS: u64 = 8;
const STEPS: usize = 100;
/// Values stay far below 2^24, where f32 stops counting exactly.
const LIMIT: f32 = 1.0e6;

/// What an operation does, to buffers `a` and `b`.
#[derive(Clone, Copy)]
enum Kind {
    /// `a += b`.
    Add,
    /// `b = a`.
    Copy,
    /// `a = value`.
    Fill(f32),
}

/// One operation, eager or in a graph's body, over buffers named by their
/// index in [`Program::buffers`].
#[derive(Clone, Copy)]
struct Op {
    kind: Kind,
    a: usize,
    b: usize,
}

/// A buffer of a program: its handle while the user holds it, and what
/// the model says it holds (kept after the drop, for the graphs).
struct Slot {
    handle: Option<Buffer>,
    values: Vec<f32>,
}

/// A random program on several streams, run on a client and on a model of
/// the values side by side.
struct Program<'a, D: UserKernels> {
    client: &'a Client<D>,
    streams: &'a [StreamId; STREAMS],
    busy: &'a [Busy<D>],
    buffers: Vec<Slot>,
    /// Live graphs, each with its body and stream.
    graphs: Vec<(GraphHandle<D>, Vec<Op>, usize)>,
    rng: Rng,
}

/// Launch `op` on `stream` over `a` and `b`.
fn launch<D: UserKernels>(
    client: &Client<D>,
    stream: StreamId,
    op: Op,
    a: &Buffer,
    b: &Buffer,
) -> Result<(), Error> {
    match op.kind {
        Kind::Add => client.run_builtin(stream, Builtin::Add, &[a, b], N, 0.0),
        Kind::Copy => client.run_builtin(stream, Builtin::Copy, &[a, b], N, 0.0),
        Kind::Fill(value) => client.run_builtin(stream, Builtin::Fill, &[a], N, value),
    }
}

impl<D: UserKernels> Program<'_, D> {
    fn below(&mut self, n: usize) -> usize {
        let unit = (self.rng.value() + 1.0) / 2.0;
        ((unit * n as f32) as usize).min(n.saturating_sub(1))
    }

    fn stream(&mut self) -> (usize, StreamId) {
        let at = self.below(STREAMS);
        (at, self.streams[at])
    }

    /// The buffers the user still holds.
    fn held(&self) -> Vec<usize> {
        (0..self.buffers.len())
            .filter(|&i| self.buffers[i].handle.is_some())
            .collect()
    }

    /// An operation over two distinct buffers the user still holds.
    fn op(&mut self) -> Option<Op> {
        let held = self.held();
        if held.len() < 2 {
            return None;
        }
        let a = held[self.below(held.len())];
        let b = held[self.below(held.len())];
        let kind = match self.below(3) {
            0 => Kind::Add,
            1 => Kind::Copy,
            _ => Kind::Fill(self.below(8) as f32),
        };
        (a != b).then_some(Op { kind, a, b })
    }

    /// `ops` on the model, in order; `false`, changing nothing, if they
    /// would leave the integers f32 counts exactly.
    fn model(&mut self, ops: &[Op]) -> bool {
        let before: Vec<Vec<f32>> = self.buffers.iter().map(|b| b.values.clone()).collect();
        for op in ops {
            let (a, b) = (&self.buffers[op.a].values, &self.buffers[op.b].values);
            match op.kind {
                Kind::Add => {
                    let sum: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
                    self.buffers[op.a].values = sum;
                }
                Kind::Copy => self.buffers[op.b].values = a.clone(),
                Kind::Fill(value) => self.buffers[op.a].values = vec![value; NU],
            }
        }
        let exact = self
            .buffers
            .iter()
            .all(|b| b.values.iter().all(|v| v.abs() < LIMIT));
        if !exact {
            for (slot, values) in self.buffers.iter_mut().zip(before) {
                slot.values = values;
            }
        }
        exact
    }

    /// Launch `op` on `stream`; the program only names held buffers.
    fn issue(&self, stream: StreamId, op: Op) -> Result<(), Error> {
        match (&self.buffers[op.a].handle, &self.buffers[op.b].handle) {
            (Some(a), Some(b)) => launch(self.client, stream, op, a, b),
            _ => Err(Error::Poisoned),
        }
    }

    fn step(&mut self, at: usize) -> Outcome {
        match self.below(11) {
            0 | 1 => {
                let (_, stream) = self.stream();
                let value = self.below(8) as f32;
                let handle = self
                    .client
                    .create_f32(stream, &[value; NU])
                    .step("create")?;
                self.buffers.push(Slot {
                    handle: Some(handle),
                    values: vec![value; NU],
                });
            }
            2 | 3 => {
                let Some(op) = self.op() else {
                    return Ok(());
                };
                let (s, stream) = self.stream();
                // Slow work first, so that a stream not ordered after this
                // one runs ahead of it.
                if self.below(2) == 0 {
                    self.busy[s].run(self.client, stream).step("busy")?;
                }
                if self.model(&[op]) {
                    self.issue(stream, op).step(&format!("eager op {at}"))?;
                }
            }
            4 | 5 => {
                let (Some(first), Some(second)) = (self.op(), self.op()) else {
                    return Ok(());
                };
                let body = [first, second];
                // The warmup runs the body once, for real.
                if !self.model(&body) {
                    return Ok(());
                }
                let (s, stream) = self.stream();
                let (handle, ()) = self
                    .client
                    .capture(stream, |_| {
                        body.iter().try_for_each(|&op| self.issue(stream, op))
                    })
                    .step(&format!("capture {at}"))?;
                self.graphs.push((handle, body.to_vec(), s));
            }
            6 | 7 => {
                if self.graphs.is_empty() {
                    return Ok(());
                }
                let g = self.below(self.graphs.len());
                let body = self.graphs[g].1.clone();
                if self.model(&body) {
                    self.client
                        .replay(&self.graphs[g].0)
                        .step(&format!("replay {at}"))?;
                }
            }
            8 => {
                let held = self.held();
                if !held.is_empty() {
                    let i = held[self.below(held.len())];
                    drop(self.buffers[i].handle.take());
                }
                if self.below(3) == 0 && !self.graphs.is_empty() {
                    let g = self.below(self.graphs.len());
                    drop(self.graphs.swap_remove(g));
                }
            }
            9 => self.write_drop_replay(at)?,
            _ => {
                let held = self.held();
                if !held.is_empty() {
                    let i = held[self.below(held.len())];
                    self.check(i, at)?;
                }
            }
        }
        Ok(())
    }

    /// A buffer a graph reads, written on another stream after slow work,
    /// then dropped, then the graph replayed at once: the drop's collection
    /// and the replay's ordering meet.
    fn write_drop_replay(&mut self, at: usize) -> Outcome {
        if self.graphs.is_empty() {
            return Ok(());
        }
        let g = self.below(self.graphs.len());
        let read: Vec<usize> = self.graphs[g]
            .1
            .iter()
            .flat_map(|op| match op.kind {
                Kind::Add => vec![op.a, op.b],
                Kind::Copy => vec![op.a],
                Kind::Fill(_) => vec![],
            })
            .filter(|&i| self.buffers[i].handle.is_some())
            .collect();
        if read.is_empty() {
            return Ok(());
        }
        let i = read[self.below(read.len())];
        let s = (self.graphs[g].2 + 1 + self.below(STREAMS - 1)) % STREAMS;
        let stream = self.streams[s];
        self.busy[s].run(self.client, stream).step("busy")?;
        let value = 8.0 + self.below(8) as f32;
        let write = Op {
            kind: Kind::Fill(value),
            a: i,
            b: i,
        };
        self.model(&[write]);
        if let Some(buffer) = &self.buffers[i].handle {
            launch(self.client, stream, write, buffer, buffer).step(&format!("write {at}"))?;
        }
        drop(self.buffers[i].handle.take());
        let body = self.graphs[g].1.clone();
        if !self.model(&body) {
            return Ok(());
        }
        self.client
            .replay(&self.graphs[g].0)
            .step(&format!("replay after a drop {at}"))?;
        // What the replay wrote, before anything overwrites it.
        for op in body {
            match op.kind {
                Kind::Copy => self.check(op.b, at)?,
                _ => self.check(op.a, at)?,
            }
        }
        Ok(())
    }

    fn check(&self, i: usize, at: usize) -> Outcome {
        match &self.buffers[i].handle {
            Some(handle) => expect(
                self.client,
                handle,
                &self.buffers[i].values,
                &format!("buffer {i} at step {at}"),
            ),
            None => Ok(()),
        }
    }
}

/// Random programs on three streams: buffers created on any, eager work on
/// any, graphs captured on any over buffers of any, buffers dropped while
/// graphs still use them, replays on other streams than the work before
/// them. Every read matches a model of the values.
pub fn rule_20_random_programs_across_streams_match_a_model<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let streams: [StreamId; STREAMS] = [
        client.create_stream().step("stream")?,
        client.create_stream().step("stream")?,
        client.create_stream().step("stream")?,
    ];
    let busy: Vec<Busy<D>> = streams
        .iter()
        .map(|&stream| Busy::on(session, &client, stream))
        .collect::<Result<_, _>>()?;
    for seed in 1..=PROGRAMS {
        let mut program = Program {
            client: &client,
            streams: &streams,
            busy: &busy,
            buffers: Vec::new(),
            graphs: Vec::new(),
            rng: Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        };
        for at in 0..STEPS {
            program
                .step(at)
                .map_err(|err| format!("program {seed}: {err}"))?;
        }
        for i in 0..program.buffers.len() {
            program
                .check(i, STEPS)
                .map_err(|err| format!("program {seed}: {err}"))?;
        }
    }
    for stream in streams {
        client.sync(stream).step("sync")?;
    }
    ensure!(
        client.lingering_buffers() == 0 && client.claimed_buffers() == 0,
        "{} dropped buffers and {} claims kept after every program ended",
        client.lingering_buffers(),
        client.claimed_buffers()
    );
    Ok(())
}
