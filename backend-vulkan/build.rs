//! Compiles the builtin kernels from WGSL to SPIR-V with naga, so building the
//! crate needs no system shader compiler and the binary carries its kernels.

use std::path::PathBuf;

const KERNELS: [&str; 4] = ["fill", "add", "copy", "axpy"];

/// The info struct and element index every kernel shares.
const COMMON: &str = "shaders/common.wgsl";

fn read(path: &str) -> String {
    println!("cargo::rerun-if-changed={path}");
    std::fs::read_to_string(path).unwrap_or_else(|e| fail(&format!("reading {path}: {e}")))
}

fn main() {
    let out_dir = match std::env::var_os("OUT_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => fail("OUT_DIR is not set"),
    };
    let common = read(COMMON);
    for name in KERNELS {
        let path = format!("shaders/{name}.wgsl");
        // One source per kernel: the shared prelude, then the kernel.
        let source = format!("{common}\n{}", read(&path));
        let words = compile(&path, &source);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let target = out_dir.join(format!("{name}.spv"));
        std::fs::write(&target, bytes)
            .unwrap_or_else(|e| fail(&format!("writing {}: {e}", target.display())));
    }
}

fn compile(path: &str, source: &str) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| fail(&format!("{path}: {}", e.emit_to_string(source))));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .unwrap_or_else(|e| fail(&format!("{path}: validation: {e:?}")));
    let mut options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    // Debug info only makes the embedded binaries larger.
    options.flags.remove(naga::back::spv::WriterFlags::DEBUG);
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
    };
    naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
        .unwrap_or_else(|e| fail(&format!("{path}: SPIR-V: {e}")))
}

fn fail(message: &str) -> ! {
    eprintln!("backend-vulkan build: {message}");
    std::process::exit(1)
}
