//! The model's shape and weights, and the model itself in plain Rust, in
//! the host kernels' order of operations.

use crate::workload::rng::Rng;

/// The model's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Layers; 18 launches each.
    pub layers: u32,
    /// Width of the residual stream.
    pub hidden: u32,
    /// Attention heads; `hidden / heads` must be even.
    pub heads: u32,
    /// Width of the gated feed-forward block.
    pub ffn: u32,
    /// Positions each sequence's cache holds.
    pub context: u32,
    /// Tokens.
    pub vocab: u32,
}

impl Config {
    /// The example's model: 8 layers, hidden 256, 4 heads, context 256,
    /// vocabulary 512; 149 launches a step.
    pub const FULL: Config = Config {
        layers: 8,
        hidden: 256,
        heads: 4,
        ffn: 512,
        context: 256,
        vocab: 512,
    };

    /// The tests' model: 2 layers, hidden 64, 4 heads, context 128 (enough
    /// for 64 steps from any of the staggered starts), vocabulary 512;
    /// small enough for debug builds on every backend.
    pub const SMALL: Config = Config {
        layers: 2,
        hidden: 64,
        heads: 4,
        ffn: 128,
        context: 128,
        vocab: 512,
    };

    /// Width of one head.
    pub fn head_dim(&self) -> u32 {
        self.hidden / self.heads
    }

    /// Kernel launches per step: the embedding, 18 a layer, and the final
    /// norm, logits, sampling and advance.
    pub fn launches(&self) -> u32 {
        1 + 18 * self.layers + 4
    }

    /// Whether the kernels can run this shape.
    pub fn validate(&self) -> Result<(), String> {
        let ok = self.layers > 0
            && self.heads > 0
            && self.hidden.is_multiple_of(self.heads)
            && self.head_dim().is_multiple_of(2)
            && self.ffn > 0
            && self.context > 0
            && self.vocab > 0;
        if ok {
            Ok(())
        } else {
            Err(format!("{self:?} is not a shape the kernels run"))
        }
    }
}

/// The normalisation's epsilon.
pub const EPS: f32 = 1e-5;

/// The base of the rotary embedding's frequencies.
pub const ROPE_BASE: f64 = 10_000.0;

/// One layer's weights, row-major.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub(super) attn_norm: Vec<f32>,
    pub(super) wq: Vec<f32>,
    pub(super) wk: Vec<f32>,
    pub(super) wv: Vec<f32>,
    pub(super) wo: Vec<f32>,
    pub(super) ffn_norm: Vec<f32>,
    pub(super) w_gate: Vec<f32>,
    pub(super) w_up: Vec<f32>,
    pub(super) w_down: Vec<f32>,
}

/// The model's weights, from a fixed seed.
#[derive(Debug, Clone)]
pub struct Weights {
    /// Its shape.
    pub config: Config,
    pub(super) embed: Vec<f32>,
    pub(super) layers: Vec<LayerWeights>,
    pub(super) final_norm: Vec<f32>,
    pub(super) lm_head: Vec<f32>,
    /// `(cos, sin)` of each position and frequency, made once in f64 so
    /// every backend rotates by the same f32 values.
    pub(super) rope: Vec<f32>,
}

impl Weights {
    /// The model of `config`.
    ///
    /// Projections are scaled by `1/sqrt(fan-in)` so each keeps its input's
    /// magnitude; the two that feed the residual stream by half that, so
    /// the stream grows slowly over the layers; the head by `2/sqrt(hidden)`,
    /// which spreads the logits over a few units and keeps exact ties rare.
    pub fn new(config: Config) -> Self {
        let mut rng = Rng::new(0x5851_f42d_4c95_7f2d);
        let (h, f, v) = (config.hidden, config.ffn, config.vocab);
        let fan = |n: u32| 1.0 / (n as f32).sqrt();
        let embed = rng.vec(v * h, 1.0, 0.0);
        let layers = (0..config.layers)
            .map(|_| LayerWeights {
                attn_norm: rng.vec(h, 0.1, 1.0),
                wq: rng.vec(h * h, fan(h), 0.0),
                wk: rng.vec(h * h, fan(h), 0.0),
                wv: rng.vec(h * h, fan(h), 0.0),
                wo: rng.vec(h * h, 0.5 * fan(h), 0.0),
                ffn_norm: rng.vec(h, 0.1, 1.0),
                w_gate: rng.vec(f * h, fan(h), 0.0),
                w_up: rng.vec(f * h, fan(h), 0.0),
                w_down: rng.vec(h * f, 0.5 * fan(f), 0.0),
            })
            .collect();
        let final_norm = rng.vec(h, 0.1, 1.0);
        let lm_head = rng.vec(v * h, 2.0 * fan(h), 0.0);
        let half = config.head_dim() / 2;
        let mut rope = Vec::with_capacity((config.context * half * 2) as usize);
        for p in 0..config.context {
            for k in 0..half {
                let frequency = ROPE_BASE.powf(-f64::from(2 * k) / f64::from(2 * half));
                let angle = f64::from(p) * frequency;
                rope.push(angle.cos() as f32);
                rope.push(angle.sin() as f32);
            }
        }
        Self {
            config,
            embed,
            layers,
            final_norm,
            lm_head,
            rope,
        }
    }
}

/// The first index of the largest value; a NaN never wins, and a row with
/// nothing above `f32::MIN` gives 0. The device's tree reduction picks the
/// same index: the maximum is exact, and ties go to the lower index.
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = (f32::MIN, values.len());
    for (i, &v) in values.iter().enumerate() {
        if v > best.0 {
            best = (v, i);
        }
    }
    if best.1 == values.len() {
        0
    } else {
        best.1 as u32
    }
}

/// The largest value less the second largest (the first on a tie with it
/// counts once): how far the greedy choice is from a tie.
pub fn top_gap(values: &[f32]) -> f32 {
    let top = argmax(values) as usize;
    let second = values
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != top)
        .map(|(_, &v)| v)
        .fold(f32::MIN, f32::max);
    values.get(top).map_or(0.0, |&v| v - second)
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

fn rmsnorm(x: &[f32], w: &[f32], out: &mut [f32]) {
    let sum: f32 = x.iter().map(|v| v * v).sum();
    let scale = 1.0 / (sum / x.len() as f32 + EPS).sqrt();
    for i in 0..x.len() {
        out[i] = x[i] * scale * w[i];
    }
}

/// One sequence of the model on the CPU: its caches, position and residual
/// stream, stepped one token at a time as the device steps it.
#[derive(Debug, Clone)]
pub struct Reference<'a> {
    weights: &'a Weights,
    /// Each layer's keys, `context x hidden`.
    k_cache: Vec<Vec<f32>>,
    /// Each layer's values.
    v_cache: Vec<Vec<f32>>,
    /// The position the next step writes.
    pub position: u32,
    /// The residual stream after the last step's last layer.
    pub hidden: Vec<f32>,
}

impl<'a> Reference<'a> {
    /// A sequence starting at `position`, its cache rows before it zero (as
    /// the device's are after a reset).
    pub fn new(weights: &'a Weights, position: u32) -> Self {
        let c = weights.config;
        let cache = vec![0.0; (c.context * c.hidden) as usize];
        Self {
            weights,
            k_cache: vec![cache.clone(); c.layers as usize],
            v_cache: vec![cache; c.layers as usize],
            position,
            hidden: vec![0.0; c.hidden as usize],
        }
    }

    /// Run one step on `token` and return the logits; the position then
    /// advances as the device's `advance` does.
    pub fn step(&mut self, token: u32) -> Vec<f32> {
        let w = self.weights;
        let c = w.config;
        let (h, f, hd, ctx) = (
            c.hidden as usize,
            c.ffn as usize,
            c.head_dim() as usize,
            c.context as usize,
        );
        let heads = c.heads as usize;
        let p = (self.position as usize).min(ctx - 1);
        let token = (token as usize).min(c.vocab as usize - 1);
        let x = &mut self.hidden;
        x.copy_from_slice(&w.embed[token * h..(token + 1) * h]);
        let mut normed = vec![0.0f32; h];
        let (mut q, mut k, mut v) = (vec![0.0f32; h], vec![0.0f32; h], vec![0.0f32; h]);
        let mut att = vec![0.0f32; h];
        let mut proj = vec![0.0f32; h];
        let (mut gate, mut up) = (vec![0.0f32; f], vec![0.0f32; f]);
        let mut scores = vec![0.0f32; ctx];
        let scale = 1.0 / (hd as f32).sqrt();
        for (l, layer) in w.layers.iter().enumerate() {
            rmsnorm(x, &layer.attn_norm, &mut normed);
            matvec(&layer.wq, &normed, &mut q);
            matvec(&layer.wk, &normed, &mut k);
            matvec(&layer.wv, &normed, &mut v);
            for vector in [&mut q, &mut k] {
                rope(vector, &w.rope, p, hd);
            }
            self.k_cache[l][p * h..(p + 1) * h].copy_from_slice(&k);
            self.v_cache[l][p * h..(p + 1) * h].copy_from_slice(&v);
            let (kc, vc) = (&self.k_cache[l], &self.v_cache[l]);
            for head in 0..heads {
                let qh = &q[head * hd..(head + 1) * hd];
                for (t, score) in scores[..=p].iter_mut().enumerate() {
                    let kh = &kc[t * h + head * hd..][..hd];
                    let mut acc = 0.0f32;
                    for (a, b) in qh.iter().zip(kh) {
                        acc += a * b;
                    }
                    *score = acc * scale;
                }
                let row = &mut scores[..=p];
                let max = row.iter().copied().fold(f32::MIN, f32::max);
                let mut sum = 0.0f32;
                for s in row.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                for s in row.iter_mut() {
                    *s /= sum;
                }
                for d in 0..hd {
                    let column = head * hd + d;
                    let mut acc = 0.0f32;
                    for (t, weight) in row.iter().enumerate() {
                        acc += weight * vc[t * h + column];
                    }
                    att[column] = acc;
                }
            }
            matvec(&layer.wo, &att, &mut proj);
            for (a, b) in x.iter_mut().zip(&proj) {
                *a += *b;
            }
            rmsnorm(x, &layer.ffn_norm, &mut normed);
            matvec(&layer.w_gate, &normed, &mut gate);
            matvec(&layer.w_up, &normed, &mut up);
            for (g, u) in gate.iter_mut().zip(&up) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            matvec(&layer.w_down, &gate, &mut proj);
            for (a, b) in x.iter_mut().zip(&proj) {
                *a += *b;
            }
        }
        rmsnorm(x, &w.final_norm, &mut normed);
        let mut logits = vec![0.0f32; c.vocab as usize];
        matvec(&w.lm_head, &normed, &mut logits);
        self.position = (self.position + 1).min(c.context - 1);
        logits
    }
}

/// Rotate each head's pairs `(2k, 2k+1)` of `x` by position `p`'s angles.
fn rope(x: &mut [f32], table: &[f32], p: usize, head_dim: usize) {
    let half = head_dim / 2;
    for head in 0..x.len() / head_dim {
        for k in 0..half {
            let (c, s) = (table[(p * half + k) * 2], table[(p * half + k) * 2 + 1]);
            let at = head * head_dim + 2 * k;
            let (x0, x1) = (x[at], x[at + 1]);
            x[at] = x0 * c - x1 * s;
            x[at + 1] = x0 * s + x1 * c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_lowest_index_on_a_tie_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 0.5]), 1);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(top_gap(&[1.0, 3.0, 3.0, 2.0]), 0.0);
        assert_eq!(top_gap(&[1.0, 4.0, 3.0]), 1.0);
    }

    #[test]
    fn the_reference_is_deterministic_bounded_and_position_dependent() {
        let weights = Weights::new(Config::SMALL);
        let run = |start: u32| {
            let mut seq = Reference::new(&weights, start);
            let mut token = 7;
            let mut tokens = Vec::new();
            for _ in 0..16 {
                let logits = seq.step(token);
                assert!(logits.iter().all(|v| v.is_finite() && v.abs() < 50.0));
                token = argmax(&logits);
                tokens.push(token);
            }
            assert!(seq.hidden.iter().all(|v| v.is_finite() && v.abs() < 1e3));
            tokens
        };
        assert_eq!(run(0), run(0));
        assert_ne!(run(0), run(5), "the position changes what is generated");
    }
}
