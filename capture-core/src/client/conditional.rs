//! Conditionals and loops over a flag the caller's kernels write: run on
//! the host's word outside a capture, recorded as one node inside one.

use super::buffer::Buffer;
use super::calls::Client;
use crate::driver::{Bodies, GraphDriver};
use crate::error::Error;
use crate::ids::StreamId;
use crate::recorded::conditional::{Conditional, Ran};
use crate::server::conditional::Body;

/// Conditionals read a flag: the `u32` in the first four bytes of a buffer
/// of the conditional's stream, non-zero meaning true, written by the
/// caller's own kernels (or writes). A body is the caller's calls on the
/// stream, made in a closure.
///
/// - **Outside a capture**, and in a capture's warmup, a conditional runs
///   on the host's word: each check reads the flag back, which waits for
///   the stream's work before it (a host sync), and the closure is called
///   as often as the body runs.
/// - **While the stream records**, each body is called once, into a
///   sub-recording of its own, and the graph holds one conditional node
///   that reads the flag on the device each time a replay reaches it.
///   Conditionals nest. A body may not hold a wait between streams, nor, on
///   a backend whose bodies skip no copy (Vulkan), a write; a backend
///   without conditional nodes (HIP) refuses the recording with
///   [`Error::NoConditionals`]. Any refusal dooms the window.
///
/// A loop runs at most `bound` iterations on every backend. A loop's flag
/// still set after it ran says that the bound, not the flag, stopped it:
/// eagerly [`Ran::Loop`] says so too.
impl<D: GraphDriver> Client<D> {
    /// Run `then` if `flag` is set.
    pub fn if_flag(
        &self,
        stream: StreamId,
        flag: &Buffer,
        mut then: impl FnMut() -> Result<(), Error>,
    ) -> Result<Ran, Error> {
        self.conditional(stream, flag, Conditional::If, &mut [&mut then])
    }

    /// Run `then` if `flag` is set, `otherwise` if it is not.
    pub fn if_else_flag(
        &self,
        stream: StreamId,
        flag: &Buffer,
        mut then: impl FnMut() -> Result<(), Error>,
        mut otherwise: impl FnMut() -> Result<(), Error>,
    ) -> Result<Ran, Error> {
        self.conditional(
            stream,
            flag,
            Conditional::IfElse,
            &mut [&mut then, &mut otherwise],
        )
    }

    /// Run `body` while `flag` is set, checked before each iteration, at
    /// most `bound` times.
    pub fn while_flag(
        &self,
        stream: StreamId,
        flag: &Buffer,
        bound: u32,
        mut body: impl FnMut() -> Result<(), Error>,
    ) -> Result<Ran, Error> {
        self.conditional(stream, flag, Conditional::While { bound }, &mut [&mut body])
    }

    /// Whether `stream` can record conditionals, and what their bodies may
    /// hold besides launches and nested conditionals (on Vulkan, no write).
    ///
    /// # Errors
    ///
    /// [`Error::NoConditionals`], with the backend's reason, where a
    /// recording on `stream` refuses them; [`Error::UnknownStream`].
    pub fn conditionals(&self, stream: StreamId) -> Result<Bodies, Error> {
        self.server()?.bodies(stream)
    }

    fn conditional(
        &self,
        stream: StreamId,
        flag: &Buffer,
        kind: Conditional,
        bodies: &mut [Body<'_>],
    ) -> Result<Ran, Error> {
        self.refusing(&[stream], |server| {
            let flag = self.buffer_ref(flag)?;
            server.conditional(stream, flag, kind, bodies)
        })
    }
}
