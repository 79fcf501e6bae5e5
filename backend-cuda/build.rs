//! Builds the stub `libcuda.so.1` the no-device test loads in place of the
//! NVIDIA driver. Only the tests use it, so a machine without a C compiler
//! still builds the crate: it gets a warning, and that test says why it
//! cannot run.

use std::env;
use std::path::PathBuf;

const SOURCE: &str = "tests/stub/cuda_stub.c";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    // The stub stands in for a Linux shared object; elsewhere the driver has
    // another name and the test is not compiled.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    if let Err(why) = build_stub() {
        println!("cargo:warning=the CUDA stub library for the no-device test was not built: {why}");
    }
}

fn build_stub() -> Result<(), String> {
    let out = env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?;
    let dir = PathBuf::from(out).join("cuda-stub");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let library = dir.join("libcuda.so.1");
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .try_get_compiler()
        .map_err(|e| format!("no C compiler: {e}"))?;
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(SOURCE)
        .status()
        .map_err(|e| format!("running {}: {e}", compiler.path().display()))?;
    if !status.success() {
        return Err(format!(
            "{} exited with {status}",
            compiler.path().display()
        ));
    }
    // Also under the unversioned name, which the loader tries first: the
    // stub directory comes first on the search path, so a real driver's
    // `libcuda.so` elsewhere on the machine cannot be picked instead.
    let unversioned = dir.join("libcuda.so");
    std::fs::copy(&library, &unversioned)
        .map_err(|e| format!("copying to {}: {e}", unversioned.display()))?;
    println!("cargo:rustc-env=CUDA_STUB_DIR={}", dir.display());
    Ok(())
}
