//! The cudarc examples (`cublas`, `nccl`, `cudarc`), where the `cudarc`
//! feature built them beside this test, run against the stub drivers: with
//! no device, and with the runs stub but no cuBLAS or NCCL, each says why
//! it cannot run and exits successfully, never panicking in cudarc's
//! loader.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::Command;

mod runs_stub;
use runs_stub::stub_dir;

/// Where cargo put example `name` of this package, if it built it.
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/<this test> -> target/<profile>/examples/<name>
    let path = exe.parent()?.parent()?.join("examples").join(name);
    path.is_file().then_some(path)
}

/// Run `path` with only `dir` on the library path; its exit and output.
fn run(path: &PathBuf, dir: &str) -> (bool, String) {
    let output = Command::new(path)
        .env("LD_LIBRARY_PATH", dir)
        .env_remove(backend_cuda::DEVICE_ENV)
        .env_remove("CAPTURE_CUBLAS_LIBRARY")
        .env_remove("CAPTURE_NCCL_LIBRARY")
        .output()
        .expect("the example runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn the_cudarc_examples_say_why_they_cannot_run_against_the_stubs() {
    let examples: Vec<(&str, Option<PathBuf>)> = ["cublas", "nccl"]
        .into_iter()
        .map(|name| (name, example(name)))
        .collect();
    if examples.iter().all(|(_, path)| path.is_none()) {
        println!("skipped: the examples were not built (they need the cudarc feature)");
        return;
    }
    let no_device = stub_dir(None).replace("cuda-stub-runs", "cuda-stub");
    for (name, path) in examples {
        let path = path.unwrap_or_else(|| panic!("{name} was not built beside the others"));
        let (ok, said) = run(&path, &no_device);
        assert!(ok, "{name} without a device: {said}");
        assert!(
            said.contains(&format!("{name} example: no CUDA device to run on")),
            "{name}: {said}"
        );
        let (ok, said) = run(&path, &stub_dir(None));
        assert!(ok, "{name} on the runs stub: {said}");
        let library = if name == "cublas" { "cuBLAS" } else { "NCCL" };
        assert!(
            said.contains(&format!("{name} example: no {library} library found")),
            "{name}: {said}"
        );
    }
}
