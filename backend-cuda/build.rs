//! Builds the stub `libcuda.so.1` libraries the no-device tests load in
//! place of the NVIDIA driver, and says which C compiler the ABI test may
//! use. Only the tests need either, so a machine without a C compiler still
//! builds the crate: it gets a warning, and those tests say why they cannot
//! run.

use std::env;
use std::path::{Path, PathBuf};

const SOURCE: &str = "tests/stub/cuda_stub.c";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    // The stub stands in for a Linux shared object; elsewhere the driver has
    // another name and the tests are not compiled.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    if let Err(why) = build_stubs() {
        println!(
            "cargo:warning=the CUDA stub libraries for the no-device tests were not built: {why}"
        );
    }
}

fn build_stubs() -> Result<(), String> {
    let out = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .try_get_compiler()
        .map_err(|e| format!("no C compiler: {e}"))?;
    println!("cargo:rustc-env=CUDA_TEST_CC={}", compiler.path().display());
    let minimal = out.join("cuda-stub");
    build_stub(&compiler, &minimal, &[])?;
    println!("cargo:rustc-env=CUDA_STUB_DIR={}", minimal.display());
    let full = out.join("cuda-stub-full");
    build_stub(&compiler, &full, &["-DCUDA_STUB_FULL"])?;
    println!("cargo:rustc-env=CUDA_FULL_STUB_DIR={}", full.display());
    let runs = out.join("cuda-stub-runs");
    build_stub(&compiler, &runs, &["-DCUDA_STUB_FULL", "-DCUDA_STUB_RUNS"])?;
    println!("cargo:rustc-env=CUDA_RUNS_STUB_DIR={}", runs.display());
    // Inside the runs stub's directory, so that whatever ships that
    // directory ships these too: a 12.0 to 12.2 driver, without the edge
    // functions taking edge data, one without any edge functions, and one
    // without the conditional-node functions of 12.3.
    build_stub(
        &compiler,
        &runs.join("no-edge-data"),
        &[
            "-DCUDA_STUB_FULL",
            "-DCUDA_STUB_RUNS",
            "-DCUDA_STUB_NO_EDGE_DATA",
        ],
    )?;
    build_stub(
        &compiler,
        &runs.join("no-edge-functions"),
        &[
            "-DCUDA_STUB_FULL",
            "-DCUDA_STUB_RUNS",
            "-DCUDA_STUB_NO_EDGE_FUNCTIONS",
        ],
    )?;
    build_stub(
        &compiler,
        &runs.join("no-conditionals"),
        &[
            "-DCUDA_STUB_FULL",
            "-DCUDA_STUB_RUNS",
            "-DCUDA_STUB_NO_CONDITIONALS",
        ],
    )?;
    Ok(())
}

fn build_stub(compiler: &cc::Tool, dir: &Path, defines: &[&str]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let library = dir.join("libcuda.so.1");
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .args(defines)
        .arg(SOURCE)
        .status()
        .map_err(|e| format!("running {}: {e}", compiler.path().display()))?;
    if !status.success() {
        return Err(format!(
            "{} exited with {status}",
            compiler.path().display()
        ));
    }
    // Also under the unversioned name: the stub directory comes first on
    // the search path, so a real driver's `libcuda.so` elsewhere on the
    // machine cannot be picked instead. A hard link where the file system
    // allows, so that a process loading both names (cudarc asks for
    // `libcuda.so`, the backend for `libcuda.so.1`) loads one stub.
    let unversioned = dir.join("libcuda.so");
    // Absent on a first build; any other failure shows in the link below.
    let _ = std::fs::remove_file(&unversioned);
    if std::fs::hard_link(&library, &unversioned).is_err() {
        std::fs::copy(&library, &unversioned)
            .map_err(|e| format!("copying to {}: {e}", unversioned.display()))?;
    }
    Ok(())
}
