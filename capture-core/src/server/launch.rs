//! Launches: checked against the kernel's signature, then enqueued or
//! recorded, with the failure policy for what they read and write.
//!
//! An eager launch is the hot path of every step that is not replayed, so
//! it clones nothing and collects nothing: the bindings are checked where
//! they lie, the info bytes' device slice is found by content and used in
//! place, and the failure store is asked only when it holds a claim.

use smallvec::SmallVec;

use super::{Bound, Server, check_owner};
use crate::driver::{Access, Binding, DeviceSlice, Driver, GraphDriver, Launch};
use crate::error::Error;
use crate::graph_log::Entry;
use crate::ids::{BufferId, StreamId};
use crate::pool::Place;
use crate::signature::{MAX_BINDINGS, Signature};
use crate::stream::StreamState;

impl<D: GraphDriver> Server<D> {
    /// Enqueue (or, while recording, record) a launch of `kernel` over
    /// `args`, in its binding order, with `info` and `params` bytes.
    ///
    /// The launch is checked against the kernel's signature first; a
    /// mismatch reaches no driver and changes nothing, except that a window
    /// recording on the stream can no longer seal (it would miss the
    /// launch). Each binding's access is the signature's. A launch that
    /// reads a claimed buffer is not run: it would compute from bytes nobody
    /// wrote. It fails with that claim, and what it would have written is
    /// claimed in turn; inside a window it dooms the window.
    pub(crate) fn launch<B: Bound>(
        &self,
        stream: StreamId,
        kernel: &D::Kernel,
        groups: [u32; 3],
        args: &[B],
        info: &[u8],
        params: &[u8],
    ) -> Result<(), Error> {
        let signature = D::signature(kernel);
        if let Err(err) = check_launch(
            signature,
            self.max_groups,
            stream,
            groups,
            args,
            info,
            params,
        ) {
            return self.refuse_launch(stream, err);
        }
        self.with(stream, |lane| {
            lane.check_recorder()?;
            let state = &mut lane.state;
            let accesses = signature.accesses();
            let mut ids = || self.ids.buffer();
            let outcome = match read_claim(state, args, accesses) {
                Some(err) => Err(err),
                None if state.capture.is_recording() => {
                    record_launch(state, kernel, groups, args, info, params, &mut ids)
                }
                None => issue_launch(state, kernel, groups, args, info, params, &mut ids),
            };
            match outcome {
                Ok(()) => Ok(()),
                Err(err) => {
                    state.failures.settle(written(args, accesses), Some(&err));
                    lane.refused(err)
                }
            }
        })
    }
}

impl<D: GraphDriver> Server<D> {
    /// A launch that does not match its kernel: refused on its stream, as
    /// [`Server::launch`] says.
    #[cold]
    fn refuse_launch(&self, stream: StreamId, err: Error) -> Result<(), Error> {
        self.with(stream, |lane| {
            lane.check_recorder()?;
            lane.refused(err)
        })
    }
}

/// The claim of the first buffer of `args` the launch reads that a failure
/// claimed, if any.
fn read_claim<D: Driver, B: Bound>(
    state: &StreamState<D>,
    args: &[B],
    accesses: &[Access],
) -> Option<Error> {
    if state.failures.is_empty() {
        return None;
    }
    args.iter()
        .zip(accesses)
        .filter(|(_, access)| access.reads())
        .find_map(|(buffer, _)| state.failures.read_error(buffer.slice().id()))
}

/// An eager launch: issued now, its written buffers' claims cleared.
fn issue_launch<D: Driver, B: Bound>(
    state: &mut StreamState<D>,
    kernel: &D::Kernel,
    groups: [u32; 3],
    args: &[B],
    info: &[u8],
    params: &[u8],
    ids: &mut impl FnMut() -> BufferId,
) -> Result<(), Error> {
    let info_place = match info {
        [] => None,
        bytes => Some(state.info_place(bytes, ids)?),
    };
    enqueue_launch(state, kernel, groups, args, info_place, params)?;
    state.issued();
    state
        .failures
        .settle(written(args, D::signature(kernel).accesses()), None);
    state.maybe_flush();
    Ok(())
}

/// A launch inside a recording: recorded into the driver's recording, and
/// logged with what it touches, reads and writes for the window.
fn record_launch<D: Driver, B: Bound>(
    state: &mut StreamState<D>,
    kernel: &D::Kernel,
    groups: [u32; 3],
    args: &[B],
    info: &[u8],
    params: &[u8],
    ids: &mut impl FnMut() -> BufferId,
) -> Result<(), Error> {
    let info_slice = match info {
        [] => None,
        bytes => Some(state.info_slice(bytes, ids)?),
    };
    let info_place = info_slice.as_ref().map(|slice| slice.place());
    enqueue_launch(state, kernel, groups, args, info_place, params)?;
    let signature = D::signature(kernel);
    let accesses = signature.accesses();
    let capture = &mut state.capture;
    capture.record_entry(Entry::Launch {
        kernel: signature.shared_name(),
        groups,
        bindings: args
            .iter()
            .zip(accesses)
            .map(|(buffer, access)| (buffer.slice().id(), *access))
            .collect(),
        info_bytes: info.len() as u32,
        param_bytes: params.len() as u32,
    });
    if let Some(info_slice) = &info_slice {
        capture.record_touch(info_slice);
    }
    for (buffer, access) in args.iter().zip(accesses) {
        let slice = buffer.slice();
        capture.record_touch(slice);
        if access.reads() {
            capture.record_read(slice.id());
        }
        if access.writes() {
            capture.record_write(slice.id());
        }
    }
    Ok(())
}

/// The buffers of `args` that `accesses` write.
fn written<'a, B: Bound>(
    args: &'a [B],
    accesses: &'a [Access],
) -> impl Iterator<Item = BufferId> + 'a {
    args.iter()
        .zip(accesses)
        .filter(|(_, access)| access.writes())
        .map(|(buffer, _)| buffer.slice().id())
}

/// Whether a launch matches `signature` and binds only `stream`'s buffers.
fn check_launch<B: Bound>(
    signature: &Signature,
    max_groups: [u32; 3],
    stream: StreamId,
    groups: [u32; 3],
    args: &[B],
    info: &[u8],
    params: &[u8],
) -> Result<(), Error> {
    if args.len() > MAX_BINDINGS {
        return Err(too_many_bindings(signature, args.len()));
    }
    signature
        .check_launch_of(
            groups,
            max_groups,
            args,
            |buffer| buffer.slice().id(),
            info.len(),
            params.len(),
        )
        .map_err(|reason| Error::KernelMismatch {
            kernel: signature.to_string(),
            reason,
        })?;
    args.iter()
        .try_for_each(|buffer| check_owner(buffer.slice().id(), buffer.stream(), stream))
}

#[cold]
fn too_many_bindings(signature: &Signature, bound: usize) -> Error {
    Error::KernelMismatch {
        kernel: signature.to_string(),
        reason: format!("{bound} buffers bound; at most {MAX_BINDINGS}"),
    }
}

/// Issue the driver launch over `args`, the info bytes at `info` and
/// `params`; each binding's access is the kernel signature's.
fn enqueue_launch<D: Driver, B: Bound>(
    state: &mut StreamState<D>,
    kernel: &D::Kernel,
    groups: [u32; 3],
    args: &[B],
    info: Option<Place>,
    params: &[u8],
) -> Result<(), Error> {
    let missing = || Error::UnknownStream(state.id);
    let mut bindings: SmallVec<[Binding<'_, D>; 8]> = SmallVec::new();
    for (buffer, access) in args.iter().zip(D::signature(kernel).accesses()) {
        let slice = buffer.slice();
        bindings.push(Binding {
            slice: DeviceSlice {
                page: state.device.page(slice).ok_or_else(missing)?,
                offset: slice.offset(),
                len: slice.len(),
            },
            access: *access,
        });
    }
    let info = match info {
        Some(place) => Some(DeviceSlice {
            page: state.device.page_at(place.slot).ok_or_else(missing)?,
            offset: place.offset,
            len: place.len,
        }),
        None => None,
    };
    D::launch(
        &mut state.raw,
        Launch {
            kernel,
            groups,
            bindings: &bindings,
            info,
            params,
        },
    )
    .map_err(Error::from)
}
