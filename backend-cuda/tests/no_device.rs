//! The backend on machines where CUDA cannot run: every way of being
//! unavailable is a reason from `probe` and an error from `open`, never a
//! panic; so is an NVRTC that cannot be loaded.
//!
//! The stub cases run in a child process (this test binary, run again with
//! the stub first on the library path), because the driver library, once
//! loaded, stays loaded for the life of a process.
#![cfg(target_os = "linux")]

use std::env;
use std::process::Command;

use backend_cuda::{Cuda, NVRTC_ENV, nvrtc_compile_ptx, nvrtc_info};
use capture_core::{Availability, Driver, Error};

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

/// Run `test` again in a child with the stub driver and `vars`, and return
/// the probe's reason it printed.
fn probe_with_stub(test: &str, vars: &[(&str, &str)]) -> String {
    let Some(stub_dir) = option_env!("CUDA_STUB_DIR") else {
        panic!(
            "the stub libcuda.so.1 was not built, so this test cannot run; the build script \
             needs a working C compiler (see its warning in the build output)"
        );
    };
    let exe = env::current_exe().expect("the test binary knows its path");
    let output = Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", stub_dir)
        .env_remove("CUDA_STUB_INIT_RESULT")
        .env_remove("CUDA_STUB_DRIVER_VERSION")
        .env_remove("CAPTURE_CUDA_DEVICE")
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
