//! The driver contract against a stand-in runtime (`tests/fake_hip.c`),
//! built with the system C compiler and loaded through `CAPTURE_HIP_LIBRARY`,
//! so the order and arguments of the backend's calls are checked on a
//! machine without a GPU. Skipped where no C compiler is installed.
//!
//! The scenario runs in a child process (this test binary, re-run), since the
//! runtime is loaded once per process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::env;
use std::ffi::{c_int, c_void};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread;
use std::time::Duration;

use backend_hip::{
    Device, DevicePage, Hip, IN_PLACE_UPDATES_PER_INSTANCE, Kernel, LIBRARY_ENV, Stream, ffi,
};
use capture_core::{
    Access, Availability, Binding, Builtin, BuiltinInfo, Builtins, Client, Config, Dependencies,
    DeviceSlice, Driver, Error, GraphDriver, HostSlice, Launch, Order, Params, Ran, Rejected,
    Signature, StreamId, Updated,
};

/// Counts the heap allocations each thread of this test binary makes, to
/// show that an eager launch, a copy and a replay make none.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    // A thread being torn down has no counter any more; nothing to count.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// count is a const-initialised thread-local with no destructor, which
// allocates nothing itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's promises are passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The calling thread's allocations so far.
fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

const CHILD_VAR: &str = "BACKEND_HIP_FAKE_CHILD";
const LOG_VAR: &str = "FAKE_HIP_LOG";

/// The calls logged so far, and a way to see only those after a mark.
struct Calls {
    path: PathBuf,
    seen: usize,
}

impl Calls {
    fn all(&self) -> Vec<String> {
        fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The calls made since the last `take`.
    fn take(&mut self) -> Vec<String> {
        let all = self.all();
        let new = all[self.seen.min(all.len())..].to_vec();
        self.seen = all.len();
        new
    }
}

/// Only the call names, in order.
fn names(calls: &[String]) -> Vec<&str> {
    calls
        .iter()
        .map(|line| line.split(' ').next().unwrap_or(""))
        .collect()
}

/// The fake runtime's own entry points, to change what it answers and to
/// act as a program using HIP directly.
struct Fake {
    library: libloading::Library,
}

impl Fake {
    fn open(path: &Path) -> Self {
        // SAFETY: the fake runtime is already loaded by the backend; opening
        // it again returns the same instance and runs no initialisers.
        let library = unsafe { libloading::Library::new(path) }
            .unwrap_or_else(|e| panic!("cannot reopen the fake runtime: {e}"));
        Self { library }
    }

    /// The fake's function `name`, of type `T`.
    ///
    /// # Safety
    ///
    /// `T` must be the function's type in `fake_hip.c`.
    unsafe fn get<T: Copy>(&self, name: &str) -> T {
        let symbol = format!("{name}\0");
        // SAFETY: the caller promises the type.
        *unsafe { self.library.get::<T>(symbol.as_bytes()) }
            .unwrap_or_else(|e| panic!("no {name} in the fake runtime: {e}"))
    }

    fn set_int(&self, name: &str, value: c_int) {
        // SAFETY: every fake setter used this way takes one int.
        let set = unsafe { self.get::<unsafe extern "C" fn(c_int)>(name) };
        // SAFETY: a plain value.
        unsafe { set(value) };
    }

    fn runtime_version(&self, version: c_int) {
        self.set_int("fake_set_runtime_version", version);
    }

    fn events_ready(&self, ready: bool) {
        self.set_int("fake_set_events_ready", c_int::from(ready));
    }

    fn node_skew(&self, skew: i64) {
        // SAFETY: `void fake_set_node_skew(long)`.
        let set =
            unsafe { self.get::<unsafe extern "C" fn(std::ffi::c_long)>("fake_set_node_skew") };
        // SAFETY: a plain value.
        unsafe { set(skew as std::ffi::c_long) };
    }

    fn fail_next_end(&self, code: c_int, leave_capturing: bool) {
        self.fail_next_end_leaving(code, c_int::from(leave_capturing));
    }

    /// The next end answers `code` and leaves the capture active, as ROCm
    /// does after `hipErrorStreamCaptureUnjoined`.
    fn fail_next_end_active(&self, code: c_int) {
        self.fail_next_end_leaving(code, 2);
    }

    fn fail_next_end_leaving(&self, code: c_int, status: c_int) {
        // SAFETY: `void fake_fail_next_end(int, int)`.
        let fail = unsafe { self.get::<unsafe extern "C" fn(c_int, c_int)>("fake_fail_next_end") };
        // SAFETY: plain values.
        unsafe { fail(code, status) };
    }

    fn push_update(&self, code: c_int, result: c_int) {
        // SAFETY: `void fake_push_update(int, int)`.
        let push = unsafe { self.get::<unsafe extern "C" fn(c_int, c_int)>("fake_push_update") };
        // SAFETY: plain values.
        unsafe { push(code, result) };
    }

    /// What a program calling HIP itself would: make `ordinal` current.
    fn set_device(&self, ordinal: c_int) {
        // SAFETY: `int hipSetDevice(int)`.
        let set = unsafe { self.get::<unsafe extern "C" fn(c_int) -> c_int>("hipSetDevice") };
        // SAFETY: a plain value.
        assert_eq!(unsafe { set(ordinal) }, 0);
    }

    fn current_device(&self) -> c_int {
        // SAFETY: `int hipGetDevice(int*)`.
        let get = unsafe { self.get::<unsafe extern "C" fn(*mut c_int) -> c_int>("hipGetDevice") };
        let mut ordinal = -1;
        // SAFETY: the out-pointer is a live local.
        assert_eq!(unsafe { get(&mut ordinal) }, 0);
        ordinal
    }
}

fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

/// The message of the error `result` holds.
fn refusal<T>(result: Result<T, capture_core::DriverError>) -> String {
    match result {
        Ok(_) => panic!("expected a refusal"),
        Err(error) => error.to_string(),
    }
}

/// The compile error `result` holds, as (kernel, log).
fn compile_error(result: Result<Kernel, Error>) -> (String, String) {
    match result {
        Err(Error::Compile { kernel, log }) => (kernel, log),
        Err(other) => panic!("expected a compile error, got {other}"),
        Ok(kernel) => panic!("expected a compile error, got {kernel:?}"),
    }
}

/// The smallest ELF64 code object: a header and nothing else, with `tag`
/// in its identification padding, which the fake logs on loading.
fn code_object(tag: &[u8; 4]) -> Vec<u8> {
    let mut image = vec![0u8; 64];
    image[..4].copy_from_slice(b"\x7fELF");
    image[4] = 2;
    image[5] = 1;
    image[6] = 1;
    image[9..13].copy_from_slice(tag);
    image
}

/// The calls from the first one starting with `first` on.
fn after(calls: &[String], first: &str) -> Vec<String> {
    let at = calls
        .iter()
        .position(|call| call.starts_with(first))
        .unwrap_or_else(|| panic!("no {first} in {calls:?}"));
    calls[at..].to_vec()
}

/// A user kernel through the fake hiprtc.
fn hip(
    device: &Arc<Device>,
    source: &str,
    entry: &str,
    signature: Signature,
) -> Result<Kernel, Error> {
    // SAFETY: the fake runtime runs no GPU code; launches only log their
    // arguments.
    unsafe { Kernel::from_hip(device, source, entry, signature) }
}

fn run_scenario(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };

    // Every device, each asked with itself current and the caller's device
    // put back after.
    let devices = ok(Hip::devices());
    assert_eq!(calls.take(), ["hipSetDevice 1", "hipSetDevice 0"]);
    assert_eq!(devices.len(), 2);
    for (index, info) in devices.iter().enumerate() {
        assert_eq!(info.index, index);
        assert_eq!(info.kind, "GPU");
        assert_eq!(info.memory_bytes, (index as u64 + 1) << 34);
        assert_eq!(
            info.driver_version,
            "driver 6.4.43483, HIP runtime 6.4.43483"
        );
        // ROCm's 2^31 - 1 blocks in x, held to what 1024-thread blocks can
        // count in 32 bits.
        assert_eq!(info.max_groups, [4_194_303, 65_535, 65_535]);
    }
    assert_eq!(
        devices[0].name,
        "Fake HIP device 0 (gfx90a:sramecc+:xnack-)"
    );
    assert_eq!(devices[1].name, "Fake HIP device 1 (gfx1030)");

    let info = match Hip::probe() {
        Availability::Available(info) => info,
        Availability::Unavailable(reason) => panic!("the fake runtime is unavailable: {reason}"),
    };
    assert_eq!(info, devices[0], "probe opens device 0 by default");
    let other = ok(Hip::open_index(1));
    assert_eq!(other.arch(), Some("gfx1030"));
    assert_eq!(Hip::device_info(&other), devices[1]);
    let missing = refusal(Hip::open_index(2));
    assert!(missing.contains("HIP device 2 does not exist"), "{missing}");
    calls.take();

    let device = ok(Hip::open());
    assert_eq!(device.arch(), Some("gfx90a:sramecc+:xnack-"));
    assert_eq!(device.max_workgroup(), ([1024, 1024, 64], 1024));
    let mut stream = Hip::create_stream(&device).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(calls.take(), ["hipStreamCreateWithFlags flags=1"]);

    // Pages, copies through pinned memory, signal and fence.
    let page = Hip::allocate_device_page(&mut stream, 256).unwrap_or_else(|e| panic!("{e}"));
    let host = Hip::allocate_host_page(&mut stream, 256).unwrap_or_else(|e| panic!("{e}"));
    let malloc = calls.take();
    let base = malloc[0]
        .split(" -> ")
        .nth(1)
        .and_then(|p| usize::from_str_radix(p.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("no address in {malloc:?}"));
    assert_eq!(malloc[1], "hipHostMalloc 256 flags=0");
    let at = |offset: usize| format!("{:#x}", base + offset);

    Hip::write_host(&host, 16, &[1, 2, 3, 4]);
    let slice = |offset, len| DeviceSlice::<Hip> {
        page: &page,
        offset,
        len,
    };
    let pinned = |offset, len| HostSlice::<Hip> {
        page: &host,
        offset,
        len,
    };
    Hip::copy_to_device(&mut stream, pinned(16, 4), slice(32, 4)).unwrap_or_else(|e| panic!("{e}"));
    Hip::copy_to_host(&mut stream, slice(32, 4), pinned(100, 4)).unwrap_or_else(|e| panic!("{e}"));
    let signal = Hip::signal(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    Hip::fence(&mut stream, signal).unwrap_or_else(|e| panic!("{e}"));
    let mut out = [0u8; 4];
    Hip::read_host(&host, 100, &mut out);
    assert_eq!(out, [1, 2, 3, 4]);
    assert_eq!(
        calls.take(),
        [
            format!("hipMemcpyHtoDAsync {} 4", at(32)),
            format!("hipMemcpyDtoHAsync {} 4", at(32)),
            "hipEventCreateWithFlags flags=2".to_owned(),
            "hipEventRecord".to_owned(),
            "hipEventSynchronize".to_owned(),
        ]
    );
    // A signal the device has not reached yet is not done, and is once it
    // has; neither question waits or logs a call.
    fake.events_ready(false);
    let later = ok(Hip::signal(&mut stream));
    assert_eq!(Hip::is_done(&mut stream, later), Ok(false));
    assert_eq!(
        Hip::is_done(&mut stream, signal),
        Ok(true),
        "an older, fenced signal"
    );
    fake.events_ready(true);
    assert_eq!(Hip::is_done(&mut stream, later), Ok(true));
    assert_eq!(Hip::is_done(&mut stream, later), Ok(true), "asked again");
    assert_eq!(calls.take(), ["hipEventRecord"]);

    // A slice outside its page is an error, not a stray copy.
    let outside = Hip::copy_to_device(&mut stream, pinned(0, 8), slice(252, 8));
    assert!(outside.is_err());
    assert!(calls.take().is_empty());

    // Builtins: ordinary kernels of one source, compiled once for the
    // device's architecture, unfused, and loaded once for both.
    let add = Hip::builtin(&device, Builtin::Add).unwrap_or_else(|e| panic!("{e}"));
    let fill = Hip::builtin(&device, Builtin::Fill).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        calls.take(),
        [
            "hiprtcCreateProgram add.hip headers=0 axpy=1",
            "hiprtcCompileProgram -O3 -ffp-contract=off --offload-arch=gfx90a:sramecc+:xnack-",
            "hiprtcDestroyProgram",
            "hipModuleLoadData FAKE",
        ]
    );
    assert_eq!(Hip::signature(&add), &Builtin::Add.signature());

    // A launch passes each binding's address (page base + offset), then the
    // info block's.
    let bindings = [
        Binding {
            slice: slice(0, 64),
            access: Access::ReadWrite,
        },
        Binding {
            slice: slice(64, 64),
            access: Access::Read,
        },
    ];
    let launch = |kernel| Launch {
        kernel,
        groups: [3, 2, 1],
        bindings: &bindings,
        info: Some(slice(128, 16)),
        params: &[],
    };
    Hip::launch(&mut stream, launch(&add)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        calls.take(),
        [format!(
            "hipModuleLaunchKernel add grid=3,2,1 block=64,1,1 shared=0 args={},{},{} extra=(nil)",
            at(0),
            at(64),
            at(128)
        )]
    );
    let one = [Binding {
        slice: slice(192, 32),
        access: Access::Write,
    }];
    let fill_launch = Launch {
        kernel: &fill,
        groups: [1, 1, 1],
        bindings: &one,
        info: Some(slice(240, 16)),
        params: &[],
    };
    Hip::launch(&mut stream, fill_launch).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        calls.take(),
        [format!(
            "hipModuleLaunchKernel fill grid=1,1,1 block=64,1,1 shared=0 args={},{} extra=(nil)",
            at(192),
            at(240)
        )]
    );

    // A user kernel: bindings, then the info block, then each by-value
    // parameter at its size, in a block of the signature's shape.
    let mixed_source = "extern \"C\" __global__ void mixed__ppp148() {}";
    let mixed_signature = Signature::new("mixed__ppp148")
        .binding(Access::Read)
        .binding(Access::Write)
        .info(16)
        .param(1)
        .param(4)
        .param(8)
        .workgroup([32, 2, 1]);
    let mixed = hip(
        &device,
        mixed_source,
        "mixed__ppp148",
        mixed_signature.clone(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        names(&calls.take()),
        [
            "hiprtcCreateProgram",
            "hiprtcCompileProgram",
            "hiprtcDestroyProgram",
            "hipModuleLoadData"
        ]
    );
    assert_eq!(mixed.signature(), &mixed_signature);
    let params = Params::new().u32(0x1234_5678).u64(0x1122_3344_5566_7788);
    let mut packed = vec![0xab];
    packed.extend_from_slice(params.as_bytes());
    let mixed_launch = Launch {
        kernel: &mixed,
        groups: [5, 1, 1],
        bindings: &[
            Binding {
                slice: slice(0, 16),
                access: Access::Read,
            },
            Binding {
                slice: slice(16, 16),
                access: Access::Write,
            },
        ],
        info: Some(slice(48, 16)),
        params: &packed,
    };
    Hip::launch(&mut stream, mixed_launch).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        calls.take(),
        [format!(
            "hipModuleLaunchKernel mixed__ppp148 grid=5,1,1 block=32,2,1 shared=0 \
             args={},{},{},0xab,0x12345678,0x1122334455667788 extra=(nil)",
            at(0),
            at(16),
            at(48)
        )]
    );
    // A second kernel of the same source reuses the compile and the module.
    let again = hip(
        &device,
        mixed_source,
        "mixed__ppp148",
        mixed_signature.clone(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(calls.take().is_empty());
    drop(again);
    assert!(
        calls.take().is_empty(),
        "the first kernel still holds the module"
    );

    // From a code object: loaded as given, its own module.
    // SAFETY: as for `hip`.
    let loaded = unsafe {
        Kernel::from_code_object(
            &device,
            &code_object(b"FAKE"),
            "mixed__ppp148",
            mixed_signature.clone(),
        )
    }
    .unwrap_or_else(|e| panic!("{e}"));
    drop(loaded);
    assert_eq!(calls.take(), ["hipModuleLoadData FAKE", "hipModuleUnload"]);

    // What the runtime refuses is a compile error carrying its answer.
    // SAFETY: as for `hip`.
    let bad = unsafe {
        Kernel::from_code_object(&device, &code_object(b"BAD!"), "k", Signature::new("k"))
    };
    let (kernel, log) = compile_error(bad);
    assert_eq!(kernel, "k");
    assert!(log.contains("hipErrorInvalidImage"), "{log}");
    assert_eq!(calls.take(), ["hipModuleLoadData BAD!"]);
    let (_, log) = compile_error(hip(
        &device,
        mixed_source,
        "missing",
        Signature::new("missing"),
    ));
    assert!(log.contains("hipErrorNotFound"), "{log}");
    assert!(
        calls.take().is_empty(),
        "the cached module served the lookup"
    );

    // A source that does not compile: hiprtc's log, and nothing loaded.
    let broken = hip(&device, "#error broken", "broken", Signature::new("broken"));
    let (kernel, log) = compile_error(broken);
    assert_eq!(kernel, "broken");
    assert!(
        log.contains("HIPRTC_ERROR_COMPILATION (6)") && log.contains("this source is broken"),
        "{log}"
    );
    assert_eq!(
        names(&calls.take()),
        [
            "hiprtcCreateProgram",
            "hiprtcCompileProgram",
            "hiprtcDestroyProgram"
        ]
    );

    // Signatures no device or not this device can run are refused before
    // anything is compiled.
    let (_, log) = compile_error(hip(
        &device,
        mixed_source,
        "k",
        Signature::new("k").param(3),
    ));
    assert!(log.contains("3-byte parameter"), "{log}");
    let deep = Signature::new("k").workgroup([1, 1, 128]);
    let (_, log) = compile_error(hip(&device, mixed_source, "k", deep));
    assert!(
        log.contains("beyond this device's blocks: at most 1024x1024x64"),
        "{log}"
    );
    assert!(calls.take().is_empty());

    // A program that uses HIP itself keeps its current device: the backend
    // makes its own current for the call and puts the caller's back.
    fake.set_device(1);
    Hip::launch(&mut stream, launch(&add)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fake.current_device(), 1);
    assert_eq!(
        names(&calls.take()),
        [
            "hipSetDevice",
            "hipSetDevice",
            "hipModuleLaunchKernel",
            "hipSetDevice"
        ]
    );
    fake.set_device(0);
    calls.take();

    // A kernel of one device is not launched on another's stream.
    let mut elsewhere = ok(Hip::create_stream(&other));
    calls.take();
    let foreign = refusal(Hip::launch(&mut elsewhere, launch(&add)));
    assert!(foreign.contains("loaded on HIP device 0"), "{foreign}");
    drop(elsewhere);
    calls.take();

    // A capture in relaxed mode, opened after an event marking the work
    // enqueued before it (what a replacement stream would wait for); the
    // recording is instantiated, staged (no hipGraphUpload in this runtime:
    // nothing to do) and replayed.
    ok(Hip::begin(&mut stream));
    ok(Hip::launch(&mut stream, launch(&add)));
    ok(Hip::copy_to_device(
        &mut stream,
        pinned(16, 4),
        slice(32, 4),
    ));
    let recording = ok(Hip::end(&mut stream));
    let mut exec = ok(Hip::instantiate(&mut stream, recording, Order::Chain));
    ok(Hip::upload(&exec, &mut stream));
    ok(Hip::replay(&exec, &mut stream));
    assert_eq!(
        names(&calls.take()),
        [
            "hipEventRecord",
            "hipStreamBeginCapture",
            "hipModuleLaunchKernel",
            "hipMemcpyHtoDAsync",
            "hipStreamEndCapture",
            "hipGraphInstantiate",
            "hipGraphLaunch"
        ]
    );
    assert_eq!(
        Hip::signal(&mut stream).map(|_| ()),
        Ok(()),
        "the stream works after a capture"
    );
    calls.take();

    // An eager launch (bindings, info and by-value parameters), copies both
    // ways and a replay allocate nothing on the heap.
    let mixed_bindings = [
        Binding {
            slice: slice(0, 16),
            access: Access::Read,
        },
        Binding {
            slice: slice(16, 16),
            access: Access::Write,
        },
    ];
    let before = allocations();
    for _ in 0..3 {
        let eager = Launch {
            kernel: &mixed,
            groups: [5, 1, 1],
            bindings: &mixed_bindings,
            info: Some(slice(48, 16)),
            params: &packed,
        };
        if let Err(error) = Hip::launch(&mut stream, eager) {
            panic!("{error}");
        }
        if let Err(error) = Hip::launch(&mut stream, launch(&add)) {
            panic!("{error}");
        }
        if let Err(error) = Hip::copy_to_device(&mut stream, pinned(16, 4), slice(32, 4)) {
            panic!("{error}");
        }
        if let Err(error) = Hip::copy_to_host(&mut stream, slice(32, 4), pinned(100, 4)) {
            panic!("{error}");
        }
        if let Err(error) = Hip::replay(&exec, &mut stream) {
            panic!("{error}");
        }
    }
    assert_eq!(allocations(), before, "a launch, copy or replay allocated");
    assert_eq!(calls.take().len(), 15);

    // The same kernels and copies in the same order, other arguments: the
    // executable is updated in place and the old recording let go.
    ok(Hip::begin(&mut stream));
    ok(Hip::launch(&mut stream, launch(&add)));
    ok(Hip::copy_to_device(
        &mut stream,
        pinned(20, 4),
        slice(36, 4),
    ));
    let same_shape = ok(Hip::end(&mut stream));
    assert!(matches!(
        Hip::update(&mut stream, &mut exec, same_shape, Order::Chain),
        Ok(Updated::InPlace)
    ));
    assert_eq!(
        names(&calls.take()),
        [
            "hipEventRecord",
            "hipStreamBeginCapture",
            "hipModuleLaunchKernel",
            "hipMemcpyHtoDAsync",
            "hipStreamEndCapture",
            "hipGraphExecUpdate",
            "hipGraphDestroy"
        ]
    );

    // Another kernel: handed back for instantiation without asking the
    // runtime, which may update node by node before it finds the mismatch.
    ok(Hip::begin(&mut stream));
    ok(Hip::launch(
        &mut stream,
        fill_on(&fill, &one, slice(240, 16)),
    ));
    let other_shape = ok(Hip::end(&mut stream));
    match Hip::update(&mut stream, &mut exec, other_shape, Order::Chain) {
        Ok(Updated::Topology(recording)) => drop(recording),
        other => panic!("expected the recording back, got {:?}", other.map(|_| ())),
    }
    assert_eq!(
        names(&calls.take()),
        [
            "hipStreamBeginCapture",
            "hipModuleLaunchKernel",
            "hipStreamEndCapture",
            "hipGraphDestroy"
        ]
    );

    // The runtime answers "parameters changed" or "not supported" for an
    // update of the same shape: the executable is updated back from its own
    // graph, still replayable, and the recording handed back for a fresh
    // instantiation, as for a shape change.
    for result in [5, 6] {
        fake.push_update(910, result);
        ok(Hip::begin(&mut stream));
        ok(Hip::launch(&mut stream, launch(&add)));
        ok(Hip::copy_to_device(
            &mut stream,
            pinned(16, 4),
            slice(32, 4),
        ));
        let refused = ok(Hip::end(&mut stream));
        match Hip::update(&mut stream, &mut exec, refused, Order::Chain) {
            Ok(Updated::Topology(recording)) => drop(recording),
            other => panic!("expected the recording back, got {:?}", other.map(|_| ())),
        }
        ok(Hip::replay(&exec, &mut stream));
        assert_eq!(
            after(&calls.take(), "hipStreamEndCapture"),
            [
                "hipStreamEndCapture",
                &format!("hipGraphExecUpdate -> 910, {result}"),
                "hipGraphExecUpdate -> 0, 0",
                "hipGraphDestroy",
                "hipGraphLaunch"
            ]
        );
    }

    // The runtime finds the topology changed and cannot be updated back
    // either: the executable is instantiated anew from its own graph (the
    // half-updated one kept until the executable drops) and the recording
    // handed back.
    fake.push_update(910, 2);
    fake.push_update(910, 1);
    ok(Hip::begin(&mut stream));
    ok(Hip::launch(&mut stream, launch(&add)));
    ok(Hip::copy_to_device(
        &mut stream,
        pinned(16, 4),
        slice(32, 4),
    ));
    let changed = ok(Hip::end(&mut stream));
    match Hip::update(&mut stream, &mut exec, changed, Order::Chain) {
        Ok(Updated::Topology(recording)) => drop(recording),
        other => panic!("expected the recording back, got {:?}", other.map(|_| ())),
    }
    ok(Hip::replay(&exec, &mut stream));
    drop(exec);
    assert_eq!(
        names(&after(&calls.take(), "hipStreamEndCapture")),
        [
            "hipStreamEndCapture",
            "hipGraphExecUpdate",
            "hipGraphExecUpdate",
            "hipGraphInstantiate",
            "hipGraphDestroy",
            "hipGraphLaunch",
            "hipGraphExecDestroy",
            "hipGraphExecDestroy",
            "hipGraphDestroy"
        ]
    );

    // A graph holding other than one node per launch and copy lost (or
    // gained) work: refused at instantiate and at update.
    for skew in [-1, 1] {
        fake.node_skew(skew);
        ok(Hip::begin(&mut stream));
        ok(Hip::launch(&mut stream, launch(&add)));
        let recording = ok(Hip::end(&mut stream));
        let message = refusal(Hip::instantiate(&mut stream, recording, Order::Chain));
        let word = if skew < 0 { "lost" } else { "added" };
        assert!(
            message.contains(&format!("{} node(s) where 1 launch", 1 + skew))
                && message.contains(word),
            "{message}"
        );
        assert_eq!(
            names(&after(&calls.take(), "hipStreamBeginCapture")),
            [
                "hipStreamBeginCapture",
                "hipModuleLaunchKernel",
                "hipStreamEndCapture",
                "hipGraphDestroy"
            ]
        );
    }
    fake.node_skew(0);
    ok(Hip::begin(&mut stream));
    let recording = ok(Hip::end(&mut stream));
    let mut empty = ok(Hip::instantiate(&mut stream, recording, Order::Chain));
    fake.node_skew(-1);
    ok(Hip::begin(&mut stream));
    ok(Hip::launch(&mut stream, launch(&add)));
    let recording = ok(Hip::end(&mut stream));
    let message = refusal(Hip::update(
        &mut stream,
        &mut empty,
        recording,
        Order::Chain,
    ));
    assert!(message.contains("lost"), "{message}");
    fake.node_skew(0);
    drop(empty);
    calls.take();

    // A failed end that leaves the stream capturing: the stream is replaced
    // by a fresh one, which first waits for the old one's newest event and
    // records one of its own for the pending signals; the old events go
    // before the old stream, and the next capture runs on the fresh one.
    fake.events_ready(false);
    ok(Hip::signal(&mut stream));
    ok(Hip::begin(&mut stream));
    ok(Hip::launch(&mut stream, launch(&add)));
    fake.fail_next_end(901, true);
    let message = refusal(Hip::end(&mut stream));
    assert!(
        message.contains("hipErrorStreamCaptureInvalidated")
            && message.contains("replaced by a fresh one"),
        "{message}"
    );
    let ended = calls.take();
    let ended = after(&ended, "hipStreamEndCapture");
    let old_events = ended
        .iter()
        .filter(|call| *call == "hipEventDestroy")
        .count();
    assert!(old_events >= 1, "{ended:?}");
    assert_eq!(
        ended[..6],
        [
            "hipStreamEndCapture",
            "hipStreamIsCapturing -> 2",
            "hipStreamCreateWithFlags flags=1",
            "hipStreamWaitEvent flags=0",
            "hipEventCreateWithFlags flags=2",
            "hipEventRecord"
        ]
    );
    assert_eq!(ended.len(), 7 + old_events, "{ended:?}");
    assert_eq!(ended.last().map(String::as_str), Some("hipStreamDestroy"));
    fake.events_ready(true);
    ok(Hip::begin(&mut stream));
    ok(Hip::launch(&mut stream, launch(&add)));
    let recording = ok(Hip::end(&mut stream));
    drop(ok(Hip::instantiate(&mut stream, recording, Order::Chain)));
    assert_eq!(
        names(&calls.take()),
        [
            "hipStreamBeginCapture",
            "hipModuleLaunchKernel",
            "hipStreamEndCapture",
            "hipGraphInstantiate",
            "hipGraphExecDestroy",
            "hipGraphDestroy"
        ]
    );
    // A failed end that did end the capture keeps the stream.
    ok(Hip::begin(&mut stream));
    fake.fail_next_end(901, false);
    let message = refusal(Hip::end(&mut stream));
    assert!(!message.contains("replaced"), "{message}");
    assert_eq!(
        calls.take(),
        [
            "hipStreamBeginCapture mode=2",
            "hipStreamEndCapture",
            "hipStreamIsCapturing -> 0"
        ]
    );

    // Frees while another stream of the device records wait for the last
    // recording to end: hipFree may synchronize the device.
    let mut recorder = ok(Hip::create_stream(&device));
    ok(Hip::begin(&mut recorder));
    let held = ok(Hip::allocate_device_page(&mut stream, 64));
    let held_host = ok(Hip::allocate_host_page(&mut stream, 64));
    calls.take();
    Hip::release_device_page(&mut stream, held);
    drop(held_host);
    ok(Hip::begin(&mut stream));
    let own = ok(Hip::end(&mut stream));
    assert!(
        names(&calls.take())
            .iter()
            .all(|name| !name.contains("Free")),
        "freed while a stream records"
    );
    drop(own);
    let recorded = ok(Hip::end(&mut recorder));
    assert_eq!(
        names(&calls.take()),
        [
            "hipGraphDestroy",
            "hipStreamEndCapture",
            "hipFree",
            "hipHostFree"
        ]
    );
    drop(recorded);
    drop(recorder);
    calls.take();

    // The modules a recording's launches run stay loaded as long as their
    // kernels do: capture-core holds them until the executable drops (its
    // rule 19), so the driver holds none of its own.
    // SAFETY: as for `hip`.
    let loaded = unsafe {
        Kernel::from_code_object(
            &device,
            &code_object(b"FAKE"),
            "fill",
            Builtin::Fill.signature(),
        )
    }
    .unwrap_or_else(|e| panic!("{e}"));
    ok(Hip::begin(&mut stream));
    ok(Hip::launch(
        &mut stream,
        fill_on(&loaded, &one, slice(240, 16)),
    ));
    let recording = ok(Hip::end(&mut stream));
    let exec = ok(Hip::instantiate(&mut stream, recording, Order::Chain));
    calls.take();
    drop(exec);
    assert_eq!(
        names(&calls.take()),
        ["hipGraphExecDestroy", "hipGraphDestroy"]
    );
    drop(loaded);
    assert_eq!(names(&calls.take()), ["hipModuleUnload"]);

    // A runtime older than ROCm 5.3 runs eager work but refuses to record:
    // its launches would run at once and be missing from the graph.
    fake.runtime_version(50_221_153);
    let old = ok(Hip::open_index(0));
    let mut old_stream = ok(Hip::create_stream(&old));
    calls.take();
    let message = refusal(Hip::begin(&mut old_stream));
    assert!(
        message.contains("5.2.21153") && message.contains("ROCm 5.3"),
        "{message}"
    );
    ok(Hip::launch(&mut old_stream, launch(&add)));
    assert_eq!(names(&calls.take()), ["hipModuleLaunchKernel"]);
    drop(old_stream);
    drop(old);
    fake.runtime_version(60_443_483);
    calls.take();

    // A page dropped without being released is freed all the same, once.
    let stray = ok(Hip::allocate_device_page(&mut stream, 64));
    let stray_host = ok(Hip::allocate_host_page(&mut stream, 64));
    drop(stray);
    drop(stray_host);
    assert_eq!(
        names(&calls.take()),
        ["hipMalloc", "hipHostMalloc", "hipFree", "hipHostFree"]
    );

    // A stream dropped while recording closes the capture first, and frees
    // what waited for it.
    ok(Hip::begin(&mut stream));
    Hip::release_device_page(&mut stream, page);
    Hip::release_host_page(&mut stream, host);
    drop(stream);
    let dropped = calls.take();
    let dropped_names: Vec<&str> = names(&dropped)
        .into_iter()
        .filter(|name| *name != "hipEventDestroy")
        .collect();
    assert_eq!(
        dropped_names,
        [
            "hipStreamBeginCapture",
            "hipStreamEndCapture",
            "hipFree",
            "hipHostFree",
            "hipGraphDestroy",
            "hipStreamSynchronize",
            "hipStreamDestroy"
        ]
    );
    assert_eq!(dropped[2], format!("hipFree {}", at(0)));

    // A module outlives the device handle while a kernel holds it, and is
    // unloaded with its last kernel.
    drop(device);
    drop(other);
    drop(add);
    drop(mixed);
    assert_eq!(calls.take(), ["hipModuleUnload"]);
    drop(fill);
    assert_eq!(calls.take(), ["hipModuleUnload"]);
}

/// A launch of a kernel shaped like `fill`.
fn fill_on<'a>(
    kernel: &'a Kernel,
    bindings: &'a [Binding<'a, Hip>],
    info: DeviceSlice<'a, Hip>,
) -> Launch<'a, Hip> {
    Launch {
        kernel,
        groups: [1, 1, 1],
        bindings,
        info: Some(info),
        params: &[],
    }
}

/// Run `scenario` in a child process (this test binary, re-run as `test`)
/// with the fake runtime, built for this test, as the one to load.
fn in_child(test: &str, scenario: fn(&Path, &Path)) {
    in_child_built(test, scenario, &[]);
}

/// As [`in_child`], with the fake built with `defines` (`-DNAME` each).
fn in_child_built(test: &str, scenario: fn(&Path, &Path), defines: &[&str]) {
    if env::var_os(CHILD_VAR).is_some() {
        let library = env::var_os(LIBRARY_ENV)
            .map(PathBuf::from)
            .unwrap_or_default();
        let log = env::var_os(LOG_VAR).map(PathBuf::from).unwrap_or_default();
        scenario(&library, &log);
        return;
    }

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-hip-{test}"));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let library = dir.join("libamdhip64.so");
    let log = dir.join("calls.log");
    let _ = fs::remove_file(&log);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_hip.c");
    let compiler = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let built = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(&library)
        .args(defines.iter().map(|name| format!("-D{name}")))
        .arg(&source)
        .output();
    match built {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "{compiler} cannot build the fake runtime:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(error) => {
            eprintln!("skipped: no C compiler ({compiler}: {error})");
            return;
        }
    }

    let exe = env::current_exe().unwrap_or_else(|e| panic!("no path to this test binary: {e}"));
    let output = Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, "1")
        .env(LIBRARY_ENV, &library)
        .env(LOG_VAR, &log)
        .output()
        .unwrap_or_else(|e| panic!("cannot re-run this test binary: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the scenario failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn driver_contract_on_fake_runtime() {
    in_child("driver_contract_on_fake_runtime", run_scenario);
}

impl Fake {
    /// One of the fake's queries that take nothing and return an int.
    fn query(&self, name: &str) -> c_int {
        // SAFETY: every fake query used this way takes nothing and returns
        // an int.
        let get = unsafe { self.get::<unsafe extern "C" fn() -> c_int>(name) };
        // SAFETY: no arguments.
        unsafe { get() }
    }

    /// Kernel-argument bytes the live executables' updates hold.
    fn kernarg_bytes(&self) -> std::ffi::c_long {
        // SAFETY: `long fake_kernarg_bytes(void)`.
        let get =
            unsafe { self.get::<unsafe extern "C" fn() -> std::ffi::c_long>("fake_kernarg_bytes") };
        // SAFETY: no arguments.
        unsafe { get() }
    }
}

/// A `fill` kernel loaded from a code object on `device`.
fn fill_kernel(device: &Arc<Device>) -> Kernel {
    // SAFETY: the fake runtime runs no GPU code.
    unsafe {
        Kernel::from_code_object(
            device,
            &code_object(b"FAKE"),
            "fill",
            Builtin::Fill.signature(),
        )
    }
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Two `Device`s opened on one ordinal: a page freed and a module unloaded
/// through B wait while a stream of A records.
fn releases_wait_for_the_gpu(library: &Path, log: &Path) {
    let _fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let a = ok(Hip::open_index(0));
    let b = ok(Hip::open_index(0));
    let mut recording = ok(Hip::create_stream(&a));
    let mut other = ok(Hip::create_stream(&b));
    let page = ok(Hip::allocate_device_page(&mut other, 64));
    let host = ok(Hip::allocate_host_page(&mut other, 64));
    let kernel = fill_kernel(&b);
    ok(Hip::begin(&mut recording));
    calls.take();
    Hip::release_device_page(&mut other, page);
    Hip::release_host_page(&mut other, host);
    drop(kernel);
    let released = calls.take();
    assert!(
        names(&released)
            .iter()
            .all(|name| !name.contains("Free") && !name.contains("Unload")),
        "released through B while a stream of A recorded: {released:?}"
    );
    let graph = ok(Hip::end(&mut recording));
    assert_eq!(
        names(&calls.take()),
        [
            "hipStreamEndCapture",
            "hipFree",
            "hipHostFree",
            "hipModuleUnload"
        ]
    );
    drop(graph);
    // With nothing recording, a release runs at once.
    let page = ok(Hip::allocate_device_page(&mut other, 64));
    calls.take();
    Hip::release_device_page(&mut other, page);
    assert_eq!(names(&calls.take()), ["hipFree"]);
}

#[test]
fn frees_and_unloads_wait_for_a_recording_through_any_device_of_the_gpu() {
    in_child(
        "frees_and_unloads_wait_for_a_recording_through_any_device_of_the_gpu",
        releases_wait_for_the_gpu,
    );
}

/// The stream another thread begins a recording on while a free runs, and
/// what came of it.
static BEGINNER: Mutex<Option<Stream>> = Mutex::new(None);
static BEGUN: Mutex<Option<Result<Stream, String>>> = Mutex::new(None);

/// Called by the fake at the start of a `hipFree`: begin a recording on
/// another thread, as a user's thread would, and wait a while for it. A
/// begin still waiting means the free runs under the GPU's lock.
extern "C" fn begin_on_another_thread() {
    let Some(mut stream) = BEGINNER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let begun = Hip::begin(&mut stream).map_err(|e| e.to_string());
        let _ = tx.send(begun.map(|()| stream));
    });
    let outcome = rx
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| Err("the begin waited for the free".to_owned()));
    *BEGUN.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
}

/// Frees held back by a recording run once it ends, without the GPU's lock:
/// another thread's begin goes ahead while one runs, and the frees still
/// queued then wait for that recording.
fn deferred_frees_outside_the_lock(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open());
    let mut recording = ok(Hip::create_stream(&device));
    let mut other = ok(Hip::create_stream(&device));
    let first = ok(Hip::allocate_device_page(&mut other, 64));
    let second = ok(Hip::allocate_device_page(&mut other, 64));
    ok(Hip::begin(&mut recording));
    Hip::release_device_page(&mut other, first);
    Hip::release_device_page(&mut other, second);
    *BEGINNER.lock().unwrap_or_else(PoisonError::into_inner) =
        Some(ok(Hip::create_stream(&device)));
    // SAFETY: `void fake_on_free(void (*)(void))`.
    let on_free =
        unsafe { fake.get::<unsafe extern "C" fn(Option<extern "C" fn()>)>("fake_on_free") };
    // SAFETY: the callback lives as long as the program.
    unsafe { on_free(Some(begin_on_another_thread)) };
    calls.take();
    let graph = ok(Hip::end(&mut recording));
    // SAFETY: as above; no callback from here.
    unsafe { on_free(None) };
    let begun = BEGUN.lock().unwrap_or_else(PoisonError::into_inner).take();
    let mut began = match begun {
        Some(Ok(stream)) => stream,
        Some(Err(why)) => panic!("another thread's begin during a deferred free: {why}"),
        None => panic!("no deferred free ran"),
    };
    let frees = |calls: &[String]| names(calls).iter().filter(|n| **n == "hipFree").count();
    assert_eq!(
        frees(&calls.take()),
        1,
        "the second page is freed while another recording is open"
    );
    drop(ok(Hip::end(&mut began)));
    assert_eq!(frees(&calls.take()), 1, "the second page waited for it");
    drop(graph);
}

#[test]
fn deferred_frees_run_without_the_gpus_lock() {
    in_child(
        "deferred_frees_run_without_the_gpus_lock",
        deferred_frees_outside_the_lock,
    );
}

/// A device page and a host page of 64 bytes on one stream, for work to
/// enqueue: a copy from the one into the other.
struct Staged {
    page: backend_hip::DevicePage,
    host: backend_hip::HostPage,
}

impl Staged {
    fn on(stream: &mut Stream) -> Self {
        Self {
            page: ok(Hip::allocate_device_page(stream, 64)),
            host: ok(Hip::allocate_host_page(stream, 64)),
        }
    }

    /// Enqueue the copy of the host page into the device page on `stream`.
    fn copy(&self, stream: &mut Stream) {
        ok(Hip::copy_to_device(
            stream,
            HostSlice::<Hip> {
                page: &self.host,
                offset: 0,
                len: 64,
            },
            DeviceSlice::<Hip> {
                page: &self.page,
                offset: 0,
                len: 64,
            },
        ));
    }
}

/// Work enqueued after the latest signal, then a capture whose end fails
/// and leaves the stream capturing: the fresh stream waits for all of it.
fn replacement_is_ordered(library: &Path, _log: &Path) {
    let fake = Fake::open(library);
    let device = ok(Hip::open());
    let mut stream = ok(Hip::create_stream(&device));
    let staged = Staged::on(&mut stream);
    let copy = |stream: &mut Stream| staged.copy(stream);
    copy(&mut stream);
    ok(Hip::signal(&mut stream));
    // Enqueued after the latest signal: only a point taken later covers it.
    copy(&mut stream);
    ok(Hip::begin(&mut stream));
    fake.fail_next_end(901, true);
    let message = refusal(Hip::end(&mut stream));
    assert!(message.contains("replaced by a fresh one"), "{message}");
    assert_eq!(
        fake.query("fake_replaced_covered"),
        1,
        "the fresh stream did not wait for all the old stream's work"
    );
    copy(&mut stream);
    drop(stream);
}

#[test]
fn a_replacement_stream_waits_for_all_the_old_streams_work() {
    in_child(
        "a_replacement_stream_waits_for_all_the_old_streams_work",
        replacement_is_ordered,
    );
}

/// Signals taken before a capture whose end fails and leaves the stream
/// capturing still fence and query once the stream is replaced: the fake
/// aborts on an event whose stream was destroyed, as ROCm reads freed
/// memory there.
fn replaced_signals(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open());
    let mut stream = ok(Hip::create_stream(&device));
    let staged = Staged::on(&mut stream);
    let copy = |stream: &mut Stream| staged.copy(stream);
    fake.events_ready(false);
    copy(&mut stream);
    let first = ok(Hip::signal(&mut stream));
    copy(&mut stream);
    let second = ok(Hip::signal(&mut stream));
    ok(Hip::begin(&mut stream));
    calls.take();
    fake.fail_next_end(901, true);
    let message = refusal(Hip::end(&mut stream));
    assert!(message.contains("replaced by a fresh one"), "{message}");
    let replaced = calls.take();
    assert_eq!(fake.query("fake_replaced_covered"), 1);

    // Both earlier points now stand on the fresh stream.
    assert!(!ok(Hip::is_done(&mut stream, first)));
    fake.events_ready(true);
    ok(Hip::fence(&mut stream, first));
    assert!(ok(Hip::is_done(&mut stream, second)));
    ok(Hip::fence(&mut stream, second));
    copy(&mut stream);
    let third = ok(Hip::signal(&mut stream));
    ok(Hip::fence(&mut stream, third));
    drop(stream);

    // One event recorded on the fresh stream after its wait, and the two
    // old ones destroyed before the old stream.
    assert_eq!(
        names(&replaced)[2..],
        [
            "hipStreamCreateWithFlags",
            "hipStreamWaitEvent",
            "hipEventCreateWithFlags",
            "hipEventRecord",
            "hipEventDestroy",
            "hipEventDestroy",
            "hipStreamDestroy"
        ],
        "{replaced:?}"
    );
}

#[test]
fn signals_before_a_replaced_capture_still_fence() {
    in_child(
        "signals_before_a_replaced_capture_still_fence",
        replaced_signals,
    );
}

/// A failed end that leaves the capture active (a stream forked into it
/// was never joined back) is an error, and the stream is not replaced: a
/// fresh stream could not be ordered after it.
fn active_capture_not_replaced(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open());
    let mut stream = ok(Hip::create_stream(&device));
    ok(Hip::begin(&mut stream));
    calls.take();
    // hipErrorStreamCaptureUnjoined.
    fake.fail_next_end_active(904);
    let message = refusal(Hip::end(&mut stream));
    assert!(
        message.contains("still active") && !message.contains("replaced by a fresh one"),
        "{message}"
    );
    assert_eq!(
        calls.take(),
        ["hipStreamEndCapture", "hipStreamIsCapturing -> 1"],
        "a fresh stream was made for a capture still active"
    );
    drop(stream);
}

#[test]
fn a_capture_left_active_is_an_error_not_a_replacement() {
    in_child(
        "a_capture_left_active_is_an_error_not_a_replacement",
        active_capture_not_replaced,
    );
}

/// 10,000 updates of one graph's recording: every
/// `IN_PLACE_UPDATES_PER_INSTANCE` in-place updates the recording comes
/// back for a fresh executable, and the kernel-argument space the updates
/// take stays bounded.
fn updates_stay_flat(library: &Path, _log: &Path) {
    let fake = Fake::open(library);
    let device = ok(Hip::open());
    let mut stream = ok(Hip::create_stream(&device));
    let page = ok(Hip::allocate_device_page(&mut stream, 256));
    let kernel = fill_kernel(&device);
    let slice = |offset, len| DeviceSlice::<Hip> {
        page: &page,
        offset,
        len,
    };
    let one = [Binding {
        slice: slice(0, 32),
        access: Access::Write,
    }];
    let record = |stream: &mut Stream| {
        ok(Hip::begin(stream));
        ok(Hip::launch(stream, fill_on(&kernel, &one, slice(64, 16))));
        ok(Hip::end(stream))
    };
    let first = record(&mut stream);
    let mut exec = ok(Hip::instantiate(&mut stream, first, Order::Chain));
    let per_instance = IN_PLACE_UPDATES_PER_INSTANCE;
    let (mut in_place, mut fresh, mut peak) = (0u32, 0u32, 0);
    for _ in 0..10_000 {
        let recording = record(&mut stream);
        match ok(Hip::update(&mut stream, &mut exec, recording, Order::Chain)) {
            Updated::InPlace => in_place += 1,
            Updated::Topology(recording) => {
                assert_eq!(in_place, per_instance, "re-instantiated early or late");
                in_place = 0;
                fresh += 1;
                exec = ok(Hip::instantiate(&mut stream, recording, Order::Chain));
            }
        }
        peak = peak.max(fake.kernarg_bytes());
    }
    assert_eq!(fresh, 10_000 / (per_instance + 1));
    // One node's 256 bytes per in-place update, for one executable at most.
    assert!(
        peak <= std::ffi::c_long::from(per_instance) * 256,
        "kernel-argument space grew to {peak} bytes"
    );
    drop(exec);
    assert_eq!(fake.kernarg_bytes(), 0);
}

#[test]
fn in_place_updates_are_bounded_per_executable() {
    in_child(
        "in_place_updates_are_bounded_per_executable",
        updates_stay_flat,
    );
}

/// Truncated and overreaching code objects are refused before the
/// runtime is asked to load them.
fn truncated_images_are_refused(library: &Path, log: &Path) {
    let _fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open());
    // An ELF with one section of 64 bytes at `offset`, its header at 64.
    let elf = |offset: u64| {
        let mut image = code_object(b"FAKE");
        image.resize(192, 0);
        image[40..48].copy_from_slice(&64u64.to_le_bytes());
        image[58..60].copy_from_slice(&64u16.to_le_bytes());
        image[60..62].copy_from_slice(&1u16.to_le_bytes());
        image[68..72].copy_from_slice(&1u32.to_le_bytes());
        image[88..96].copy_from_slice(&offset.to_le_bytes());
        image[96..104].copy_from_slice(&64u64.to_le_bytes());
        image
    };
    // A bundle of one entry claiming `claimed` bytes of `entry`.
    let bundle = |entry: &[u8], claimed: u64| {
        let triple = b"hipv4-amdgcn-amd-amdhsa--gfx90a";
        let mut image = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
        image.extend_from_slice(&1u64.to_le_bytes());
        let offset = (image.len() + 24 + triple.len()) as u64;
        image.extend_from_slice(&offset.to_le_bytes());
        image.extend_from_slice(&claimed.to_le_bytes());
        image.extend_from_slice(&(triple.len() as u64).to_le_bytes());
        image.extend_from_slice(triple);
        image.extend_from_slice(entry);
        image
    };
    let load = |image: &[u8]| {
        // SAFETY: the fake runtime runs no GPU code.
        unsafe { Kernel::from_code_object(&device, image, "fill", Builtin::Fill.signature()) }
    };
    let whole = elf(128);
    let whole_bundle = bundle(&whole, whole.len() as u64);
    calls.take();
    let cases: [(&str, &[u8], &str); 4] = [
        ("truncated ELF", &whole[..100], "section header table"),
        ("section past the end", &elf(160), "section 0"),
        (
            "truncated bundle",
            &whole_bundle[..whole_bundle.len() - 10],
            "entry 0",
        ),
        (
            "bundle entry past the end",
            &bundle(&whole, 4096),
            "4096 bytes at offset",
        ),
    ];
    for (what, image, says) in cases {
        let (kernel, log) = compile_error(load(image));
        assert_eq!(kernel, "fill");
        assert!(log.contains(says), "{what}: {log}");
        assert!(calls.take().is_empty(), "{what} reached the runtime");
    }
    drop(ok(load(&whole)));
    drop(ok(load(&whole_bundle)));
    assert_eq!(
        calls.take(),
        [
            "hipModuleLoadData FAKE",
            "hipModuleUnload",
            "hipModuleLoadData __CL",
            "hipModuleUnload"
        ]
    );
}

#[test]
fn truncated_code_objects_are_refused_without_loading() {
    in_child(
        "truncated_code_objects_are_refused_without_loading",
        truncated_images_are_refused,
    );
}

impl Fake {
    /// Make the next call of the fake's function `name` answer `code`.
    fn fail_next_call(&self, name: &str, code: c_int) {
        let name = std::ffi::CString::new(name).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: `void fake_fail_next_call(const char*, int)`.
        let fail = unsafe {
            self.get::<unsafe extern "C" fn(*const std::ffi::c_char, c_int)>("fake_fail_next_call")
        };
        // SAFETY: a NUL-terminated string the fake copies, and a value.
        unsafe { fail(name.as_ptr(), code) };
    }
}

/// An event recorded on stream A (the child's first stream) and waited
/// for by B: the calls in order, the wait between the two streams, the
/// destroy on drop; an event of the other device refused before the
/// runtime sees it; and each refusal of the runtime as a `DriverError`.
fn events_across_streams(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open_index(0));
    let mut a = ok(Hip::create_stream(&device));
    let mut b = ok(Hip::create_stream(&device));
    calls.take();

    let event = ok(Hip::record_event(&mut a));
    assert_eq!(
        calls.take(),
        ["hipEventCreateWithFlags flags=2", "hipEventRecord"]
    );
    ok(Hip::wait_event(&mut b, &event));
    assert_eq!(calls.take(), ["hipStreamWaitEvent flags=0"]);
    assert_eq!(
        fake.query("fake_last_wait"),
        100,
        "B (stream 1) did not wait for an event recorded on A (stream 0)"
    );
    drop(event);
    assert_eq!(calls.take(), ["hipEventDestroy"]);
    // B's next signal is a fresh point after the wait, so a fence on it
    // covers A's work too.
    ok(Hip::signal(&mut b));
    assert!(
        names(&calls.take()).contains(&"hipEventRecord"),
        "the signal after a wait recorded no event"
    );

    // An event of device 1, waited for on device 0.
    let one = ok(Hip::open_index(1));
    let mut on_one = ok(Hip::create_stream(&one));
    let foreign = ok(Hip::record_event(&mut on_one));
    calls.take();
    let refused = match Hip::wait_event(&mut b, &foreign) {
        Ok(()) => panic!("an event of another device was waited for"),
        Err(error) => error,
    };
    assert_eq!(refused.backend, "hip");
    assert_eq!(refused.op, "wait for an event");
    assert!(refused.message.contains("device 1"), "{refused}");
    assert!(
        names(&calls.take())
            .iter()
            .all(|name| *name != "hipStreamWaitEvent"),
        "the runtime was asked to wait for another device's event"
    );
    // Destroyed on its own device, the caller's put back after.
    drop(foreign);
    assert_eq!(
        calls.take(),
        ["hipSetDevice 1", "hipEventDestroy", "hipSetDevice 0"]
    );

    // The runtime's refusals, in its own words.
    fake.fail_next_call("hipEventCreateWithFlags", 2);
    let message = refusal(Hip::record_event(&mut a));
    assert!(message.contains("record an event"), "{message}");
    assert!(message.contains("hipErrorOutOfMemory"), "{message}");
    assert_eq!(calls.take(), ["hipEventCreateWithFlags -> 2"]);

    fake.fail_next_call("hipEventRecord", 400);
    let message = refusal(Hip::record_event(&mut a));
    assert!(message.contains("hipErrorInvalidHandle"), "{message}");
    assert_eq!(
        calls.take(),
        [
            "hipEventCreateWithFlags flags=2",
            "hipEventRecord -> 400",
            "hipEventDestroy"
        ],
        "the event whose record failed was not destroyed"
    );

    let event = ok(Hip::record_event(&mut a));
    fake.fail_next_call("hipStreamWaitEvent", 400);
    let message = refusal(Hip::wait_event(&mut b, &event));
    assert!(message.contains("wait for an event"), "{message}");
    assert!(message.contains("hipErrorInvalidHandle"), "{message}");
    calls.take();
    // A destroy the runtime refuses is logged, not a panic.
    fake.fail_next_call("hipEventDestroy", 400);
    drop(event);
    assert_eq!(calls.take(), ["hipEventDestroy -> 400"]);
    drop(on_one);
    drop(a);
    drop(b);
}

#[test]
fn events_order_streams_and_refusals_are_errors() {
    in_child(
        "events_order_streams_and_refusals_are_errors",
        events_across_streams,
    );
}

impl Fake {
    /// The edges of the graph the fake last instantiated or updated from,
    /// as node positions, sorted.
    fn graph_edges(&self) -> Vec<(usize, usize)> {
        const MAX: usize = 64;
        let (mut from, mut to) = ([0 as c_int; MAX], [0 as c_int; MAX]);
        // SAFETY: `long fake_graph_edges(int*, int*, long)`, which writes at
        // most `max` entries of each array.
        let get = unsafe {
            self.get::<unsafe extern "C" fn(*mut c_int, *mut c_int, std::ffi::c_long) -> std::ffi::c_long>(
                "fake_graph_edges",
            )
        };
        // SAFETY: both arrays hold `MAX` ints.
        let count = unsafe { get(from.as_mut_ptr(), to.as_mut_ptr(), MAX as std::ffi::c_long) };
        let count = usize::try_from(count).unwrap_or_else(|_| panic!("{count} edges"));
        assert!(count <= MAX, "the fake holds {count} edges");
        let position = |n: c_int| usize::try_from(n).unwrap_or_else(|_| panic!("node {n}"));
        let mut edges: Vec<(usize, usize)> = from[..count]
            .iter()
            .zip(&to[..count])
            .map(|(&a, &b)| (position(a), position(b)))
            .collect();
        edges.sort_unstable();
        edges
    }

    /// Make captures put every node after the first (no chain), or not.
    fn branch_captures(&self, on: bool) {
        self.set_int("fake_set_branch_captures", c_int::from(on));
    }
}

/// A dependency graph over `nodes` operations with these edges.
fn deps(nodes: usize, edges: &[(usize, usize)]) -> Dependencies {
    Dependencies {
        nodes,
        edges: edges.to_vec(),
        ..Dependencies::default()
    }
}

/// Whether any call rewrote a graph's edges.
fn rewrote_edges(calls: &[String]) -> bool {
    names(calls).iter().any(|name| {
        name.starts_with("hipGraphAddDependencies")
            || name.starts_with("hipGraphRemoveDependencies")
    })
}

/// Records `launches` launches of `fill`, each on its own part of a page.
struct Recorder {
    device: Arc<Device>,
    stream: Stream,
    page: backend_hip::DevicePage,
    kernel: Kernel,
}

impl Recorder {
    fn new() -> Self {
        let device = ok(Hip::open());
        let mut stream = ok(Hip::create_stream(&device));
        let page = ok(Hip::allocate_device_page(&mut stream, 1024));
        let kernel = fill_kernel(&device);
        Self {
            device,
            stream,
            page,
            kernel,
        }
    }

    fn record(&mut self, launches: u64) -> backend_hip::Recording {
        ok(Hip::begin(&mut self.stream));
        for i in 0..launches {
            let slice = |offset, len| DeviceSlice::<Hip> {
                page: &self.page,
                offset,
                len,
            };
            let one = [Binding {
                slice: slice(i * 64, 32),
                access: Access::Write,
            }];
            ok(Hip::launch(
                &mut self.stream,
                fill_on(&self.kernel, &one, slice(i * 64 + 32, 16)),
            ));
        }
        ok(Hip::end(&mut self.stream))
    }

    fn instantiate(
        &mut self,
        launches: u64,
        order: Order<'_>,
    ) -> Result<backend_hip::Executable, capture_core::DriverError> {
        let recording = self.record(launches);
        Hip::instantiate(&mut self.stream, recording, order)
    }

    fn update(
        &mut self,
        exec: &mut backend_hip::Executable,
        launches: u64,
        order: Order<'_>,
    ) -> Result<Updated<backend_hip::Recording>, capture_core::DriverError> {
        let recording = self.record(launches);
        Hip::update(&mut self.stream, exec, recording, order)
    }

    fn release(mut self) {
        Hip::release_device_page(&mut self.stream, self.page);
        drop(self.kernel);
        drop(self.device);
    }
}

/// Four launches instantiated as the chain and as their dependency graph;
/// a capture that is no chain refused the dependency graph.
fn dependency_edges(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let mut recorder = Recorder::new();
    calls.take();

    let exec = ok(recorder.instantiate(4, Order::Chain));
    assert_eq!(fake.graph_edges(), [(0, 1), (1, 2), (2, 3)]);
    assert!(
        !rewrote_edges(&calls.take()),
        "the chain's edges were rewritten"
    );
    drop(exec);

    let two_pairs = deps(4, &[(0, 2), (1, 3)]);
    let exec = ok(recorder.instantiate(4, Order::Dependencies(&two_pairs)));
    assert_eq!(fake.graph_edges(), [(0, 2), (1, 3)]);
    let made = calls.take();
    let rewrites: Vec<&String> = made
        .iter()
        .filter(|call| call.contains("Dependencies"))
        .collect();
    assert_eq!(
        rewrites,
        ["hipGraphRemoveDependencies 3", "hipGraphAddDependencies 2"]
    );
    assert_eq!(
        names(&after(&made, "hipGraphRemoveDependencies")).last(),
        Some(&"hipGraphInstantiate"),
        "the edges were not rewritten before the instantiation: {made:?}"
    );
    drop(exec);

    // Dependencies that are the chain need no rewriting; none at all drop
    // every edge.
    let chain = deps(3, &[(0, 1), (1, 2)]);
    let exec = ok(recorder.instantiate(3, Order::Dependencies(&chain)));
    assert_eq!(fake.graph_edges(), [(0, 1), (1, 2)]);
    assert!(!rewrote_edges(&calls.take()));
    let none = deps(3, &[]);
    let free = ok(recorder.instantiate(3, Order::Dependencies(&none)));
    assert_eq!(fake.graph_edges(), []);
    drop((exec, free));

    // A capture that is no chain: its nodes cannot be matched to the
    // launches, so the dependency graph is refused; as captured it runs.
    fake.branch_captures(true);
    let edges = deps(3, &[(0, 2)]);
    let refused = match recorder.instantiate(3, Order::Dependencies(&edges)) {
        Ok(_) => panic!("a capture that is no chain took dependency edges"),
        Err(error) => error,
    };
    assert_eq!(refused.backend, "hip");
    assert_eq!(refused.op, "instantiate");
    assert!(refused.message.contains("not one chain"), "{refused}");
    assert!(
        refused
            .message
            .contains("operation 0 is followed by more than one"),
        "{refused}"
    );
    let exec = ok(recorder.instantiate(3, Order::Chain));
    assert_eq!(fake.graph_edges(), [(0, 1), (0, 2)]);
    fake.branch_captures(false);
    drop(exec);
    recorder.release();
}

#[test]
fn graphs_take_their_dependency_edges_or_keep_the_chain() {
    in_child(
        "graphs_take_their_dependency_edges_or_keep_the_chain",
        dependency_edges,
    );
}

/// Updates in place with the same edges; with other edges (or the chain)
/// the recording comes back and instantiates with its own.
fn update_edges(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let mut recorder = Recorder::new();
    let two_pairs = deps(4, &[(0, 2), (1, 3)]);
    let crossed = deps(4, &[(0, 3), (1, 2)]);
    let mut exec = ok(recorder.instantiate(4, Order::Dependencies(&two_pairs)));
    calls.take();

    match ok(recorder.update(&mut exec, 4, Order::Dependencies(&two_pairs))) {
        Updated::InPlace => {}
        Updated::Topology(_) => panic!("the same edges were not updated in place"),
    }
    assert!(names(&calls.take()).contains(&"hipGraphExecUpdate"));
    assert_eq!(fake.graph_edges(), [(0, 2), (1, 3)]);

    let back = match ok(recorder.update(&mut exec, 4, Order::Dependencies(&crossed))) {
        Updated::Topology(recording) => recording,
        Updated::InPlace => panic!("other edges were updated in place"),
    };
    assert!(
        !names(&calls.take()).contains(&"hipGraphExecUpdate"),
        "the runtime was asked to update with other edges"
    );
    // Instantiated as capture-core does with a recording handed back: its
    // edges are already the dependencies'.
    exec = ok(Hip::instantiate(
        &mut recorder.stream,
        back,
        Order::Dependencies(&crossed),
    ));
    assert!(!rewrote_edges(&calls.take()));
    assert_eq!(fake.graph_edges(), [(0, 3), (1, 2)]);

    // The chain is other edges too; a handed-back recording gets its chain
    // back when instantiated as one.
    let back = match ok(recorder.update(&mut exec, 4, Order::Chain)) {
        Updated::Topology(recording) => recording,
        Updated::InPlace => panic!("a chain updated a dependency graph in place"),
    };
    let dependencies_first = ok(Hip::instantiate(
        &mut recorder.stream,
        back,
        Order::Dependencies(&two_pairs),
    ));
    assert_eq!(fake.graph_edges(), [(0, 2), (1, 3)]);
    drop(dependencies_first);
    exec = ok(recorder.instantiate(4, Order::Chain));
    match ok(recorder.update(&mut exec, 4, Order::Chain)) {
        Updated::InPlace => {}
        Updated::Topology(_) => panic!("a chain was not updated in place"),
    }
    assert_eq!(fake.graph_edges(), [(0, 1), (1, 2), (2, 3)]);
    drop(exec);
    recorder.release();
}

#[test]
fn an_update_goes_in_place_only_with_the_same_edges() {
    in_child(
        "an_update_goes_in_place_only_with_the_same_edges",
        update_edges,
    );
}

/// A runtime without the edge functions: the dependency graph falls back to
/// the chain, and updates compare as chains.
fn fallback_to_chain(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let mut recorder = Recorder::new();
    let two_pairs = deps(4, &[(0, 2), (1, 3)]);
    let mut exec = ok(recorder.instantiate(4, Order::Dependencies(&two_pairs)));
    assert_eq!(fake.graph_edges(), [(0, 1), (1, 2), (2, 3)]);
    let crossed = deps(4, &[(0, 3), (1, 2)]);
    match ok(recorder.update(&mut exec, 4, Order::Dependencies(&crossed))) {
        Updated::InPlace => {}
        Updated::Topology(_) => panic!("two chains were not updated in place"),
    }
    assert!(!rewrote_edges(&calls.take()));
    drop(exec);
    recorder.release();
}

#[test]
fn a_runtime_without_the_edge_functions_keeps_the_chain() {
    in_child_built(
        "a_runtime_without_the_edge_functions_keeps_the_chain",
        fallback_to_chain,
        &["FAKE_HIP_NO_EDGE_FUNCTIONS"],
    );
}

impl Fake {
    /// What a library using HIP directly would do: set the calling thread's
    /// capture mode; the mode it had comes back.
    fn exchange_capture_mode(&self, mode: c_int) -> c_int {
        // SAFETY: `int hipThreadExchangeStreamCaptureMode(int*)`.
        let exchange = unsafe {
            self.get::<unsafe extern "C" fn(*mut c_int) -> c_int>(
                "hipThreadExchangeStreamCaptureMode",
            )
        };
        let mut mode = mode;
        // SAFETY: the pointer is a live local.
        assert_eq!(unsafe { exchange(&mut mode) }, 0);
        mode
    }
}

/// `hipStreamCaptureModeGlobal` and `hipStreamCaptureModeThreadLocal`.
const MODE_GLOBAL: c_int = 0;
const MODE_THREAD_LOCAL: c_int = 1;

/// While another thread captures in global mode: pages allocated and freed,
/// a module loaded and unloaded, a signal waited for and a stream destroyed
/// (which syncs it), from a thread in global mode (ROCm's default) and from
/// one in thread-local mode, all go ahead and leave that capture valid;
/// each call puts the thread's mode back as it found it.
fn beside_a_foreign_global_capture(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open());
    fake.set_int("fake_set_foreign_global_capture", 1);
    for mode in [MODE_GLOBAL, MODE_THREAD_LOCAL] {
        fake.exchange_capture_mode(mode);
        let left = |after: &str| {
            assert_eq!(
                fake.query("fake_capture_mode"),
                mode,
                "mode left after {after}"
            );
        };
        let mut stream = ok(Hip::create_stream(&device));
        let page = ok(Hip::allocate_device_page(&mut stream, 64));
        left("allocating");
        let host = ok(Hip::allocate_host_page(&mut stream, 64));
        let kernel = fill_kernel(&device);
        left("loading");
        let signal = ok(Hip::signal(&mut stream));
        ok(Hip::fence(&mut stream, signal));
        left("waiting");
        Hip::release_device_page(&mut stream, page);
        Hip::release_host_page(&mut stream, host);
        drop(kernel);
        left("freeing");
        drop(stream);
        left("destroying a stream");
    }
    let all = calls.all();
    assert!(
        all.iter().all(|call| !call.ends_with("-> 900")),
        "refused beside the capture: {all:?}"
    );
    for call in [
        "hipFree",
        "hipHostFree",
        "hipModuleUnload",
        "hipStreamSynchronize",
        "hipEventSynchronize",
    ] {
        assert_eq!(
            names(&all).iter().filter(|n| **n == call).count(),
            2,
            "{call}"
        );
    }
    assert_eq!(
        fake.query("fake_foreign_capture_status"),
        1,
        "the other library's capture was invalidated"
    );
    // The fake does refuse a thread left in global mode, and invalidates.
    fake.exchange_capture_mode(MODE_GLOBAL);
    // SAFETY: `int hipMalloc(void**, size_t)`.
    let malloc = unsafe {
        fake.get::<unsafe extern "C" fn(*mut *mut std::ffi::c_void, usize) -> c_int>("hipMalloc")
    };
    let mut ptr = std::ptr::null_mut();
    // SAFETY: the out-pointer is a live local.
    assert_eq!(unsafe { malloc(&mut ptr, 64) }, 900);
    assert_eq!(fake.query("fake_foreign_capture_status"), 2);
}

#[test]
fn calls_beside_another_librarys_global_capture_go_ahead_and_leave_it_valid() {
    in_child(
        "calls_beside_another_librarys_global_capture_go_ahead_and_leave_it_valid",
        beside_a_foreign_global_capture,
    );
}

/// What the backend logged in this process.
static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Logged;

impl log::Log for Logged {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        LOGGED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record.args().to_string());
    }

    fn flush(&self) {}
}

static LOGGER: Logged = Logged;

/// A runtime without `hipThreadExchangeStreamCaptureMode`: every call runs
/// in the thread's own mode, and the missing function is said once.
fn without_the_exchange(library: &Path, _log: &Path) {
    log::set_logger(&LOGGER).unwrap_or_else(|e| panic!("{e}"));
    log::set_max_level(log::LevelFilter::Info);
    let fake = Fake::open(library);
    let device = ok(Hip::open());
    for _ in 0..2 {
        let mut stream = ok(Hip::create_stream(&device));
        let page = ok(Hip::allocate_device_page(&mut stream, 64));
        Hip::release_device_page(&mut stream, page);
        drop(fill_kernel(&device));
    }
    assert_eq!(fake.query("fake_capture_mode"), MODE_GLOBAL);
    let logged = LOGGED.lock().unwrap_or_else(PoisonError::into_inner);
    let said = logged
        .iter()
        .filter(|line| line.contains("no hipThreadExchangeStreamCaptureMode"))
        .count();
    assert_eq!(said, 1, "{logged:?}");
}

#[test]
fn a_runtime_without_the_mode_exchange_runs_calls_in_the_threads_mode_and_says_so_once() {
    in_child_built(
        "a_runtime_without_the_mode_exchange_runs_calls_in_the_threads_mode_and_says_so_once",
        without_the_exchange,
        &["FAKE_HIP_NO_EXCHANGE"],
    );
}

impl Fake {
    /// `bytes` of device memory the caller allocates on device `ordinal`
    /// with its own `hipMalloc`, as another library would.
    fn malloc(&self, ordinal: c_int, bytes: usize) -> *mut c_void {
        let before = self.current_device();
        self.set_device(ordinal);
        // SAFETY: `int hipMalloc(void**, size_t)`.
        let malloc = unsafe {
            self.get::<unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int>("hipMalloc")
        };
        let mut pointer = std::ptr::null_mut();
        // SAFETY: the out-pointer is a live local.
        assert_eq!(unsafe { malloc(&mut pointer, bytes) }, 0);
        self.set_device(before);
        pointer
    }

    /// A stream the caller makes on device `ordinal` with its own
    /// `hipStreamCreateWithFlags`.
    fn stream(&self, ordinal: c_int) -> *mut c_void {
        let before = self.current_device();
        self.set_device(ordinal);
        // SAFETY: `int hipStreamCreateWithFlags(hipStream_t*, unsigned)`.
        let create = unsafe {
            self.get::<unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int>(
                "hipStreamCreateWithFlags",
            )
        };
        let mut stream = std::ptr::null_mut();
        // SAFETY: the out-pointer is a live local.
        assert_eq!(unsafe { create(&mut stream, 1) }, 0);
        self.set_device(before);
        stream
    }

    /// How many times the fake destroyed `stream`.
    fn destroyed(&self, stream: *mut c_void) -> c_int {
        // SAFETY: `int fake_stream_destroyed(void*)`.
        let count = unsafe {
            self.get::<unsafe extern "C" fn(*mut c_void) -> c_int>("fake_stream_destroyed")
        };
        // SAFETY: a plain handle.
        unsafe { count(stream) }
    }

    /// A function `name` of a module the caller loaded itself.
    fn function(&self, name: &str) -> *mut c_void {
        // SAFETY: `int hipModuleGetFunction(hipFunction_t*, hipModule_t,
        // const char*)`.
        let get = unsafe {
            self.get::<unsafe extern "C" fn(
                *mut *mut c_void,
                *mut c_void,
                *const std::ffi::c_char,
            ) -> c_int>("hipModuleGetFunction")
        };
        let name = std::ffi::CString::new(name).unwrap_or_default();
        let mut function = std::ptr::null_mut();
        // SAFETY: the out-pointer is a live local; the name ends in NUL.
        let code = unsafe { get(&mut function, std::ptr::null_mut(), name.as_ptr()) };
        assert_eq!(code, 0);
        function
    }

    /// The caller's own launch of `function` with `pointers` on `stream`.
    fn launch(&self, function: *mut c_void, stream: *mut c_void, pointers: &mut [*mut c_void]) {
        // SAFETY: `hipModuleLaunchKernel`'s prototype.
        let launch = unsafe { self.get::<ffi::HipModuleLaunchKernel>("hipModuleLaunchKernel") };
        let mut args: Vec<*mut c_void> = pointers
            .iter_mut()
            .map(|p| std::ptr::from_mut(p).cast::<c_void>())
            .collect();
        // SAFETY: one argument per pointer the function's name declares,
        // each pointing at a live slot.
        let code = unsafe {
            launch(
                function,
                1,
                1,
                1,
                64,
                1,
                1,
                0,
                stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(code, 0);
    }
}

/// Set when dropped: a keep-alive whose drop can be watched.
struct Watched(Arc<AtomicBool>);

impl Drop for Watched {
    fn drop(&mut self) {
        self.0.store(true, AtomicOrdering::SeqCst);
    }
}

/// A keep-alive and the flag its drop sets.
fn watched() -> (Watched, Arc<AtomicBool>) {
    let flag = Arc::new(AtomicBool::new(false));
    (Watched(Arc::clone(&flag)), flag)
}

/// The error of a refusal given a watched keep-alive, after checking that
/// the refusal handed that keep-alive back undropped.
fn handed_back<T>(refuse: impl FnOnce(Watched) -> Result<T, Rejected<Watched>>) -> Error {
    let (keep, dropped) = watched();
    let Err(rejected) = refuse(keep) else {
        panic!("expected a refusal");
    };
    let (error, kept) = rejected.into_parts();
    assert!(
        !dropped.load(AtomicOrdering::SeqCst),
        "the refusal dropped the caller's keep-alive ({error})"
    );
    drop(kept);
    assert!(
        dropped.load(AtomicOrdering::SeqCst),
        "what was handed back is what was given"
    );
    error
}

/// `fill`, as a function the caller loaded, made a kernel of `device`.
fn raw_fill(fake: &Fake, device: &Arc<Device>) -> capture_core::Kernel<Hip> {
    // SAFETY: the fake runtime runs no GPU code; launches only log.
    let kernel =
        unsafe { Kernel::from_raw(device, fake.function("fill"), Builtin::Fill.signature(), ()) };
    capture_core::Kernel::new(ok(kernel))
}

const N: usize = 64;

fn fill_info() -> [u8; BuiltinInfo::SIZE] {
    BuiltinInfo::new(N as u32, 1.0).to_bytes()
}

/// Memory the caller allocated, imported, launched on, captured and
/// replayed: never freed here, its keep-alive dropped once the buffer and
/// the graph holding it are gone. Each bad import is refused with its
/// reason and changes nothing.
fn imports(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open_index(0));
    let other = ok(Hip::open_index(1));
    let client = Client::<Hip>::with_device(Arc::clone(&device), Config::default());
    let stream = ok(client.create_stream());
    let fill = raw_fill(&fake, &device);
    let pointer = fake.malloc(0, N * 4);
    let (keep, dropped) = watched();
    // SAFETY: the fake's allocation of N floats, live for the process.
    let page = ok(unsafe { DevicePage::from_raw(&device, pointer, (N * 4) as u64, keep) });
    assert_eq!((page.device_ptr(), page.len()), (pointer, (N * 4) as u64));
    let x = client
        .import(stream, page)
        .map_err(|rejected| rejected.error)
        .unwrap_or_else(|e| panic!("{e}"));
    calls.take();
    ok(client.launch(stream, &fill, [1, 1, 1], &[&x], &fill_info(), &[]));
    let launched = format!("args={pointer:p},");
    assert!(
        calls.take().iter().any(|c| c.contains(&launched)),
        "the launch binds the imported address"
    );
    let (graph, ()) = ok(client.capture(stream, |_| {
        client.launch(stream, &fill, [1, 1, 1], &[&x], &fill_info(), &[])
    }));
    drop(x);
    ok(client.sync(stream));
    assert!(!dropped.load(AtomicOrdering::SeqCst), "the graph holds it");
    ok(graph.replay());
    drop(graph);
    ok(client.sync(stream));
    assert!(
        dropped.load(AtomicOrdering::SeqCst),
        "let go with the graph"
    );
    let freed = format!("hipFree {pointer:p}");
    assert!(
        !calls.all().contains(&freed),
        "imported memory is never freed here"
    );

    // Bad imports: the keep-alive dropped, the reason said.
    let refused = |device: &Arc<Device>, pointer: *mut c_void, len: u64| {
        handed_back(|keep| {
            // SAFETY: refused before any use.
            unsafe { DevicePage::from_raw(device, pointer, len, keep) }
        })
        .to_string()
    };
    let says = |message: String, what: &str| {
        assert!(message.contains(what), "{message:?} lacks {what:?}");
    };
    let mine = fake.malloc(0, 256);
    says(refused(&device, std::ptr::null_mut(), 16), "null");
    says(refused(&device, mine, 0), "empty");
    let host = [0u8; 64];
    says(
        refused(&device, host.as_ptr().cast_mut().cast(), 64),
        "knows no device memory",
    );
    let theirs = fake.malloc(1, 256);
    says(
        refused(&device, theirs, 256),
        "belongs to device 1, not device 0",
    );
    says(
        refused(&device, mine.wrapping_byte_add(128), 132),
        "run past the end of their allocation (256 bytes",
    );
    // Nothing changed: the tail imports.
    // SAFETY: the fake's 256-byte allocation, live for the process.
    let tail = ok(unsafe { DevicePage::from_raw(&device, mine.wrapping_byte_add(128), 128, ()) });
    client
        .import(stream, tail)
        .map_err(|rejected| rejected.error)
        .unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: device 1's allocation, live for the process.
    let foreign = ok(unsafe { DevicePage::from_raw(&other, theirs, 256, ()) });
    let (err, _) = client
        .import(stream, foreign)
        .err()
        .unwrap_or_else(|| panic!("another device's page was taken"))
        .into_parts();
    assert!(
        matches!(err, Error::OtherDevice { what: "page", .. }),
        "{err}"
    );
    let mut raw = ok(Hip::create_stream(&device));
    let own = ok(Hip::allocate_device_page(&mut raw, 64));
    let (err, own) = client
        .import(stream, own)
        .err()
        .unwrap_or_else(|| panic!("a pool's page was taken"))
        .into_parts();
    assert!(
        matches!(err, Error::NotImported { backend: "hip" }),
        "{err}"
    );
    Hip::release_device_page(&mut raw, own);
    // A device opened by ordinal shares the runtime's context: the same
    // GPU's memory is its.
    let again = ok(Device::from_ordinal(0));
    assert_eq!(again.ordinal(), 0);
    // SAFETY: as above.
    let shared = ok(unsafe { DevicePage::from_raw(&again, mine, 64, ()) });
    client
        .import(stream, shared)
        .map_err(|rejected| rejected.error)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn imported_memory_is_launched_captured_and_let_go_and_bad_imports_are_refused() {
    in_child(
        "imported_memory_is_launched_captured_and_let_go_and_bad_imports_are_refused",
        imports,
    );
}

/// A stream the caller made, adopted: a capture on it keeps the caller's own
/// launch issued through the raw handle between begin and instantiate (on a
/// stream of the library's, the same launch makes instantiate refuse), and
/// the stream is never destroyed. Bad handles are refused.
fn adopted_streams(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open_index(0));
    let other = ok(Hip::open_index(1));
    let client = Client::<Hip>::with_device(Arc::clone(&device), Config::default());
    let fill = raw_fill(&fake, &device);
    let caller = fake.function("caller__p");
    let mine = fake.malloc(0, 64);
    let record = |stream: StreamId, raw: *mut c_void| {
        let x = ok(client.create_f32(stream, &[0.0; N]));
        let window = ok(client.prepare(stream));
        ok(client.launch(stream, &fill, [1, 1, 1], &[&x], &fill_info(), &[]));
        ok(client.begin(stream, window));
        ok(client.launch(stream, &fill, [1, 1, 1], &[&x], &fill_info(), &[]));
        fake.launch(caller, raw, &mut [mine]);
        client.instantiate(stream, window)
    };

    let raw = fake.stream(0);
    let (keep, dropped) = watched();
    // SAFETY: the fake's stream lives for the process; the caller's launch
    // touches only memory the library does not use.
    let adopted = ok(unsafe { Stream::from_raw(&device, raw, keep) });
    assert_eq!(adopted.as_raw(), raw);
    let stream = ok(client.adopt_stream(adopted));
    calls.take();
    let graph = record(stream, raw).unwrap_or_else(|e| panic!("{e}"));
    let recorded = after(&calls.take(), "hipStreamBeginCapture");
    let caller_at = recorded
        .iter()
        .position(|c| c.starts_with("hipModuleLaunchKernel caller__p"))
        .unwrap_or_else(|| panic!("no caller's launch in {recorded:?}"));
    let end_at = recorded
        .iter()
        .position(|c| c == "hipStreamEndCapture")
        .unwrap_or_else(|| panic!("no end in {recorded:?}"));
    assert!(caller_at < end_at, "the caller's launch lies in the window");
    // SAFETY: `long fake_last_instantiated_nodes(void)`.
    let nodes = unsafe {
        fake.get::<unsafe extern "C" fn() -> std::ffi::c_long>("fake_last_instantiated_nodes")
    };
    // SAFETY: no arguments.
    let held = unsafe { nodes() };
    let library_nodes = recorded
        .iter()
        .take(end_at)
        .filter(|c| c.starts_with("hipModuleLaunchKernel fill") || c.starts_with("hipMemcpy"))
        .count();
    assert_eq!(
        held as usize,
        library_nodes + 1,
        "the caller's node is in the graph"
    );
    ok(graph.replay());
    drop(graph);
    ok(client.destroy_stream(stream));
    assert_eq!(
        fake.destroyed(raw),
        0,
        "the caller's stream is the caller's"
    );
    assert!(dropped.load(AtomicOrdering::SeqCst), "its keep-alive went");

    // On a stream of the library's, a node it did not issue is lost work's
    // mirror image, and refused.
    let own_stream = ok(Hip::create_stream(&device));
    let own_raw = own_stream.as_raw();
    let own = ok(client.adopt_stream(own_stream));
    let err = record(own, own_raw)
        .err()
        .unwrap_or_else(|| panic!("a graph with a node nobody recorded"));
    assert!(err.to_string().contains("added"), "{err}");

    // Bad handles.
    let refused = |device: &Arc<Device>, raw: *mut c_void| {
        handed_back(|keep| {
            // SAFETY: refused before any use.
            unsafe { Stream::from_raw(device, raw, keep) }
        })
        .to_string()
    };
    assert!(refused(&device, std::ptr::null_mut()).contains("null"));
    calls.take();
    let legacy = refused(&device, std::ptr::without_provenance_mut(1));
    assert!(legacy.contains("legacy"), "{legacy}");
    assert!(
        calls.take().is_empty(),
        "refused before the runtime is asked"
    );
    assert!(refused(&device, std::ptr::without_provenance_mut(2)).contains("per-thread"));
    let theirs = fake.stream(1);
    assert!(refused(&device, theirs).contains("belongs to device 1, not device 0"));
    // SAFETY: device 1's stream, live for the process.
    let foreign = ok(unsafe { Stream::from_raw(&other, theirs, ()) });
    let err = client
        .adopt_stream(foreign)
        .err()
        .unwrap_or_else(|| panic!("another device's stream was taken"));
    assert!(matches!(err, Error::OtherDevice { .. }), "{err}");
    assert_eq!(fake.destroyed(theirs), 0);
}

#[test]
fn an_adopted_streams_graph_keeps_the_callers_own_launch_and_the_stream_outlives_it() {
    in_child(
        "an_adopted_streams_graph_keeps_the_callers_own_launch_and_the_stream_outlives_it",
        adopted_streams,
    );
}

/// Kernels over functions the caller loaded: checked against the device's
/// and the function's limits, their keep-alive dropped with them, and no
/// module unloaded.
fn raw_kernels(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open_index(0));
    let (keep, dropped) = watched();
    // SAFETY: the fake runtime runs no GPU code.
    let kernel = ok(unsafe {
        Kernel::from_raw(
            &device,
            fake.function("fill"),
            Builtin::Fill.signature(),
            keep,
        )
    });
    calls.take();
    drop(kernel);
    assert!(dropped.load(AtomicOrdering::SeqCst));
    assert!(
        !names(&calls.take()).contains(&"hipModuleUnload"),
        "no module unloaded"
    );
    // Each refusal hands the keep-alive back.
    let refused = |function: *mut c_void, signature: Signature| {
        compile_error(Err(handed_back(|keep| {
            // SAFETY: refused before any use.
            unsafe { Kernel::from_raw(&device, function, signature, keep) }
        })))
    };
    let (_, log_text) = refused(std::ptr::null_mut(), Builtin::Fill.signature());
    assert!(log_text.contains("null"), "{log_text}");
    let (_, log_text) = refused(fake.function("narrow__pp"), Builtin::Fill.signature());
    assert!(log_text.contains("at most 32 threads"), "{log_text}");
    let too_big = Signature::new("fill")
        .binding(Access::Write)
        .info(16)
        .workgroup([2048, 1, 1]);
    refused(fake.function("fill"), too_big);
}

#[test]
fn kernels_over_the_callers_functions_are_checked_and_unload_nothing() {
    in_child(
        "kernels_over_the_callers_functions_are_checked_and_unload_nothing",
        raw_kernels,
    );
}

/// A conditional recorded in a capture is refused with
/// `Error::NoConditionals` naming HIP, the window with it, and the stream
/// records again at once; outside a capture a loop and an if run eagerly,
/// on the host's word, each body's calls made as often as it runs.
fn conditionals_refused_and_eager(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open_index(0));
    let client = Client::<Hip>::with_device(Arc::clone(&device), Config::default());
    let stream = ok(client.create_stream());
    let fill = raw_fill(&fake, &device);
    let x = ok(client.create_f32(stream, &[0.0; N]));
    let flag = ok(client.create(stream, &1u32.to_le_bytes()));
    let set = |value: u32| client.write(&flag, &value.to_le_bytes());
    let launch = || client.launch(stream, &fill, [1, 1, 1], &[&x], &fill_info(), &[]);
    let launches = |calls: &[String]| {
        names(calls)
            .iter()
            .filter(|&&name| name == "hipModuleLaunchKernel")
            .count()
    };

    let refused = client
        .capture(stream, |_| {
            client
                .while_flag(stream, &flag, 3, || {
                    launch()?;
                    set(0)
                })
                .map(drop)
        })
        .map(drop)
        .expect_err("a recorded loop is refused");
    let Error::NoConditionals { backend, reason } = refused.root() else {
        panic!("another refusal: {refused}");
    };
    assert_eq!(*backend, "hip");
    assert!(
        reason.contains("HIP graphs have no conditional nodes"),
        "{reason}"
    );
    assert!(refused.to_string().contains("hip"), "{refused}");
    let (graph, ()) = ok(client.capture(stream, |_| launch()));
    ok(graph.replay());
    ok(client.sync(stream));

    // The loop's body clears the flag: one iteration.
    ok(set(1));
    calls.take();
    let ran = ok(client.while_flag(stream, &flag, 3, || {
        launch()?;
        set(0)
    }));
    assert_eq!(
        ran,
        Ran::Loop {
            iterations: 1,
            bound_reached: false
        }
    );
    assert_eq!(launches(&calls.take()), 1);
    // A flag that stays set: the bound stops the loop and says so.
    ok(set(1));
    let ran = ok(client.while_flag(stream, &flag, 3, launch));
    assert_eq!(
        ran,
        Ran::Loop {
            iterations: 3,
            bound_reached: true
        }
    );
    assert_eq!(launches(&calls.take()), 3);
    // An if/else takes the branch the flag says.
    ok(set(0));
    let ran = ok(client.if_else_flag(stream, &flag, || Ok(()), launch));
    assert_eq!(ran, Ran::Branch(Some(1)));
    assert_eq!(launches(&calls.take()), 1);
}

#[test]
fn a_recorded_conditional_is_refused_naming_hip_and_runs_eagerly_outside_a_capture() {
    in_child(
        "a_recorded_conditional_is_refused_naming_hip_and_runs_eagerly_outside_a_capture",
        conditionals_refused_and_eager,
    );
}

/// What the scenarios' foreign operation does.
#[derive(Clone, Copy, PartialEq)]
enum Code {
    /// The caller's own launch of `caller__p` over its one buffer.
    Launches,
    /// An error instead.
    Fails,
    /// A panic instead.
    Panics,
}

/// The foreign operation the scenarios issue, doing what `code` says on
/// the stream it is handed; each call notes whether the stream captured.
fn caller_op(
    library: &Path,
    device: &Arc<Device>,
    code: Code,
    seen: &Arc<Mutex<Vec<bool>>>,
) -> capture_core::Kernel<Hip> {
    let fake = Fake::open(library);
    let caller = fake.function("caller__p") as usize;
    let seen = Arc::clone(seen);
    let op = move |s: &backend_hip::ForeignStream<'_>| {
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(s.capturing);
        match code {
            Code::Fails => return Err("the foreign operation refuses".to_owned()),
            Code::Panics => panic!("deliberate panic in a foreign operation"),
            Code::Launches => {}
        }
        let [buffer] = s.buffers else {
            return Err("one buffer".to_owned());
        };
        fake.launch(caller as *mut c_void, s.stream, &mut [buffer.address]);
        Ok(())
    };
    // SAFETY: the fake runtime runs no GPU code; the launch is logged only.
    let kernel = unsafe { Kernel::foreign(device, "caller_op", &[Access::Write], op) };
    capture_core::Kernel::new(ok(kernel))
}

/// Foreign operations: run at once on the stream itself; inside a window
/// captured on a side stream into a graph of their own, which becomes one
/// child graph node after what the stream's next node would follow, the
/// stream then following it; one node per operation in the instantiated
/// graph; failing or panicking code refusing the call and dooming the
/// window; and its code dropped only once no stream of the GPU records.
fn foreign_operations(library: &Path, log: &Path) {
    let fake = Fake::open(library);
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };
    let device = ok(Hip::open_index(0));
    let client = Client::<Hip>::with_device(Arc::clone(&device), Config::default());
    let stream = ok(client.create_stream());
    let fill = raw_fill(&fake, &device);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let op = caller_op(library, &device, Code::Launches, &seen);
    let x = ok(client.create_f32(stream, &[0.0; N]));
    let fill_x = || ok(client.launch(stream, &fill, [1, 1, 1], &[&x], &fill_info(), &[]));
    let open = || {
        let window = ok(client.prepare(stream));
        ok(client.begin(stream, window));
        window
    };
    fill_x();
    calls.take();
    ok(client.foreign(stream, &op, &[&x]));
    let at_once = calls.take();
    assert_eq!(
        names(&at_once),
        ["hipModuleLaunchKernel"],
        "run at once on the stream: {at_once:?}"
    );
    assert_eq!(seen.lock().unwrap().pop(), Some(false));

    let window = open();
    fill_x();
    ok(client.foreign(stream, &op, &[&x]));
    fill_x();
    let graph = ok(client.instantiate(stream, window));
    let recorded = calls.take();
    let from = recorded
        .iter()
        .position(|c| c.starts_with("hipModuleLaunchKernel caller__p"))
        .unwrap_or_else(|| panic!("no caller's launch in {recorded:?}"));
    assert_eq!(
        names(&recorded[from - 1..from + 6]),
        [
            "hipStreamBeginCapture",
            "hipModuleLaunchKernel",
            "hipStreamEndCapture",
            "hipStreamGetCaptureInfo_v2",
            "hipGraphAddChildGraphNode",
            "hipStreamUpdateCaptureDependencies",
            "hipGraphDestroy",
        ],
        "{recorded:?}"
    );
    assert_eq!(
        recorded[from + 3],
        "hipGraphAddChildGraphNode child=1 deps=1"
    );
    assert_eq!(
        seen.lock().unwrap().pop(),
        Some(true),
        "handed a capturing stream"
    );
    // SAFETY: `long fake_last_instantiated_nodes(void)`.
    let nodes = unsafe {
        fake.get::<unsafe extern "C" fn() -> std::ffi::c_long>("fake_last_instantiated_nodes")
    };
    // SAFETY: no arguments.
    let held = unsafe { nodes() };
    assert_eq!(held, 3, "two launches and one child graph node");
    ok(graph.replay());
    ok(client.sync(stream));

    // First in its window, it follows nothing.
    let window = open();
    calls.take();
    ok(client.foreign(stream, &op, &[&x]));
    let first = ok(client.instantiate(stream, window));
    assert!(
        calls
            .take()
            .contains(&"hipGraphAddChildGraphNode child=1 deps=0".to_owned())
    );
    // SAFETY: no arguments.
    let held = unsafe { nodes() };
    assert_eq!(held, 1);
    ok(first.replay());

    // A runtime answering the capture's state wrongly: refused, with what
    // it said, and the window doomed.
    // SAFETY: `void fake_next_capture_info(int, int)`.
    let wrong = unsafe { fake.get::<unsafe extern "C" fn(c_int, c_int)>("fake_next_capture_info") };
    for (status, null, says) in [
        (2, 0, "not capturing (capture status 2)"),
        (-1, 1, "1 dependencies of the capture, and no nodes"),
    ] {
        let window = open();
        fill_x();
        // SAFETY: plain values.
        unsafe { wrong(status, null) };
        let err = client
            .foreign(stream, &op, &[&x])
            .expect_err("a wrong answer is refused");
        assert!(err.to_string().contains(says), "{err}");
        assert!(client.instantiate(stream, window).is_err());
        ok(client.write_f32(&x, &[0.0; N]));
    }

    // A side capture the runtime fails to end: an invalidated side stream
    // is destroyed, an active one left alone, and the next foreign
    // operation captures on a fresh one.
    for active in [false, true] {
        let window = open();
        fill_x();
        if active {
            fake.fail_next_end_active(901);
        } else {
            fake.fail_next_end(901, true);
        }
        calls.take();
        let err = client
            .foreign(stream, &op, &[&x])
            .expect_err("a failed end");
        assert!(err.to_string().contains("could not be captured"), "{err}");
        let failed = calls.take();
        assert_eq!(
            failed.iter().filter(|c| *c == "hipStreamDestroy").count(),
            usize::from(!active),
            "{failed:?}"
        );
        assert!(client.instantiate(stream, window).is_err());
        ok(client.write_f32(&x, &[0.0; N]));
        let window = open();
        calls.take();
        ok(client.foreign(stream, &op, &[&x]));
        let again = calls.take();
        assert_eq!(
            names(&again[..2]),
            ["hipStreamCreateWithFlags", "hipStreamBeginCapture"],
            "{again:?}"
        );
        ok(client.instantiate(stream, window));
    }

    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("deliberate panic") {
            report(info);
        }
    }));
    for (code, says) in [(Code::Fails, "refuses"), (Code::Panics, "panicked")] {
        let failing = caller_op(library, &device, code, &seen);
        ok(client.write_f32(&x, &[0.0; N]));
        let window = open();
        let err = client
            .foreign(stream, &failing, &[&x])
            .expect_err("failing code is refused");
        assert!(err.to_string().contains(says), "{err}");
        let err = client
            .instantiate(stream, window)
            .expect_err("its window is doomed");
        assert!(err.to_string().contains(says), "{err}");
        assert!(matches!(client.read(&x), Err(Error::Claimed { .. })));
        let y = ok(client.create_f32(stream, &[0.0; N]));
        ok(client.foreign(stream, &op, &[&y]));
        ok(client.sync(stream));
    }

    // Dropped while a stream of the GPU records, its code (and what the
    // code owns: a rocBLAS handle, an RCCL communicator) goes only once
    // the recording ends.
    let (owned, dropped) = watched();
    let owner = move |_: &backend_hip::ForeignStream<'_>| {
        let _owned = &owned;
        Ok(())
    };
    // SAFETY: it enqueues nothing.
    let owner = ok(unsafe { Kernel::foreign(&device, "owns", &[Access::Write], owner) });
    let recording = ok(client.create_stream());
    let window = ok(client.prepare(recording));
    ok(client.begin(recording, window));
    drop(owner);
    assert!(
        !dropped.load(AtomicOrdering::SeqCst),
        "kept while recording"
    );
    drop(client.instantiate(recording, window));
    assert!(
        dropped.load(AtomicOrdering::SeqCst),
        "gone once no stream records"
    );
}

#[test]
fn foreign_operations_run_at_once_and_become_one_child_graph_node_in_a_window() {
    in_child(
        "foreign_operations_run_at_once_and_become_one_child_graph_node_in_a_window",
        foreign_operations,
    );
}

/// A runtime without the capture-node functions: a foreign operation runs
/// at once, and inside a window is refused with their names.
fn foreign_without_capture_nodes(library: &Path, _log: &Path) {
    let device = ok(Hip::open_index(0));
    let client = Client::<Hip>::with_device(Arc::clone(&device), Config::default());
    let stream = ok(client.create_stream());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let op = caller_op(library, &device, Code::Launches, &seen);
    let x = ok(client.create_f32(stream, &[0.0; N]));
    ok(client.foreign(stream, &op, &[&x]));
    let window = ok(client.prepare(stream));
    ok(client.begin(stream, window));
    let err = client
        .foreign(stream, &op, &[&x])
        .expect_err("refused in a window");
    assert!(
        err.to_string().contains("hipGraphAddChildGraphNode"),
        "{err}"
    );
    assert!(client.instantiate(stream, window).is_err());
    ok(client.foreign(stream, &op, &[&x]));
    ok(client.sync(stream));
}

#[test]
fn a_runtime_without_the_capture_node_functions_refuses_foreign_work_in_a_window() {
    in_child_built(
        "a_runtime_without_the_capture_node_functions_refuses_foreign_work_in_a_window",
        foreign_without_capture_nodes,
        &["FAKE_HIP_NO_CAPTURE_NODES"],
    );
}
