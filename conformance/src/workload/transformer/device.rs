//! The transformer on a device: its weights, per-sequence state and
//! scratch in buffers of one stream, sized for a largest batch, and the
//! launches of one step for any batch up to it.

use graph_capture::{Buffer, Builtin, Client, Error, Ran, StreamId};

use super::kernels::Kernels;
use super::reference::{Config, EPS, Weights};
use crate::workload::UserKernels;

/// Where a sequence starts: its first token and the position it is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// The token the first step reads.
    pub token: u32,
    /// The position the first step writes; the cache rows before it are
    /// zero.
    pub position: u32,
}

/// The starts of `batch` sequences: distinct tokens, and positions
/// staggered by one, so a kernel reading another sequence's position or
/// token cannot go unnoticed.
pub fn starts(batch: u32, config: &Config) -> Vec<Start> {
    (0..batch)
        .map(|b| Start {
            token: (97 * b + 13) % config.vocab,
            position: b.min(config.context - 1),
        })
        .collect()
}

struct Layer {
    attn_norm: Buffer,
    wq: Buffer,
    wk: Buffer,
    wv: Buffer,
    wo: Buffer,
    ffn_norm: Buffer,
    w_gate: Buffer,
    w_up: Buffer,
    w_down: Buffer,
    /// `max_batch x context x hidden`.
    k_cache: Buffer,
    v_cache: Buffer,
}

/// The model on a device, for batches of up to `max_batch` sequences.
pub struct Transformer<D: UserKernels> {
    client: Client<D>,
    stream: StreamId,
    config: Config,
    max_batch: u32,
    kernels: Kernels<D>,
    embed: Buffer,
    layers: Vec<Layer>,
    final_norm: Buffer,
    lm_head: Buffer,
    rope: Buffer,
    /// Each sequence's next input token (`u32`), written by `argmax`.
    tokens: Buffer,
    /// Each sequence's position (`u32`), advanced by every step.
    positions: Buffer,
    /// Each sequence's generated tokens (`u32`), `max_batch x context`, at
    /// the position they were generated at.
    generated: Buffer,
    /// The residual stream, `max_batch x hidden`.
    x: Buffer,
    /// Each sequence's end: 1 once it emitted the end token (`u32`).
    done: Buffer,
    /// The position each finished sequence is held at (`u32`).
    held: Buffer,
    /// Whether any sequence of a generation runs on (`u32`): its loop's
    /// flag.
    running: Buffer,
}

/// What one step computes and drops, sized for its batch: the temporaries
/// of a captured step, whose memory the graphs of the stream share.
struct Scratch {
    normed: Buffer,
    q: Buffer,
    k: Buffer,
    v: Buffer,
    att: Buffer,
    proj: Buffer,
    scores: Buffer,
    gate: Buffer,
    up: Buffer,
    logits: Buffer,
}

impl Scratch {
    /// Room for a step of `batch` sequences, each buffer written before it
    /// is read.
    fn new<D: UserKernels>(
        client: &Client<D>,
        stream: StreamId,
        c: &Config,
        batch: u32,
    ) -> Result<Self, Error> {
        let room = |n: u32| client.allocate(stream, u64::from(n) * 4);
        let rows = batch * c.hidden;
        Ok(Self {
            normed: room(rows)?,
            q: room(rows)?,
            k: room(rows)?,
            v: room(rows)?,
            att: room(rows)?,
            proj: room(rows)?,
            scores: room(batch * c.heads * c.context)?,
            gate: room(batch * c.ffn)?,
            up: room(batch * c.ffn)?,
            logits: room(batch * c.vocab)?,
        })
    }

    /// Bytes a step of `batch` sequences allocates.
    fn bytes(c: &Config, batch: u32) -> u64 {
        let elements = 6 * batch * c.hidden
            + batch * c.heads * c.context
            + 2 * batch * c.ffn
            + batch * c.vocab;
        u64::from(elements) * 4
    }
}

fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl<D: UserKernels> Transformer<D> {
    /// Upload `weights` to `stream`, make room for `max_batch` sequences
    /// and build the kernels.
    pub fn new(
        client: &Client<D>,
        stream: StreamId,
        weights: &Weights,
        max_batch: u32,
    ) -> Result<Self, Error> {
        Self::with_kernels(
            client,
            stream,
            weights,
            max_batch,
            Kernels::new(client.device())?,
        )
    }

    /// The same, with every matmul a foreign operation (see
    /// [`Kernels::with_foreign_matmuls`]).
    pub fn with_foreign_matmuls(
        client: &Client<D>,
        stream: StreamId,
        weights: &Weights,
        max_batch: u32,
    ) -> Result<Self, Error> {
        let kernels = Kernels::with_foreign_matmuls(client.device())?;
        Self::with_kernels(client, stream, weights, max_batch, kernels)
    }

    fn with_kernels(
        client: &Client<D>,
        stream: StreamId,
        weights: &Weights,
        max_batch: u32,
        kernels: Kernels<D>,
    ) -> Result<Self, Error> {
        let c = weights.config;
        c.validate().map_err(Error::BadLaunch)?;
        if max_batch == 0 {
            return Err(Error::BadLaunch("a batch of no sequences".into()));
        }
        let f32s = |values: &[f32]| client.create_f32(stream, values);
        // State and scratch are written before they are read: by `reset`,
        // or earlier in the step.
        let room = |n: u32| client.allocate(stream, u64::from(n) * 4);
        let layers = weights
            .layers
            .iter()
            .map(|l| {
                Ok(Layer {
                    attn_norm: f32s(&l.attn_norm)?,
                    wq: f32s(&l.wq)?,
                    wk: f32s(&l.wk)?,
                    wv: f32s(&l.wv)?,
                    wo: f32s(&l.wo)?,
                    ffn_norm: f32s(&l.ffn_norm)?,
                    w_gate: f32s(&l.w_gate)?,
                    w_up: f32s(&l.w_up)?,
                    w_down: f32s(&l.w_down)?,
                    k_cache: room(max_batch * c.context * c.hidden)?,
                    v_cache: room(max_batch * c.context * c.hidden)?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let b = max_batch;
        let me = Self {
            client: client.clone(),
            stream,
            config: c,
            max_batch,
            kernels,
            embed: f32s(&weights.embed)?,
            layers,
            final_norm: f32s(&weights.final_norm)?,
            lm_head: f32s(&weights.lm_head)?,
            rope: f32s(&weights.rope)?,
            tokens: room(b)?,
            positions: room(b)?,
            generated: room(b * c.context)?,
            x: room(b * c.hidden)?,
            done: room(b)?,
            held: room(b)?,
            running: room(1)?,
        };
        Ok(me)
    }

    /// The model's shape.
    pub fn config(&self) -> Config {
        self.config
    }

    /// The largest batch the buffers hold.
    pub fn max_batch(&self) -> u32 {
        self.max_batch
    }

    /// The stream the model runs on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Start the first `starts.len()` sequences afresh: their tokens and
    /// positions, every cache row and generated token zero.
    pub fn reset(&self, starts: &[Start]) -> Result<(), Error> {
        let b = self.max_batch as usize;
        if starts.len() > b {
            return Err(Error::BadLaunch(format!(
                "{} sequences, room for {b}",
                starts.len()
            )));
        }
        let mut tokens = vec![0u32; b];
        let mut positions = vec![0u32; b];
        for (i, start) in starts.iter().enumerate() {
            tokens[i] = start.token;
            positions[i] = start.position;
        }
        let (c, s) = (&self.client, self.stream);
        c.write(&self.tokens, &u32_bytes(&tokens))?;
        c.write(&self.positions, &u32_bytes(&positions))?;
        let zero = |buffer: &Buffer| {
            let n = u32::try_from(buffer.len() / 4)
                .map_err(|_| Error::BadLaunch("a buffer too long to clear".into()))?;
            c.run_builtin(s, Builtin::Fill, &[buffer], n, 0.0)
        };
        zero(&self.generated)?;
        for layer in &self.layers {
            zero(&layer.k_cache)?;
            zero(&layer.v_cache)?;
        }
        Ok(())
    }

    /// Issue one step's launches for the first `batch` sequences (eagerly,
    /// or into an open window): each generates one token. What the step
    /// computes on the way is in buffers it allocates and drops, so a
    /// captured step's are temporaries, shared by the stream's graphs.
    pub fn step(&self, batch: u32) -> Result<(), Error> {
        if batch == 0 || batch > self.max_batch {
            return Err(Error::BadLaunch(format!(
                "a batch of {batch}, room for 1 to {}",
                self.max_batch
            )));
        }
        let cfg = self.config;
        let (h, f, hd, ctx) = (cfg.hidden, cfg.ffn, cfg.head_dim(), cfg.context);
        let (k, c, s) = (&self.kernels, &self.client, self.stream);
        let pos = &self.positions;
        let scale = 1.0 / (hd as f32).sqrt();
        let dims = [h, hd, ctx, batch];
        let t = Scratch::new(c, s, &cfg, batch)?;
        k.embed(
            c,
            s,
            &self.embed,
            &self.tokens,
            &self.x,
            h,
            cfg.vocab,
            batch,
        )?;
        for l in &self.layers {
            k.rmsnorm_rows(c, s, &self.x, &l.attn_norm, &t.normed, h, batch, EPS)?;
            k.matmul(c, s, &l.wq, &t.normed, &t.q, h, h, batch)?;
            k.matmul(c, s, &l.wk, &t.normed, &t.k, h, h, batch)?;
            k.matmul(c, s, &l.wv, &t.normed, &t.v, h, h, batch)?;
            k.rope(c, s, &t.q, pos, &self.rope, h, hd, batch, ctx)?;
            k.rope(c, s, &t.k, pos, &self.rope, h, hd, batch, ctx)?;
            let caches = [&l.k_cache, &l.v_cache];
            k.kv_append(c, s, [&t.k, &t.v], pos, caches, h, ctx, batch)?;
            k.attn_scores(c, s, &t.q, &l.k_cache, pos, &t.scores, dims, scale)?;
            k.attn_softmax(c, s, &t.scores, pos, ctx, cfg.heads, batch)?;
            k.attn_values(c, s, &t.scores, &l.v_cache, pos, &t.att, dims)?;
            k.matmul(c, s, &l.wo, &t.att, &t.proj, h, h, batch)?;
            k.residual(c, s, &self.x, &t.proj, h * batch)?;
            k.rmsnorm_rows(c, s, &self.x, &l.ffn_norm, &t.normed, h, batch, EPS)?;
            k.matmul(c, s, &l.w_gate, &t.normed, &t.gate, f, h, batch)?;
            k.matmul(c, s, &l.w_up, &t.normed, &t.up, f, h, batch)?;
            k.silu_mul(c, s, &t.gate, &t.up, f * batch)?;
            k.matmul(c, s, &l.w_down, &t.gate, &t.proj, h, f, batch)?;
            k.residual(c, s, &self.x, &t.proj, h * batch)?;
        }
        k.rmsnorm_rows(c, s, &self.x, &self.final_norm, &t.normed, h, batch, EPS)?;
        let v = cfg.vocab;
        k.matmul(c, s, &self.lm_head, &t.normed, &t.logits, v, h, batch)?;
        let (tokens, generated) = (&self.tokens, &self.generated);
        k.argmax(c, s, &t.logits, pos, tokens, generated, v, ctx, batch)?;
        k.advance(c, s, pos, ctx, batch)
    }

    /// Start a generation: no sequence done, the loop's flag set. By
    /// kernels, so a graph holding it starts each replay afresh.
    pub fn start_generation(&self, batch: u32) -> Result<(), Error> {
        let (c, s) = (&self.client, self.stream);
        c.run_builtin(s, Builtin::Fill, &[&self.done], batch, 0.0)?;
        c.run_builtin(s, Builtin::Fill, &[&self.held], batch, 0.0)?;
        // A fill writes `f32`s: 1.0 is a non-zero word.
        c.run_builtin(s, Builtin::Fill, &[&self.running], 1, 1.0)
    }

    /// After a step: each of the first `batch` sequences that emitted `end`
    /// is done, held at its token and position from then on (its launches
    /// run along, and what they write past its position is never read);
    /// the loop's flag says whether any runs on.
    pub fn settle(&self, batch: u32, end: u32) -> Result<(), Error> {
        let state = [&self.tokens, &self.positions, &self.done, &self.held];
        self.kernels
            .settle(&self.client, self.stream, state, &self.running, end, batch)
    }

    /// A whole generation of the first `batch` sequences: steps while any
    /// has not emitted `end`, at most `bound`. Eagerly the host reads the
    /// flag before each step; inside a capture it is one loop the device
    /// runs.
    pub fn generation(&self, batch: u32, end: u32, bound: u32) -> Result<Ran, Error> {
        self.start_generation(batch)?;
        self.client
            .while_flag(self.stream, &self.running, bound, || {
                self.step(batch)?;
                self.settle(batch, end)
            })
    }

    /// Whether any sequence of the generation runs on: the loop's flag,
    /// read back (a host sync).
    pub fn running(&self) -> Result<bool, Error> {
        Ok(self
            .read_u32(&self.running)?
            .first()
            .is_some_and(|&w| w != 0))
    }

    fn read_u32(&self, buffer: &Buffer) -> Result<Vec<u32>, Error> {
        let bytes = self.client.read(buffer)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// Each sequence's position now.
    pub fn positions(&self) -> Result<Vec<u32>, Error> {
        self.read_u32(&self.positions)
    }

    /// The tokens each of the sequences that began at `starts` has
    /// generated since, in order: those from its start to its position now.
    pub fn generated(&self, starts: &[Start]) -> Result<Vec<Vec<u32>>, Error> {
        let all = self.read_u32(&self.generated)?;
        let positions = self.positions()?;
        let ctx = self.config.context as usize;
        starts
            .iter()
            .zip(&positions)
            .enumerate()
            .map(|(b, (start, &now))| {
                let (from, to) = (start.position as usize, now as usize);
                all.get(b * ctx + from..b * ctx + to.max(from))
                    .map(<[u32]>::to_vec)
                    .ok_or_else(|| Error::BadLaunch(format!("sequence {b} lies past the list")))
            })
            .collect()
    }

    /// The residual stream of the first `batch` sequences after the last
    /// step, row after row.
    pub fn hidden(&self, batch: u32) -> Result<Vec<f32>, Error> {
        let mut x = self.client.read_f32(&self.x)?;
        x.truncate((batch * self.config.hidden) as usize);
        Ok(x)
    }

    /// Bytes a step of `batch` sequences allocates and drops.
    pub fn scratch_bytes(&self, batch: u32) -> u64 {
        Scratch::bytes(&self.config, batch)
    }

    /// Bytes of every buffer the model holds: weights, caches and state.
    pub fn live_bytes(&self) -> u64 {
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                [
                    &l.attn_norm,
                    &l.wq,
                    &l.wk,
                    &l.wv,
                    &l.wo,
                    &l.ffn_norm,
                    &l.w_gate,
                    &l.w_up,
                    &l.w_down,
                    &l.k_cache,
                    &l.v_cache,
                ]
                .iter()
                .map(|b| b.len())
                .sum::<u64>()
            })
            .sum();
        let rest = [
            &self.embed,
            &self.final_norm,
            &self.lm_head,
            &self.rope,
            &self.tokens,
            &self.positions,
            &self.generated,
            &self.x,
            &self.done,
            &self.held,
            &self.running,
        ];
        layers + rest.iter().map(|b| b.len()).sum::<u64>()
    }
}
