//! Fault injection: a driver wrapper that fails the k-th call of a chosen
//! primitive, so every rule about refusals is proven on real drivers and not
//! only on the host.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use graph_capture::{
    Availability, Binding, Bodies, Builtin, Builtins, Conditional, DeviceInfo, DeviceSlice, Driver,
    DriverError, Error, GraphDriver, HostSlice, ImportRefusal, Launch, Order, Signature, Updated,
};

use crate::workload::{UserKernel, UserKernels};
use smallvec::SmallVec;

/// A primitive whose calls can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// `GraphDriver::begin`.
    Begin,
    /// `GraphDriver::instantiate` (the recording is still closed).
    Instantiate,
    /// `GraphDriver::replay`.
    Replay,
    /// `GraphDriver::upload`.
    Upload,
    /// Device or host page allocation.
    Allocate,
    /// `Driver::launch`.
    Launch,
    /// `Driver::copy_to_device` or `Driver::copy_to_host`.
    Copy,
    /// `Driver::fence` or `Driver::is_done`.
    Fence,
    /// `GraphDriver::update`.
    Update,
    /// `Driver::record_event`.
    RecordEvent,
    /// `Driver::wait_event`.
    WaitEvent,
    /// `GraphDriver::open_conditional`: a conditional node's creation.
    Conditional,
}

impl Primitive {
    /// Every primitive, in a fixed order.
    pub const ALL: [Primitive; 12] = [
        Primitive::Begin,
        Primitive::Instantiate,
        Primitive::Replay,
        Primitive::Upload,
        Primitive::Allocate,
        Primitive::Launch,
        Primitive::Copy,
        Primitive::Fence,
        Primitive::Update,
        Primitive::RecordEvent,
        Primitive::WaitEvent,
        Primitive::Conditional,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Which calls fail, and how many calls and executables there have been.
#[derive(Debug, Default)]
pub struct FaultPlan {
    calls: [AtomicU64; Primitive::ALL.len()],
    /// Per primitive, the call numbers (1-based, counted since creation)
    /// that fail.
    armed: Mutex<Vec<(Primitive, u64)>>,
    injected: AtomicU64,
    injected_by: [AtomicU64; Primitive::ALL.len()],
    live_executables: AtomicUsize,
}

impl FaultPlan {
    /// Make the `k`-th call of `primitive` from now fail (`k = 1`: the next).
    pub fn fail(&self, primitive: Primitive, k: u64) {
        let at = self.calls(primitive) + k.max(1);
        if let Ok(mut armed) = self.armed.lock() {
            armed.push((primitive, at));
        }
    }

    /// Forget every armed fault that has not fired.
    pub fn disarm(&self) {
        if let Ok(mut armed) = self.armed.lock() {
            armed.clear();
        }
    }

    /// Forget the armed faults of `primitive` that have not fired.
    pub fn disarm_only(&self, primitive: Primitive) {
        if let Ok(mut armed) = self.armed.lock() {
            armed.retain(|&(p, _)| p != primitive);
        }
    }

    /// Whether a fault of `primitive` is armed and has not fired.
    pub fn armed(&self, primitive: Primitive) -> bool {
        self.armed
            .lock()
            .is_ok_and(|armed| armed.iter().any(|&(p, _)| p == primitive))
    }

    /// Calls of `primitive` so far.
    pub fn calls(&self, primitive: Primitive) -> u64 {
        self.calls[primitive.index()].load(Ordering::SeqCst)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// Faults of `primitive` injected so far.
    pub fn injected_of(&self, primitive: Primitive) -> u64 {
        self.injected_by[primitive.index()].load(Ordering::SeqCst)
    }

    /// Executables instantiated and not yet dropped.
    pub fn live_executables(&self) -> usize {
        self.live_executables.load(Ordering::SeqCst)
    }

    /// Count a call of `primitive`; the injected error if it must fail.
    fn call(&self, primitive: Primitive) -> Result<(), DriverError> {
        let n = self.calls[primitive.index()].fetch_add(1, Ordering::SeqCst) + 1;
        let fire = match self.armed.lock() {
            Ok(mut armed) => match armed.iter().position(|&(p, at)| p == primitive && at == n) {
                Some(index) => {
                    armed.swap_remove(index);
                    true
                }
                None => false,
            },
            Err(_) => false,
        };
        if fire {
            self.injected.fetch_add(1, Ordering::SeqCst);
            self.injected_by[primitive.index()].fetch_add(1, Ordering::SeqCst);
            Err(DriverError::new(
                "faulty",
                primitive_name(primitive),
                format!("injected failure of call {n}"),
            ))
        } else {
            Ok(())
        }
    }
}

fn primitive_name(primitive: Primitive) -> &'static str {
    match primitive {
        Primitive::Begin => "begin",
        Primitive::Instantiate => "instantiate",
        Primitive::Replay => "replay",
        Primitive::Upload => "upload",
        Primitive::Allocate => "allocate",
        Primitive::Launch => "launch",
        Primitive::Copy => "copy",
        Primitive::Fence => "fence",
        Primitive::Update => "update",
        Primitive::RecordEvent => "record event",
        Primitive::WaitEvent => "wait event",
        Primitive::Conditional => "open conditional",
    }
}

/// `D`, with faults injected where its [`FaultPlan`] says.
pub struct Faulty<D>(PhantomData<D>);

/// The wrapped device and the plan its streams share.
pub struct FaultyDevice<D: Driver> {
    inner: Arc<D::Device>,
    plan: Arc<FaultPlan>,
}

impl<D: Driver> FaultyDevice<D> {
    /// Wrap an opened device with a fresh plan.
    pub fn wrap(inner: Arc<D::Device>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            plan: Arc::default(),
        })
    }

    /// The plan: which calls fail, and the counts.
    pub fn plan(&self) -> &Arc<FaultPlan> {
        &self.plan
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<D::Device> {
        &self.inner
    }
}

/// A stream of the wrapped driver.
pub struct FaultyStream<D: Driver> {
    inner: D::Stream,
    plan: Arc<FaultPlan>,
}

/// An executable of the wrapped driver, counted while alive.
pub struct FaultyExecutable<D: GraphDriver> {
    inner: D::Executable,
    plan: Arc<FaultPlan>,
}

impl<D: GraphDriver> Drop for FaultyExecutable<D> {
    fn drop(&mut self) {
        self.plan.live_executables.fetch_sub(1, Ordering::SeqCst);
    }
}

fn device_slice<'a, D: Driver>(slice: DeviceSlice<'a, Faulty<D>>) -> DeviceSlice<'a, D> {
    DeviceSlice {
        page: slice.page,
        offset: slice.offset,
        len: slice.len,
    }
}

fn host_slice<'a, D: Driver>(slice: HostSlice<'a, Faulty<D>>) -> HostSlice<'a, D> {
    HostSlice {
        page: slice.page,
        offset: slice.offset,
        len: slice.len,
    }
}

impl<D: Driver> Driver for Faulty<D> {
    type Device = FaultyDevice<D>;
    type Stream = FaultyStream<D>;
    type DevicePage = D::DevicePage;
    type HostPage = D::HostPage;
    type Signal = D::Signal;
    type Kernel = D::Kernel;
    type Event = D::Event;

    const NAME: &'static str = D::NAME;

    fn probe() -> Availability {
        D::probe()
    }

    fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
        D::devices()
    }

    fn open_index(index: usize) -> Result<Arc<Self::Device>, DriverError> {
        Ok(FaultyDevice::wrap(D::open_index(index)?))
    }

    fn open() -> Result<Arc<Self::Device>, DriverError> {
        Ok(FaultyDevice::wrap(D::open()?))
    }

    fn device_info(device: &Self::Device) -> DeviceInfo {
        D::device_info(&device.inner)
    }

    fn signature(kernel: &Self::Kernel) -> &Signature {
        D::signature(kernel)
    }

    fn is_stream_of(device: &Arc<Self::Device>, stream: &Self::Stream) -> bool {
        D::is_stream_of(&device.inner, &stream.inner)
    }

    fn create_stream(device: &Arc<Self::Device>) -> Result<Self::Stream, DriverError> {
        Ok(FaultyStream {
            inner: D::create_stream(&device.inner)?,
            plan: device.plan.clone(),
        })
    }

    fn allocate_device_page(
        stream: &mut Self::Stream,
        bytes: u64,
    ) -> Result<Self::DevicePage, DriverError> {
        stream.plan.call(Primitive::Allocate)?;
        D::allocate_device_page(&mut stream.inner, bytes)
    }

    fn release_device_page(stream: &mut Self::Stream, page: Self::DevicePage) {
        D::release_device_page(&mut stream.inner, page);
    }

    fn imported_bytes(
        device: &Self::Device,
        page: &Self::DevicePage,
    ) -> Result<u64, ImportRefusal> {
        D::imported_bytes(&device.inner, page)
    }

    fn allocate_host_page(
        stream: &mut Self::Stream,
        bytes: u64,
    ) -> Result<Self::HostPage, DriverError> {
        stream.plan.call(Primitive::Allocate)?;
        D::allocate_host_page(&mut stream.inner, bytes)
    }

    fn release_host_page(stream: &mut Self::Stream, page: Self::HostPage) {
        D::release_host_page(&mut stream.inner, page);
    }

    fn write_host(page: &Self::HostPage, offset: u64, bytes: &[u8]) {
        D::write_host(page, offset, bytes);
    }

    fn read_host(page: &Self::HostPage, offset: u64, out: &mut [u8]) {
        D::read_host(page, offset, out);
    }

    fn copy_to_device(
        stream: &mut Self::Stream,
        src: HostSlice<'_, Self>,
        dst: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.plan.call(Primitive::Copy)?;
        D::copy_to_device(&mut stream.inner, host_slice(src), device_slice(dst))
    }

    fn copy_to_host(
        stream: &mut Self::Stream,
        src: DeviceSlice<'_, Self>,
        dst: HostSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.plan.call(Primitive::Copy)?;
        D::copy_to_host(&mut stream.inner, device_slice(src), host_slice(dst))
    }

    fn launch(stream: &mut Self::Stream, launch: Launch<'_, Self>) -> Result<(), DriverError> {
        stream.plan.call(Primitive::Launch)?;
        let bindings: SmallVec<[Binding<'_, D>; 8]> = launch
            .bindings
            .iter()
            .map(|b| Binding {
                slice: device_slice(b.slice),
                access: b.access,
            })
            .collect();
        D::launch(
            &mut stream.inner,
            Launch {
                kernel: launch.kernel,
                groups: launch.groups,
                bindings: &bindings,
                info: launch.info.map(device_slice),
                params: launch.params,
            },
        )
    }

    fn signal(stream: &mut Self::Stream) -> Result<Self::Signal, DriverError> {
        D::signal(&mut stream.inner)
    }

    fn fence(stream: &mut Self::Stream, signal: Self::Signal) -> Result<(), DriverError> {
        stream.plan.call(Primitive::Fence)?;
        D::fence(&mut stream.inner, signal)
    }

    fn is_done(stream: &mut Self::Stream, signal: Self::Signal) -> Result<bool, DriverError> {
        stream.plan.call(Primitive::Fence)?;
        D::is_done(&mut stream.inner, signal)
    }

    fn record_event(stream: &mut Self::Stream) -> Result<Self::Event, DriverError> {
        stream.plan.call(Primitive::RecordEvent)?;
        D::record_event(&mut stream.inner)
    }

    fn wait_event(stream: &mut Self::Stream, event: &Self::Event) -> Result<(), DriverError> {
        stream.plan.call(Primitive::WaitEvent)?;
        D::wait_event(&mut stream.inner, event)
    }
}

impl<D: GraphDriver> GraphDriver for Faulty<D> {
    type Recording = D::Recording;
    type Executable = FaultyExecutable<D>;

    fn begin(stream: &mut Self::Stream) -> Result<(), DriverError> {
        stream.plan.call(Primitive::Begin)?;
        D::begin(&mut stream.inner)
    }

    fn end(stream: &mut Self::Stream) -> Result<Self::Recording, DriverError> {
        // Never injected: ending is what every refusal path relies on to
        // leave capture mode, and the real driver always ends.
        D::end(&mut stream.inner)
    }

    fn instantiate(
        stream: &mut Self::Stream,
        recording: Self::Recording,
        order: Order<'_>,
    ) -> Result<Self::Executable, DriverError> {
        stream.plan.call(Primitive::Instantiate)?;
        let inner = D::instantiate(&mut stream.inner, recording, order)?;
        stream.plan.live_executables.fetch_add(1, Ordering::SeqCst);
        Ok(FaultyExecutable {
            inner,
            plan: stream.plan.clone(),
        })
    }

    fn update(
        stream: &mut Self::Stream,
        exec: &mut Self::Executable,
        recording: Self::Recording,
        order: Order<'_>,
    ) -> Result<Updated<Self::Recording>, DriverError> {
        stream.plan.call(Primitive::Update)?;
        D::update(&mut stream.inner, &mut exec.inner, recording, order)
    }

    fn conditionals(stream: &Self::Stream) -> Result<Bodies, String> {
        D::conditionals(&stream.inner)
    }

    fn open_conditional(
        stream: &mut Self::Stream,
        kind: Conditional,
        flag: DeviceSlice<'_, Self>,
    ) -> Result<(), DriverError> {
        stream.plan.call(Primitive::Conditional)?;
        D::open_conditional(&mut stream.inner, kind, device_slice(flag))
    }

    fn next_body(stream: &mut Self::Stream) -> Result<(), DriverError> {
        D::next_body(&mut stream.inner)
    }

    fn close_conditional(
        stream: &mut Self::Stream,
        orders: &[Order<'_>],
    ) -> Result<(), DriverError> {
        D::close_conditional(&mut stream.inner, orders)
    }

    fn upload(exec: &Self::Executable, stream: &mut Self::Stream) -> Result<(), DriverError> {
        stream.plan.call(Primitive::Upload)?;
        D::upload(&exec.inner, &mut stream.inner)
    }

    fn replay(exec: &Self::Executable, stream: &mut Self::Stream) -> Result<(), DriverError> {
        stream.plan.call(Primitive::Replay)?;
        D::replay(&exec.inner, &mut stream.inner)
    }
}

impl<D: Builtins> Builtins for Faulty<D> {
    fn builtin(device: &Arc<Self::Device>, which: Builtin) -> Result<Self::Kernel, DriverError> {
        D::builtin(&device.inner, which)
    }
}

impl<D: UserKernels> UserKernels for Faulty<D> {
    #[allow(unsafe_code)]
    unsafe fn user_kernel(
        device: &Arc<Self::Device>,
        which: UserKernel,
    ) -> Result<Self::Kernel, Error> {
        // SAFETY: the caller's promise is passed on unchanged.
        unsafe { D::user_kernel(&device.inner, which) }
    }

    fn broken_kernel(device: &Arc<Self::Device>) -> Result<Self::Kernel, Error> {
        D::broken_kernel(&device.inner)
    }

    fn disagreeing_kernel(device: &Arc<Self::Device>) -> Option<Result<Self::Kernel, Error>> {
        D::disagreeing_kernel(&device.inner)
    }

    fn foreign_page(
        device: &Arc<Self::Device>,
        bytes: &[u8],
        keep_alive: Arc<()>,
    ) -> Option<Result<Self::DevicePage, Error>> {
        D::foreign_page(&device.inner, bytes, keep_alive)
    }

    const FOREIGN_FAILS_WHILE_RECORDING: bool = D::FOREIGN_FAILS_WHILE_RECORDING;
    const FOREIGN_RUNS_AT_INSTANTIATE: bool = D::FOREIGN_RUNS_AT_INSTANTIATE;
    const FOREIGN_IN_BODIES: bool = D::FOREIGN_IN_BODIES;

    fn foreign_op(
        device: &Arc<Self::Device>,
        work: &crate::workload::foreign::ForeignWork,
    ) -> Option<Result<Self::Kernel, Error>> {
        D::foreign_op(&device.inner, work)
    }
}
