//! `scripts/gpu-check run` on bundles made up here, with no built binaries:
//! with no NVIDIA GPU it refuses and lists every step it would run; with a
//! stand-in `nvidia-smi` that lists one, a machine whose glibc is older than
//! the bundle needs is refused before any step runs, NVIDIA's libraries are
//! found in the wheels of the Python `PYTHON` names, which the run logs, and
//! the Vulkan steps run only when the conformance binary lists a Vulkan
//! device other than a CPU one.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The script, from the crate's directory.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-check")
}

/// A fresh directory under the test's scratch space.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gpu-check")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the scratch directory can be made");
    dir
}

/// A bundle with no binaries that needs glibc `glibc`.
fn bundle(name: &str, glibc: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(dir.join("bin")).expect("bin can be made");
    std::fs::write(dir.join("glibc"), format!("{glibc}\n")).expect("glibc can be written");
    dir
}

/// Make `path` an executable bash script of `body`.
fn write_script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/usr/bin/env bash\n{body}")).expect("a script is writable");
    let chmod = Command::new("chmod")
        .arg("+x")
        .arg(path)
        .status()
        .expect("chmod runs");
    assert!(chmod.success());
}

/// A stand-in conformance binary: `--devices` lists one Vulkan device of
/// `kind`; anything else passes, with the arguments in its log.
fn fake_conformance(bundle: &Path, kind: &str) {
    write_script(
        &bundle.join("bin/conformance"),
        &format!(
            "case \"$*\" in\n\
             *--devices*) printf 'vulkan: 1 device (* opens by default)\\n  * 0  Some Device; {kind}, \
             2.0 GiB, driver 1.0\\n' ;;\n\
             *) echo \"args: $*\" ;;\n\
             esac\n"
        ),
    );
}

/// A folder holding a stand-in `nvidia-smi` that lists one GPU.
fn fake_gpu(bundle: &Path) -> PathBuf {
    let dir = bundle.join("fake-gpu");
    std::fs::create_dir_all(&dir).expect("a folder");
    write_script(
        &dir.join("nvidia-smi"),
        "if [ \"$1\" = -L ]; then echo 'GPU 0: Stand-in GPU (UUID: GPU-0)'; fi\n",
    );
    dir
}

/// The run, with a stand-in `nvidia-smi` listing a GPU first on the PATH.
fn run(bundle: &Path, out: &Path, vars: &[(&str, &str)]) -> (Output, String) {
    let path = format!(
        "{}:{}",
        fake_gpu(bundle).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut vars = vars.to_vec();
    vars.push(("PATH", path.as_str()));
    run_here(bundle, out, &vars)
}

/// The run, on this machine as it is.
fn run_here(bundle: &Path, out: &Path, vars: &[(&str, &str)]) -> (Output, String) {
    let output = Command::new("bash")
        .arg(script())
        .arg("run")
        .arg(bundle)
        .arg(out)
        .env_remove("CAPTURE_NVRTC_LIBRARY")
        .env_remove("PYTHON")
        .envs(vars.iter().copied())
        .output()
        .expect("bash runs the script");
    let status = std::fs::read_to_string(out.join("status.txt")).unwrap_or_default();
    (output, status)
}

/// This machine's glibc, as the script reads it; `None` without one.
fn glibc_here() -> Option<String> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version = text.split_whitespace().last()?.to_owned();
    out.status.success().then_some(version)
}

#[test]
fn an_older_glibc_than_the_bundle_needs_is_refused_before_anything_runs() {
    if glibc_here().is_none() {
        println!("skipped: this machine reports no glibc version");
        return;
    }
    let bundle = bundle("new-glibc", "99.0");
    let out = bundle.join("out");
    let (output, status) = run(&bundle, &out, &[]);
    println!("{status}");
    assert_eq!(output.status.code(), Some(2), "{status}");
    assert!(status.contains("the bundle needs 99.0"), "{status}");
    assert!(status.contains("refused: this machine's glibc"), "{status}");
    assert!(status.contains("older than the 99.0"), "{status}");
    for step in [
        "conformance",
        "cuda-unit",
        "decode-cuda",
        "summary",
        "python:",
    ] {
        assert!(!status.contains(step), "{step} ran: {status}");
    }
}

#[test]
fn the_python_python_names_is_asked_for_the_nvrtc_wheels_and_logged() {
    let Some(here) = glibc_here() else {
        println!("skipped: this machine reports no glibc version");
        return;
    };
    let bundle = bundle("python", &here);
    // A stand-in Python: asked for its executable it names itself, asked
    // where a library lies it names one in its wheel (but NCCL, which it
    // lacks), and it imports no module.
    let python = bundle.join("fake-python");
    write_script(
        &python,
        "case \"$2\" in\n\
         *sys.executable*) echo \"$0\" ;;\n\
         import*) exit 1 ;;\n\
         *) [ \"$3\" = nccl ] && exit 1; echo /fake/nvidia/$3/lib/lib$3.so.12 ;;\n\
         esac\n",
    );
    fake_conformance(&bundle, "CPU");
    let out = bundle.join("out");
    let python_text = python.to_string_lossy().into_owned();
    let (output, status) = run(&bundle, &out, &[("PYTHON", python_text.as_str())]);
    println!("{status}");
    // Every step fails, as the bundle has no binaries.
    assert_eq!(output.status.code(), Some(1), "{status}");
    assert!(
        status.contains(&format!("python: {python_text} holds the NVIDIA wheels")),
        "{status}"
    );
    for found in [
        "nvrtc: /fake/nvidia/nvrtc/lib/libnvrtc.so.12",
        "cublas: /fake/nvidia/cublas/lib/libcublas.so.12",
    ] {
        assert!(status.contains(found), "{found} missing: {status}");
    }
    assert!(
        status.contains("nccl: not found under nvidia/*/lib or nvidia/cu13/lib of any of"),
        "{status}"
    );
    // cudarc looks for libcublas.so by that name: a link to the wheel's.
    let link = std::fs::read_link(out.join("libraries/libcublas.so"));
    assert_eq!(
        link.ok(),
        Some(PathBuf::from("/fake/nvidia/cublas/lib/libcublas.so.12"))
    );
    assert!(!out.join("libraries/libnccl.so").exists());
    // Neither PyTorch nor CuPy imports: the side by side runs ours alone
    // (and fails here, with no summary binary), saying why it skipped them.
    let log = std::fs::read_to_string(out.join("side-by-side.log")).unwrap_or_default();
    assert!(
        log.contains("side-by-side: torch: SKIPPED (no Python of"),
        "{log}"
    );
    assert!(
        log.contains("side-by-side: cupy: SKIPPED (no Python of"),
        "{log}"
    );
    // With only a CPU Vulkan device, the Vulkan steps are skipped with the
    // reason, and conformance leaves out its vulkan trials.
    assert!(status.contains("decode-vulkan: SKIPPED ("), "{status}");
    assert!(status.contains("peers: SKIPPED ("), "{status}");
    assert!(status.contains("conformance-vulkan: SKIPPED ("), "{status}");
    assert!(status.contains("conformance: PASS"), "{status}");
    let log = std::fs::read_to_string(out.join("conformance.log")).unwrap_or_default();
    assert!(log.contains("--skip vulkan::"), "{log}");
}

#[test]
fn vulkan_steps_run_with_a_vulkan_gpu() {
    let Some(here) = glibc_here() else {
        println!("skipped: this machine reports no glibc version");
        return;
    };
    let bundle = bundle("vulkan-gpu", &here);
    fake_conformance(&bundle, "discrete GPU");
    let out = bundle.join("out");
    let (_, status) = run(&bundle, &out, &[]);
    println!("{status}");
    if status.contains("no Vulkan loader") {
        println!("skipped: no Vulkan loader on this machine");
        return;
    }
    assert!(!status.contains("SKIPPED"), "{status}");
    // The steps ran, and failed as the bundle has no decode or peers binary.
    assert!(status.contains("decode-vulkan: FAIL"), "{status}");
    assert!(status.contains("peers: FAIL"), "{status}");
    let log = std::fs::read_to_string(out.join("conformance.log")).unwrap_or_default();
    assert!(!log.contains("--skip"), "{log}");
}

/// Whether this machine has an NVIDIA GPU, as the script would find it.
fn has_nvidia_gpu() -> bool {
    let smi = Command::new("nvidia-smi").arg("-L").output();
    let listed = smi.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("GPU "));
    let ldconfig = Command::new("sh")
        .args(["-c", "ldconfig -p 2>/dev/null | grep -q 'libcuda\\.so\\.1'"])
        .status();
    listed || ldconfig.is_ok_and(|s| s.success())
}

#[test]
fn without_an_nvidia_gpu_the_run_refuses_and_lists_its_steps() {
    if has_nvidia_gpu() {
        println!("skipped: this machine has an NVIDIA GPU");
        return;
    }
    let bundle = bundle("no-gpu", "2.0");
    let out = bundle.join("out");
    let (output, status) = run_here(&bundle, &out, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert_eq!(output.status.code(), Some(3), "{stdout}");
    assert!(
        status.starts_with("refused: no NVIDIA GPU here"),
        "{status}"
    );
    // Every step, in order, with its limit; nothing ran.
    let mut at = 0;
    for step in [
        "conformance: at most 170s",
        "side-by-side: at most 150s",
        "cuda-unit: at most",
        "cuda-device: at most",
        "cublas-cuda: at most 40s",
        "nccl-cuda: at most 40s",
        "decode-cuda: at most",
        "generate-cuda: at most",
        "decode-vulkan: at most",
        "peers: at most",
        "dependencies: at most",
        "summary: at most 200s",
    ] {
        let found = status[at..].find(step);
        assert!(found.is_some(), "{step} missing after byte {at}: {status}");
        at += found.unwrap_or(0);
    }
    assert!(!out.join("conformance.log").exists());
    // The peer script's one line, from the repository's copy.
    assert!(status.contains("the peer script here: "), "{status}");
}
