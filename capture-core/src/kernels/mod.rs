//! Kernels: what a compiled kernel takes (its [`Signature`]), and the bytes
//! of a buffer an operation touches ([`Span`]). Every launch is checked
//! against its kernel's signature here, once, for every backend.
//!
//! Uses only the crate's ids; every other part may use it.

pub(crate) mod signature;
pub(crate) mod span;
pub(crate) mod user_code;

pub use signature::{
    MAX_BINDINGS, MAX_INFO_BYTES, MAX_PARAM_BYTES, MAX_WORKGROUP_THREADS, Params, Signature,
};
pub use span::Span;
pub use user_code::{panic_message, run_foreign_code};
