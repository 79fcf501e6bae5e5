//! The contract a backend implements: the primitives capture-core cannot
//! provide for itself, and nothing more.
//!
//! Everything here is an associated function over backend-owned types, so a
//! backend keeps whatever per-stream state its API needs (a CUDA stream and
//! its context, a Vulkan command pool and timeline semaphore) and capture-core
//! keeps the bookkeeping that is the same on every backend: pools, the drop
//! queue, the info cache, failures and the capture state.

use std::fmt::{self, Debug};
use std::sync::Arc;

pub use crate::kernels::signature::Access;
use crate::kernels::signature::Signature;
pub use crate::recorded::conditional::Conditional;
use crate::recorded::dependencies::Dependencies;

/// Whether a backend's device can be used on this machine, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// A device was found and opened.
    Available(DeviceInfo),
    /// No usable device; the reason is meant for a person
    /// (`no CUDA driver: libcuda.so not found`).
    Unavailable(String),
}

/// What a person needs to know about the device a backend runs on, and the
/// limits the core checks every launch against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's own name (`NVIDIA H200`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// The driver's version, as the driver reports it.
    pub driver_version: String,
    /// Most workgroups (CUDA blocks) a launch may have in x, y and z.
    pub max_groups: [u32; 3],
    /// The device's index in [`Driver::devices`], the one
    /// [`Driver::open_index`] takes.
    pub index: usize,
    /// Device memory in bytes (0 when the driver does not say).
    pub memory_bytes: u64,
    /// What kind of device it is, where the API says (`discrete GPU`,
    /// `integrated GPU`, `CPU`); empty when it does not.
    pub kind: String,
}

impl DeviceInfo {
    /// The grid limit every backend offers at least: 65,535 workgroups in
    /// each dimension (Vulkan's required minimum, CUDA's y and z).
    pub const PORTABLE_MAX_GROUPS: [u32; 3] = [65_535; 3];

    /// A device called `name` on `driver_version`, with the portable grid
    /// limit.
    pub fn new(name: impl Into<String>, driver_version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            driver_version: driver_version.into(),
            max_groups: Self::PORTABLE_MAX_GROUPS,
            index: 0,
            memory_bytes: 0,
            kind: String::new(),
        }
    }
}

/// A driver call that failed, with the driver's own words kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{backend}: {op} failed: {message}")]
pub struct DriverError {
    /// The backend that answered (`host`, `vulkan`, `cuda`, `hip`).
    pub backend: &'static str,
    /// The primitive that failed (`allocate device page`, `begin capture`, ...).
    pub op: &'static str,
    /// The driver's message, including its error code's name where it has one.
    pub message: String,
}

impl DriverError {
    /// A failure of `op` on `backend`, described by `message`.
    pub fn new(backend: &'static str, op: &'static str, message: impl Into<String>) -> Self {
        Self {
            backend,
            op,
            message: message.into(),
        }
    }
}

/// A byte range of a device page.
pub struct DeviceSlice<'a, D: Driver> {
    /// The page the range lies in.
    pub page: &'a D::DevicePage,
    /// Byte offset of the range in the page.
    pub offset: u64,
    /// Length of the range in bytes.
    pub len: u64,
}

/// A byte range of a pinned host page.
pub struct HostSlice<'a, D: Driver> {
    /// The page the range lies in.
    pub page: &'a D::HostPage,
    /// Byte offset of the range in the page.
    pub offset: u64,
    /// Length of the range in bytes.
    pub len: u64,
}

/// One buffer bound to a launch.
pub struct Binding<'a, D: Driver> {
    /// The memory bound.
    pub slice: DeviceSlice<'a, D>,
    /// How the kernel uses it: always the kernel signature's access for
    /// this binding, never the caller's word.
    pub access: Access,
}

/// Everything one kernel launch needs.
///
/// When capture-core issues it, the launch matches the kernel's
/// [`Signature`]: one binding per declared access, each slice non-empty and
/// no written binding sharing memory with another binding; `info` is `Some`
/// exactly when the signature reads info bytes, holding that many; `params`
/// holds exactly [`Signature::param_bytes`] bytes; every `groups` entry is
/// at least 1 and within the device's [`DeviceInfo::max_groups`]. A backend
/// need not check any of that again.
pub struct Launch<'a, D: Driver> {
    /// The kernel, as the backend compiled it.
    pub kernel: &'a D::Kernel,
    /// Number of workgroups (CUDA blocks) in x, y and z.
    pub groups: [u32; 3],
    /// The buffers, in the kernel's binding order.
    pub bindings: &'a [Binding<'a, D>],
    /// The device slice holding the launch's info bytes (element counts,
    /// scalars), bound after the buffers; `None` for a kernel that reads no
    /// info.
    pub info: Option<DeviceSlice<'a, D>>,
    /// The by-value parameters, packed in declaration order. Recorded by
    /// value: a replay passes these bytes, whatever the caller does later.
    pub params: &'a [u8],
}

// Manual impls: a derive would demand `D: Clone`, which a driver marker type
// has no reason to be.
impl<D: Driver> Clone for DeviceSlice<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<D: Driver> Copy for DeviceSlice<'_, D> {}
impl<D: Driver> Clone for HostSlice<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<D: Driver> Copy for HostSlice<'_, D> {}
impl<D: Driver> Debug for DeviceSlice<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceSlice({}..{})",
            self.offset,
            self.offset + self.len
        )
    }
}
impl<D: Driver> Debug for HostSlice<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostSlice({}..{})", self.offset, self.offset + self.len)
    }
}

/// Why [`Driver::imported_bytes`] turns a page away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportRefusal {
    /// The backend made the page itself, not from imported memory.
    NotImported,
    /// The page is imported memory of another device.
    OtherDevice,
}

/// The primitives a backend provides.
///
/// Every call may be made from any thread (capture-core serializes each
/// stream's calls under that stream's lock), so a backend must not depend
/// on the calling thread: CUDA and HIP make their context current on every
/// entry.
///
/// Nothing here may panic on a driver's answer: a failure is a [`DriverError`].
pub trait Driver: Sized + Send + 'static {
    /// The opened device, shared by every stream on it.
    type Device: Send + Sync + 'static;
    /// One in-order queue of work, with whatever the backend needs to record
    /// it into a graph.
    type Stream: Send + 'static;
    /// A page of device memory, cut into slices by capture-core.
    type DevicePage: Send + 'static;
    /// A page of pinned host memory the device can copy from and to.
    type HostPage: Send + 'static;
    /// A point in a stream's work that a fence can wait for.
    type Signal: Copy + Send + Debug + 'static;
    /// A compiled kernel, carrying its [`Signature`].
    type Kernel: Send + Sync + 'static;
    /// A point recorded on one stream that another stream of the same device
    /// can wait for on the device. Dropping it releases it, even while a
    /// wait on it is still pending on the device.
    type Event: Send + Sync + 'static;

    /// The backend's short name, used in trial names and reports.
    const NAME: &'static str;

    /// Whether this machine has a usable device, and why not: whether
    /// [`Driver::open`] succeeds. Written once here in terms of `open`, so
    /// what the probe says is what opening does.
    ///
    /// Must never panic: a missing library, a stub library, no device or a
    /// driver that is too old are all reasons.
    fn probe() -> Availability {
        match Self::open() {
            Ok(device) => Availability::Available(Self::device_info(&device)),
            Err(err) => Availability::Unavailable(err.message),
        }
    }

    /// Every device this backend sees, in index order, whether or not it
    /// can run the backend. An error (no library, no driver) says why none
    /// is listed; an empty list means the driver sees no device.
    fn devices() -> Result<Vec<DeviceInfo>, DriverError>;

    /// Open the device at `index` of [`Driver::devices`].
    fn open_index(index: usize) -> Result<Arc<Self::Device>, DriverError>;

    /// Open the device the environment selects (each backend documents its
    /// selection variable, `DEVICE_ENV`), or the backend's default.
    fn open() -> Result<Arc<Self::Device>, DriverError>;

    /// What the opened device is, and its launch limits.
    fn device_info(device: &Self::Device) -> DeviceInfo;

    /// What `kernel` takes: capture-core checks every launch against it.
    fn signature(kernel: &Self::Kernel) -> &Signature;

    /// Create a stream on `device`.
    fn create_stream(device: &Arc<Self::Device>) -> Result<Self::Stream, DriverError>;

    /// Whether `stream` was made on `device`, for a stream handed to
    /// `Client::adopt_stream` (a backend's streams over raw handles).
    fn is_stream_of(device: &Arc<Self::Device>, stream: &Self::Stream) -> bool;

    /// Allocate a device page of at least `bytes` bytes.
    fn allocate_device_page(
        stream: &mut Self::Stream,
        bytes: u64,
    ) -> Result<Self::DevicePage, DriverError>;

    /// Give a device page back. capture-core calls this only once no
    /// enqueued work can touch the page any more.
    fn release_device_page(stream: &mut Self::Stream, page: Self::DevicePage);

    /// The bytes `page` holds if it is memory imported for `device` from
    /// elsewhere, made by the backend's own (`unsafe`, where the memory is
    /// the device's) import constructor; why not for any other page, and by
    /// default, for a backend that imports nothing. capture-core never
    /// releases an imported page: it drops it, once no enqueued work can
    /// touch it, and the page's drop lets go of what kept the memory alive.
    fn imported_bytes(
        device: &Self::Device,
        page: &Self::DevicePage,
    ) -> Result<u64, ImportRefusal> {
        let _ = (device, page);
        Err(ImportRefusal::NotImported)
    }

    /// Allocate a pinned host page of at least `bytes` bytes.
    fn allocate_host_page(
        stream: &mut Self::Stream,
        bytes: u64,
    ) -> Result<Self::HostPage, DriverError>;

    /// Give a host page back, under the same promise as device pages.
    fn release_host_page(stream: &mut Self::Stream, page: Self::HostPage);

    /// Copy `bytes` into a host page at `offset`, on the host, now.
    ///
    /// capture-core only writes a range no enqueued copy still reads (the
    /// drop queue guarantees that), and always within the page.
    fn write_host(page: &Self::HostPage, offset: u64, bytes: &[u8]);

    /// Copy from a host page at `offset` into `out`, on the host, now.
    ///
    /// capture-core calls this only after a fence on the copy that filled it.
    fn read_host(page: &Self::HostPage, offset: u64, out: &mut [u8]);

    /// Enqueue a copy of `src` into `dst` (equal lengths). The copy reads
    /// `src` when it runs, not when it is enqueued.
    fn copy_to_device(
        stream: &mut Self::Stream,
        src: HostSlice<'_, Self>,
        dst: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError>;

    /// Enqueue a copy of `src` into `dst` (equal lengths).
    fn copy_to_host(
        stream: &mut Self::Stream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError>;

    /// Enqueue a kernel launch that matches its kernel's signature (see
    /// [`Launch`]).
    fn launch(stream: &mut Self::Stream, launch: Launch<'_, Self>) -> Result<(), DriverError>;

    /// Mark the current end of the stream's work.
    fn signal(stream: &mut Self::Stream) -> Result<Self::Signal, DriverError>;

    /// Block the host until the stream's work up to `signal` has finished.
    ///
    /// An error any earlier asynchronous work ran into is reported here.
    fn fence(stream: &mut Self::Stream, signal: Self::Signal) -> Result<(), DriverError>;

    /// Whether the stream's work up to `signal` has finished, without
    /// waiting: how the drop queue reclaims what the device is done with
    /// and fences only when it must. An error is reported as by `fence`.
    fn is_done(stream: &mut Self::Stream, signal: Self::Signal) -> Result<bool, DriverError>;

    /// Record the current end of `stream`'s work as an event another stream
    /// can wait for: it completes once everything enqueued on `stream`
    /// before it has finished. The work before it is on its way to the
    /// device when this returns (a backend that batches submits the batch),
    /// so a wait on it never waits for a submission that is not coming.
    ///
    /// capture-core records an event only on a stream that is not
    /// recording.
    fn record_event(stream: &mut Self::Stream) -> Result<Self::Event, DriverError>;

    /// Make the work enqueued on `stream` from here wait, on the device, for
    /// `event`; the host does not wait.
    ///
    /// capture-core guarantees that `event` was recorded on another stream
    /// of the same device, and that `stream` is not recording. Where the
    /// work before `event` failed, the backend reports it no later than the
    /// waiting stream's next fence, as for the stream's own work.
    fn wait_event(stream: &mut Self::Stream, event: &Self::Event) -> Result<(), DriverError>;
}

/// What [`GraphDriver::update`] did with a recording.
#[derive(Debug)]
pub enum Updated<R> {
    /// The executable now runs the new recording's work; the recording is
    /// consumed.
    InPlace,
    /// The recording's shape differs from the executable's (other kernels,
    /// another order, other node kinds), or the backend has no in-place
    /// update cheaper than a new executable: the recording is handed back,
    /// untouched, to be instantiated instead.
    Topology(R),
}

/// The order a graph's operations keep when it replays, handed to
/// [`GraphDriver::instantiate`] and [`GraphDriver::update`].
///
/// The operations are numbered in the order the stream issued them while it
/// recorded: every [`Driver::copy_to_device`] and [`Driver::launch`]
/// between [`GraphDriver::begin`] and [`GraphDriver::end`], the copies
/// capture-core makes of a launch's info bytes included (nothing else is
/// issued on a recording stream). A conditional is one operation where it
/// was opened; the operations of each of its bodies are numbered from 0 in
/// that body, and their order is handed to
/// [`GraphDriver::close_conditional`].
#[derive(Debug, Clone, Copy)]
pub enum Order<'a> {
    /// Each operation after the one issued before it: the stream's own
    /// order, as a native stream capture records it.
    Chain,
    /// Only the edges of `Dependencies`: operation `to` after operation
    /// `from`, and operations with no path between them in any order or at
    /// the same time.
    ///
    /// capture-core guarantees that `nodes` is the number of operations
    /// recorded, that every edge `(from, to)` has `from < to < nodes`, that
    /// the edges are sorted and distinct, and that any two operations
    /// touching a common byte, one of them writing it, are joined by a path
    /// of edges (the declared accesses are the only memory a launch may
    /// touch). A backend need not check any of that again.
    Dependencies(&'a Dependencies),
}

/// What a backend's conditional bodies may hold, besides launches and the
/// conditionals nested in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bodies {
    /// Whether a caller's copy (a write) may be recorded in a body.
    /// capture-core refuses one where not. The copies it makes of a
    /// launch's info bytes may come in a body either way: their bytes never
    /// change, so a backend may run them whether the body runs or not, and
    /// nothing outside the body reads them.
    pub copies: bool,
}

/// A driver that can record a stream's launches into a replayable graph.
///
/// # What capture-core guarantees about the calls
///
/// As wgpu-hal states a command encoder's states, these are the call-order
/// preconditions every backend may rely on without checking them again:
///
/// - `begin` is called only on a stream that is not recording, and is
///   followed by exactly one `end` on that stream before any other `begin`.
/// - Between `begin` and `end`, no `signal`, `fence`, `is_done`, `replay`,
///   `upload`, `instantiate` or `update` is called on the stream, and no
///   page is released. Pages may be allocated (the stream's pools may grow
///   while recording); capture-core itself refuses the graph at `end`, so a
///   backend need not count them.
/// - `instantiate` and `update` are called only with a recording the same
///   stream's `end` returned, and only when no operation inside the
///   recording failed or was skipped: a doomed recording is ended and
///   dropped.
/// - `update` may be called while earlier replays of `exec` are still
///   running: they must finish the work they were enqueued with (a backend
///   that replaces resources keeps the old ones alive until then).
/// - An executable is dropped only once no replay of it can still run.
/// - Every kernel a recording launched stays alive (capture-core holds its
///   `Arc`) until the recording, every executable made from it and every
///   replay of those are gone, whatever the user dropped (rule 19): a
///   backend may unload a kernel's code when its last reference drops, and
///   holds nothing of a kernel's for a recording's sake.
/// - `open_conditional` is called only while the stream records, after
///   `conditionals` said yes, with a four-byte flag at an offset that is a
///   multiple of four. It is followed by exactly `kind.bodies() - 1`
///   `next_body` and one `close_conditional`, with conditionals nested in
///   a body opened and closed inside it; `end` comes only once every
///   conditional is closed, even where a body failed (the recording is
///   then dropped). No copy but a launch's info goes in a body where
///   [`Bodies::copies`] is false, and no other stream joins in one.
///
/// The host backend checks all of this anyway, as a tripwire: being strict
/// is its job.
pub trait GraphDriver: Driver {
    /// A closed recording, not yet instantiated. Dropping it releases it.
    type Recording: Send + 'static;

    /// An instantiated graph, released when it drops.
    ///
    /// Dropping is the only way to destroy one, so no path can lose an
    /// executable without releasing it; capture-core drops it only once no
    /// replay of it can still be running.
    type Executable: Send + 'static;

    /// Put `stream` into recording mode: from here every copy and launch
    /// issued on it is recorded instead of run.
    ///
    /// On an error the stream must be as it was found; capture-core restores
    /// its own state so the whole prepare-then-begin sequence can be retried.
    fn begin(stream: &mut Self::Stream) -> Result<(), DriverError>;

    /// Close the recording on `stream` and hand back what it recorded.
    ///
    /// The stream leaves recording mode on every path, errors included: a
    /// stream left recording would swallow every launch after it.
    fn end(stream: &mut Self::Stream) -> Result<Self::Recording, DriverError>;

    /// Instantiate `recording` as an executable graph whose operations keep
    /// `order` (see [`Order`]) and no more: where it is
    /// [`Order::Dependencies`], operations with no path between them may
    /// run at the same time.
    fn instantiate(
        stream: &mut Self::Stream,
        recording: Self::Recording,
        order: Order<'_>,
    ) -> Result<Self::Executable, DriverError>;

    /// Make `exec` run `recording`'s work instead of its own, in place where
    /// the two have the same shape (CUDA's `cuGraphExecUpdate`) and that
    /// costs less than a new executable. Otherwise hand the recording back
    /// ([`Updated::Topology`]): capture-core instantiates it and swaps the
    /// new executable in, keeping the old one until its replays are past.
    /// Which backends update in place: CUDA and HIP (natively), the host
    /// (the reference of that path); Vulkan always hands back.
    ///
    /// `order` is the new recording's, as for `instantiate`; an update in
    /// place leaves the executable keeping it, whatever order the old
    /// recording had.
    ///
    /// On an error `exec` must be left as it was: still replayable, with its
    /// old work.
    fn update(
        stream: &mut Self::Stream,
        exec: &mut Self::Executable,
        recording: Self::Recording,
        order: Order<'_>,
    ) -> Result<Updated<Self::Recording>, DriverError>;

    /// Whether conditionals can be recorded on `stream`, and what their
    /// bodies may hold; why not otherwise, for a person. By default none
    /// can: a conditional outside a capture runs on the host's word on
    /// every backend.
    fn conditionals(stream: &Self::Stream) -> Result<Bodies, String> {
        let _ = stream;
        Err("its graphs have no conditional nodes".into())
    }

    /// Open a conditional node of `kind` reading `flag` in the recording:
    /// what the stream issues from here goes into its first body.
    fn open_conditional(
        stream: &mut Self::Stream,
        kind: Conditional,
        flag: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        let _ = (stream, kind, flag);
        Err(DriverError::new(
            Self::NAME,
            "open conditional",
            "no conditional nodes",
        ))
    }

    /// The open conditional's current body is complete: what the stream
    /// issues from here goes into its next body (an `if/else`'s `else`).
    fn next_body(stream: &mut Self::Stream) -> Result<(), DriverError> {
        let _ = stream;
        Err(DriverError::new(
            Self::NAME,
            "next body",
            "no conditional nodes",
        ))
    }

    /// Close the innermost open conditional, whose bodies keep `orders`
    /// (one per body, as [`Order`] numbers a body's operations): what the
    /// stream issues from here follows it in the body or recording it was
    /// opened in.
    fn close_conditional(
        stream: &mut Self::Stream,
        orders: &[Order<'_>],
    ) -> Result<(), DriverError> {
        let _ = (stream, orders);
        Err(DriverError::new(
            Self::NAME,
            "close conditional",
            "no conditional nodes",
        ))
    }

    /// Pre-stage `exec` so the first replay does not pay for it.
    ///
    /// Best-effort by contract: capture-core logs a failure and goes on, since
    /// a replay stages on demand.
    fn upload(exec: &Self::Executable, stream: &mut Self::Stream) -> Result<(), DriverError>;

    /// Enqueue `exec`'s recorded work on `stream`.
    fn replay(exec: &Self::Executable, stream: &mut Self::Stream) -> Result<(), DriverError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_driver::{Page, TestDriver};

    #[test]
    fn slices_print_the_bytes_they_name() {
        let page = Page::default();
        let device = DeviceSlice::<TestDriver> {
            page: &page,
            offset: 256,
            len: 64,
        };
        let host = HostSlice::<TestDriver> {
            page: &page,
            offset: 0,
            len: 16,
        };
        assert_eq!(format!("{device:?}"), "DeviceSlice(256..320)");
        assert_eq!(format!("{host:?}"), "HostSlice(0..16)");
    }
}
