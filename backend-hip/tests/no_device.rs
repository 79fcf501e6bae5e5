//! What the backend says on a machine without an AMD GPU, and without ROCm.
//!
//! The runtime is loaded once per process, so the case "no library" runs in a
//! child process (this same test binary, re-run with an environment that
//! points the loader at a path that does not exist).

use std::env;
use std::path::Path;
use std::process::Command;

use backend_hip::{Hip, LIBRARY_ENV};
use capture_core::{Availability, Driver};

/// Set in the child process, which then runs the check instead of spawning.
const CHILD_VAR: &str = "BACKEND_HIP_TEST_CHILD";

/// The ROCm kernel driver's device node: without it no HIP device can exist.
fn amd_gpu_driver_present() -> bool {
    Path::new("/dev/kfd").exists()
}

#[test]
fn probe_without_a_device_gives_a_reason_and_open_agrees() {
    let reason = match Hip::probe() {
        Availability::Available(info) => {
            eprintln!("skipped: a HIP device is present ({info:?})");
            assert!(
                Hip::open().is_ok(),
                "probe found a device that open cannot open"
            );
            return;
        }
        Availability::Unavailable(reason) => reason,
    };
    eprintln!("probe: {reason}");
    assert!(!reason.is_empty());

    let error = match Hip::open() {
        Ok(_) => panic!("open succeeded where probe said: {reason}"),
        Err(error) => error,
    };
    assert_eq!(error.backend, "hip");
    assert_eq!(error.message, reason, "open and probe disagree");
    let by_index = Hip::open_index(0).err().map(|error| error.message);
    assert_eq!(
        by_index.as_deref(),
        Some(reason.as_str()),
        "open_index(0) and open disagree"
    );

    // The list is empty where a runtime sees no device, and an error saying
    // why where there is no runtime to ask.
    match Hip::devices() {
        Ok(devices) => assert!(
            devices.is_empty(),
            "devices listed where none can be opened: {devices:?}"
        ),
        Err(error) => assert_eq!(error.message, reason),
    }

    if reason.starts_with("no HIP runtime:") {
        eprintln!("note: no HIP runtime installed here, so the no-device answer is not checked");
    } else if !amd_gpu_driver_present() {
        // A runtime is installed but the machine has no AMD GPU: the runtime
        // itself must have said so, by name.
        assert!(
            reason.starts_with("no HIP device: ") && reason.contains("hipErrorNoDevice"),
            "unexpected reason: {reason}"
        );
    }
}

#[test]
fn probe_without_the_library_says_it_is_missing() {
    if env::var_os(CHILD_VAR).is_some() {
        match Hip::probe() {
            Availability::Unavailable(reason) => println!("REASON={reason}"),
            Availability::Available(info) => panic!("a device was found with no library: {info:?}"),
        }
        match Hip::open() {
            Ok(_) => panic!("open succeeded with no library"),
            Err(error) => println!("OPEN={error}"),
        }
        match Hip::devices() {
            Ok(devices) => panic!("devices listed with no library: {devices:?}"),
            Err(error) => println!("DEVICES={error}"),
        }
        match backend_hip::hiprtc_compile("extern \"C\" __global__ void k() {}", "k.hip", "gfx90a")
        {
            Ok(_) => panic!("hiprtc compiled with no library"),
            Err(error) => println!("COMPILE={error}"),
        }
        for attempt in backend_hip::library_search() {
            println!("TRIED={}", attempt.path);
            println!("ANSWERED={}", attempt.error.as_deref().unwrap_or("loaded"));
        }
        return;
    }

    let missing = "/nonexistent/libamdhip64.so";
    let exe = env::current_exe().unwrap_or_else(|e| panic!("no path to this test binary: {e}"));
    let output = Command::new(exe)
        .args([
            "--exact",
            "probe_without_the_library_says_it_is_missing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .env(LIBRARY_ENV, missing)
        .output()
        .unwrap_or_else(|e| panic!("cannot re-run this test binary: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
    let reason = stdout
        .lines()
        .find_map(|line| line.split_once("REASON=").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the child printed no reason:\n{stdout}\n{stderr}"));
    eprintln!("probe: {reason}");
    assert_eq!(
        reason,
        format!("no HIP runtime: libamdhip64 not found at {missing} ({LIBRARY_ENV})")
    );
    // What the loader said of each path is there for a verbose report.
    let tried: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("TRIED="))
        .collect();
    assert_eq!(tried, [missing]);
    let answered = stdout
        .lines()
        .find_map(|line| line.strip_prefix("ANSWERED="))
        .unwrap_or_default();
    assert!(
        answered.starts_with(&format!("{missing}: ")),
        "unexpected answer: {answered}"
    );
    let open = stdout
        .lines()
        .find_map(|line| line.split_once("OPEN=").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the child printed no open error:\n{stdout}"));
    assert!(
        open.starts_with("hip: open device failed: no HIP runtime: "),
        "{open}"
    );
    let devices = stdout
        .lines()
        .find_map(|line| line.split_once("DEVICES=").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the child printed no listing error:\n{stdout}"));
    assert!(
        devices.starts_with("hip: list devices failed: no HIP runtime: "),
        "{devices}"
    );
    // A compile with no hiprtc is an error naming what was tried, not a panic.
    let compile = stdout
        .lines()
        .find_map(|line| line.split_once("COMPILE=").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the child printed no compile error:\n{stdout}"));
    assert_eq!(
        compile,
        format!(
            "hip: compile kernel failed: hiprtc unavailable: no HIP runtime: libamdhip64 not \
             found at {missing} ({LIBRARY_ENV})"
        )
    );
}

#[test]
fn a_bad_device_index_is_a_reason_not_a_panic() {
    if env::var_os(CHILD_VAR).is_some() {
        match Hip::probe() {
            Availability::Unavailable(reason) => println!("REASON={reason}"),
            Availability::Available(info) => println!("AVAILABLE={info:?}"),
        }
        return;
    }
    let exe = env::current_exe().unwrap_or_else(|e| panic!("no path to this test binary: {e}"));
    let output = Command::new(exe)
        .args([
            "--exact",
            "a_bad_device_index_is_a_reason_not_a_panic",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .env(backend_hip::DEVICE_ENV, "not-a-number")
        .output()
        .unwrap_or_else(|e| panic!("cannot re-run this test binary: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reason = stdout
        .lines()
        .find_map(|line| line.split_once("REASON=").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("a device was opened with a bad index:\n{stdout}"));
    // Without a runtime or a device, that reason comes first; with devices,
    // the bad index must be named.
    assert!(
        reason.starts_with("no HIP runtime:")
            || reason.starts_with("no HIP device:")
            || reason.contains("CAPTURE_HIP_DEVICE=\"not-a-number\""),
        "unexpected reason: {reason}"
    );
}
