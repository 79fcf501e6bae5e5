//! Which bytes of which allocation an operation touches: a whole buffer, or
//! the part of it a view names.

use std::fmt;

use crate::ids::BufferId;

/// A byte range of one allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    /// The allocation.
    pub buffer: BufferId,
    /// The first byte, from the allocation's start.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

impl Span {
    /// All `len` bytes of `buffer`.
    pub fn whole(buffer: BufferId, len: u64) -> Self {
        Self {
            buffer,
            offset: 0,
            len,
        }
    }

    /// One past the last byte.
    #[inline]
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }

    /// Whether it names every byte of an allocation of `len` bytes: only a
    /// write of all of them clears a claim.
    #[inline]
    pub fn covers(&self, len: u64) -> bool {
        self.offset == 0 && self.len == len
    }

    /// Whether the two share a byte.
    #[inline]
    pub fn overlaps(&self, other: &Span) -> bool {
        self.buffer == other.buffer && self.offset < other.end() && other.offset < self.end()
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}..{})", self.buffer, self.offset, self.end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(buffer: u64, offset: u64, len: u64) -> Span {
        Span {
            buffer: BufferId(buffer),
            offset,
            len,
        }
    }

    #[test]
    fn spans_overlap_only_on_a_shared_byte_of_one_buffer() {
        let a = span(1, 256, 256);
        assert!(a.overlaps(&a));
        assert!(a.overlaps(&span(1, 511, 1)), "its last byte");
        assert!(a.overlaps(&span(1, 0, 257)), "its first byte");
        assert!(!a.overlaps(&span(1, 512, 8)), "just after");
        assert!(!a.overlaps(&span(1, 0, 256)), "just before");
        assert!(!a.overlaps(&span(2, 256, 256)), "another buffer");
        assert_eq!(a.end(), 512);
        assert_eq!(Span::whole(BufferId(3), 64), span(3, 0, 64));
        assert_eq!(a.to_string(), "buffer 1 [256..512)");
    }

    #[test]
    fn a_span_covers_an_allocation_only_from_its_first_byte_to_its_last() {
        assert!(span(1, 0, 512).covers(512));
        assert!(!span(1, 0, 256).covers(512), "its first half");
        assert!(!span(1, 256, 256).covers(512), "its second half");
        assert!(
            !span(1, 256, 512).covers(512),
            "as long, not from its start"
        );
    }
}
