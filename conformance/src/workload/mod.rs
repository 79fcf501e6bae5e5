//! User kernels every backend builds from its own sources, and the decode
//! step and the decoder-only transformer written with them.
//!
//! [`UserKernel`] names the kernels and gives each its one [`Signature`];
//! a backend implements [`UserKernels`] by compiling them from its own
//! language (Rust closures on the host, WGSL on Vulkan, the CUDA C++ source
//! in `kernels/workload.cu` through NVRTC on CUDA and hiprtc on HIP). The
//! scenarios and the decode example are then written once.
//!
//! Every kernel is 1-D over 64-thread workgroups (element
//! `i = (group.y * groups.x + group.x) * 64 + local.x`), binds its buffers
//! in the order listed, reads no info bytes and takes its by-value
//! parameters in the order listed:
//!
//! | kernel | bindings | parameters | computes |
//! |---|---|---|---|
//! | `rmsnorm` | x (read), w (read), out (write) | n: u32, eps: f32 | `out[i] = x[i] * (1 / sqrt(sum(x²)/n + eps)) * w[i]`, one workgroup |
//! | `matvec` | w (read), x (read), y (write) | rows: u32, cols: u32 | `y[r] = Σ_c w[r·cols + c] · x[c]`, in `c` order |
//! | `silu` | x (read-write) | n: u32 | `x[i] = x[i] / (1 + exp(-x[i]))` |
//! | `residual` | x (read-write), y (read) | n: u32 | `x[i] = x[i] + y[i]` |
//! | `scale` | x (read-write) | n: u32, a: f32, b: f32 | `x[i] = x[i] * a + b` |
//!
//! The transformer's kernels ([`transformer`]) work on a batch of `batch`
//! sequences laid out row after row; `tokens` and `pos` hold one `u32` per
//! sequence and every index read from them is clamped on the device
//! (a token to `vocab - 1`, a position `p = min(pos[b], context - 1)`), so
//! no value a buffer holds can send a kernel past its bindings. Kernels
//! marked "per row" run one workgroup per row (row = the workgroup's linear
//! index), reduce over it with a tree in workgroup memory, and skip rows at
//! or past their count:
//!
//! | kernel | bindings | parameters | computes |
//! |---|---|---|---|
//! | `embed` | table (read), tokens (read), x (write) | width, vocab, batch: u32 | `x[b·width + c] = table[min(tokens[b], vocab-1)·width + c]` |
//! | `rmsnorm_rows` | x (read), w (read), out (write) | n, rows: u32, eps: f32 | `rmsnorm` of each row of `n`, per row |
//! | `matmul` | w (read), x (read), y (write) | rows, cols, batch: u32 | `y[b·rows + r] = Σ_c w[r·cols + c] · x[b·cols + c]`, in `c` order |
//! | `rope` | x (read-write), pos (read), table (read) | width, head_dim, batch, context: u32 | rotates pair `(2k, 2k+1)` of each head by `table[(p·head_dim/2 + k)·2 ..]` (cos, sin) |
//! | `kv_append` | k (read), v (read), pos (read), k_cache (read-write), v_cache (read-write) | width, context, batch: u32 | row `b·context + p` of each cache = row `b` of k, v |
//! | `attn_scores` | q (read), k_cache (read), pos (read), scores (write) | width, head_dim, context, batch: u32, scale: f32 | `scores[(b·heads + h)·context + t] = scale · q_bh · k_cache_bth` for `t ≤ p`, else 0; the grid covers the whole context |
//! | `attn_softmax` | scores (read-write), pos (read) | context, heads, batch: u32 | softmax of each row over `t ≤ p`, 0 past it, per row |
//! | `attn_values` | probs (read), v_cache (read), pos (read), out (write) | width, head_dim, context, batch: u32 | `out[b·width + c] = Σ_{t ≤ p} probs[(b·heads + h)·context + t] · v_cache[(b·context + t)·width + c]`, in `t` order |
//! | `silu_mul` | gate (read-write), up (read) | n: u32 | `gate[i] = gate[i] / (1 + exp(-gate[i])) · up[i]` |
//! | `argmax` | logits (read), pos (read), tokens (write), generated (read-write) | vocab, context, batch: u32 | the first index of the row's largest logit into `tokens[b]` and `generated[b·context + p]`, per row |
//! | `advance` | pos (read-write) | context, batch: u32 | `pos[b] = min(pos[b] + 1, context - 1)` |

pub mod collective;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod cuda_foreign;
pub mod decode;
mod footprint;
pub mod foreign;
#[cfg(feature = "hip")]
mod hip;
#[cfg(feature = "hip")]
mod hip_foreign;
mod host;
pub mod rng;
pub mod transformer;
#[cfg(feature = "vulkan")]
mod vulkan;

use std::sync::Arc;

pub use footprint::Footprint;

use graph_capture::{
    Access, Buffer, Builtins, Client, Error, GraphDriver, Kernel, Params, Signature, StreamId,
};

/// Threads per workgroup of every workload kernel.
pub const WORKGROUP: u32 = 64;

/// The CUDA C++ source of the workload, shared by CUDA (NVRTC) and HIP
/// (hiprtc).
pub const CUDA_SOURCE: &str = include_str!("../../kernels/workload.cu");

/// One of the workload's kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UserKernel {
    /// Root-mean-square normalisation, scaled by a weight vector.
    RmsNorm,
    /// Row-major matrix times vector.
    MatVec,
    /// The SiLU activation, in place.
    Silu,
    /// `x += y`.
    Residual,
    /// `x = x * a + b`, with `a` and `b` by value.
    Scale,
    /// The embedding row of each sequence's token.
    Embed,
    /// [`UserKernel::RmsNorm`] of each row of a batch.
    RmsNormRows,
    /// A matrix times each vector of a batch.
    MatMul,
    /// The rotary position embedding at each sequence's position.
    Rope,
    /// Keys and values written to each sequence's cache row at its position.
    KvAppend,
    /// Scaled dot products of each head's query with every cached key.
    AttnScores,
    /// Softmax of each head's scores up to its sequence's position.
    AttnSoftmax,
    /// Each head's cached values weighted by its probabilities.
    AttnValues,
    /// `gate = silu(gate) * up`.
    SiluMul,
    /// Greedy sampling: the largest logit's index, lowest on a tie.
    Argmax,
    /// Each sequence's position, one further.
    Advance,
    /// A loop's counter, one lower, and its flag set while it is above 0.
    Countdown,
    /// Each sequence that emitted the end token stopped, and held there;
    /// the generation's flag set while any runs on.
    Settle,
    /// `output = input + 1`: the chain the side-by-side rows time, the
    /// same source CuPy's `RawKernel` runs there.
    AddOne,
}

impl UserKernel {
    /// Every kernel, in a fixed order.
    pub const ALL: [UserKernel; 19] = [
        UserKernel::RmsNorm,
        UserKernel::MatVec,
        UserKernel::Silu,
        UserKernel::Residual,
        UserKernel::Scale,
        UserKernel::Embed,
        UserKernel::RmsNormRows,
        UserKernel::MatMul,
        UserKernel::Rope,
        UserKernel::KvAppend,
        UserKernel::AttnScores,
        UserKernel::AttnSoftmax,
        UserKernel::AttnValues,
        UserKernel::SiluMul,
        UserKernel::Argmax,
        UserKernel::Advance,
        UserKernel::Countdown,
        UserKernel::Settle,
        UserKernel::AddOne,
    ];

    /// The kernels of the MLP decode step, which [`Workload`] builds.
    pub const MLP: [UserKernel; 5] = [
        UserKernel::RmsNorm,
        UserKernel::MatVec,
        UserKernel::Silu,
        UserKernel::Residual,
        UserKernel::Scale,
    ];

    /// The entry point's name in every backend's sources.
    pub fn name(self) -> &'static str {
        match self {
            UserKernel::RmsNorm => "rmsnorm",
            UserKernel::MatVec => "matvec",
            UserKernel::Silu => "silu",
            UserKernel::Residual => "residual",
            UserKernel::Scale => "scale",
            UserKernel::Embed => "embed",
            UserKernel::RmsNormRows => "rmsnorm_rows",
            UserKernel::MatMul => "matmul",
            UserKernel::Rope => "rope",
            UserKernel::KvAppend => "kv_append",
            UserKernel::AttnScores => "attn_scores",
            UserKernel::AttnSoftmax => "attn_softmax",
            UserKernel::AttnValues => "attn_values",
            UserKernel::SiluMul => "silu_mul",
            UserKernel::Argmax => "argmax",
            UserKernel::Advance => "advance",
            UserKernel::Countdown => "countdown",
            UserKernel::Settle => "settle",
            UserKernel::AddOne => "add_one",
        }
    }

    /// The kernel's signature, the same on every backend.
    pub fn signature(self) -> Signature {
        use Access::{Read, ReadWrite, Write};
        let base = Signature::new(self.name()).workgroup([WORKGROUP, 1, 1]);
        match self {
            UserKernel::RmsNorm => base.bindings(&[Read, Read, Write]).param(4).param(4),
            UserKernel::MatVec => base.bindings(&[Read, Read, Write]).param(4).param(4),
            UserKernel::Silu => base.binding(ReadWrite).param(4),
            UserKernel::Residual => base.bindings(&[ReadWrite, Read]).param(4),
            UserKernel::Scale => base.binding(ReadWrite).param(4).param(4).param(4),
            UserKernel::Embed => base.bindings(&[Read, Read, Write]).params(3),
            UserKernel::RmsNormRows => base.bindings(&[Read, Read, Write]).params(3),
            UserKernel::MatMul => base.bindings(&[Read, Read, Write]).params(3),
            UserKernel::Rope => base.bindings(&[ReadWrite, Read, Read]).params(4),
            UserKernel::KvAppend => base
                .bindings(&[Read, Read, Read, ReadWrite, ReadWrite])
                .params(3),
            UserKernel::AttnScores => base.bindings(&[Read, Read, Read, Write]).params(5),
            UserKernel::AttnSoftmax => base.bindings(&[ReadWrite, Read]).params(3),
            UserKernel::AttnValues => base.bindings(&[Read, Read, Read, Write]).params(4),
            UserKernel::SiluMul => base.bindings(&[ReadWrite, Read]).param(4),
            UserKernel::Argmax => base.bindings(&[Read, Read, Write, ReadWrite]).params(3),
            UserKernel::Advance => base.binding(ReadWrite).params(2),
            UserKernel::Countdown => base.bindings(&[ReadWrite, Write]),
            UserKernel::Settle => base
                .bindings(&[ReadWrite, ReadWrite, ReadWrite, ReadWrite, Write])
                .params(2),
            UserKernel::AddOne => base.bindings(&[Read, Write]).param(4),
        }
    }
}

/// `count` by-value parameters of four bytes each.
trait FourByteParams {
    fn params(self, count: usize) -> Self;
}

impl FourByteParams for Signature {
    fn params(self, count: usize) -> Self {
        (0..count).fold(self, |signature, _| signature.param(4))
    }
}

/// The grid of 64-thread workgroups that covers `n` elements.
pub fn grid(n: u32) -> [u32; 3] {
    [n.div_ceil(WORKGROUP).max(1), 1, 1]
}

/// A backend's build of the workload's kernels, from its own sources.
pub trait UserKernels: GraphDriver + Builtins {
    /// Build `which` for `device`, with [`UserKernel::signature`].
    ///
    /// # Safety
    ///
    /// The GPU backends' kernels trust their counts, so the caller launches
    /// the kernel only with counts that fit the buffers it binds (in
    /// elements): `n` at most each buffer's length for `rmsnorm`, `silu`,
    /// `residual` and `scale`; for `matvec`, `rows * cols` at most `w`'s
    /// length, `cols` at most `x`'s and `rows` at most `y`'s; for the
    /// transformer's kernels, every index the module table writes, taken
    /// over the counts a launch passes, within its buffer. [`Workload`] and
    /// [`transformer::Kernels`] are the safe ways to launch them.
    #[allow(unsafe_code)]
    unsafe fn user_kernel(
        device: &Arc<Self::Device>,
        which: UserKernel,
    ) -> Result<Self::Kernel, Error>;

    /// Try to build a kernel whose source does not compile (or, for a
    /// backend without a compiler, whose signature no device accepts)
    /// through the same path. The error must carry the compiler's log.
    fn broken_kernel(device: &Arc<Self::Device>) -> Result<Self::Kernel, Error>;

    /// Try to build a kernel whose code disagrees with the signature it is
    /// given (a binding too few), where the backend can tell; `None` where
    /// it cannot check (it then relies on the caller's promise).
    fn disagreeing_kernel(device: &Arc<Self::Device>) -> Option<Result<Self::Kernel, Error>>;

    /// `bytes` in memory made outside the library, as a runtime that owns
    /// its memory makes it, as a page for `Client::import`; `keep_alive`
    /// is dropped once the library lets go of the page. `None` where this
    /// run makes no foreign memory on the backend.
    fn foreign_page(
        device: &Arc<Self::Device>,
        bytes: &[u8],
        keep_alive: Arc<()>,
    ) -> Option<Result<Self::DevicePage, Error>> {
        let _ = (device, bytes, keep_alive);
        None
    }

    /// `work` as a foreign operation of this backend, for
    /// `Client::foreign`; `None` where the backend has none yet (by
    /// default), or cannot express this one (a GEMM on Vulkan).
    fn foreign_op(
        device: &Arc<Self::Device>,
        work: &foreign::ForeignWork,
    ) -> Option<Result<Self::Kernel, Error>> {
        let _ = (device, work);
        None
    }

    /// When a foreign operation's own failure (an `Err` or a panic) is
    /// seen: while it is recorded (`true`: a refused call, or inside a
    /// window a refused instantiate), or as a device fault at the next
    /// fence, for a backend whose foreign operation is the work itself.
    /// Read only where [`UserKernels::foreign_op`] gives operations.
    const FOREIGN_FAILS_WHILE_RECORDING: bool = true;

    /// Whether a foreign operation's code runs when a window's graph is
    /// made (`true`: Vulkan, which records it into the graph's command
    /// buffer then, so its failure refuses the instantiate) rather than as
    /// it is recorded (CUDA and HIP capture it at the call, so its failure
    /// refuses the call and dooms the window). Read only where
    /// [`UserKernels::FOREIGN_FAILS_WHILE_RECORDING`] holds.
    const FOREIGN_RUNS_AT_INSTANTIATE: bool = false;

    /// Whether a conditional body may hold a foreign operation; read only
    /// where [`UserKernels::foreign_op`] gives operations.
    const FOREIGN_IN_BODIES: bool = true;
}

/// The workload's kernels on one device, launched only with counts checked
/// against the buffers: the safe way to run them.
pub struct Workload<D: UserKernels> {
    kernels: [Kernel<D>; 6],
}

/// The kernels [`Workload`] builds: the MLP step's and a loop's countdown.
const WORKLOAD: [UserKernel; 6] = [
    UserKernel::RmsNorm,
    UserKernel::MatVec,
    UserKernel::Silu,
    UserKernel::Residual,
    UserKernel::Scale,
    UserKernel::Countdown,
];

fn elements(buffer: &Buffer) -> u64 {
    buffer.len() / 4
}

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

impl<D: UserKernels> Workload<D> {
    /// Build every kernel of the workload for `device`.
    #[allow(unsafe_code)]
    pub fn new(device: &Arc<D::Device>) -> Result<Self, Error> {
        // SAFETY: the kernels are launched only by the methods below, each
        // of which checks its counts against its buffers first, and by
        // callers of the unsafe `kernel`, which promise the same.
        let build = |which| unsafe { D::user_kernel(device, which) }.map(Kernel::new);
        let [a, b, c, d, e, f] = WORKLOAD;
        Ok(Self {
            kernels: [
                build(a)?,
                build(b)?,
                build(c)?,
                build(d)?,
                build(e)?,
                build(f)?,
            ],
        })
    }

    /// Kernel `which`, for a launch the safe methods do not make (a
    /// mismatched one, say).
    pub fn get(&self, which: UserKernel) -> &Kernel<D> {
        let index = WORKLOAD.iter().position(|&k| k == which).unwrap_or(0);
        &self.kernels[index]
    }

    /// The kernel itself, to launch through the client directly.
    ///
    /// # Safety
    ///
    /// As for [`UserKernels::user_kernel`]: every launch that reaches the
    /// device passes counts that fit its buffers. (A launch the client
    /// refuses for not matching the signature reaches no device.)
    #[allow(unsafe_code)]
    pub unsafe fn kernel(&self, which: UserKernel) -> &Kernel<D> {
        self.get(which)
    }

    /// `out = rmsnorm(x) * w` over `n` elements, in one workgroup.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm(
        &self,
        client: &Client<D>,
        stream: StreamId,
        x: &Buffer,
        w: &Buffer,
        out: &Buffer,
        n: u32,
        eps: f32,
    ) -> Result<(), Error> {
        let k = UserKernel::RmsNorm;
        for (what, buffer) in [("x", x), ("w", w), ("out", out)] {
            fits(k, what, u64::from(n), buffer)?;
        }
        let params = Params::new().u32(n).f32(eps);
        client.launch(
            stream,
            self.get(k),
            [1, 1, 1],
            &[x, w, out],
            &[],
            params.as_bytes(),
        )
    }

    /// `y = w x` for a `rows x cols` row-major `w`.
    #[allow(clippy::too_many_arguments)]
    pub fn matvec(
        &self,
        client: &Client<D>,
        stream: StreamId,
        w: &Buffer,
        x: &Buffer,
        y: &Buffer,
        rows: u32,
        cols: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::MatVec;
        fits(k, "w", u64::from(rows) * u64::from(cols), w)?;
        fits(k, "x", u64::from(cols), x)?;
        fits(k, "y", u64::from(rows), y)?;
        let params = Params::new().u32(rows).u32(cols);
        client.launch(
            stream,
            self.get(k),
            grid(rows),
            &[w, x, y],
            &[],
            params.as_bytes(),
        )
    }

    /// `x = silu(x)` over `n` elements.
    pub fn silu(
        &self,
        client: &Client<D>,
        stream: StreamId,
        x: &Buffer,
        n: u32,
    ) -> Result<(), Error> {
        let k = UserKernel::Silu;
        fits(k, "x", u64::from(n), x)?;
        let params = Params::new().u32(n);
        client.launch(stream, self.get(k), grid(n), &[x], &[], params.as_bytes())
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

    /// `counter[0] -= 1`, then `flag[0] = counter[0] > 0` (`1` or `0`): the
    /// counter is an `f32`, so that a fill resets it, and the flag a `u32`.
    pub fn countdown(
        &self,
        client: &Client<D>,
        stream: StreamId,
        counter: &Buffer,
        flag: &Buffer,
    ) -> Result<(), Error> {
        let k = UserKernel::Countdown;
        fits(k, "counter", 1, counter)?;
        fits(k, "flag", 1, flag)?;
        client.launch(stream, self.get(k), [1, 1, 1], &[counter, flag], &[], &[])
    }

    /// `x = x * a + b` over the first `n` elements the `groups` grid covers.
    #[allow(clippy::too_many_arguments)]
    pub fn scale(
        &self,
        client: &Client<D>,
        stream: StreamId,
        groups: [u32; 3],
        x: &Buffer,
        n: u32,
        a: f32,
        b: f32,
    ) -> Result<(), Error> {
        let k = UserKernel::Scale;
        fits(k, "x", u64::from(n), x)?;
        let params = Params::new().u32(n).f32(a).f32(b);
        client.launch(stream, self.get(k), groups, &[x], &[], params.as_bytes())
    }
}
