//! The transformer's kernels on one device, launched only with counts
//! checked against the buffers they bind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use graph_capture::{Buffer, Client, Error, Kernel, Params, StreamId};

use crate::workload::foreign::ForeignWork;
use crate::workload::{UserKernel, UserKernels, grid};

/// The kernels this module launches, in the order [`Kernels`] holds them.
const USED: [UserKernel; 13] = [
    UserKernel::Embed,
    UserKernel::RmsNormRows,
    UserKernel::MatMul,
    UserKernel::Rope,
    UserKernel::KvAppend,
    UserKernel::AttnScores,
    UserKernel::AttnSoftmax,
    UserKernel::AttnValues,
    UserKernel::Residual,
    UserKernel::SiluMul,
    UserKernel::Argmax,
    UserKernel::Advance,
    UserKernel::Settle,
];

/// The transformer's kernels, each launch checked: the safe way to run
/// them.
pub struct Kernels<D: UserKernels> {
    kernels: Vec<Kernel<D>>,
    /// Where the matmuls are foreign operations (another library's GEMM),
    /// the device and one operation per shape, made at first use.
    foreign: Option<Foreign<D>>,
}

/// The foreign matmuls of one device, by `(rows, cols, batch)`.
struct Foreign<D: UserKernels> {
    device: Arc<D::Device>,
    matmuls: Mutex<HashMap<(u32, u32, u32), Kernel<D>>>,
}

fn elements(buffer: &Buffer) -> u64 {
    buffer.len() / 4
}

/// `buffer` holds at least `need` elements (products taken in u64, so no
/// count can wrap past the check).
fn fits(which: UserKernel, what: &str, need: u64, buffer: &Buffer) -> Result<(), Error> {
    if need <= elements(buffer) {
        Ok(())
    } else {
        Err(Error::BadLaunch(format!(
            "{} needs {need} elements of {what}, {} holds {}",
            which.name(),
            buffer.id(),
            elements(buffer)
        )))
    }
}

fn nonzero(which: UserKernel, values: &[(&str, u32)]) -> Result<(), Error> {
    match values.iter().find(|(_, v)| *v == 0) {
        Some((what, _)) => Err(Error::BadLaunch(format!(
            "{} needs a {what} of at least 1",
            which.name()
        ))),
        None => Ok(()),
    }
}

/// Heads of `head_dim` in `width`, refused unless they tile it exactly.
fn heads(which: UserKernel, width: u32, head_dim: u32) -> Result<u32, Error> {
    if head_dim == 0 || !width.is_multiple_of(head_dim) {
        return Err(Error::BadLaunch(format!(
            "{} needs a head_dim dividing width, not {head_dim} of {width}",
            which.name()
        )));
    }
    Ok(width / head_dim)
}

fn product(values: &[u32]) -> u64 {
    values.iter().map(|&v| u64::from(v)).product()
}

/// A grid of `rows` workgroups, one a row.
fn rows(rows: u32) -> [u32; 3] {
    [rows.max(1), 1, 1]
}

/// The grid covering `n` elements, refused where `n` does not fit a `u32`
/// (the kernels index in 32 bits).
fn span(which: UserKernel, n: u64) -> Result<[u32; 3], Error> {
    u32::try_from(n)
        .map(grid)
        .map_err(|_| Error::BadLaunch(format!("{} over {n} elements", which.name())))
}

impl<D: UserKernels> Kernels<D> {
    /// Build the transformer's kernels for `device`.
    #[allow(unsafe_code)]
    pub fn new(device: &Arc<D::Device>) -> Result<Self, Error> {
        let kernels = USED
            .iter()
            .map(|&which| {
                // SAFETY: the kernels are launched only by the methods
                // below, each of which checks every count against the
                // buffers it binds first; the indices the kernels read from
                // buffers (tokens, positions) are clamped on the device.
                unsafe { D::user_kernel(device, which) }.map(Kernel::new)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Self {
            kernels,
            foreign: None,
        })
    }

    /// The same, but with every matmul a foreign operation: the backend's
    /// GEMM from another library (a CPU GEMM on the host), refused where
    /// the backend has none.
    pub fn with_foreign_matmuls(device: &Arc<D::Device>) -> Result<Self, Error> {
        let probe = ForeignWork::MatMul {
            rows: 1,
            cols: 1,
            batch: 1,
        };
        if D::foreign_op(device, &probe).is_none() {
            return Err(Error::BadLaunch(format!("{} has no foreign GEMM", D::NAME)));
        }
        let mut me = Self::new(device)?;
        me.foreign = Some(Foreign {
            device: Arc::clone(device),
            matmuls: Mutex::new(HashMap::new()),
        });
        Ok(me)
    }

    /// Whether the matmuls are foreign operations.
    pub fn foreign_matmuls(&self) -> bool {
        self.foreign.is_some()
    }

    /// The foreign matmul of one shape, made at its first use.
    fn foreign_matmul(
        &self,
        foreign: &Foreign<D>,
        shape: (u32, u32, u32),
    ) -> Result<Kernel<D>, Error> {
        let mut made = foreign
            .matmuls
            .lock()
            .map_err(|_| Error::BadLaunch("the foreign matmuls' lock is poisoned".into()))?;
        if let Some(kernel) = made.get(&shape) {
            return Ok(kernel.clone());
        }
        let (rows, cols, batch) = shape;
        let work = ForeignWork::MatMul { rows, cols, batch };
        let kernel = D::foreign_op(&foreign.device, &work)
            .ok_or_else(|| Error::BadLaunch(format!("{} has no foreign GEMM", D::NAME)))?
            .map(Kernel::new)?;
        made.insert(shape, kernel.clone());
        Ok(kernel)
    }

    fn get(&self, which: UserKernel) -> &Kernel<D> {
        let index = USED.iter().position(|&k| k == which).unwrap_or(0);
        &self.kernels[index]
    }

    /// `x[b] = table[tokens[b]]` for each of `batch` sequences.
    #[allow(clippy::too_many_arguments)]
    pub fn embed(
        &self,
        client: &Client<D>,
        stream: StreamId,
        table: &Buffer,
        tokens: &Buffer,
        x: &Buffer,
        width: u32,
        vocab: u32,
        batch: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::Embed;
        nonzero(k, &[("vocab", vocab)])?;
        fits(k, "table", product(&[vocab, width]), table)?;
        fits(k, "tokens", u64::from(batch), tokens)?;
        fits(k, "x", product(&[batch, width]), x)?;
        let params = Params::new().u32(width).u32(vocab).u32(batch);
        let groups = span(k, product(&[batch, width]))?;
        client.launch(
            stream,
            self.get(k),
            groups,
            &[table, tokens, x],
            &[],
            params.as_bytes(),
        )
    }

    /// `out = rmsnorm(x) * w` for each of `count` rows of `n`.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm_rows(
        &self,
        client: &Client<D>,
        stream: StreamId,
        x: &Buffer,
        w: &Buffer,
        out: &Buffer,
        n: u32,
        count: u32,
        eps: f32,
    ) -> Result<(), Error> {
        let k = UserKernel::RmsNormRows;
        fits(k, "x", product(&[count, n]), x)?;
        fits(k, "w", u64::from(n), w)?;
        fits(k, "out", product(&[count, n]), out)?;
        let params = Params::new().u32(n).u32(count).f32(eps);
        client.launch(
            stream,
            self.get(k),
            rows(count),
            &[x, w, out],
            &[],
            params.as_bytes(),
        )
    }

    /// `y[b] = w x[b]` for a `rows x cols` row-major `w` and each of
    /// `batch` vectors.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        client: &Client<D>,
        stream: StreamId,
        w: &Buffer,
        x: &Buffer,
        y: &Buffer,
        rows: u32,
        cols: u32,
        batch: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::MatMul;
        fits(k, "w", product(&[rows, cols]), w)?;
        fits(k, "x", product(&[batch, cols]), x)?;
        fits(k, "y", product(&[batch, rows]), y)?;
        if let Some(foreign) = &self.foreign {
            let op = self.foreign_matmul(foreign, (rows, cols, batch))?;
            return client.foreign(stream, &op, &[w, x, y]);
        }
        let params = Params::new().u32(rows).u32(cols).u32(batch);
        let groups = span(k, product(&[batch, rows]))?;
        client.launch(
            stream,
            self.get(k),
            groups,
            &[w, x, y],
            &[],
            params.as_bytes(),
        )
    }

    /// Rotate each head of each of `batch` rows of `x` by its sequence's
    /// position's angles in `table`.
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &self,
        client: &Client<D>,
        stream: StreamId,
        x: &Buffer,
        pos: &Buffer,
        table: &Buffer,
        width: u32,
        head_dim: u32,
        batch: u32,
        context: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::Rope;
        nonzero(k, &[("context", context)])?;
        heads(k, width, head_dim)?;
        if !head_dim.is_multiple_of(2) {
            return Err(Error::BadLaunch(format!(
                "rope needs an even head_dim, not {head_dim}"
            )));
        }
        fits(k, "x", product(&[batch, width]), x)?;
        fits(k, "pos", u64::from(batch), pos)?;
        fits(k, "table", product(&[context, head_dim]), table)?;
        let params = Params::new()
            .u32(width)
            .u32(head_dim)
            .u32(batch)
            .u32(context);
        let groups = span(k, product(&[batch, width / 2]))?;
        client.launch(
            stream,
            self.get(k),
            groups,
            &[x, pos, table],
            &[],
            params.as_bytes(),
        )
    }

    /// Write row `b` of `k` and `v` to row `pos[b]` of sequence `b`'s part
    /// of each cache.
    #[allow(clippy::too_many_arguments)]
    pub fn kv_append(
        &self,
        client: &Client<D>,
        stream: StreamId,
        [key, value]: [&Buffer; 2],
        pos: &Buffer,
        [k_cache, v_cache]: [&Buffer; 2],
        width: u32,
        context: u32,
        batch: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::KvAppend;
        nonzero(k, &[("context", context)])?;
        fits(k, "k", product(&[batch, width]), key)?;
        fits(k, "v", product(&[batch, width]), value)?;
        fits(k, "pos", u64::from(batch), pos)?;
        fits(k, "k_cache", product(&[batch, context, width]), k_cache)?;
        fits(k, "v_cache", product(&[batch, context, width]), v_cache)?;
        let params = Params::new().u32(width).u32(context).u32(batch);
        let groups = span(k, product(&[batch, width]))?;
        client.launch(
            stream,
            self.get(k),
            groups,
            &[key, value, pos, k_cache, v_cache],
            &[],
            params.as_bytes(),
        )
    }

    /// Each head's scaled scores against every cached key up to its
    /// sequence's position; the grid covers the whole context.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_scores(
        &self,
        client: &Client<D>,
        stream: StreamId,
        q: &Buffer,
        k_cache: &Buffer,
        pos: &Buffer,
        scores: &Buffer,
        [width, head_dim, context, batch]: [u32; 4],
        scale: f32,
    ) -> Result<(), Error> {
        let k = UserKernel::AttnScores;
        nonzero(k, &[("context", context)])?;
        let heads = heads(k, width, head_dim)?;
        fits(k, "q", product(&[batch, width]), q)?;
        fits(k, "k_cache", product(&[batch, context, width]), k_cache)?;
        fits(k, "pos", u64::from(batch), pos)?;
        fits(k, "scores", product(&[batch, heads, context]), scores)?;
        let params = Params::new()
            .u32(width)
            .u32(head_dim)
            .u32(context)
            .u32(batch)
            .f32(scale);
        let groups = span(k, product(&[batch, heads, context]))?;
        client.launch(
            stream,
            self.get(k),
            groups,
            &[q, k_cache, pos, scores],
            &[],
            params.as_bytes(),
        )
    }

    /// Softmax of each head's scores up to its sequence's position.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_softmax(
        &self,
        client: &Client<D>,
        stream: StreamId,
        scores: &Buffer,
        pos: &Buffer,
        context: u32,
        heads: u32,
        batch: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::AttnSoftmax;
        nonzero(k, &[("context", context), ("heads", heads)])?;
        fits(k, "scores", product(&[batch, heads, context]), scores)?;
        fits(k, "pos", u64::from(batch), pos)?;
        let count = u32::try_from(product(&[batch, heads]))
            .map_err(|_| Error::BadLaunch("attn_softmax over too many rows".into()))?;
        let params = Params::new().u32(context).u32(heads).u32(batch);
        client.launch(
            stream,
            self.get(k),
            rows(count),
            &[scores, pos],
            &[],
            params.as_bytes(),
        )
    }

    /// Each head's cached values weighted by its probabilities.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_values(
        &self,
        client: &Client<D>,
        stream: StreamId,
        probs: &Buffer,
        v_cache: &Buffer,
        pos: &Buffer,
        out: &Buffer,
        [width, head_dim, context, batch]: [u32; 4],
    ) -> Result<(), Error> {
        let k = UserKernel::AttnValues;
        nonzero(k, &[("context", context)])?;
        let heads = heads(k, width, head_dim)?;
        fits(k, "probs", product(&[batch, heads, context]), probs)?;
        fits(k, "v_cache", product(&[batch, context, width]), v_cache)?;
        fits(k, "pos", u64::from(batch), pos)?;
        fits(k, "out", product(&[batch, width]), out)?;
        let params = Params::new()
            .u32(width)
            .u32(head_dim)
            .u32(context)
            .u32(batch);
        let groups = span(k, product(&[batch, width]))?;
        client.launch(
            stream,
            self.get(k),
            groups,
            &[probs, v_cache, pos, out],
            &[],
            params.as_bytes(),
        )
    }

    /// `x += y` over `n` elements.
    pub fn residual(
        &self,
        client: &Client<D>,
        stream: StreamId,
        x: &Buffer,
        y: &Buffer,
        n: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::Residual;
        fits(k, "x", u64::from(n), x)?;
        fits(k, "y", u64::from(n), y)?;
        let params = Params::new().u32(n);
        client.launch(
            stream,
            self.get(k),
            grid(n),
            &[x, y],
            &[],
            params.as_bytes(),
        )
    }

    /// `gate = silu(gate) * up` over `n` elements.
    pub fn silu_mul(
        &self,
        client: &Client<D>,
        stream: StreamId,
        gate: &Buffer,
        up: &Buffer,
        n: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::SiluMul;
        fits(k, "gate", u64::from(n), gate)?;
        fits(k, "up", u64::from(n), up)?;
        let params = Params::new().u32(n);
        client.launch(
            stream,
            self.get(k),
            grid(n),
            &[gate, up],
            &[],
            params.as_bytes(),
        )
    }

    /// Each sequence's greedy token into `tokens[b]` and its generated list
    /// at its position.
    #[allow(clippy::too_many_arguments)]
    pub fn argmax(
        &self,
        client: &Client<D>,
        stream: StreamId,
        logits: &Buffer,
        pos: &Buffer,
        tokens: &Buffer,
        generated: &Buffer,
        vocab: u32,
        context: u32,
        batch: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::Argmax;
        nonzero(k, &[("vocab", vocab), ("context", context)])?;
        fits(k, "logits", product(&[batch, vocab]), logits)?;
        fits(k, "pos", u64::from(batch), pos)?;
        fits(k, "tokens", u64::from(batch), tokens)?;
        fits(k, "generated", product(&[batch, context]), generated)?;
        let params = Params::new().u32(vocab).u32(context).u32(batch);
        client.launch(
            stream,
            self.get(k),
            rows(batch),
            &[logits, pos, tokens, generated],
            &[],
            params.as_bytes(),
        )
    }

    /// Each of `batch` sequences that emitted `end` is done and held at its
    /// token and position; `flag` set while any runs on.
    #[allow(clippy::too_many_arguments)]
    pub fn settle(
        &self,
        client: &Client<D>,
        stream: StreamId,
        [tokens, pos, done, held]: [&Buffer; 4],
        flag: &Buffer,
        end: u32,
        batch: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::Settle;
        for (what, buffer) in [
            ("tokens", tokens),
            ("pos", pos),
            ("done", done),
            ("held", held),
        ] {
            fits(k, what, u64::from(batch), buffer)?;
        }
        fits(k, "flag", 1, flag)?;
        let params = Params::new().u32(end).u32(batch);
        client.launch(
            stream,
            self.get(k),
            [1, 1, 1],
            &[tokens, pos, done, held, flag],
            &[],
            params.as_bytes(),
        )
    }

    /// Each of `batch` positions one further, up to the context's last.
    pub fn advance(
        &self,
        client: &Client<D>,
        stream: StreamId,
        pos: &Buffer,
        context: u32,
        batch: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::Advance;
        nonzero(k, &[("context", context)])?;
        fits(k, "pos", u64::from(batch), pos)?;
        let params = Params::new().u32(context).u32(batch);
        client.launch(
            stream,
            self.get(k),
            grid(batch),
            &[pos],
            &[],
            params.as_bytes(),
        )
    }
}
