//! A decoder-only transformer written with the workload's user kernels: one
//! step generates one token for each of a batch of sequences, sampling on
//! the device, so replaying a captured step N times generates N tokens with
//! no host work between.
//!
//! Each layer runs rmsnorm, separate Q, K and V projections, rotary
//! position embedding of Q and K, the K and V rows appended to the layer's
//! cache, attention over the cache up to the position (scores, softmax,
//! weighted values), the output projection and its residual, rmsnorm,
//! separate gate and up projections, the SiLU-gated product, the down
//! projection and its residual. The step starts with the token's embedding
//! and ends with the final norm, the logits, greedy sampling (which writes
//! the next token into the input buffer and appends it to the generated
//! list) and a launch that advances the position. Token, position and
//! context length are all read on the device, so the launches of a step
//! never change from one step to the next.
//!
//! [`GraphSet`] holds one captured step per batch size, picked per step by
//! the number of live sequences; the step's scratch buffers are its
//! temporaries, so the set's graphs share their memory.
//!
//! [`Reference`] is the same model in plain Rust, in the host kernels'
//! order of operations; [`check`] compares a device's tokens and final
//! hidden state with it.

mod check;
mod device;
mod graph_set;
pub(crate) mod host;
mod kernels;
mod reference;
mod stops;

pub use check::{HIDDEN_TOLERANCE, NEAR_TIE, NearTie, Verdict, check};
pub use device::{Start, Transformer, starts};
pub use graph_set::{GraphSet, SET_TARGET, SetMemory, bucket};
pub use kernels::Kernels;
pub use reference::{Config, EPS, LayerWeights, ROPE_BASE, Reference, Weights, argmax, top_gap};
pub use stops::{Whole, end_token, reference_tokens, until_end, whole_generation};
