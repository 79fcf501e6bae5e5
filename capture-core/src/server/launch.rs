//! Launches: checked against the kernel's signature, then enqueued or
//! recorded, with the failure policy for what they read and write.

use smallvec::SmallVec;

use super::{BufferRef, Server, check_owner};
use crate::driver::{Binding, DeviceSlice, Driver, GraphDriver, Launch};
use crate::error::Error;
use crate::graph_log::Entry;
use crate::ids::{BufferId, StreamId};
use crate::pool::SliceHandle;
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
    pub fn launch(
        &self,
        stream: StreamId,
        kernel: &D::Kernel,
        groups: [u32; 3],
        args: &[BufferRef<'_>],
        info: &[u8],
        params: &[u8],
    ) -> Result<(), Error> {
        let signature = D::signature(kernel);
        let checked = check_launch(
            signature,
            self.max_groups,
            stream,
            groups,
            args,
            info,
            params,
        );
        self.with(stream, |lane| {
            lane.check_recorder()?;
            if let Err(err) = checked {
                return lane.refused(err);
            }
            let state = &mut lane.state;
            let recording = state.capture.is_recording();
            let accesses = signature.accesses();
            let poisoned = args
                .iter()
                .zip(accesses)
                .filter(|(_, access)| access.reads())
                .find_map(|(buffer, _)| state.failures.read_error(buffer.slice.id()));
            let outcome = match poisoned {
                Some(err) => Err(err),
                None if info.is_empty() => {
                    enqueue_launch::<D>(state, kernel, groups, args, None, params).map(|()| None)
                }
                None => {
                    let mut ids = || self.ids.buffer();
                    state.info_slice(info, &mut ids).and_then(|info_slice| {
                        enqueue_launch::<D>(state, kernel, groups, args, Some(&info_slice), params)
                            .map(|()| Some(info_slice))
                    })
                }
            };
            match outcome {
                Ok(info_slice) => {
                    if recording {
                        state.capture.record_entry(Entry::Launch {
                            kernel: signature.shared_name(),
                            groups,
                            bindings: args
                                .iter()
                                .zip(accesses)
                                .map(|(buffer, access)| (buffer.slice.id(), *access))
                                .collect(),
                            info_bytes: info.len() as u32,
                            param_bytes: params.len() as u32,
                        });
                        if let Some(info_slice) = &info_slice {
                            state.capture.record_touch(info_slice);
                        }
                        for (buffer, access) in args.iter().zip(accesses) {
                            state.capture.record_touch(buffer.slice);
                            if access.reads() {
                                state.capture.record_read(buffer.slice.id());
                            }
                            if access.writes() {
                                state.capture.record_write(buffer.slice.id());
                            }
                        }
                    } else {
                        state.issued();
                        state.failures.settle(written(args, accesses), None);
                        state.maybe_flush();
                    }
                    Ok(())
                }
                Err(err) => {
                    state.failures.settle(written(args, accesses), Some(&err));
                    lane.refused(err)
                }
            }
        })
    }
}

/// The buffers of `args` that `accesses` write.
fn written<'a>(
    args: &'a [BufferRef<'_>],
    accesses: &'a [crate::driver::Access],
) -> impl Iterator<Item = BufferId> + 'a {
    args.iter()
        .zip(accesses)
        .filter(|(_, access)| access.writes())
        .map(|(buffer, _)| buffer.slice.id())
}

/// Whether a launch matches `signature` and binds only `stream`'s buffers.
fn check_launch(
    signature: &Signature,
    max_groups: [u32; 3],
    stream: StreamId,
    groups: [u32; 3],
    args: &[BufferRef<'_>],
    info: &[u8],
    params: &[u8],
) -> Result<(), Error> {
    if args.len() > MAX_BINDINGS {
        return Err(Error::KernelMismatch {
            kernel: signature.to_string(),
            reason: format!("{} buffers bound; at most {MAX_BINDINGS}", args.len()),
        });
    }
    let ids: SmallVec<[BufferId; 8]> = args.iter().map(|b| b.slice.id()).collect();
    signature
        .check_launch(groups, max_groups, &ids, info.len(), params.len())
        .map_err(|reason| Error::KernelMismatch {
            kernel: signature.to_string(),
            reason,
        })?;
    args.iter()
        .try_for_each(|buffer| check_owner(*buffer, stream))
}

/// Issue the driver launch over `args`, `info_slice` and `params`; each
/// binding's access is the kernel signature's.
fn enqueue_launch<D: Driver>(
    state: &mut StreamState<D>,
    kernel: &D::Kernel,
    groups: [u32; 3],
    args: &[BufferRef<'_>],
    info_slice: Option<&SliceHandle>,
    params: &[u8],
) -> Result<(), Error> {
    let missing = || Error::UnknownStream(state.id);
    let mut bindings: SmallVec<[Binding<'_, D>; 8]> = SmallVec::new();
    for (buffer, access) in args.iter().zip(D::signature(kernel).accesses()) {
        let page = state.device.page(buffer.slice).ok_or_else(missing)?;
        bindings.push(Binding {
            slice: DeviceSlice {
                page,
                offset: buffer.slice.offset(),
                len: buffer.slice.len(),
            },
            access: *access,
        });
    }
    let info = match info_slice {
        Some(slice) => Some(DeviceSlice {
            page: state.device.page(slice).ok_or_else(missing)?,
            offset: slice.offset(),
            len: slice.len(),
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
