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
use std::sync::Arc;

use backend_hip::{Hip, HipDevice, Kernel, LIBRARY_VAR};
use capture_core::{
    Access, Availability, Binding, Builtin, Builtins, DeviceSlice, Driver, DriverError, Error,
    GraphDriver, HostSlice, Launch, Params, Signature,
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

/// The compile error `result` holds, as (kernel, log).
fn compile_error(result: Result<Kernel, Error>) -> (String, String) {
    match result {
        Err(Error::Compile { kernel, log }) => (kernel, log),
        Err(other) => panic!("expected a compile error, got {other}"),
        Ok(kernel) => panic!("expected a compile error, got {kernel:?}"),
    }
}

/// A user kernel through the fake hiprtc.
fn hip(
    device: &Arc<HipDevice>,
    source: &str,
    entry: &str,
    signature: Signature,
) -> Result<Kernel, Error> {
    // SAFETY: the fake runtime runs no GPU code; launches only log their
    // arguments.
    unsafe { Kernel::from_hip(device, source, entry, signature) }
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
    assert_eq!(info.name, "Fake HIP device (gfx90a:sramecc+:xnack-)");
    assert_eq!(
        info.driver_version,
        "driver 6.4.43483, HIP runtime 6.4.43483"
    );
    // ROCm's 2^31 - 1 blocks in x, held to what 1024-thread blocks can count
    // in 32 bits.
    assert_eq!(info.max_groups, [4_194_303, 65_535, 65_535]);

    let device = Hip::open().unwrap_or_else(|e| panic!("{e}"));
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
            b"FAKE-IMAGE",
            "mixed__ppp148",
            mixed_signature.clone(),
        )
    }
    .unwrap_or_else(|e| panic!("{e}"));
    drop(loaded);
    assert_eq!(calls.take(), ["hipModuleLoadData FAKE", "hipModuleUnload"]);

    // What the runtime refuses is a compile error carrying its answer.
    // SAFETY: as for `hip`.
    let bad = unsafe { Kernel::from_code_object(&device, b"BAD!", "k", Signature::new("k")) };
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

    // A capture in relaxed mode, opened behind an event that marks the work
    // issued before it (the launches above came after the last signal);
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

    // A page dropped without being released is freed all the same, once.
    let stray = Hip::allocate_device_page(&mut stream, 64).unwrap_or_else(|e| panic!("{e}"));
    let stray_host = Hip::allocate_host_page(&mut stream, 64).unwrap_or_else(|e| panic!("{e}"));
    drop(stray);
    drop(stray_host);
    assert_eq!(
        names(&calls.take()),
        ["hipMalloc", "hipHostMalloc", "hipFree", "hipHostFree"]
    );

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
    assert_eq!(dropped[2], format!("hipFree {}", at(0)));

    // A module outlives the device handle while a kernel holds it, and is
    // unloaded with its last kernel.
    drop(device);
    drop(add);
    drop(mixed);
    assert_eq!(calls.take(), ["hipModuleUnload"]);
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
