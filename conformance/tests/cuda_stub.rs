//! With a stub CUDA driver that has no device on the library path, every
//! cuda trial is ignored with the driver's reason, printed once: not failed,
//! not panicked; and required, they fail with that reason.
#![cfg(all(feature = "cuda", target_os = "linux"))]

use std::process::Command;

fn run(require: &str) -> (bool, String) {
    let Some(stub) = graph_capture::cuda::TEST_STUB_DIR else {
        panic!("the CUDA stub library was not built (no C compiler at build time)");
    };
    let output = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .arg("cuda::")
        .env("LD_LIBRARY_PATH", stub)
        .env("CONFORMANCE_REQUIRE", require)
        .output()
        .expect("the conformance binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn cuda_trials_are_ignored_with_the_drivers_reason() {
    let (ok, text) = run("");
    assert!(ok, "the run failed:\n{text}");
    assert!(!text.contains("panicked"), "{text}");
    assert!(
        text.contains("CUDA_ERROR_NO_DEVICE"),
        "the reason is shown:\n{text}"
    );
    assert!(text.contains(" 0 passed; 0 failed;"), "{text}");
    assert!(
        !text.contains(" 0 ignored;"),
        "cuda trials are ignored:\n{text}"
    );
    // Every scenario runs twice: as dependency graphs and as chains.
    let scenarios = 2 * conformance::scenarios::<graph_capture::cuda::Cuda>().len();
    let lines: Vec<_> = text.lines().filter(|l| l.starts_with("cuda")).collect();
    assert_eq!(lines.len(), 1, "one line for every cuda trial:\n{text}");
    assert!(
        lines[0].starts_with(&format!("cuda: {scenarios} trials ignored, unavailable: ")),
        "{text}"
    );
    assert!(text.contains("CUDA_ERROR_NO_DEVICE"), "{text}");
}

#[test]
fn devices_says_why_cuda_lists_none() {
    let Some(stub) = graph_capture::cuda::TEST_STUB_DIR else {
        panic!("the CUDA stub library was not built (no C compiler at build time)");
    };
    let output = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(["--devices", "--backend", "cuda"])
        .env("LD_LIBRARY_PATH", stub)
        .output()
        .expect("the conformance binary runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.starts_with("cuda: no devices"), "{text}");
    // One line, its reason wrapped under it.
    assert!(
        text.lines().skip(1).all(|line| line.starts_with("  ")),
        "{text}"
    );
}

#[test]
fn required_cuda_fails_with_the_reason() {
    let (ok, text) = run("cuda");
    assert!(
        !ok,
        "a required backend without a device must fail:\n{text}"
    );
    assert!(text.contains("CUDA_ERROR_NO_DEVICE"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
}

#[test]
fn a_client_without_a_device_is_unavailable_with_the_reason() {
    use graph_capture::{Availability, Client, Driver, Error};
    let Availability::Unavailable(reason) = graph_capture::cuda::Cuda::probe() else {
        eprintln!("skipped: this machine has a CUDA device");
        return;
    };
    match Client::<graph_capture::cuda::Cuda>::open() {
        Err(Error::Unavailable {
            backend,
            reason: why,
        }) => {
            assert_eq!(backend, "cuda");
            assert_eq!(why, reason, "open and probe agree");
        }
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("a client opened where probe said: {reason}"),
    }
}
