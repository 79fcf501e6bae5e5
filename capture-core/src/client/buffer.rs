//! A device buffer as the user holds it, or a view of part of one.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::error::Error;
use crate::ids::{BufferId, StreamId};
use crate::kernels::span::Span;
use crate::memory::pool::{Place, SliceHandle};
use crate::server::{AnySlot, Bound};

/// A device buffer, or a view of part of one ([`Buffer::range`]). Clones
/// and views share the allocation; once the last of them drops, its memory
/// returns to the pool after a fence, unless a graph still uses it, in which
/// case the graph keeps it for its lifetime.
pub struct Buffer {
    pub(crate) inner: Arc<BufferInner>,
    /// The bytes of the allocation this handle names.
    pub(crate) view: Span,
}

pub(crate) struct BufferInner {
    pub(crate) slice: Option<SliceHandle>,
    /// The slice's id and place, copied: a launch reads them here, a load
    /// nearer than the slice's own.
    pub(crate) id: BufferId,
    pub(crate) place: Place,
    pub(crate) stream: StreamId,
    /// The stream's slot: launches find their stream here, and the drop
    /// leaves the slice in its graveyard.
    pub(crate) slot: Arc<dyn AnySlot>,
    pub(crate) client: u64,
    /// Set once another stream used the buffer: from then on every
    /// operation on it is ordered across streams.
    pub(crate) shared: AtomicBool,
}

impl Clone for Buffer {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            view: self.view,
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_view() {
            write!(f, "Buffer({}, {})", self.view, self.inner.stream)
        } else {
            write!(
                f,
                "Buffer({}, {} bytes, {})",
                self.id(),
                self.len(),
                self.inner.stream
            )
        }
    }
}

impl Bound for &Buffer {
    #[inline]
    fn slice(&self) -> &SliceHandle {
        Buffer::slice(self)
    }

    #[inline]
    fn stream(&self) -> StreamId {
        self.inner.stream
    }

    #[inline]
    fn id(&self) -> BufferId {
        self.inner.id
    }

    #[inline]
    fn place(&self) -> Place {
        self.inner.place.narrowed(&self.view)
    }

    #[inline]
    fn span(&self) -> Span {
        self.view
    }

    #[inline]
    fn stream_slot(&self) -> Option<&dyn AnySlot> {
        Some(&*self.inner.slot)
    }

    #[inline]
    fn shared(&self) -> &AtomicBool {
        &self.inner.shared
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        // The device may still be using the memory: hand it to the server,
        // which queues it for a fence, instead of freeing it here.
        if let Some(slice) = self.slice.take() {
            self.slot.graveyard().bury(slice);
        }
    }
}

impl Buffer {
    #[inline]
    pub(crate) fn slice(&self) -> &SliceHandle {
        // Only `Drop` takes the slice out, so a live buffer always has it.
        self.inner
            .slice
            .as_ref()
            .unwrap_or_else(|| unreachable!("a live buffer holds its slice"))
    }

    /// The allocation's id, as errors name it.
    #[inline]
    pub fn id(&self) -> BufferId {
        self.inner.id
    }

    /// Size in bytes: of the view, for a view.
    #[inline]
    pub fn len(&self) -> u64 {
        self.view.len
    }

    /// Whether the buffer holds no bytes (never: empty buffers and views
    /// are refused).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of the allocation this handle names: all of them, or a
    /// view's.
    pub fn span(&self) -> Span {
        self.view
    }

    /// Whether this handle names only part of its allocation.
    pub fn is_view(&self) -> bool {
        self.view.len != self.inner.place.len
    }

    /// A view of `len` bytes of this buffer from `offset`: a buffer of its
    /// own to launches, writes and reads, over the same memory. It keeps the
    /// allocation alive as a clone would.
    ///
    /// Operations on disjoint views of one allocation are independent: a
    /// graph's dependency edges (and the ordering of its replays) compare
    /// byte ranges, so they may run side by side. A launch may bind disjoint
    /// views of one allocation, one of them written; a written view that
    /// overlaps another binding is refused as a written buffer bound twice.
    /// What is tracked per allocation stays per allocation: a failed write
    /// to a view claims the whole allocation ([`Error::Claimed`]) until an
    /// operation writes all of it again, and work on another stream waits
    /// for every earlier user of the allocation.
    ///
    /// # Errors
    ///
    /// [`Error::BadRange`] when `len` is 0, when the range does not lie
    /// inside this buffer, or when `offset` is not a multiple of
    /// [`SLICE_ALIGN`](crate::SLICE_ALIGN) (the binding alignment every
    /// backend can bind).
    pub fn range(&self, offset: u64, len: u64) -> Result<Buffer, Error> {
        let refuse = |reason: &'static str| {
            Err(Error::BadRange {
                buffer: self.id(),
                offset,
                len,
                size: self.len(),
                reason,
            })
        };
        if len == 0 {
            return refuse("a view holds at least one byte");
        }
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            return refuse("the range runs past the buffer's end");
        }
        if !offset.is_multiple_of(crate::memory::pool::SLICE_ALIGN) {
            return refuse("a view's offset is a multiple of SLICE_ALIGN");
        }
        Ok(Buffer {
            inner: self.inner.clone(),
            view: Span {
                buffer: self.view.buffer,
                offset: self.view.offset + offset,
                len,
            },
        })
    }

    /// The stream it was allocated on, whose pool holds it. Any stream of
    /// the client may use it: work on another stream is ordered after what
    /// the buffer's last users did (rule 20).
    pub fn stream(&self) -> StreamId {
        self.inner.stream
    }

    /// Where the buffer's allocation lies in its stream's device pool (a
    /// view's whole allocation): for diagnostics and for tests proving no
    /// two live users share memory.
    pub fn placement(&self) -> Placement {
        let slice = self.slice();
        Placement {
            stream: self.inner.stream,
            page: slice.slot(),
            offset: slice.offset(),
            span: slice.span(),
        }
    }
}

/// Where a buffer lies: its stream's pool page, and the aligned byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The stream whose pool holds it.
    pub stream: StreamId,
    /// The page's slot in that pool.
    pub page: usize,
    /// Byte offset in the page.
    pub offset: u64,
    /// Bytes reserved (the length rounded up to the slice alignment).
    pub span: u64,
}

impl Placement {
    /// Whether the two ranges share a byte.
    pub fn overlaps(&self, other: &Placement) -> bool {
        self.stream == other.stream
            && self.page == other.page
            && self.offset < other.offset + other.span
            && other.offset < self.offset + self.span
    }
}
