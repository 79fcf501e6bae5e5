//! A launch-bound decode step of a small transformer-like model, written
//! once with the workload's user kernels, and its plain-Rust reference.
//!
//! Each layer runs `h = rmsnorm(x) * norm`, `u = W1 h`, `u = silu(u)`,
//! `v = W2 u`, `x += v`: five launches, so 40 layers make a 200-launch step
//! of tiny kernels, where the host's cost per launch sets the pace. The
//! step updates `x` in place, so replaying its graph k times is k steps.
//!
//! Weights come from a fixed-seed generator, so every backend and the
//! reference see the same model.

use graph_capture::{Buffer, Client, Error, GraphHandle, StreamId};

use super::{Footprint, UserKernels, Workload};
use crate::workload::rng::Rng;

/// The model's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Width of the residual stream.
    pub hidden: u32,
    /// Width of each layer's inner projection.
    pub ffn: u32,
    /// Layers; five launches each.
    pub layers: u32,
}

impl Shape {
    /// The example's and the bench's model: 40 layers, 200 launches a step.
    pub const DECODE: Shape = Shape {
        hidden: 256,
        ffn: 512,
        layers: 40,
    };

    /// A model small enough for a debug-build test on every backend.
    pub const SMALL: Shape = Shape {
        hidden: 64,
        ffn: 128,
        layers: 8,
    };

    /// Kernel launches per step.
    pub fn launches(&self) -> u32 {
        self.layers * 5
    }
}

/// The normalisation's epsilon.
pub const EPS: f32 = 1e-5;

/// The model's weights.
#[derive(Debug, Clone)]
pub struct Model {
    /// Its shape.
    pub shape: Shape,
    norms: Vec<Vec<f32>>,
    /// `ffn x hidden`, row-major.
    w1: Vec<Vec<f32>>,
    /// `hidden x ffn`, row-major.
    w2: Vec<Vec<f32>>,
}

impl Model {
    /// The model of `shape`, from a fixed seed.
    pub fn new(shape: Shape) -> Self {
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        let (h, f) = (shape.hidden, shape.ffn);
        let mut norms = Vec::new();
        let mut w1 = Vec::new();
        let mut w2 = Vec::new();
        for _ in 0..shape.layers {
            norms.push(rng.vec(h, 0.1, 1.0));
            w1.push(rng.vec(f * h, 1.0 / (h as f32).sqrt(), 0.0));
            w2.push(rng.vec(h * f, 0.5 / (f as f32).sqrt(), 0.0));
        }
        Self {
            shape,
            norms,
            w1,
            w2,
        }
    }

    /// The first step's input.
    pub fn input(&self) -> Vec<f32> {
        Rng::new(42).vec(self.shape.hidden, 1.0, 0.0)
    }

    /// One step on the CPU, in the kernels' order of operations.
    pub fn reference_step(&self, x: &mut [f32]) {
        let (h, f) = (self.shape.hidden as usize, self.shape.ffn as usize);
        let mut normed = vec![0.0f32; h];
        let mut u = vec![0.0f32; f];
        let mut v = vec![0.0f32; h];
        for layer in 0..self.shape.layers as usize {
            let sum: f32 = x.iter().map(|a| a * a).sum();
            let scale = 1.0 / (sum / h as f32 + EPS).sqrt();
            for i in 0..h {
                normed[i] = x[i] * scale * self.norms[layer][i];
            }
            matvec(&self.w1[layer], &normed, &mut u);
            for value in &mut u {
                *value /= 1.0 + (-*value).exp();
            }
            matvec(&self.w2[layer], &u, &mut v);
            for (a, b) in x.iter_mut().zip(&v) {
                *a += *b;
            }
        }
    }

    /// `steps` steps of the reference from the first input.
    pub fn reference(&self, steps: usize) -> Vec<f32> {
        let mut x = self.input();
        for _ in 0..steps {
            self.reference_step(&mut x);
        }
        x
    }
}

fn matvec(w: &[f32], x: &[f32], y: &mut [f32]) {
    let cols = x.len();
    for (r, out) in y.iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for (a, b) in w[r * cols..(r + 1) * cols].iter().zip(x) {
            acc += a * b;
        }
        *out = acc;
    }
}

struct Layer {
    norm: Buffer,
    w1: Buffer,
    w2: Buffer,
}

/// The model on a device: its weights and activations in buffers of one
/// stream, and the kernels that run a step.
pub struct Decoder<D: UserKernels> {
    client: Client<D>,
    stream: StreamId,
    shape: Shape,
    workload: Workload<D>,
    layers: Vec<Layer>,
    /// The residual stream, updated in place by every step.
    pub x: Buffer,
    normed: Buffer,
    u: Buffer,
    v: Buffer,
}

impl<D: UserKernels> Decoder<D> {
    /// Upload `model` to `stream` and build its kernels.
    pub fn new(client: &Client<D>, stream: StreamId, model: &Model) -> Result<Self, Error> {
        let workload = Workload::new(client.device())?;
        let layers = (0..model.shape.layers as usize)
            .map(|l| {
                Ok(Layer {
                    norm: client.create_f32(stream, &model.norms[l])?,
                    w1: client.create_f32(stream, &model.w1[l])?,
                    w2: client.create_f32(stream, &model.w2[l])?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let (h, f) = (model.shape.hidden as usize, model.shape.ffn as usize);
        Ok(Self {
            client: client.clone(),
            stream,
            shape: model.shape,
            workload,
            layers,
            x: client.create_f32(stream, &model.input())?,
            normed: client.create_f32(stream, &vec![0.0; h])?,
            u: client.create_f32(stream, &vec![0.0; f])?,
            v: client.create_f32(stream, &vec![0.0; h])?,
        })
    }

    /// The stream the decoder runs on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Reset the residual stream to the model's first input.
    pub fn reset(&self, model: &Model) -> Result<(), Error> {
        self.client.write_f32(&self.x, &model.input())
    }

    /// Issue one step's launches (eagerly, or into an open window).
    pub fn step(&self) -> Result<(), Error> {
        let (h, f) = (self.shape.hidden, self.shape.ffn);
        let (k, c, s) = (&self.workload, &self.client, self.stream);
        for layer in &self.layers {
            k.rmsnorm(c, s, &self.x, &layer.norm, &self.normed, h, EPS)?;
            k.matvec(c, s, &layer.w1, &self.normed, &self.u, f, h)?;
            k.silu(c, s, &self.u, f)?;
            k.matvec(c, s, &layer.w2, &self.u, &self.v, h, f)?;
            k.residual(c, s, &self.x, &self.v, h)?;
        }
        Ok(())
    }

    /// Capture one step as a graph (warmup, then the recorded run).
    pub fn capture(&self) -> Result<GraphHandle<D>, Error> {
        self.client
            .capture(self.stream, |_pass| self.step())
            .map(|(graph, ())| graph)
    }

    /// The residual stream now.
    pub fn read(&self) -> Result<Vec<f32>, Error> {
        self.client.read_f32(&self.x)
    }

    /// Bytes of every buffer the decoder holds: weights, norms and
    /// activations.
    pub fn live_bytes(&self) -> u64 {
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| l.norm.len() + l.w1.len() + l.w2.len())
            .sum();
        layers + self.x.len() + self.normed.len() + self.u.len() + self.v.len()
    }
}

/// What one run of the decode step measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// The model's shape.
    pub shape: Shape,
    /// Steps run each way.
    pub steps: usize,
    /// Seconds per step, launched eagerly.
    pub eager_step: f64,
    /// Seconds per step, replayed from the graph.
    pub replay_step: f64,
    /// Seconds to capture the step (warmup, recording, instantiate).
    pub capture: f64,
    /// The eager run's distance from the reference ([`relative_error`]).
    pub eager_error: f32,
    /// The replayed run's distance from the reference.
    pub replay_error: f32,
    /// Whether the replayed run matched the eager one bit for bit.
    pub bitwise_equal: bool,
    /// The stream's pool and the step's graph once warm (after the
    /// replays).
    pub footprint: Footprint,
}

impl Figures {
    /// Eager time over replay time: how much the graph saves a step.
    pub fn speedup(&self) -> f64 {
        self.eager_step / self.replay_step
    }

    /// Whether both runs are within [`TOLERANCE`] of the reference.
    pub fn passed(&self) -> bool {
        self.eager_error <= TOLERANCE && self.replay_error <= TOLERANCE
    }
}

/// Run `steps` decode steps of `shape` eagerly and `steps` as replays of a
/// captured step on `client`, timing both (each ends with the read that
/// waits for it) and checking both against the reference.
pub fn measure<D: UserKernels>(
    client: &Client<D>,
    shape: Shape,
    steps: usize,
) -> Result<Figures, Error> {
    use std::time::Instant;
    let model = Model::new(shape);
    let stream = client.create_stream()?;
    let decoder = Decoder::new(client, stream, &model)?;
    // One step of each kind first, so neither timing pays for a first use
    // (kernel compilation, pool growth).
    decoder.step()?;
    let started = Instant::now();
    let graph = decoder.capture()?;
    let capture = started.elapsed().as_secs_f64();
    client.replay(&graph)?;

    decoder.reset(&model)?;
    client.sync(stream)?;
    let started = Instant::now();
    for _ in 0..steps {
        decoder.step()?;
    }
    let eager_x = decoder.read()?;
    let eager_step = started.elapsed().as_secs_f64() / steps as f64;

    decoder.reset(&model)?;
    client.sync(stream)?;
    let started = Instant::now();
    for _ in 0..steps {
        client.replay(&graph)?;
    }
    let replay_x = decoder.read()?;
    let replay_step = started.elapsed().as_secs_f64() / steps as f64;
    let footprint = Footprint::of(client, stream, &graph, decoder.live_bytes())?;

    let reference = model.reference(steps);
    drop(graph);
    drop(decoder);
    client.destroy_stream(stream)?;
    Ok(Figures {
        shape,
        steps,
        eager_step,
        replay_step,
        capture,
        eager_error: relative_error(&eager_x, &reference),
        replay_error: relative_error(&replay_x, &reference),
        bitwise_equal: eager_x == replay_x,
        footprint,
    })
}

/// The largest difference between `got` and `want`, relative to
/// `1 + max |want|`: the measure the decode checks bound.
pub fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    if got.len() != want.len() {
        return f32::INFINITY;
    }
    let scale = 1.0 + want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(a, b)| {
            if a.is_finite() {
                (a - b).abs()
            } else {
                f32::INFINITY
            }
        })
        .fold(0.0f32, f32::max)
        / scale
}

/// How far a backend may be from the reference after a few steps.
///
/// The host runs the reference's exact operations and matches it bit for
/// bit. GPU backends differ in the last bits of `exp` and `sqrt` and in the
/// order of rmsnorm's sum (a tree, not a line); the normalisation keeps
/// each layer's input at unit scale, so those differences stay near the
/// rounding error of one layer (~1e-6) times the layers they pass through.
/// 1e-4 of the stream's magnitude leaves a wide margin for that and still
/// catches any wrong index, missing launch or stale buffer, which shift
/// values by whole units.
pub const TOLERANCE: f32 = 1e-4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_deterministic_and_bounded() {
        let a = Model::new(Shape::SMALL);
        let b = Model::new(Shape::SMALL);
        assert_eq!(a.reference(3), b.reference(3));
        let x = a.reference(10);
        assert!(x.iter().all(|v| v.is_finite() && v.abs() < 1e3), "{x:?}");
        assert!(
            relative_error(&x, &a.reference(9)) > 1e-3,
            "steps change the state"
        );
    }

    #[test]
    fn relative_error_measures_the_worst_element() {
        assert_eq!(relative_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert_eq!(relative_error(&[1.0, 2.5], &[1.0, 2.0]), 0.5 / 3.0);
        assert_eq!(relative_error(&[1.0], &[1.0, 2.0]), f32::INFINITY);
        assert_eq!(relative_error(&[f32::NAN], &[1.0]), f32::INFINITY);
    }
}
