//! Conditionals and loops: run on the host's word outside a recording,
//! recorded as one node whose bodies are sub-recordings inside one.

use std::panic::AssertUnwindSafe;

use super::shared::Shareable;
use super::{BufferRef, Lane, Server};
use crate::driver::{Bodies, DeviceSlice, GraphDriver, Order};
use crate::error::Error;
use crate::ids::StreamId;
use crate::kernels::span::Span;
use crate::recorded::conditional::{Conditional, Ran};
use crate::recorded::dependencies::Dependencies;
use crate::recorded::entries::Entry;
use crate::streams::state::ReplayOrder;

/// A body: the caller's calls, made again for each run eagerly and once
/// while recording.
pub(crate) type Body<'a> = &'a mut dyn FnMut() -> Result<(), Error>;

/// The four bytes of `flag` a conditional reads, once they are checked to
/// be a `u32`. Every buffer and view starts at a multiple of
/// `SLICE_ALIGN`, so the word is aligned as every device wants it.
fn flag_span(flag: &BufferRef<'_>) -> Result<Span, Error> {
    if flag.span.len < 4 {
        return Err(Error::BadFlag {
            buffer: flag.slice.id(),
            reason: format!("it holds {} byte(s); a flag is a u32", flag.span.len),
        });
    }
    Ok(Span {
        len: 4,
        ..flag.span
    })
}

impl<D: GraphDriver> Server<D> {
    /// Run `bodies` as `kind` says on `flag`, a buffer of `stream`: on the
    /// host's word where `stream` is not recording (each check of the flag
    /// reads it back, a host sync), or recorded as one conditional node
    /// whose bodies are each called once where it is.
    pub(crate) fn conditional(
        &self,
        stream: StreamId,
        flag: BufferRef<'_>,
        kind: Conditional,
        bodies: &mut [Body<'_>],
    ) -> Result<Ran, Error> {
        let span = flag_span(&flag)?;
        if flag.stream != stream {
            let err = Error::BadFlag {
                buffer: flag.slice.id(),
                reason: format!("it belongs to {}, not to {stream}", flag.stream),
            };
            return Err(err);
        }
        let flag = BufferRef { span, ..flag };
        let recording = self.with(stream, |lane| {
            lane.check_recorder()?;
            if let Some(join) = lane.state.join() {
                let reason = format!(
                    "it is joined to the capture window of {}; record the conditional there",
                    join.stream
                );
                return lane.refused(Error::OutOfOrder {
                    call: "conditional",
                    stream,
                    reason,
                });
            }
            Ok(lane.state.capture.is_recording())
        })?;
        if recording {
            self.record_conditional(stream, flag, kind, bodies)
        } else {
            self.run_conditional(flag, kind, bodies)
        }
    }

    /// What a conditional body recorded on `stream` may hold.
    pub(crate) fn bodies(&self, stream: StreamId) -> Result<Bodies, Error> {
        self.with(stream, |lane| {
            D::conditionals(&lane.state.raw).map_err(|reason| Error::NoConditionals {
                backend: D::NAME,
                reason,
            })
        })
    }

    /// Whether the flag is set now: its bytes read back after the work
    /// before.
    fn flag_is_set(&self, flag: BufferRef<'_>) -> Result<bool, Error> {
        let bytes = self.read(flag)?;
        let word: [u8; 4] = bytes
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .unwrap_or_default();
        Ok(u32::from_le_bytes(word) != 0)
    }

    /// The conditional on the host's word.
    fn run_conditional(
        &self,
        flag: BufferRef<'_>,
        kind: Conditional,
        bodies: &mut [Body<'_>],
    ) -> Result<Ran, Error> {
        match kind {
            Conditional::If | Conditional::IfElse => {
                let taken = if self.flag_is_set(flag)? {
                    Some(0)
                } else {
                    (bodies.len() > 1).then_some(1)
                };
                if let Some(body) = taken {
                    (bodies[body])()?;
                }
                Ok(Ran::Branch(taken))
            }
            Conditional::While { bound } => {
                for done in 0..bound {
                    if !self.flag_is_set(flag)? {
                        return Ok(Ran::Loop {
                            iterations: done,
                            bound_reached: false,
                        });
                    }
                    (bodies[0])()?;
                }
                Ok(Ran::Loop {
                    iterations: bound,
                    bound_reached: self.flag_is_set(flag)?,
                })
            }
        }
    }

    /// The conditional recorded: opened, each body called once into its own
    /// sub-recording, closed, on every path (a body's error or panic
    /// included: the window is then doomed).
    fn record_conditional(
        &self,
        stream: StreamId,
        flag: BufferRef<'_>,
        kind: Conditional,
        bodies: &mut [Body<'_>],
    ) -> Result<Ran, Error> {
        self.with(stream, |lane| open(lane, flag, kind))?;
        let mut failed = None;
        let mut panicked = None;
        for (at, body) in bodies.iter_mut().enumerate() {
            if at > 0 {
                let switched = self.with(stream, |lane| {
                    let switched = D::next_body(&mut lane.state.raw);
                    lane.state.body_recorded();
                    lane.state.capture.next_body();
                    switched.or_else(|err| lane.refused(err.into()))
                });
                if let Err(err) = switched {
                    failed.get_or_insert(err);
                }
            }
            match std::panic::catch_unwind(AssertUnwindSafe(&mut *body)) {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    failed.get_or_insert(err);
                }
                Err(panic) => {
                    panicked = Some(panic);
                    break;
                }
            }
        }
        let trouble = match (&panicked, &failed) {
            (Some(_), _) => Some(Error::InBody {
                stream,
                what: "a panic",
                reason: "a body panicked while it was recorded".into(),
            }),
            (None, failed) => failed.clone(),
        };
        let closed = self.with(stream, |lane| close(lane, trouble));
        if let Some(panic) = panicked {
            std::panic::resume_unwind(panic);
        }
        match failed.map_or(closed, Err) {
            Ok(()) => Ok(Ran::Recorded),
            Err(err) => Err(err),
        }
    }
}

/// Open a recorded conditional on the lane's stream, after checking the
/// backend can hold one and the flag can be read.
fn open<D: GraphDriver>(
    lane: &mut Lane<D>,
    flag: BufferRef<'_>,
    kind: Conditional,
) -> Result<(), Error> {
    lane.check_recorder()?;
    if let Err(reason) = D::conditionals(&lane.state.raw) {
        return lane.refused(Error::NoConditionals {
            backend: D::NAME,
            reason,
        });
    }
    let id = flag.slice.id();
    if flag.shared.is_shared() {
        return lane.refused(Error::BadFlag {
            buffer: id,
            reason: "another stream used it; a recorded conditional reads a flag of its own \
                     stream's only"
                .into(),
        });
    }
    if let Some(err) = lane.state.failures.read_error(id) {
        return lane.refused(err);
    }
    let place = flag.slice.place().narrowed(&flag.span);
    let state = &mut lane.state;
    let Some(page) = state.device.page_at(place.slot) else {
        return lane.refused(Error::UnknownStream(lane.state.id));
    };
    let slice = DeviceSlice {
        page,
        offset: place.offset,
        len: place.len,
    };
    if let Err(err) = D::open_conditional(&mut state.raw, kind, slice) {
        return lane.refused(err.into());
    }
    let capture = &mut lane.state.capture;
    capture.record_touch(flag.slice);
    capture.record_read(id);
    capture.open_conditional(kind, flag.span);
    Ok(())
}

/// Close the innermost recorded conditional and log it in the body or
/// window it was opened in. `trouble` is what went wrong in a body (an
/// error it returned, a panic): the window can no longer seal.
fn close<D: GraphDriver>(lane: &mut Lane<D>, trouble: Option<Error>) -> Result<(), Error> {
    let state = &mut lane.state;
    if state.capture.depth() == 0 {
        return Ok(());
    }
    state.body_recorded();
    let Some(closed) = state.capture.close_conditional() else {
        return Ok(());
    };
    let dependencies: Vec<Option<Dependencies>> = closed
        .bodies
        .iter()
        .map(|body| match state.replay_order {
            ReplayOrder::Dependencies => Some(Dependencies::of(body)),
            ReplayOrder::Chain => None,
        })
        .collect();
    let orders: Vec<Order<'_>> = dependencies
        .iter()
        .map(|d| d.as_ref().map_or(Order::Chain, Order::Dependencies))
        .collect();
    let ended = D::close_conditional(&mut state.raw, &orders);
    drop(orders);
    state.capture.record_entry(Entry::Conditional {
        kind: closed.kind,
        flag: closed.flag,
        bodies: closed.bodies,
    });
    if let Some(err) = trouble {
        state.capture.record_failure(err);
    }
    ended.or_else(|err| lane.refused(err.into()))
}

/// What the lane's recording may hold in a conditional's body, where it is
/// in one: `None` outside any body.
pub(super) fn body_rules<D: GraphDriver>(lane: &Lane<D>) -> Option<Result<Bodies, String>> {
    (lane.state.capture.is_recording() && lane.state.capture.depth() > 0)
        .then(|| D::conditionals(&lane.state.raw))
}
