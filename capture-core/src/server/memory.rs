//! Buffers: allocation, the copies that fill and read them, syncs and trims.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;

use super::shared::Shareable;
use super::{Bound, BufferRef, Lane, Server};
use crate::driver::{DeviceSlice, GraphDriver, ImportRefusal};
use crate::error::Error;
use crate::ids::StreamId;
use crate::interleave::{self, Point};
use crate::kernels::signature::Access;
use crate::memory::pool::SliceHandle;
use crate::recorded::entries::Entry;

impl<D: GraphDriver> Server<D> {
    /// Allocate a buffer of `len` bytes on `stream`.
    pub fn allocate(&self, stream: StreamId, len: u64) -> Result<SliceHandle, Error> {
        self.with(stream, |lane| {
            lane.check_recorder()?;
            if let Err(err) = self.check_size(len) {
                return lane.refused(err);
            }
            let id = self.ids.buffer();
            match lane.state.allocate_buffer(id, len) {
                Ok(slice) => {
                    lane.state.failures.track(id);
                    Ok(slice)
                }
                Err(err) => lane.refused(err),
            }
        })
    }

    /// Whether one buffer may hold `len` bytes: at least one, and at most
    /// the configured limit, or less where the pool could not align the
    /// length (a config that lifts the limit to near `u64::MAX`).
    fn check_size(&self, len: u64) -> Result<(), Error> {
        let alignable = u64::MAX - (crate::memory::pool::SLICE_ALIGN - 1);
        let limit = self.config.max_allocation_bytes.min(alignable);
        match len {
            0 => Err(Error::EmptyBuffer),
            len if len > limit => Err(Error::TooLarge {
                requested: len,
                limit,
            }),
            _ => Ok(()),
        }
    }

    /// A buffer on `stream` over `page`, memory imported from elsewhere.
    /// Refused, with the page handed back, for a page not made by the
    /// backend's import constructor, an empty one, one past the allocation
    /// limit, or while `stream` records.
    pub fn import(
        &self,
        stream: StreamId,
        page: D::DevicePage,
    ) -> Result<SliceHandle, (Error, D::DevicePage)> {
        let len = match D::imported_bytes(&self.device, &page) {
            Ok(len) => len,
            Err(refusal) => {
                let err = match refusal {
                    ImportRefusal::NotImported => Error::NotImported { backend: D::NAME },
                    ImportRefusal::OtherDevice => Error::OtherDevice {
                        backend: D::NAME,
                        what: "page",
                    },
                };
                return Err((err, page));
            }
        };
        let slot = match self.slot(stream) {
            Ok(slot) => slot,
            Err(err) => return Err((err, page)),
        };
        let mut page = Some(page);
        let imported = Self::with_slot(&slot, stream, |lane| {
            lane.check_recorder()?;
            if lane.state.capture.is_recording() {
                return lane.refused(Error::OutOfOrder {
                    call: "import",
                    stream,
                    reason: "a recording takes no new memory; import before the window opens"
                        .into(),
                });
            }
            if let Err(err) = self.check_size(len) {
                return lane.refused(err);
            }
            // Every check is passed, and nothing below fails: a refusal
            // always hands the page back.
            let Some(page) = page.take() else {
                return Err(Error::Poisoned);
            };
            let id = self.ids.buffer();
            let slice = lane.state.device.import(id, page, len);
            lane.state.failures.track(id);
            slot.imports.store(true, Ordering::Relaxed);
            self.imported.store(true, Ordering::Relaxed);
            Ok(slice)
        });
        match (imported, page) {
            (Ok(slice), _) => Ok(slice),
            (Err(err), Some(page)) => Err((err, page)),
            (Err(_), None) => unreachable!("the page is taken only by an import that succeeds"),
        }
    }

    /// Call `f` with the device page, offset and length `buffer` names,
    /// under its stream's lock, for the caller's own work on that memory.
    pub fn with_device_slice<R>(
        &self,
        buffer: impl Bound,
        f: impl FnOnce(DeviceSlice<'_, D>) -> R,
    ) -> Result<R, Error> {
        let stream = buffer.stream();
        let place = buffer.place();
        // `f` is the caller's and may panic: caught under the lock, which
        // it cannot have left half-changed, and raised again once the lock
        // is released, so that the stream is not poisoned for good.
        let ran = self.with(stream, |lane| {
            let page = lane
                .state
                .device
                .page_at(place.slot)
                .ok_or(Error::UnknownStream(stream))?;
            let slice = DeviceSlice {
                page,
                offset: place.offset,
                len: place.len,
            };
            Ok(std::panic::catch_unwind(AssertUnwindSafe(|| f(slice))))
        })?;
        Ok(ran.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    }

    /// Enqueue a copy of `bytes` into `buffer`, on its own stream; ordered
    /// after the other streams' work on it when it is shared.
    pub fn write(&self, buffer: BufferRef<'_>, bytes: &[u8]) -> Result<(), Error> {
        let done = self.with(buffer.stream, |lane| {
            if let Some(join) = lane.state.join() {
                let reason = format!(
                    "{} is joined to the capture window of {}, which records launches \
                     only; write before the window opens",
                    buffer.stream, join.stream
                );
                return lane.refused(Error::OutOfOrder {
                    call: "write",
                    stream: buffer.stream,
                    reason,
                });
            }
            // Asked under the stream's lock, where the buffer is shared.
            if buffer.shared.is_shared() {
                return Ok(false);
            }
            self.write_in(lane, buffer, bytes).map(|()| true)
        })?;
        if done {
            return Ok(());
        }
        interleave::reached(Point::WriteOrdered);
        let accesses = [(buffer.span.buffer, Access::Write)];
        self.ordered(
            buffer.stream,
            &accesses,
            &[buffer.stream],
            |lanes, _, waited| {
                let lane = &mut *lanes.mine;
                let written = match waited {
                    Err(err) => Err(err),
                    Ok(()) if lane.state.join().is_some() => Err(Error::OutOfOrder {
                        call: "write",
                        stream: buffer.stream,
                        reason: format!("{} joined a capture window meanwhile", buffer.stream),
                    }),
                    Ok(()) => return (self.write_in(lane, buffer, bytes), true),
                };
                match written {
                    Ok(()) => (Ok(()), true),
                    Err(err) => {
                        lane.state.failures.settle([buffer.slice.id()], Some(&err));
                        (lane.refused(err), false)
                    }
                }
            },
        )
    }

    /// [`Server::write`] on the locked lane of the buffer's stream.
    fn write_in(
        &self,
        lane: &mut Lane<D>,
        buffer: BufferRef<'_>,
        bytes: &[u8],
    ) -> Result<(), Error> {
        lane.check_recorder()?;
        if let Some(Ok(rules)) = super::conditional::body_rules(lane)
            && !rules.copies
        {
            return lane.refused(Error::InBody {
                stream: buffer.stream,
                what: "a write",
                reason: format!(
                    "{} cannot skip a copy with the body it lies in; write the bytes before the \
                     conditional, or with a kernel",
                    D::NAME
                ),
            });
        }
        let (slice, span) = (buffer.slice, buffer.span);
        if bytes.len() as u64 != span.len {
            return lane.refused(Error::SizeMismatch {
                buffer: slice.id(),
                expected: span.len,
                got: bytes.len() as u64,
            });
        }
        // Only a write of every byte leaves the buffer unclaimed: a view's
        // leaves the rest as a failure left it.
        let whole = span.covers(slice.len());
        let renewed = if whole { Some(slice.id()) } else { None };
        let staging = self.ids.buffer();
        let state = &mut lane.state;
        let recording = state.capture.is_recording();
        match state.stage_to_device(staging, bytes, slice, span.offset) {
            Ok(()) if recording => {
                state.capture.record_write(slice.id(), whole);
                state.capture.record_entry(Entry::Write { span });
            }
            Ok(()) => state.failures.settle(renewed, None),
            Err(err) => {
                state.failures.settle([slice.id()], Some(&err));
                return lane.refused(err);
            }
        }
        state.maybe_flush();
        Ok(())
    }

    /// Copy `buffer` back to the host, after the work before it on every
    /// stream that used it. A host sync: refused while its stream records
    /// (and the window can no longer seal).
    pub fn read(&self, buffer: BufferRef<'_>) -> Result<Vec<u8>, Error> {
        let read = self.with(buffer.stream, |lane| {
            if buffer.shared.is_shared() {
                return Ok(None);
            }
            self.read_in(lane, buffer).map(Some)
        })?;
        if let Some(bytes) = read {
            self.after_host_wait();
            return Ok(bytes);
        }
        let accesses = [(buffer.span.buffer, Access::Read)];
        let bytes = self.ordered(
            buffer.stream,
            &accesses,
            &[buffer.stream],
            |lanes, _, waited| match waited {
                Ok(()) => (self.read_in(lanes.mine, buffer), true),
                Err(err) => (Err(err), false),
            },
        )?;
        self.after_host_wait();
        Ok(bytes)
    }

    /// [`Server::read`] on the locked lane of the buffer's stream.
    fn read_in(&self, lane: &mut Lane<D>, buffer: BufferRef<'_>) -> Result<Vec<u8>, Error> {
        if lane.state.capture.is_recording() || lane.state.join().is_some() {
            return lane.refused(Error::SyncWhileRecording(buffer.stream));
        }
        if let Some(err) = lane.state.failures.read_error(buffer.slice.id()) {
            return Err(err);
        }
        let staging = self.ids.buffer();
        lane.state.read_back(staging, buffer.slice, &buffer.span)
    }

    /// Wait for everything enqueued on `stream`.
    pub fn sync(&self, stream: StreamId) -> Result<(), Error> {
        self.with(stream, |lane| {
            if lane.state.capture.is_recording() || lane.state.join().is_some() {
                return lane.refused(Error::SyncWhileRecording(stream));
            }
            lane.state.sync().map_err(Error::from)
        })?;
        self.after_host_wait();
        Ok(())
    }

    /// Release every page of `stream` no slice is held in.
    pub fn trim(&self, stream: StreamId) -> Result<usize, Error> {
        let released = self.with(stream, |lane| match lane.state.trim() {
            Ok(released) => Ok(released),
            Err(err) => lane.refused(err),
        })?;
        self.after_host_wait();
        Ok(released)
    }
}
