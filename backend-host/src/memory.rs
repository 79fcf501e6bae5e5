//! Host memory standing in for device and pinned pages.
//!
//! Every page is numbered and carries a released flag, so a replay that
//! would touch a page already given back fails with an error naming it,
//! where a GPU would read or corrupt freed memory.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes freshly allocated pages are filled with: all-ones is a NaN as
/// `f32`, so a kernel that reads memory nobody wrote gives a visibly wrong
/// answer.
pub const UNWRITTEN: u8 = 0xFF;

/// Which pool a page belongs to, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Device memory.
    Device,
    /// Pinned host memory.
    Host,
}

/// One page of memory.
#[derive(Debug)]
pub struct Memory {
    id: u64,
    kind: PageKind,
    bytes: Mutex<Vec<u8>>,
    released: AtomicBool,
}

static NEXT_PAGE: AtomicU64 = AtomicU64::new(1);

impl Memory {
    /// A page of `len` bytes, or `None` when the host cannot hold it: a
    /// driver reports that as an error, where `vec!` would panic or abort.
    pub(crate) fn new(kind: PageKind, len: usize) -> Option<Arc<Self>> {
        // Filled a block at a time: a block copy is a memcpy even in an
        // unoptimised build, where an element-wise fill of a 4 MiB page is
        // slow enough to dominate a test.
        const BLOCK: [u8; 4096] = [UNWRITTEN; 4096];
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(len).ok()?;
        while bytes.len() < len {
            let n = (len - bytes.len()).min(BLOCK.len());
            bytes.extend_from_slice(&BLOCK[..n]);
        }
        Some(Arc::new(Self {
            id: NEXT_PAGE.fetch_add(1, Ordering::Relaxed),
            kind,
            bytes: Mutex::new(bytes),
            released: AtomicBool::new(false),
        }))
    }

    /// The bytes, under the page's lock. A poisoned lock only means a kernel
    /// panicked mid-write; the bytes are as garbage as a GPU's would be.
    pub(crate) fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        self.bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Give the memory back; later uses are detected, not undefined.
    pub(crate) fn release(&self) {
        self.released.store(true, Ordering::Release);
        *self.bytes() = Vec::new();
    }

    /// Whether the page was given back.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// A description for errors: `device page 12`.
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            PageKind::Device => "device",
            PageKind::Host => "host",
        };
        format!("{kind} page {}", self.id)
    }
}

/// A device page of the host backend.
#[derive(Debug)]
pub struct DevicePage(pub(crate) Arc<Memory>);

/// A pinned host page of the host backend.
#[derive(Debug)]
pub struct HostPage(pub(crate) Arc<Memory>);

/// A byte range of a page, as recorded work refers to it.
#[derive(Debug, Clone)]
pub(crate) struct Range {
    pub memory: Arc<Memory>,
    pub offset: usize,
    pub len: usize,
}

impl Range {
    pub(crate) fn new(memory: &Arc<Memory>, offset: u64, len: u64) -> Self {
        Self {
            memory: memory.clone(),
            offset: usize::try_from(offset).unwrap_or(usize::MAX),
            len: usize::try_from(len).unwrap_or(usize::MAX),
        }
    }

    /// Copy the range out; `None` when it lies outside the page or the page
    /// was released.
    pub(crate) fn load(&self) -> Option<Vec<u8>> {
        let bytes = self.memory.bytes();
        bytes
            .get(self.offset..self.offset.checked_add(self.len)?)
            .map(<[u8]>::to_vec)
    }

    /// Copy `data` into the range; false when it does not fit.
    pub(crate) fn store(&self, data: &[u8]) -> bool {
        let mut bytes = self.memory.bytes();
        let end = self.offset.saturating_add(data.len().min(self.len));
        match bytes.get_mut(self.offset..end) {
            Some(target) => {
                target.copy_from_slice(&data[..target.len()]);
                true
            }
            None => false,
        }
    }
}
