//! A randomized workload checked against a CPU model: several threads, each
//! with its own stream on one client, issuing mixed operations (allocate,
//! write, launch, capture, replay, read, drop, destroy) and comparing every
//! read with what the model says the buffer holds.
//!
//! Used by the stress scenarios (with tiny pages too, so pools grow and
//! shrink under it) and by the benches summary (operations per second, one
//! thread against four).

use std::time::{Duration, Instant};

use graph_capture::{Buffer, Builtin, Client, Error, GraphHandle, StreamId};

use crate::workload::UserKernels;

/// Elements of every buffer the workload uses.
pub const ELEMENTS: u32 = 64;
const LEN: usize = ELEMENTS as usize;
/// Live buffers a thread keeps at most.
const SLOTS: usize = 8;
/// Values stay below this, so every result is exact in `f32` on every
/// backend (products by 0.5 and sums of such values lose no bits).
const BOUND: f32 = 4096.0;

/// What one thread's run did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Run {
    /// Operations issued.
    pub operations: usize,
    /// Reads checked against the model.
    pub reads: usize,
    /// Graphs captured.
    pub captures: usize,
    /// Replays issued.
    pub replays: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Run {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.operations as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// xorshift64*: the same sequence of operations on every run for a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn value(&mut self) -> f32 {
        (self.below(64) as f32) * 0.5 - 16.0
    }
}

/// One launch of a builtin over model slots.
#[derive(Debug, Clone, Copy)]
enum Op {
    Fill { out: usize, value: f32 },
    Add { x: usize, y: usize },
    Copy { src: usize, dst: usize },
    Axpy { x: usize, y: usize },
}

struct Slot {
    buffer: Buffer,
    model: Vec<f32>,
}

struct Recorded<D: UserKernels> {
    graph: GraphHandle<D>,
    ops: Vec<Op>,
}

struct Thread<'a, D: UserKernels> {
    client: &'a Client<D>,
    stream: StreamId,
    rng: Rng,
    slots: Vec<Option<Slot>>,
    graphs: Vec<Recorded<D>>,
    run: Run,
}

impl<D: UserKernels> Thread<'_, D> {
    fn live(&mut self) -> Option<usize> {
        let live: Vec<usize> = (0..SLOTS).filter(|&i| self.slots[i].is_some()).collect();
        live.get(self.rng.below(live.len())).copied()
    }

    fn two_live(&mut self) -> Option<(usize, usize)> {
        let a = self.live()?;
        let b = self.live()?;
        (a != b).then_some((a, b))
    }

    fn model(&self, slot: usize) -> &[f32] {
        self.slots[slot].as_ref().map_or(&[], |s| &s.model)
    }

    fn buffer(&self, slot: usize) -> Result<&Buffer, String> {
        self.slots[slot]
            .as_ref()
            .map(|s| &s.buffer)
            .ok_or_else(|| format!("slot {slot} is empty"))
    }

    /// A launch over live slots that keeps every value within [`BOUND`].
    fn pick_op(&mut self) -> Option<Op> {
        let op = match self.rng.below(4) {
            0 => Op::Fill {
                out: self.live()?,
                value: self.rng.value(),
            },
            1 => {
                let (x, y) = self.two_live()?;
                Op::Add { x, y }
            }
            2 => {
                let (src, dst) = self.two_live()?;
                Op::Copy { src, dst }
            }
            _ => {
                let (x, y) = self.two_live()?;
                Op::Axpy { x, y }
            }
        };
        // One launch at most doubles a value; past half the bound, the
        // destination is filled instead.
        let (dst, src) = match op {
            Op::Add { x, y } => (x, Some(y)),
            Op::Axpy { x, y } => (y, Some(x)),
            Op::Copy { dst, .. } | Op::Fill { out: dst, .. } => (dst, None),
        };
        let big = |slot: usize| self.model(slot).iter().any(|v| v.abs() * 2.0 >= BOUND);
        if src.is_some_and(|src| big(src) || big(dst)) {
            return Some(Op::Fill {
                out: dst,
                value: 1.0,
            });
        }
        Some(op)
    }

    /// Whether every value is small enough for three more doublings: the
    /// most a captured sequence does.
    fn room_for_a_graph(&self) -> bool {
        self.slots
            .iter()
            .flatten()
            .all(|s| s.model.iter().all(|v| v.abs() * 8.0 < BOUND))
    }

    fn issue(&self, op: Op) -> Result<(), Error> {
        let c = self.client;
        let s = self.stream;
        let b = |slot| self.buffer(slot).map_err(Error::BadLaunch);
        match op {
            Op::Fill { out, value } => c.run_builtin(s, Builtin::Fill, &[b(out)?], ELEMENTS, value),
            Op::Add { x, y } => c.run_builtin(s, Builtin::Add, &[b(x)?, b(y)?], ELEMENTS, 0.0),
            Op::Copy { src, dst } => {
                c.run_builtin(s, Builtin::Copy, &[b(src)?, b(dst)?], ELEMENTS, 0.0)
            }
            Op::Axpy { x, y } => c.run_builtin(s, Builtin::Axpy, &[b(x)?, b(y)?], ELEMENTS, 0.5),
        }
    }

    fn apply(&mut self, op: Op) {
        let get = |slots: &Vec<Option<Slot>>, i: usize| {
            slots[i]
                .as_ref()
                .map(|s| s.model.clone())
                .unwrap_or_default()
        };
        match op {
            Op::Fill { out, value } => {
                if let Some(s) = &mut self.slots[out] {
                    s.model.fill(value);
                }
            }
            Op::Add { x, y } => {
                let y = get(&self.slots, y);
                if let Some(s) = &mut self.slots[x] {
                    s.model.iter_mut().zip(&y).for_each(|(a, b)| *a += *b);
                }
            }
            Op::Copy { src, dst } => {
                let src = get(&self.slots, src);
                if let Some(s) = &mut self.slots[dst] {
                    s.model.copy_from_slice(&src);
                }
            }
            Op::Axpy { x, y } => {
                let x = get(&self.slots, x);
                if let Some(s) = &mut self.slots[y] {
                    s.model.iter_mut().zip(&x).for_each(|(b, a)| *b += 0.5 * *a);
                }
            }
        }
    }

    fn pinned(&self, slot: usize) -> bool {
        self.graphs.iter().any(|g| {
            g.ops.iter().any(|op| match *op {
                Op::Fill { out, .. } => out == slot,
                Op::Add { x, y } | Op::Axpy { x, y } => x == slot || y == slot,
                Op::Copy { src, dst } => src == slot || dst == slot,
            })
        })
    }

    fn step(&mut self) -> Result<(), String> {
        let at = self.run.operations;
        let fail = |what: &str, err: Error| format!("operation {at} ({what}): {err}");
        match self.rng.below(16) {
            // Allocate (and fill) a buffer in an empty slot.
            0 | 1 => {
                if let Some(slot) = (0..SLOTS).find(|&i| self.slots[i].is_none()) {
                    let model: Vec<f32> = (0..LEN).map(|_| self.rng.value()).collect();
                    let buffer = self
                        .client
                        .create_f32(self.stream, &model)
                        .map_err(|e| fail("create", e))?;
                    self.slots[slot] = Some(Slot { buffer, model });
                }
            }
            2 => {
                if let Some(slot) = self.live() {
                    let model: Vec<f32> = (0..LEN).map(|_| self.rng.value()).collect();
                    self.client
                        .write_f32(self.buffer(slot)?, &model)
                        .map_err(|e| fail("write", e))?;
                    if let Some(s) = &mut self.slots[slot] {
                        s.model = model;
                    }
                }
            }
            3..=6 => {
                if let Some(op) = self.pick_op() {
                    self.issue(op).map_err(|e| fail("launch", e))?;
                    self.apply(op);
                }
            }
            7 => {
                let ops: Vec<Op> = (0..1 + self.rng.below(3))
                    .filter_map(|_| self.pick_op())
                    .collect();
                if !ops.is_empty() && self.room_for_a_graph() {
                    let (graph, ()) = self
                        .client
                        .capture(self.stream, |_| {
                            ops.iter().try_for_each(|op| self.issue(*op))
                        })
                        .map_err(|e| fail("capture", e))?;
                    // The warmup ran the ops once for real.
                    ops.iter().for_each(|op| self.apply(*op));
                    self.graphs.push(Recorded { graph, ops });
                    self.run.captures += 1;
                    if self.graphs.len() > 4 {
                        self.graphs.remove(0);
                    }
                }
            }
            8..=10 => {
                if !self.graphs.is_empty() {
                    let i = self.rng.below(self.graphs.len());
                    let ops = self.graphs[i].ops.clone();
                    // A replay that could grow values past the bound is
                    // skipped: the model must stay exact.
                    if self.room_for_a_graph() {
                        self.graphs[i]
                            .graph
                            .replay()
                            .map_err(|e| fail("replay", e))?;
                        ops.iter().for_each(|op| self.apply(*op));
                        self.run.replays += 1;
                    }
                }
            }
            11..=13 => {
                if let Some(slot) = self.live() {
                    let got = self
                        .client
                        .read_f32(self.buffer(slot)?)
                        .map_err(|e| fail("read", e))?;
                    let want = self.model(slot);
                    if let Some(i) = (0..LEN).find(|&i| got[i] != want[i]) {
                        return Err(format!(
                            "operation {at}: slot {slot} element {i} reads {}, the model says {}",
                            got[i], want[i]
                        ));
                    }
                    self.run.reads += 1;
                }
            }
            14 => {
                if let Some(slot) = self.live()
                    && !self.pinned(slot)
                {
                    self.slots[slot] = None;
                }
            }
            _ => {
                if !self.graphs.is_empty() {
                    let i = self.rng.below(self.graphs.len());
                    let recorded = self.graphs.remove(i);
                    if self.rng.below(2) == 0 {
                        self.client
                            .destroy(&recorded.graph)
                            .map_err(|e| fail("destroy", e))?;
                    }
                    drop(recorded);
                }
            }
        }
        self.run.operations += 1;
        Ok(())
    }
}

/// Run `operations` random operations seeded by `seed` on a new stream of
/// `client`, checking every read against the model, then read every live
/// buffer once more.
pub fn run<D: UserKernels>(
    client: &Client<D>,
    seed: u64,
    operations: usize,
) -> Result<Run, String> {
    let stream = client.create_stream().map_err(|e| format!("stream: {e}"))?;
    let mut thread = Thread {
        client,
        stream,
        rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        slots: (0..SLOTS).map(|_| None).collect(),
        graphs: Vec::new(),
        run: Run::default(),
    };
    let started = Instant::now();
    while thread.run.operations < operations {
        thread.step()?;
    }
    for slot in 0..SLOTS {
        if thread.slots[slot].is_some() {
            let got = client
                .read_f32(thread.buffer(slot)?)
                .map_err(|e| format!("final read: {e}"))?;
            if got != thread.model(slot) {
                return Err(format!("slot {slot} differs from the model at the end"));
            }
        }
    }
    thread.run.elapsed = started.elapsed();
    let run = thread.run;
    drop(thread);
    client
        .destroy_stream(stream)
        .map_err(|e| format!("destroy stream: {e}"))?;
    Ok(run)
}

/// Run `threads` threads of [`run`] at once, one stream each.
pub fn run_threads<D: UserKernels>(
    client: &Client<D>,
    threads: usize,
    operations: usize,
) -> Result<Vec<Run>, String> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| scope.spawn(move || run(client, t as u64 + 1, operations)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    })
}
