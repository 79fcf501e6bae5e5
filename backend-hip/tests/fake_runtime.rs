//! The driver contract against a stand-in runtime (`tests/fake_hip.c`),
//! built with the system C compiler and loaded through `CAPTURE_HIP_LIBRARY`,
//! so the order and arguments of the backend's calls are checked on a
//! machine without a GPU. Skipped where no C compiler is installed.
//!
//! The scenario runs in a child process (this test binary, re-run), since the
//! runtime is loaded once per process.

use std::env;
use std::ffi::c_int;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use backend_hip::{Hip, LIBRARY_VAR};
use capture_core::{
    Access, Availability, Binding, Builtin, Builtins, DeviceSlice, Driver, DriverError, Error,
    GraphDriver, HostSlice, Launch,
};

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

fn set_node_types(library: &Path, types: &[c_int]) {
    // SAFETY: the fake runtime is already loaded by the backend; opening it
    // again returns the same instance and runs no initialisers.
    let lib = unsafe { libloading::Library::new(library) }
        .unwrap_or_else(|e| panic!("cannot reopen the fake runtime: {e}"));
    // SAFETY: the fake declares `void fake_set_node_types(const int*, size_t)`.
    let set =
        unsafe { lib.get::<unsafe extern "C" fn(*const c_int, usize)>(b"fake_set_node_types\0") }
            .unwrap_or_else(|e| panic!("no fake_set_node_types: {e}"));
    // SAFETY: the pointer and length describe a live slice.
    unsafe { set(types.as_ptr(), types.len()) };
}

fn run_scenario(library: &Path, log: &Path) {
    let mut calls = Calls {
        path: log.to_owned(),
        seen: 0,
    };

    let info = match Hip::probe() {
        Availability::Available(info) => info,
        Availability::Unavailable(reason) => panic!("the fake runtime is unavailable: {reason}"),
    };
    assert_eq!(info.name, "Fake HIP device");
    assert_eq!(
        info.driver_version,
        "driver 6.4.43483, HIP runtime 6.4.43483"
    );

    let device = Hip::open().unwrap_or_else(|e| panic!("{e}"));
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
    // A slice outside its page is an error, not a stray copy.
    let outside = Hip::copy_to_device(&mut stream, pinned(0, 8), slice(252, 8));
    assert!(outside.is_err());
    assert!(calls.take().is_empty());

    // Builtins: compiled once per device, launched with each binding's
    // address (page base + offset), then the info block's.
    let add = Hip::builtin(&device, Builtin::Add).unwrap_or_else(|e| panic!("{e}"));
    let fill = Hip::builtin(&device, Builtin::Fill).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        names(&calls.take()),
        [
            "hiprtcCreateProgram",
            "hiprtcCompileProgram",
            "hiprtcDestroyProgram",
            "hipModuleLoadData"
        ]
    );
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
        info: slice(128, 16),
    };
    Hip::launch(&mut stream, launch(&add)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        calls.take(),
        [format!(
            "hipModuleLaunchKernel add grid=3,2,1 block=64,1,1 shared=0 args={},{},{}",
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
        info: slice(240, 16),
    };
    Hip::launch(&mut stream, fill_launch).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        calls.take(),
        [format!(
            "hipModuleLaunchKernel fill grid=1,1,1 block=64,1,1 shared=0 args={},{}",
            at(192),
            at(240)
        )]
    );

    // A capture in relaxed mode, opened behind an event that marks the work
    // issued before it (the two launches above came after the last signal);
    // signals inside it record nothing and stand for that event; the graph
    // is instantiated after the capture closed and destroyed right after.
    Hip::begin(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        Hip::begin(&mut stream).is_err(),
        "a second begin must be refused"
    );
    Hip::launch(&mut stream, launch(&add)).unwrap_or_else(|e| panic!("{e}"));
    let inside = Hip::signal(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(
        inside, signal,
        "a signal inside a capture covers the work issued since the last one"
    );
    assert_eq!(
        Hip::signal(&mut stream).unwrap_or_else(|e| panic!("{e}")),
        inside,
        "every signal inside a capture marks where it began"
    );
    Hip::fence(&mut stream, inside).unwrap_or_else(|e| panic!("{e}"));
    let exec = Hip::instantiate(&mut stream, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        names(&calls.take()),
        [
            "hipEventRecord",
            "hipStreamBeginCapture",
            "hipModuleLaunchKernel",
            "hipEventSynchronize",
            "hipStreamEndCapture",
            "hipGraphInstantiate",
            "hipGraphDestroy"
        ]
    );
    // No hipGraphUpload in this runtime: upload succeeds and does nothing.
    Hip::upload(&exec, &mut stream).unwrap_or_else(|e| panic!("{e}"));
    Hip::replay(&exec, &mut stream).unwrap_or_else(|e| panic!("{e}"));
    drop(exec);
    assert_eq!(calls.take(), ["hipGraphLaunch", "hipGraphExecDestroy"]);

    // A doomed recording is closed, its graph destroyed, and the doom returned.
    let doomed = Error::Driver(DriverError::new(
        "hip",
        "launch",
        "failed inside the window",
    ));
    Hip::begin(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    let refused = Hip::instantiate(&mut stream, Some(doomed.clone())).err();
    assert_eq!(refused, Some(doomed));
    assert_eq!(
        calls.take(),
        [
            "hipEventRecord",
            "hipStreamBeginCapture mode=2",
            "hipStreamEndCapture",
            "hipGraphDestroy"
        ]
    );

    // A recording holding memory nodes is refused after closing, on every
    // numbering of the node types (10 and 11).
    for memory_node in [10, 11] {
        set_node_types(library, &[0, memory_node, 1]);
        Hip::begin(&mut stream).unwrap_or_else(|e| panic!("{e}"));
        let refused = Hip::instantiate(&mut stream, None).err();
        let message = refused.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("memory allocation or free node"),
            "{message}"
        );
        assert_eq!(
            names(&calls.take()),
            [
                "hipEventRecord",
                "hipStreamBeginCapture",
                "hipStreamEndCapture",
                "hipGraphDestroy"
            ]
        );
    }
    set_node_types(library, &[0, 1]);

    // A stream dropped while capturing closes the capture first.
    Hip::begin(&mut stream).unwrap_or_else(|e| panic!("{e}"));
    Hip::release_device_page(&mut stream, page);
    Hip::release_host_page(&mut stream, host);
    drop(stream);
    let dropped = calls.take();
    assert_eq!(
        names(&dropped),
        [
            "hipEventRecord",
            "hipStreamBeginCapture",
            "hipFree",
            "hipHostFree",
            "hipStreamEndCapture",
            "hipGraphDestroy",
            "hipStreamSynchronize",
            "hipEventDestroy",
            "hipStreamDestroy"
        ]
    );

    // The module outlives the device handle while a kernel holds it.
    drop(device);
    drop(add);
    assert!(calls.take().is_empty());
    drop(fill);
    assert_eq!(calls.take(), ["hipModuleUnload"]);
}

#[test]
fn driver_contract_on_fake_runtime() {
    if env::var_os(CHILD_VAR).is_some() {
        let library = env::var_os(LIBRARY_VAR)
            .map(PathBuf::from)
            .unwrap_or_default();
        let log = env::var_os(LOG_VAR).map(PathBuf::from).unwrap_or_default();
        run_scenario(&library, &log);
        return;
    }

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fake-hip");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let library = dir.join("libamdhip64.so");
    let log = dir.join("calls.log");
    let _ = fs::remove_file(&log);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_hip.c");
    let compiler = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let built = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(&library)
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
        .args([
            "--exact",
            "driver_contract_on_fake_runtime",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .env(LIBRARY_VAR, &library)
        .env(LOG_VAR, &log)
        .output()
        .unwrap_or_else(|e| panic!("cannot re-run this test binary: {e}"));
    assert!(
        output.status.success(),
        "the scenario failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
