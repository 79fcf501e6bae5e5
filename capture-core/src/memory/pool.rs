//! Pages from the driver, cut into slices and reused.
//!
//! A slice is handed out as a [`SliceHandle`], a shared reference the pool
//! also holds. The pool may give the range to another allocation once it is
//! the only holder left, so "who still needs this memory" is answered by who
//! still holds a handle: a user's buffer, the drop queue waiting for a fence,
//! a graph that replays into it, or a capture window that pinned it.

use std::sync::Arc;

use crate::driver::DriverError;
use crate::ids::BufferId;
use crate::kernels::span::Span;
use crate::phase::Phase;

/// Every slice starts at a multiple of this many bytes, which satisfies the
/// binding-offset alignment of every supported backend.
pub const SLICE_ALIGN: u64 = 256;

/// A range of one pool page, shared by everyone who still needs it.
#[derive(Debug, Clone)]
pub struct SliceHandle(Arc<SliceMeta>);

#[derive(Debug)]
struct SliceMeta {
    id: BufferId,
    slot: usize,
    offset: u64,
    len: u64,
    span: u64,
    /// For a temporary cut from its stream's arena, the arena's slice: held
    /// so the arena's memory lives as long as any temporary in it.
    arena: Option<SliceHandle>,
}

impl SliceHandle {
    /// The allocation this slice was made for; never reused.
    #[inline]
    pub fn id(&self) -> BufferId {
        self.0.id
    }

    /// Byte offset in its page.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.0.offset
    }

    /// Bytes requested.
    #[inline]
    pub fn len(&self) -> u64 {
        self.0.len
    }

    /// Bytes reserved: the length rounded up to [`SLICE_ALIGN`].
    #[inline]
    pub fn span(&self) -> u64 {
        self.0.span
    }

    /// Which page slot of its pool the slice lies in.
    #[inline]
    pub(crate) fn slot(&self) -> usize {
        self.0.slot
    }

    /// Where the slice lies, as plain numbers: what a launch needs of a
    /// slice it does not keep.
    #[inline]
    pub(crate) fn place(&self) -> Place {
        Place {
            slot: self.0.slot,
            offset: self.0.offset,
            len: self.0.len,
        }
    }

    /// Whether the slice is a temporary cut from its stream's arena, whose
    /// bytes the stream's graphs share (see `temporaries`).
    #[inline]
    pub fn is_temporary(&self) -> bool {
        self.0.arena.is_some()
    }

    /// A slice of `len` bytes for allocation `id`, `at` bytes into this one
    /// (which must hold them), that keeps this one alive. The pool does not
    /// track it: only this one is in its page.
    pub(crate) fn cut(&self, id: BufferId, at: u64, len: u64) -> SliceHandle {
        SliceHandle(Arc::new(SliceMeta {
            id,
            slot: self.0.slot,
            offset: self.0.offset + at,
            len,
            span: aligned(len).unwrap_or(u64::MAX),
            arena: Some(self.clone()),
        }))
    }

    /// A hold on the slice that does not keep it.
    pub(crate) fn downgrade(&self) -> WeakSlice {
        WeakSlice(Arc::downgrade(&self.0))
    }

    /// Whether `self` and `other` are the same allocation.
    #[cfg(test)]
    pub fn same(&self, other: &SliceHandle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The first byte past the slice's reserved span.
    fn end(&self) -> u64 {
        self.0.offset + self.0.span
    }

    /// Whether someone other than the pool still holds this slice.
    fn in_use(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// Whether someone besides this handle and the pool holds the slice: a
    /// graph, a queued free, another stream's use. Racing holders only ever
    /// let go, so a `true` may be stale, never a `false`.
    pub(crate) fn held_elsewhere(&self) -> bool {
        holders(&self.0) > 1
    }
}

/// How many hold `meta`, its pool's own hold not counted (a temporary cut
/// from the arena is in no pool's list).
fn holders(meta: &Arc<SliceMeta>) -> usize {
    let pooled = usize::from(meta.arena.is_none());
    Arc::strong_count(meta).saturating_sub(pooled)
}

/// A slice as someone who does not keep it sees it.
#[derive(Debug, Clone)]
pub(crate) struct WeakSlice(std::sync::Weak<SliceMeta>);

impl WeakSlice {
    /// Whether nobody but its pool holds the slice any more: nothing can
    /// touch its memory again, and the pool may hand it out.
    pub(crate) fn is_released(&self) -> bool {
        // The upgrade itself is one holder.
        self.0.upgrade().is_none_or(|meta| holders(&meta) <= 1)
    }
}

/// Where a slice lies: its page slot, offset and length, without a hold
/// on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) slot: usize,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl Place {
    /// Whether the two share a byte of one page.
    pub(crate) fn overlaps(&self, other: &Place) -> bool {
        self.slot == other.slot
            && self.offset < other.offset + other.len
            && other.offset < self.offset + self.len
    }

    /// The part of the slice at `self` that `span` names (its offset
    /// counted from the slice's start).
    #[inline]
    pub(crate) fn narrowed(self, span: &Span) -> Place {
        Place {
            slot: self.slot,
            offset: self.offset + span.offset,
            len: span.len,
        }
    }
}

/// How much memory one pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolUsage {
    /// Bytes of every page obtained from the driver.
    pub reserved_bytes: u64,
    /// Bytes of the slices someone still holds (aligned spans).
    pub in_use_bytes: u64,
    /// Live slices.
    pub slices: usize,
    /// Pages obtained from the driver and not yet released.
    pub pages: usize,
    /// Bytes of the memory imported from elsewhere and still held (in none
    /// of the figures above: the pool neither obtained nor cuts it).
    pub imported_bytes: u64,
}

struct Page<P> {
    page: P,
    size: u64,
    /// Live slices, sorted by offset.
    slices: Vec<SliceHandle>,
    /// Memory imported from elsewhere: one slice, never cut again, and
    /// dropped rather than released to the driver once that slice is free.
    imported: bool,
}

impl<P> Page<P> {
    /// Whether no slice of the page is held any more.
    fn is_free(&mut self) -> bool {
        self.slices.retain(SliceHandle::in_use);
        self.slices.is_empty()
    }
}

/// Give `page` back: to the driver through `release`, or, for imported
/// memory, to its owner by dropping it (which drops its keep-alive).
fn give_back<P>(page: Page<P>, release: impl FnOnce(P)) {
    if page.imported {
        drop(page.page);
    } else {
        release(page.page);
    }
}

/// The pages of one kind of memory (device or pinned host) of one stream.
pub struct Pool<P> {
    slots: Vec<Option<Page<P>>>,
    /// The size of the largest page the pool asks for (more for a larger
    /// slice).
    page_size: u64,
    /// The size of its first page (more for a larger slice).
    first_page: u64,
    /// Slices handed out since the window was prepared (warmup's) or since
    /// it began recording (the graph's); empty outside a window.
    retained: Vec<SliceHandle>,
    grew_while_recording: bool,
}

impl<P> Pool<P> {
    /// An empty pool that asks the driver for pages of `page_size` bytes, or
    /// more for a larger slice.
    #[cfg(test)]
    pub fn new(page_size: u64) -> Self {
        Self::growing(page_size, page_size)
    }

    /// An empty pool whose pages grow with what it holds: the first is
    /// `first_page` bytes, each later one a quarter of the bytes the pool
    /// holds then, between `first_page` and `page_size` (more, either way,
    /// for a larger slice).
    ///
    /// So a small working set reserves little, a large one takes few
    /// pages, and once warm the pages exceed what a full pool's slices
    /// span by about a quarter at most.
    pub fn growing(first_page: u64, page_size: u64) -> Self {
        let page_size = page_size.max(SLICE_ALIGN);
        Self {
            slots: Vec::new(),
            page_size,
            first_page: first_page.clamp(SLICE_ALIGN, page_size),
            retained: Vec::new(),
            grew_while_recording: false,
        }
    }

    /// The size of the next page, before a larger slice asks for more.
    fn next_page_size(&self) -> u64 {
        let held: u64 = self.slots.iter().flatten().map(|page| page.size).sum();
        (held / 4)
            .div_ceil(SLICE_ALIGN)
            .saturating_mul(SLICE_ALIGN)
            .clamp(self.first_page, self.page_size)
    }

    /// The page a slice of this pool lies in.
    #[inline]
    pub fn page(&self, slice: &SliceHandle) -> Option<&P> {
        self.page_at(slice.slot())
    }

    /// The page in slot `slot`, if it holds one.
    #[inline]
    pub(crate) fn page_at(&self, slot: usize) -> Option<&P> {
        self.slots
            .get(slot)
            .and_then(Option::as_ref)
            .map(|page| &page.page)
    }

    /// A slice of `len` bytes for allocation `id`, from a free range of an
    /// existing page or, when none fits and `may_grow` allows it, from a new
    /// page obtained through `allocate_page`. `phase` is the stream's:
    /// inside a window the slice is retained, and a page obtained while
    /// recording is noted for the window to answer for.
    ///
    /// Returns `Ok(None)` when no existing page fits and growing was not
    /// allowed, so the caller can free memory (flush its drop queue) and try
    /// again before paying for a page.
    pub fn reserve(
        &mut self,
        id: BufferId,
        len: u64,
        may_grow: bool,
        phase: Phase,
        allocate_page: impl FnOnce(u64) -> Result<P, DriverError>,
    ) -> Result<Option<SliceHandle>, DriverError> {
        // Checked: a length within a few bytes of `u64::MAX` (a config that
        // lifts the allocation limit) would wrap to a span of zero, a slice
        // that overlaps every other.
        let span = aligned(len).ok_or_else(|| unalignable(len))?;
        let found = self.slots.iter_mut().enumerate().find_map(|(slot, page)| {
            let page = page.as_mut().filter(|page| !page.imported)?;
            page.slices.retain(SliceHandle::in_use);
            first_fit(page, span).map(|(index, offset)| (slot, index, offset))
        });
        let (slot, index, offset) = match found {
            Some(found) => found,
            None if !may_grow => return Ok(None),
            None => {
                let size = span.max(self.next_page_size());
                let page = allocate_page(size)?;
                if matches!(phase, Phase::Recording(_)) {
                    self.grew_while_recording = true;
                }
                (self.add_page(page, size), 0, 0)
            }
        };
        let handle = SliceHandle(Arc::new(SliceMeta {
            id,
            slot,
            offset,
            len,
            span,
            arena: None,
        }));
        if let Some(page) = self.slots[slot].as_mut() {
            page.slices.insert(index, handle.clone());
        }
        if phase != Phase::None {
            self.retained.push(handle.clone());
        }
        Ok(Some(handle))
    }

    /// A slice of `len` bytes for allocation `id` alone in a page of its
    /// own, obtained through `allocate_page`: the room of the other pages,
    /// which a warmup sized, stays as it was. Never retained by a window.
    pub fn reserve_page(
        &mut self,
        id: BufferId,
        len: u64,
        allocate_page: impl FnOnce(u64) -> Result<P, DriverError>,
    ) -> Result<SliceHandle, DriverError> {
        let span = aligned(len).ok_or_else(|| unalignable(len))?;
        let page = allocate_page(span)?;
        Ok(self.whole_page(id, page, span, len, false))
    }

    /// A slice for allocation `id` over all `len` bytes of `page`, memory
    /// imported from elsewhere: never cut again, and dropped once the slice
    /// is free ([`Pool::drop_free_imports`]). Never retained by a window.
    pub fn import(&mut self, id: BufferId, page: P, len: u64) -> SliceHandle {
        self.whole_page(id, page, len, len, true)
    }

    /// Add `page`, of `size` bytes, holding one slice of `len` bytes at its
    /// start for allocation `id`.
    fn whole_page(
        &mut self,
        id: BufferId,
        page: P,
        size: u64,
        len: u64,
        imported: bool,
    ) -> SliceHandle {
        let slot = self.add_page(page, size);
        let handle = SliceHandle(Arc::new(SliceMeta {
            id,
            slot,
            offset: 0,
            len,
            span: aligned(len).unwrap_or(u64::MAX),
            arena: None,
        }));
        if let Some(page) = self.slots[slot].as_mut() {
            page.imported = imported;
            page.slices.push(handle.clone());
        }
        handle
    }

    /// Drop every imported page whose slice nobody holds any more; how many.
    /// The caller guarantees no enqueued work still uses them.
    pub fn drop_free_imports(&mut self) -> usize {
        let mut dropped = 0;
        for slot in &mut self.slots {
            if let Some(page) = slot.take_if(|page| page.imported && page.is_free()) {
                drop(page);
                dropped += 1;
            }
        }
        dropped
    }

    /// Put `page`, of `size` bytes, in the first free slot; which one.
    fn add_page(&mut self, page: P, size: u64) -> usize {
        let fresh = Page {
            page,
            size,
            slices: Vec::new(),
            imported: false,
        };
        match self.slots.iter().position(Option::is_none) {
            Some(slot) => {
                self.slots[slot] = Some(fresh);
                slot
            }
            None => {
                self.slots.push(Some(fresh));
                self.slots.len() - 1
            }
        }
    }

    /// Hold `slice` for the open window's graph, as a slice the pool handed
    /// out inside it would be.
    pub fn retain(&mut self, slice: SliceHandle) {
        self.retained.push(slice);
    }

    /// What the pool holds now. A query: the free slices it skips stay
    /// listed until an allocation or a trim reclaims them.
    pub fn usage(&self) -> PoolUsage {
        let mut usage = PoolUsage::default();
        for page in self.slots.iter().flatten() {
            if page.imported {
                if page.slices.iter().any(SliceHandle::in_use) {
                    usage.imported_bytes += page.size;
                }
                continue;
            }
            usage.pages += 1;
            usage.reserved_bytes += page.size;
            for slice in page.slices.iter().filter(|slice| slice.in_use()) {
                usage.slices += 1;
                usage.in_use_bytes += slice.0.span;
            }
        }
        usage
    }

    /// Release every page no slice is held in. The caller guarantees no
    /// enqueued work still uses them.
    pub fn trim(&mut self, mut release: impl FnMut(P)) -> usize {
        let mut released = 0;
        for slot in &mut self.slots {
            if let Some(page) = slot.take_if(|page| page.is_free()) {
                if !page.imported {
                    released += 1;
                }
                give_back(page, &mut release);
            }
        }
        released
    }

    /// Pages obtained and not released.
    pub fn page_count(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|page| !page.imported)
            .count()
    }

    /// Release the page in `slot` if no slice is held in it; whether it
    /// was. The caller guarantees no enqueued work still uses it.
    pub fn release_if_free(&mut self, slot: usize, release: impl FnOnce(P)) -> bool {
        let Some(entry) = self.slots.get_mut(slot) else {
            return false;
        };
        match entry.take_if(|page| page.is_free()) {
            Some(page) => {
                give_back(page, release);
                true
            }
            None => false,
        }
    }

    /// Release every page, held or not: the stream is going away.
    pub fn release_all(&mut self, mut release: impl FnMut(P)) {
        self.retained.clear();
        for page in self.slots.drain(..).flatten() {
            give_back(page, &mut release);
        }
    }

    /// Arm for a window about to open: from here every slice handed out is
    /// retained, so warmup grows the pool to everything the run holds at
    /// once and the recorded run finds it all free again.
    pub fn capture_begin(&mut self) {
        self.retained.clear();
        self.grew_while_recording = false;
    }

    /// Warmup is over: let go of what it retained so the recorded run reuses
    /// those slices instead of allocating pages, which mid-recording is a
    /// fault. Mandatory, not an optimisation.
    pub fn capture_priming_end(&mut self) {
        self.retained.clear();
    }

    /// Close the window: disarm, and hand over every slice the recorded run
    /// was given, for the graph to pin for its lifetime.
    pub fn capture_end(&mut self) -> Vec<SliceHandle> {
        self.grew_while_recording = false;
        std::mem::take(&mut self.retained)
    }

    /// Whether a page was obtained from the driver since recording began.
    pub fn grew_while_recording(&self) -> bool {
        self.grew_while_recording
    }
}

/// `len` rounded up to [`SLICE_ALIGN`] (at least one alignment), if it can be.
pub(crate) fn aligned(len: u64) -> Option<u64> {
    len.max(1).div_ceil(SLICE_ALIGN).checked_mul(SLICE_ALIGN)
}

#[cold]
fn unalignable(len: u64) -> DriverError {
    DriverError::new(
        "core",
        "allocate page",
        format!("{len} bytes cannot be aligned to {SLICE_ALIGN}"),
    )
}

/// The first gap of at least `span` bytes in `page`: the index the new slice
/// takes in the sorted list and its offset.
fn first_fit<P>(page: &Page<P>, span: u64) -> Option<(usize, u64)> {
    let mut cursor = 0;
    for (index, slice) in page.slices.iter().enumerate() {
        if slice.offset() - cursor >= span {
            return Some((index, cursor));
        }
        cursor = slice.end();
    }
    (page.size - cursor >= span).then_some((page.slices.len(), cursor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::WindowId;

    fn reserve(pool: &mut Pool<u32>, id: u64, len: u64, pages: &mut u32) -> SliceHandle {
        reserve_in(pool, id, len, Phase::None, pages)
    }

    fn reserve_in(
        pool: &mut Pool<u32>,
        id: u64,
        len: u64,
        phase: Phase,
        pages: &mut u32,
    ) -> SliceHandle {
        pool.reserve(BufferId(id), len, true, phase, |_| {
            *pages += 1;
            Ok(*pages)
        })
        .expect("test allocator never fails")
        .expect("growth allowed")
    }

    #[test]
    fn slices_are_aligned_and_disjoint() {
        let mut pool = Pool::new(4096);
        let mut pages = 0;
        let a = reserve(&mut pool, 1, 10, &mut pages);
        let b = reserve(&mut pool, 2, 300, &mut pages);
        let c = reserve(&mut pool, 3, 1, &mut pages);
        assert_eq!(pages, 1);
        assert_eq!((a.offset(), b.offset(), c.offset()), (0, 256, 768));
        assert_eq!(pool.usage().in_use_bytes, 256 + 512 + 256);
        assert_eq!((a.len(), a.span(), b.span(), c.span()), (10, 256, 512, 256));
        // A second page: the figures add up over pages and slices alike.
        let d = reserve(&mut pool, 4, 5000, &mut pages);
        assert_eq!((pages, a.slot(), d.slot()), (2, 0, 1));
        assert_eq!(
            pool.usage(),
            PoolUsage {
                reserved_bytes: 4096 + 5120,
                in_use_bytes: 256 + 512 + 256 + 5120,
                slices: 4,
                pages: 2,
                imported_bytes: 0,
            }
        );
        drop((b, d));
        assert_eq!(
            pool.usage(),
            PoolUsage {
                reserved_bytes: 4096 + 5120,
                in_use_bytes: 512,
                slices: 2,
                pages: 2,
                imported_bytes: 0,
            }
        );
    }

    #[test]
    fn growing_pages_follow_what_the_pool_holds() {
        let mut pool = Pool::growing(256, 4096);
        let mut pages = 0;
        // The first page is the first slice's; each later one a quarter of
        // what the pool holds, at least the first page's size.
        let a = reserve(&mut pool, 1, 1024, &mut pages);
        let b = reserve(&mut pool, 2, 100, &mut pages);
        assert_eq!((pages, pool.usage().reserved_bytes), (2, 1024 + 256));
        let held: Vec<_> = (3..40)
            .map(|id| reserve(&mut pool, id, 1024, &mut pages))
            .collect();
        let usage = pool.usage();
        assert!(
            usage.reserved_bytes * 4 <= usage.in_use_bytes * 5 + 4096,
            "{usage:?}"
        );
        // Capped at the page size.
        let before = pool.usage().reserved_bytes;
        let c = reserve(&mut pool, 50, 256, &mut pages);
        let grown = pool.usage().reserved_bytes - before;
        assert!(grown == 0 || grown <= 4096, "{grown}");
        drop((a, b, c, held));
    }

    #[test]
    fn next_page_sizes_are_aligned_and_bounded() {
        let mut pool = Pool::growing(1, 2048);
        assert_eq!(pool.next_page_size(), 256, "at least one alignment");
        let mut pages = 0;
        let _a = reserve(&mut pool, 1, 1100, &mut pages);
        // Holds 1280: a quarter is 320, rounded up to 512.
        assert_eq!(pool.next_page_size(), 512);
        let _b = reserve(&mut pool, 2, 10_000, &mut pages);
        assert_eq!(pool.next_page_size(), 2048, "capped");
        assert_eq!(Pool::<u32>::new(1000).next_page_size(), 1000);
    }

    #[test]
    fn freed_slices_are_reused_and_held_ones_are_not() {
        let mut pool = Pool::new(1024);
        let mut pages = 0;
        let a = reserve(&mut pool, 1, 512, &mut pages);
        let b = reserve(&mut pool, 2, 512, &mut pages);
        drop(a);
        let c = reserve(&mut pool, 3, 256, &mut pages);
        assert_eq!(c.offset(), 0, "the freed range is reused");
        let d = reserve(&mut pool, 4, 512, &mut pages);
        assert_eq!(pages, 2, "a held range is never shared");
        assert!(!d.same(&b));
        drop((b, c, d));
        assert_eq!(pool.usage().in_use_bytes, 0);
        assert_eq!(pool.trim(|_| ()), 2);
        assert_eq!(pool.usage(), PoolUsage::default());
    }

    #[test]
    fn no_growth_asks_the_caller_first() {
        let mut pool: Pool<u32> = Pool::new(256);
        let got = pool.reserve(BufferId(1), 8, false, Phase::None, |_| Ok(0));
        assert!(matches!(got, Ok(None)));
        assert_eq!(pool.usage().pages, 0);
    }

    #[test]
    fn oversized_slices_get_their_own_page() {
        let mut pool = Pool::new(1024);
        let mut pages = 0;
        let big = reserve(&mut pool, 1, 10_000, &mut pages);
        assert_eq!(big.offset(), 0);
        assert_eq!(pool.usage().reserved_bytes, 10_240);
    }

    #[test]
    fn driver_refusal_is_returned_and_changes_nothing() {
        let mut pool: Pool<u32> = Pool::new(1024);
        let err = pool.reserve(BufferId(1), 8, true, Phase::None, |_| {
            Err(DriverError::new("test", "allocate", "out of memory"))
        });
        assert!(err.is_err());
        assert_eq!(pool.usage(), PoolUsage::default());
    }

    #[test]
    fn a_length_whose_span_overflows_is_refused() {
        let mut pool: Pool<u32> = Pool::new(1024);
        let got = pool.reserve(BufferId(1), u64::MAX - 10, true, Phase::None, |_| Ok(0));
        assert!(got.is_err(), "no slice may claim to span wrapped bytes");
        assert_eq!(pool.usage(), PoolUsage::default());
    }

    #[test]
    fn capture_mode_primes_then_pins_the_recorded_run() {
        let mut pool = Pool::new(1024);
        let mut pages = 0;
        pool.capture_begin();
        // Warmup: an intermediate freed at once is still retained, so the
        // second allocation does not reuse it.
        let warmup = Phase::Prepared(WindowId(1));
        let warm = reserve_in(&mut pool, 1, 512, warmup, &mut pages);
        drop(warm);
        let warm2 = reserve_in(&mut pool, 2, 512, warmup, &mut pages);
        drop(warm2);
        assert_eq!(pool.usage().in_use_bytes, 1024);
        pool.capture_priming_end();
        // The recorded run finds both ranges free: no page is needed.
        let recording = Phase::Recording(WindowId(1));
        let rec = reserve_in(&mut pool, 3, 512, recording, &mut pages);
        drop(rec);
        let rec2 = reserve_in(&mut pool, 4, 512, recording, &mut pages);
        drop(rec2);
        assert!(!pool.grew_while_recording());
        assert_eq!(pages, 1);
        let pinned = pool.capture_end();
        assert_eq!(pinned.len(), 2);
        assert_eq!(
            pool.usage().in_use_bytes,
            1024,
            "the graph's pins hold both"
        );
        drop(pinned);
        assert_eq!(pool.usage().in_use_bytes, 0);
    }

    #[test]
    fn a_page_while_recording_is_noticed() {
        let mut pool = Pool::new(256);
        let mut pages = 0;
        pool.capture_begin();
        pool.capture_priming_end();
        let stale = reserve_in(&mut pool, 9, 8, Phase::Recording(WindowId(0)), &mut pages);
        drop(stale);
        // Arming forgets what an earlier window left.
        pool.capture_begin();
        pool.capture_priming_end();
        let warmup = reserve_in(&mut pool, 1, 8, Phase::Prepared(WindowId(1)), &mut pages);
        assert!(!pool.grew_while_recording(), "warmup may grow");
        let _slice = reserve_in(&mut pool, 2, 512, Phase::Recording(WindowId(1)), &mut pages);
        assert!(pool.grew_while_recording());
        assert_eq!(pool.capture_end().len(), 2);
        assert!(!pool.grew_while_recording());
        drop(warmup);
        let _outside = reserve(&mut pool, 3, 4096, &mut pages);
        assert!(
            !pool.grew_while_recording(),
            "growth outside a window is no fault"
        );
        assert!(
            pool.capture_end().is_empty(),
            "nothing retained outside a window"
        );
    }

    #[test]
    fn places_overlap_only_on_a_shared_byte_of_one_page() {
        let place = |slot, offset, len| Place { slot, offset, len };
        let a = place(1, 256, 256);
        assert!(a.overlaps(&a));
        assert!(a.overlaps(&place(1, 511, 10)), "its last byte");
        assert!(a.overlaps(&place(1, 0, 257)), "its first byte");
        assert!(a.overlaps(&place(1, 300, 8)), "inside it");
        assert!(!a.overlaps(&place(1, 512, 8)), "just after");
        assert!(!a.overlaps(&place(1, 0, 256)), "just before");
        assert!(!a.overlaps(&place(2, 256, 256)), "another page");
    }

    #[test]
    fn a_page_of_its_own_is_released_once_free() {
        let mut pool = Pool::new(4096);
        let mut pages = 0;
        let shared = reserve(&mut pool, 1, 8, &mut pages);
        let own = pool
            .reserve_page(BufferId(2), 1000, |size| {
                assert_eq!(size, 1024, "the aligned length");
                Ok(99)
            })
            .expect("a page");
        assert_eq!(pool.page_count(), 2);
        assert_eq!((own.offset(), own.span()), (0, 1024));
        assert_ne!(own.slot(), shared.slot());
        let mut released = Vec::new();
        assert!(
            !pool.release_if_free(own.slot(), |p| released.push(p)),
            "held"
        );
        assert!(
            !pool.release_if_free(7, |p| released.push(p)),
            "no such slot"
        );
        let slot = own.slot();
        drop(own);
        assert!(pool.release_if_free(slot, |p| released.push(p)));
        assert_eq!((released, pool.page_count()), (vec![99], 1));
        let before = pool.usage().in_use_bytes;
        pool.retain(shared.clone());
        assert_eq!(pool.capture_end().len(), 1, "retained for the window");
        assert_eq!(pool.usage().in_use_bytes, before);
    }

    #[test]
    fn imported_pages_are_never_cut_and_go_to_their_owner_once_free() {
        let mut pool = Pool::new(4096);
        let mut pages = 0;
        let imported = pool.import(BufferId(1), 77, 1000);
        assert_eq!(
            (imported.offset(), imported.len(), imported.span()),
            (0, 1000, 1024)
        );
        assert_eq!(pool.page_count(), 0, "not the pool's own");
        assert_eq!(pool.usage().imported_bytes, 1000);
        assert_eq!(pool.usage().pages, 0);
        let own = reserve(&mut pool, 2, 8, &mut pages);
        assert_ne!(own.slot(), imported.slot(), "never cut");
        assert_eq!(pool.drop_free_imports(), 0, "still held");
        let slot = imported.slot();
        drop(imported);
        assert_eq!(pool.usage().imported_bytes, 0, "held by nobody");
        let again = reserve(&mut pool, 3, 8, &mut pages);
        assert_ne!(again.slot(), slot, "free, and still never cut");
        assert_eq!(pool.drop_free_imports(), 1);
        assert_eq!(pool.drop_free_imports(), 0);
        // No release path hands imported memory to the driver.
        drop(pool.import(BufferId(4), 88, 16));
        let mut released = Vec::new();
        assert_eq!(pool.trim(|page| released.push(page)), 0, "own pages held");
        assert!(released.is_empty(), "the import was dropped, not released");
        let _held = pool.import(BufferId(5), 99, 16);
        pool.release_all(|page| released.push(page));
        assert_eq!(released, vec![1], "the pool's one page alone");
        drop((own, again));
    }
}
