//! The backend on machines where CUDA cannot run: every way of being
//! unavailable is a reason from `probe` and an error from `open`, never a
//! panic; so is an NVRTC that cannot be loaded. With the full stub, which
//! lists devices but runs nothing, devices are listed and opened by index,
//! driver codes are named or printed as numbers, every call leaves the
//! calling thread's context stack as it found it, and CUDA C++ reaches the
//! driver as a cubin for the device's architecture, or as PTX only for one
//! NVRTC does not know.
//!
//! The stub cases run in a child process (this test binary, run again with
//! a stub first on the library path), because the driver library, once
//! loaded, stays loaded for the life of a process.
#![cfg(target_os = "linux")]

use std::env;
use std::process::Command;

#[allow(dead_code)]
mod common;

use backend_cuda::{Cuda, DEVICE_ENV, Kernel, NVRTC_ENV, nvrtc_compile_ptx, nvrtc_info};
use capture_core::{Access, Availability, Builtin, Builtins, Driver, Error, Signature};

/// Set in the child: run the probe and print its reason instead of
/// spawning.
const CHILD: &str = "BACKEND_CUDA_PROBE_CHILD";
const REASON: &str = "PROBE_REASON=";

fn in_child() -> bool {
    env::var_os(CHILD).is_some()
}

/// In the child: probe, check that nothing is available and that opening
/// fails too, and hand the reason to the parent on stdout.
fn report_probe() {
    let reason = match Cuda::probe() {
        Availability::Unavailable(reason) => reason,
        Availability::Available(info) => panic!("the stub reported a device: {info:?}"),
    };
    if let Ok(device) = Cuda::open() {
        panic!("the stub opened a device: {device:?}");
    }
    // On a line of its own: the harness prints the test name before it.
    println!("\n{REASON}{reason}");
}

/// Where the minimal stub lies when the test binary runs on another
/// machine than it was built on (the GPU bundle ships the stubs).
const STUB_DIR_ENV: &str = "CAPTURE_CUDA_TEST_STUB_DIR";
/// The same for the full stub.
const FULL_STUB_DIR_ENV: &str = "CAPTURE_CUDA_TEST_FULL_STUB_DIR";

/// Run `test` again in a child with the minimal stub driver and `vars`,
/// and return the probe's reason it printed.
fn probe_with_stub(test: &str, vars: &[(&str, &str)]) -> String {
    run_with(test, STUB_DIR_ENV, backend_cuda::TEST_STUB_DIR, vars)
}

/// Run `test` again in a child with the full stub driver and `vars`, and
/// return the reason it printed.
fn with_full_stub(test: &str, vars: &[(&str, &str)]) -> String {
    run_with(
        test,
        FULL_STUB_DIR_ENV,
        backend_cuda::TEST_FULL_STUB_DIR,
        vars,
    )
}

fn run_with(test: &str, var: &str, built: Option<&str>, vars: &[(&str, &str)]) -> String {
    let stub_dir = env::var(var).ok().or(built.map(str::to_owned));
    let Some(stub_dir) = stub_dir else {
        panic!(
            "the stub libcuda.so.1 was not built, so this test cannot run; the build script \
             needs a working C compiler (see its warning in the build output)"
        );
    };
    let exe = env::current_exe().expect("the test binary knows its path");
    let output = Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &stub_dir)
        .env_remove("CUDA_STUB_INIT_RESULT")
        .env_remove("CUDA_STUB_DRIVER_VERSION")
        .env_remove("CUDA_STUB_DEVICE_COUNT")
        .env_remove("CUDA_STUB_RETAIN_RESULT")
        .env_remove("CUDA_STUB_CC_MAJOR")
        .env_remove("CUDA_STUB_CC_MINOR")
        .env_remove("CUDA_STUB_MODULE_RESULT")
        .env_remove("PYTHON")
        .env_remove(DEVICE_ENV)
        .env_remove(NVRTC_ENV)
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .envs(vars.iter().copied())
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout
        .lines()
        .find_map(|line| line.find(REASON).map(|at| &line[at + REASON.len()..]))
        .unwrap_or_else(|| panic!("the child printed no reason:\n{stdout}\n{stderr}"))
        .to_owned()
}

#[test]
fn a_driver_without_a_device_is_unavailable_with_the_cuda_error() {
    if in_child() {
        return report_probe();
    }
    let reason = probe_with_stub(
        "a_driver_without_a_device_is_unavailable_with_the_cuda_error",
        &[],
    );
    println!("reason: {reason}");
    assert!(reason.contains("CUDA_ERROR_NO_DEVICE"), "{reason}");
    assert!(
        reason.contains("no CUDA-capable device is detected"),
        "{reason}"
    );
}

#[test]
fn a_driver_missing_a_symbol_is_unavailable_not_a_panic() {
    if in_child() {
        return report_probe();
    }
    // cuInit succeeds, so the loader goes on to the symbols the stub lacks.
    let reason = probe_with_stub(
        "a_driver_missing_a_symbol_is_unavailable_not_a_panic",
        &[("CUDA_STUB_INIT_RESULT", "0")],
    );
    println!("reason: {reason}");
    assert!(
        reason.contains("missing symbol cuDeviceGetCount"),
        "{reason}"
    );
    assert!(reason.contains("12.4"), "{reason}");
}

#[test]
fn a_driver_too_old_is_unavailable() {
    if in_child() {
        return report_probe();
    }
    let reason = probe_with_stub(
        "a_driver_too_old_is_unavailable",
        &[
            ("CUDA_STUB_INIT_RESULT", "0"),
            ("CUDA_STUB_DRIVER_VERSION", "11020"),
        ],
    );
    println!("reason: {reason}");
    assert!(reason.contains("CUDA driver 11.2 is too old"), "{reason}");
}

/// The toolkit's `stubs/libcuda.so` answers `CUDA_ERROR_STUB_LIBRARY` to
/// everything; found first on the library path, it is named as what it is.
#[test]
fn the_toolkits_stub_library_is_named_in_the_reason() {
    if in_child() {
        let listed = Cuda::devices().expect_err("the stub lists no device");
        assert!(listed.message.contains("toolkit's stub"), "{listed}");
        return report_probe();
    }
    let reason = probe_with_stub(
        "the_toolkits_stub_library_is_named_in_the_reason",
        &[("CUDA_STUB_INIT_RESULT", "34")],
    );
    println!("reason: {reason}");
    assert!(
        reason.starts_with("the libcuda.so found is the toolkit's stub, not the driver: "),
        "{reason}"
    );
    assert!(reason.contains("CUDA_ERROR_STUB_LIBRARY (34)"), "{reason}");
    assert!(reason.contains("LD_LIBRARY_PATH"), "{reason}");
}

/// In the child with the full stub: list the devices and check what is
/// said of each.
fn check_listed_devices() {
    let devices = Cuda::devices().expect("the full stub lists its devices");
    assert_eq!(devices.len(), 2, "{devices:?}");
    for (index, info) in devices.iter().enumerate() {
        assert_eq!(info.index, index);
        assert_eq!(info.name, "Stub GPU (sm_90)");
        assert_eq!(info.driver_version, "12.4");
        assert_eq!(info.max_groups, [2_147_483_647, 65_535, 65_535]);
        assert_eq!(info.memory_bytes, 80 << 30);
        assert_eq!(info.kind, "GPU");
    }
    let second = Cuda::open_index(1).expect("device 1 opens");
    assert_eq!(Cuda::device_info(&second), devices[1]);
    let beyond = Cuda::open_index(2).expect_err("there is no device 2");
    assert!(
        beyond
            .message
            .contains("device 2 was asked for, and the driver reports 2 device(s)"),
        "{beyond}"
    );
    // The variable picks the default device.
    let chosen = Cuda::open().expect("the device the variable names opens");
    assert_eq!(Cuda::device_info(&chosen).index, 1);
    let Availability::Available(info) = Cuda::probe() else {
        panic!("the probe disagrees with open");
    };
    assert_eq!(info, devices[1]);
    println!("\n{REASON}listed");
}

#[test]
fn devices_are_listed_and_opened_by_index() {
    if in_child() {
        return check_listed_devices();
    }
    let said = with_full_stub(
        "devices_are_listed_and_opened_by_index",
        &[("CUDA_STUB_DEVICE_COUNT", "2"), (DEVICE_ENV, "1")],
    );
    assert_eq!(said, "listed");
}

#[test]
fn a_device_index_past_the_last_names_the_variable() {
    if in_child() {
        return report_probe();
    }
    let reason = with_full_stub(
        "a_device_index_past_the_last_names_the_variable",
        &[("CUDA_STUB_DEVICE_COUNT", "2"), (DEVICE_ENV, "5")],
    );
    println!("reason: {reason}");
    assert!(reason.contains(&format!("{DEVICE_ENV}=5")), "{reason}");
    assert!(reason.contains("reports 2 device(s)"), "{reason}");
}

#[test]
fn a_driver_listing_no_device_is_an_empty_list_and_unavailable() {
    if in_child() {
        let devices = Cuda::devices().expect("an empty list is an answer");
        assert!(devices.is_empty(), "{devices:?}");
        return report_probe();
    }
    let reason = with_full_stub(
        "a_driver_listing_no_device_is_an_empty_list_and_unavailable",
        &[("CUDA_STUB_DEVICE_COUNT", "0")],
    );
    assert_eq!(
        reason,
        "no CUDA device: the driver is installed but reports no device"
    );
}

/// Driver codes are integers: one the table names is named, one newer than
/// every table (or made up) prints as its number, and neither is undefined
/// behaviour as it would be written into a Rust enum.
#[test]
fn driver_codes_are_named_by_the_table_or_printed_as_numbers() {
    if in_child() {
        return report_probe();
    }
    let test = "driver_codes_are_named_by_the_table_or_printed_as_numbers";
    let contained = with_full_stub(test, &[("CUDA_STUB_RETAIN_RESULT", "226")]);
    println!("reason: {contained}");
    assert!(
        contained.contains("retain the device's primary context: CUDA_ERROR_CONTAINED (226)"),
        "{contained}"
    );
    let unknown = with_full_stub(test, &[("CUDA_STUB_RETAIN_RESULT", "9999")]);
    println!("reason: {unknown}");
    assert!(unknown.ends_with("CUDA error 9999"), "{unknown}");
}

/// The stub's count of contexts pushed on the calling thread and not yet
/// popped.
fn context_depth() -> i32 {
    // SAFETY: the library is the full stub this process already loaded (the
    // same name resolves to the same handle), whose cuStubContextDepth takes
    // nothing and returns an int.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let depth = library
            .get::<unsafe extern "C" fn() -> i32>(b"cuStubContextDepth\0")
            .expect("the full stub counts contexts");
        depth()
    }
}

/// In the child with the full stub: every call pushes the device's context
/// and pops it again, on failure too.
fn check_contexts_are_restored() {
    let device = Cuda::open().expect("the full stub opens its device");
    assert_eq!(context_depth(), 0, "opening leaves no context pushed");
    let stream = Cuda::create_stream(&device).expect_err("the stub runs nothing");
    assert_eq!(stream.op, "create stream");
    assert!(
        stream.message.starts_with("CUDA_ERROR_NOT_SUPPORTED (801)"),
        "{stream}"
    );
    assert_eq!(context_depth(), 0, "a failed call pops what it pushed");
    let builtin = Cuda::builtin(&device, Builtin::Fill).expect_err("the stub compiles nothing");
    assert!(
        builtin.message.contains("CUDA_ERROR_NOT_SUPPORTED"),
        "{builtin}"
    );
    assert_eq!(context_depth(), 0, "a failed build pops what it pushed");
    println!("\n{REASON}restored");
}

#[test]
fn every_call_leaves_the_callers_context_as_it_was() {
    if in_child() {
        return check_contexts_are_restored();
    }
    let said = with_full_stub("every_call_leaves_the_callers_context_as_it_was", &[]);
    assert_eq!(said, "restored");
}

/// Without the stub, the outcome depends on the machine: with no driver
/// library anywhere the loader can see, the reason is the standard one;
/// with one, any answer is fine as long as it is an answer.
#[test]
fn no_driver_library_is_unavailable_with_the_standard_reason() {
    if in_child() {
        return;
    }
    let availability = Cuda::probe();
    println!("probe: {availability:?}");
    if driver_library_visible() {
        if let Availability::Unavailable(reason) = &availability {
            assert!(!reason.is_empty());
            assert!(Cuda::open().is_err());
        }
    } else {
        assert_eq!(
            availability,
            Availability::Unavailable("no CUDA driver: libcuda.so not found".to_owned())
        );
        let error = Cuda::open().expect_err("no driver, no device");
        assert_eq!(error.message, "no CUDA driver: libcuda.so not found");
        let listed = Cuda::devices().expect_err("no driver, no list");
        assert_eq!(listed.message, "no CUDA driver: libcuda.so not found");
    }
}

/// Whether the dynamic loader could find some `libcuda.so*`: in a directory
/// of `LD_LIBRARY_PATH`, or in its cache.
fn driver_library_visible() -> bool {
    let on_path = env::var_os("LD_LIBRARY_PATH").is_some_and(|paths| {
        env::split_paths(&paths).any(|dir| {
            std::fs::read_dir(dir).is_ok_and(|entries| {
                entries.flatten().any(|entry| {
                    entry
                        .file_name()
                        .to_string_lossy()
                        .starts_with("libcuda.so")
                })
            })
        })
    });
    let cached = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|ldconfig| Command::new(ldconfig).arg("-p").output().ok())
        .is_some_and(|out| String::from_utf8_lossy(&out.stdout).contains("libcuda.so"));
    // The usual install places, for systems whose loader cache is not
    // readable this way.
    let installed = [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
        "/usr/lib/wsl/lib/libcuda.so.1",
    ]
    .iter()
    .any(|path| std::path::Path::new(path).exists());
    on_path || cached || installed
}

/// In the child: ask for NVRTC twice (the second answer comes from the
/// cache) and hand the reason to the parent.
fn report_nvrtc() {
    let Err(first) = nvrtc_info() else {
        panic!("an NVRTC was loaded from a path that does not exist");
    };
    let compiled = nvrtc_compile_ptx("extern \"C\" __global__ void k() {}", "compute_75");
    let Err(Error::Driver(second)) = compiled else {
        panic!("compiling without NVRTC gave {compiled:?}");
    };
    assert_eq!(Error::Driver(second.clone()), first);
    assert_eq!(second.op, "load NVRTC");
    println!("\n{REASON}{}", second.message);
}

#[test]
fn an_nvrtc_that_cannot_be_loaded_is_an_error_naming_the_path_tried() {
    if in_child() {
        return report_nvrtc();
    }
    let missing = "/nonexistent/libnvrtc.so.12";
    let reason = probe_with_stub(
        "an_nvrtc_that_cannot_be_loaded_is_an_error_naming_the_path_tried",
        &[(NVRTC_ENV, missing)],
    );
    println!("reason: {reason}");
    assert!(reason.starts_with("NVRTC unavailable: "), "{reason}");
    assert!(
        reason.contains(&format!("{NVRTC_ENV}={missing}")),
        "{reason}"
    );
    assert!(reason.contains("tried only that path"), "{reason}");
    assert!(reason.contains("No such file"), "{reason}");
}

/// In the child: hand the path NVRTC was loaded from, or why none was, to
/// the parent.
fn report_nvrtc_path() {
    match nvrtc_info() {
        Ok(info) => println!("\n{REASON}loaded {}", info.path),
        Err(error) => println!("\n{REASON}{error}"),
    }
}

/// The CUDA 12 NVRTC of NVIDIA's wheel in the `python3` on the PATH.
fn wheel_nvrtc() -> Option<std::path::PathBuf> {
    let script = "import nvidia\nfor p in nvidia.__path__: print(p)";
    let out = Command::new("python3").args(["-c", script]).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|dir| std::path::Path::new(dir.trim()).join("cuda_nvrtc/lib/libnvrtc.so.12"))
        .find(|path| path.exists())
}

#[test]
fn nvrtc_is_found_under_cuda_home() {
    if in_child() {
        return report_nvrtc_path();
    }
    let Some(wheel) = wheel_nvrtc() else {
        println!("skipped: no NVRTC wheel in the python3 on the PATH");
        return;
    };
    let home = env::temp_dir().join(format!("capture-cuda-home-{}", std::process::id()));
    let lib64 = home.join("lib64");
    std::fs::create_dir_all(&lib64).expect("a temporary directory");
    let link = lib64.join("libnvrtc.so.12");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&wheel, &link).expect("a symlink");
    let home_text = home.to_string_lossy().into_owned();
    // No Python on the PATH: only CUDA_HOME can lead to it.
    let said = probe_with_stub(
        "nvrtc_is_found_under_cuda_home",
        &[("CUDA_HOME", home_text.as_str()), ("PATH", "/nonexistent")],
    );
    let _ = std::fs::remove_dir_all(&home);
    assert_eq!(said, format!("loaded {}", link.display()));
}

#[test]
fn nvrtc_not_found_lists_every_path_tried() {
    if in_child() {
        return report_nvrtc_path();
    }
    let said = probe_with_stub(
        "nvrtc_not_found_lists_every_path_tried",
        &[
            ("CUDA_HOME", "/nonexistent/home"),
            ("CUDA_PATH", "/nonexistent/path"),
            ("PATH", "/nonexistent"),
        ],
    );
    println!("reason: {said}");
    for tried in [
        "tried libnvrtc.so, libnvrtc.so.12",
        "/nonexistent/home/lib64/libnvrtc.so.13",
        "/nonexistent/path/lib64/libnvrtc.so.12",
        "/usr/local/cuda/lib64/libnvrtc.so",
    ] {
        assert!(said.contains(tried), "{tried} missing from: {said}");
    }
}

#[test]
fn nvrtc_is_found_in_the_python_wheels() {
    if in_child() {
        return report_nvrtc_path();
    }
    if wheel_nvrtc().is_none() || std::path::Path::new("/usr/local/cuda/lib64").exists() {
        println!("skipped: no NVRTC wheel, or a toolkit in /usr/local/cuda found first");
        return;
    }
    let said = probe_with_stub("nvrtc_is_found_in_the_python_wheels", &[]);
    assert!(
        said.starts_with("loaded ") && said.contains("/nvidia/"),
        "{said}"
    );
}

/// The Python the `python3` on the PATH runs, by its full path.
fn python_executable() -> Option<String> {
    let script = "import sys\nprint(sys.executable)";
    let out = Command::new("python3").args(["-c", script]).output().ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !path.is_empty()).then_some(path)
}

#[test]
fn nvrtc_is_found_through_the_python_that_python_names() {
    if in_child() {
        return report_nvrtc_path();
    }
    if std::path::Path::new("/usr/local/cuda/lib64").exists() {
        println!("skipped: a toolkit in /usr/local/cuda is found first");
        return;
    }
    let (Some(_), Some(python)) = (wheel_nvrtc(), python_executable()) else {
        println!("skipped: no NVRTC wheel in the python3 on the PATH");
        return;
    };
    // No python3 on the PATH: only PYTHON can lead to the wheels.
    let said = probe_with_stub(
        "nvrtc_is_found_through_the_python_that_python_names",
        &[("PYTHON", python.as_str()), ("PATH", "/nonexistent")],
    );
    assert!(
        said.starts_with("loaded ") && said.contains("/nvidia/"),
        "{said}"
    );
}

// ---- what NVRTC hands the driver -------------------------------------------

/// Said by the child when it has no NVRTC to compile with.
const NO_NVRTC: &str = "no NVRTC: ";

/// What the stub's last cuModuleLoadDataEx was handed: 1 an ELF image, 2
/// text.
fn last_image() -> i32 {
    // SAFETY: the library is the full stub this process already loaded (the
    // same name resolves to the same handle), whose cuStubLastImage takes
    // nothing and returns an int.
    unsafe {
        let library = libloading::Library::new("libcuda.so.1").expect("the stub is loaded");
        let last = library
            .get::<unsafe extern "C" fn() -> i32>(b"cuStubLastImage\0")
            .expect("the full stub records images");
        last()
    }
}

/// In the child with the full stub, whose module load refuses every image:
/// build a CUDA C++ kernel and hand the parent what the stub was given and
/// the error, on one line.
fn report_from_cuda() {
    if let Err(error) = nvrtc_info() {
        println!("\n{REASON}{NO_NVRTC}{error}");
        return;
    }
    let device = Cuda::open().expect("the full stub opens its device");
    let source = r#"
        extern "C" __global__ void __launch_bounds__(64) twice(float* x, unsigned n) {
            unsigned i = blockIdx.x * 64 + threadIdx.x;
            if (i < n) x[i] *= 2.0f;
        }"#;
    let signature = Signature::new("twice").binding(Access::ReadWrite).param(4);
    // SAFETY: the stub loads no module, so the kernel is never launched.
    let built = unsafe { Kernel::from_cuda(&device, source, "twice", signature) };
    let Err(Error::Compile { log, .. }) = built else {
        panic!("the stub's refusal was not a compile error: {built:?}");
    };
    let image = match last_image() {
        1 => "cubin",
        2 => "ptx",
        _ => "nothing",
    };
    println!("\n{REASON}{image}: {}", log.replace('\n', " | "));
}

/// Run [`report_from_cuda`] as `test` with the full stub and `vars`, with
/// the parent's NVRTC; `None` (after saying why) when there is no NVRTC.
fn from_cuda_with_stub(test: &str, vars: &[(&str, &str)]) -> Option<String> {
    let chosen = env::var(NVRTC_ENV).ok();
    let mut all: Vec<(&str, &str)> = vars.to_vec();
    if let Some(path) = &chosen {
        all.push((NVRTC_ENV, path));
    }
    let said = with_full_stub(test, &all);
    if let Some(why) = said.strip_prefix(NO_NVRTC) {
        common::missing(&format!("no NVRTC to compile with ({why})"));
        return None;
    }
    Some(said)
}

#[test]
fn cuda_cpp_reaches_the_driver_as_a_cubin_for_the_devices_architecture() {
    if in_child() {
        return report_from_cuda();
    }
    // sm_80 is known to every NVRTC from 11.0 to 13.x.
    let Some(said) = from_cuda_with_stub(
        "cuda_cpp_reaches_the_driver_as_a_cubin_for_the_devices_architecture",
        &[
            ("CUDA_STUB_CC_MAJOR", "8"),
            ("CUDA_STUB_CC_MINOR", "0"),
            ("CUDA_STUB_DRIVER_VERSION", "13000"),
            // CUDA_ERROR_NO_BINARY_FOR_GPU
            ("CUDA_STUB_MODULE_RESULT", "209"),
        ],
    ) else {
        return;
    };
    println!("said: {said}");
    assert!(said.starts_with("cubin: "), "{said}");
    assert!(said.contains("CUDA_ERROR_NO_BINARY_FOR_GPU"), "{said}");
    assert!(said.contains("and driver 13.0 disagree"), "{said}");
    assert!(said.contains("the cubin NVRTC 1"), "{said}");
    assert!(said.contains("made for sm_80"), "{said}");
}

#[test]
fn an_architecture_nvrtc_does_not_know_reaches_the_driver_as_ptx_and_a_refusal_names_both_versions()
{
    if in_child() {
        return report_from_cuda();
    }
    let test = "an_architecture_nvrtc_does_not_know_reaches_the_driver_as_ptx_and_a_refusal_names_both_versions";
    // CUDA_ERROR_UNSUPPORTED_PTX_VERSION, then CUDA_ERROR_INVALID_PTX.
    for (code, name) in [
        ("222", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
        ("218", "CUDA_ERROR_INVALID_PTX"),
    ] {
        // No NVRTC knows sm_99, and every one from 11.8 on knows compute_90.
        let Some(said) = from_cuda_with_stub(
            test,
            &[
                ("CUDA_STUB_CC_MAJOR", "9"),
                ("CUDA_STUB_CC_MINOR", "9"),
                ("CUDA_STUB_DRIVER_VERSION", "13000"),
                ("CUDA_STUB_MODULE_RESULT", code),
            ],
        ) else {
            return;
        };
        println!("said: {said}");
        assert!(said.starts_with("ptx: "), "{said}");
        assert!(said.contains(name), "{said}");
        assert!(said.contains("and driver 13.0 disagree"), "{said}");
        assert!(said.contains("PTX for compute_90"), "{said}");
        let version = nvrtc_version_said(&said);
        assert!(version.starts_with("NVRTC 1"), "{said}");
    }
    // A refusal that is not about the image says nothing of versions.
    let Some(said) = from_cuda_with_stub(
        test,
        &[
            ("CUDA_STUB_CC_MAJOR", "9"),
            ("CUDA_STUB_CC_MINOR", "9"),
            ("CUDA_STUB_MODULE_RESULT", "2"),
        ],
    ) else {
        return;
    };
    assert!(said.starts_with("ptx: "), "{said}");
    assert!(!said.contains("disagree"), "{said}");
}

/// The `NVRTC X.Y` a mismatch message names first.
fn nvrtc_version_said(said: &str) -> &str {
    let at = said
        .find("NVRTC ")
        .unwrap_or_else(|| panic!("no NVRTC named: {said}"));
    let rest = &said[at..];
    let end = rest[6..].find(' ').map_or(rest.len(), |space| space + 6);
    &rest[..end]
}
