//! Host memory standing in for device and pinned pages.
//!
//! Every page is numbered and carries a released flag, so a replay that
//! would touch a page already given back fails with an error naming it,
//! where a GPU would read or corrupt freed memory.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use capture_core::{DriverError, ImportRefusal, KeepAlive, Rejected};

use crate::device::Device;

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
// Every queued launch holds a reference, taken on the caller's thread and
// let go on the worker's: the count's cache line moves between the two
// cores on every launch. Aligned, the `Arc` keeps its counts on a line of
// their own, so that this traffic does not evict what lies beside them (a
// signature, a buffer's metadata) from the caller's cache.
#[repr(align(128))]
pub struct Memory {
    id: u64,
    kind: PageKind,
    /// Shared by work that only reads it, or that writes elsewhere and
    /// copies back later (a step of a replay running beside others).
    storage: RwLock<Storage>,
    released: AtomicBool,
    /// Memory made elsewhere and imported ([`DevicePage::import`]).
    imported: Option<Imported>,
}

/// What an imported page keeps: the device it was imported for, and the
/// caller's keep-alive, dropped once the page is.
struct Imported {
    device: Weak<Device>,
    keep_alive: Mutex<Option<KeepAlive>>,
}

impl std::fmt::Debug for Imported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Imported").finish_non_exhaustive()
    }
}

/// A page's bytes, held as 8-byte words so that every slice at an aligned
/// offset can be viewed in place as `f32`s or `u32`s, as device memory is.
#[derive(Debug)]
struct Storage {
    words: Box<[u64]>,
    len: usize,
}

/// A page's bytes, locked for writing.
pub(crate) struct Bytes<'a>(RwLockWriteGuard<'a, Storage>);

/// A page's bytes, locked for reading only.
pub(crate) struct SharedBytes<'a>(RwLockReadGuard<'a, Storage>);

impl Deref for SharedBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let storage = &*self.0;
        &bytemuck::cast_slice::<u64, u8>(&storage.words)[..storage.len]
    }
}

impl Deref for Bytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let storage = &*self.0;
        &bytemuck::cast_slice::<u64, u8>(&storage.words)[..storage.len]
    }
}

impl DerefMut for Bytes<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        let storage = &mut *self.0;
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut storage.words)[..storage.len]
    }
}

static NEXT_PAGE: AtomicU64 = AtomicU64::new(1);

impl Memory {
    /// A page of `len` bytes, or `None` when the host cannot hold it: a
    /// driver reports that as an error, where `vec!` would panic or abort.
    pub(crate) fn new(kind: PageKind, len: usize) -> Option<Arc<Self>> {
        // Filled a block at a time: a block copy is a memcpy even in an
        // unoptimised build, where an element-wise fill of a 4 MiB page is
        // slow enough to dominate a test.
        const BLOCK: [u64; 512] = [u64::from_ne_bytes([UNWRITTEN; 8]); 512];
        let count = len.div_ceil(8);
        let mut words = Vec::new();
        words.try_reserve_exact(count).ok()?;
        while words.len() < count {
            let n = (count - words.len()).min(BLOCK.len());
            words.extend_from_slice(&BLOCK[..n]);
        }
        Some(Arc::new(Self {
            id: NEXT_PAGE.fetch_add(1, Ordering::Relaxed),
            kind,
            storage: RwLock::new(Storage {
                words: words.into_boxed_slice(),
                len,
            }),
            released: AtomicBool::new(false),
            imported: None,
        }))
    }

    /// The bytes, under the page's lock. A poisoned lock only means a kernel
    /// panicked mid-write; the bytes are as garbage as a GPU's would be.
    pub(crate) fn bytes(&self) -> Bytes<'_> {
        Bytes(
            self.storage
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The bytes, for reading, beside other readers.
    pub(crate) fn shared(&self) -> SharedBytes<'_> {
        SharedBytes(
            self.storage
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Give the memory back; later uses are detected, not undefined.
    pub(crate) fn release(&self) {
        self.released.store(true, Ordering::Release);
        let mut storage = self
            .storage
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *storage = Storage {
            words: Box::new([]),
            len: 0,
        };
    }

    /// The page's number, which orders locks when a launch holds several.
    pub(crate) fn id(&self) -> u64 {
        self.id
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

impl DevicePage {
    /// Memory made elsewhere, moved in, for `Client::import` on a client
    /// of `device`: a device page of exactly `bytes`' length and content.
    /// It is let go of, and `keep_alive` dropped, once the last buffer,
    /// view, graph or queued use of it is done.
    ///
    /// # Errors
    ///
    /// Where the host cannot hold it, with `keep_alive` handed back.
    pub fn import<K: Send + 'static>(
        device: &Arc<Device>,
        bytes: &[u8],
        keep_alive: K,
    ) -> Result<Self, Rejected<K>> {
        let no_room = || {
            DriverError::new(
                "host",
                "import",
                format!("no room for {} bytes", bytes.len()),
            )
        };
        let Some(memory) = Memory::new(PageKind::Device, bytes.len()) else {
            return Err(Rejected::new(no_room(), keep_alive));
        };
        memory.bytes().copy_from_slice(bytes);
        let Some(mut memory) = Arc::into_inner(memory) else {
            return Err(Rejected::new(no_room(), keep_alive));
        };
        memory.imported = Some(Imported {
            device: Arc::downgrade(device),
            keep_alive: Mutex::new(Some(KeepAlive::new(keep_alive))),
        });
        Ok(Self(Arc::new(memory)))
    }

    /// The bytes it holds, if it is memory imported for `device`.
    pub(crate) fn imported_bytes(&self, device: &Device) -> Result<u64, ImportRefusal> {
        let imported = self.0.imported.as_ref().ok_or(ImportRefusal::NotImported)?;
        if !std::ptr::eq(imported.device.as_ptr(), device) {
            return Err(ImportRefusal::OtherDevice);
        }
        Ok(self.0.shared().len() as u64)
    }
}

impl Drop for DevicePage {
    fn drop(&mut self) {
        // capture-core drops imported memory instead of releasing it: a use
        // after that is detected as a released page's is.
        if let Some(imported) = &self.0.imported {
            self.0.release();
            let keep_alive = imported
                .keep_alive
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            drop(keep_alive);
        }
    }
}

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
        let bytes = self.memory.shared();
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
