//! A global allocator that counts the heap allocations each thread makes.
//!
//! The count is per thread, so the worker threads a backend runs (the host
//! backend's stream workers, a driver's own threads) do not show up in the
//! count of the thread that issues the work. A binary opts in with
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: benches::alloc_counter::CountingAlloc = benches::alloc_counter::CountingAlloc;
//! # fn main() { assert!(benches::alloc_counter::installed()); }
//! ```
//!
//! and reads [`allocations`] before and after the code it measures. Without
//! that line every count stays zero ([`installed`] says which).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // Constant-initialised and without a destructor: reading it never
    // allocates, so the allocator itself may touch it.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with` fails only while the thread is being torn down; an
    // allocation made then is not one anybody measures.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

/// The system allocator, counting every allocation (and reallocation) the
/// calling thread makes.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the only addition is a thread-local counter that
// never allocates.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every
        // allocation of this allocator is), as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: `ptr` was allocated by `System` with `layout`, and the
        // caller guarantees `new_size` is valid for it.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Heap allocations (and reallocations) the calling thread has made so far;
/// always zero unless [`CountingAlloc`] is the global allocator.
pub fn allocations() -> u64 {
    ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}

/// Whether [`CountingAlloc`] is the global allocator of this binary.
pub fn installed() -> bool {
    let before = allocations();
    let probe = std::hint::black_box(Box::new(0u64));
    drop(probe);
    allocations() > before
}
