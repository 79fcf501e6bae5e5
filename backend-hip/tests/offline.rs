//! The kernel sources compile with the installed hiprtc for the AMD
//! architectures the backend is run on, and agree with their signatures, on
//! a machine with no GPU: hiprtc compiles for a named architecture without
//! one, and the code objects' metadata says what each kernel takes.
//!
//! Where no hiprtc is installed each test says why and passes, unless
//! `CAPTURE_REQUIRE_OFFLINE_TOOLS=1` asks for the check to be enforced (as
//! CI does on its machine with ROCm's packages).
//!
//! MI300 (gfx942) is newer than ROCm 5.2's hiprtc, so the sources are also
//! compiled for it by an upstream clang (`clang++-19` by default, or the one
//! `CAPTURE_HIP_CLANG` names) against the installed HIP headers, as a
//! relocatable object: the device libraries are not needed to check that the
//! source compiles and what its kernels take. Skipped where that clang is
//! missing, unless `CAPTURE_HIP_CLANG` is set.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use backend_hip::{check_code_object, hiprtc_compile};
use capture_core::{Access, Builtin, Error, Signature};

/// The workload's source, shared with the CUDA backend.
const WORKLOAD: &str = include_str!("../../conformance/kernels/workload.cu");

/// The builtins' source, as the backend embeds it.
const BUILTINS: &str = include_str!("../src/kernels.hip");

/// MI50/MI60, MI100, MI200 and RDNA2: one of each instruction family ROCm
/// 5.2's hiprtc knows.
const ARCHES: [&str; 4] = ["gfx906", "gfx908", "gfx90a", "gfx1030"];

/// Set to `1` to fail, rather than skip, where hiprtc is missing.
const REQUIRE_VAR: &str = "CAPTURE_REQUIRE_OFFLINE_TOOLS";

/// The workload's signatures, as `conformance::workload::UserKernel` states
/// them (that crate depends on this one, so they are written out here).
fn workload() -> [Signature; 16] {
    use Access::{Read, ReadWrite, Write};
    let base = |name| Signature::new(name).workgroup([64, 1, 1]);
    // `count` by-value parameters of four bytes each.
    let params = |signature: Signature, count: usize| {
        (0..count).fold(signature, |signature, _| signature.param(4))
    };
    [
        base("rmsnorm")
            .bindings(&[Read, Read, Write])
            .param(4)
            .param(4),
        base("matvec")
            .bindings(&[Read, Read, Write])
            .param(4)
            .param(4),
        base("silu").binding(ReadWrite).param(4),
        base("residual").bindings(&[ReadWrite, Read]).param(4),
        base("scale").binding(ReadWrite).param(4).param(4).param(4),
        params(base("embed").bindings(&[Read, Read, Write]), 3),
        params(base("rmsnorm_rows").bindings(&[Read, Read, Write]), 3),
        params(base("matmul").bindings(&[Read, Read, Write]), 3),
        params(base("rope").bindings(&[ReadWrite, Read, Read]), 4),
        params(
            base("kv_append").bindings(&[Read, Read, Read, ReadWrite, ReadWrite]),
            3,
        ),
        params(base("attn_scores").bindings(&[Read, Read, Read, Write]), 5),
        params(base("attn_softmax").bindings(&[ReadWrite, Read]), 3),
        params(base("attn_values").bindings(&[Read, Read, Read, Write]), 4),
        params(base("silu_mul").bindings(&[ReadWrite, Read]), 1),
        params(base("argmax").bindings(&[Read, Read, Write, ReadWrite]), 3),
        params(base("advance").binding(ReadWrite), 2),
    ]
}

/// `source` compiled for `arch`, or `None` (after saying why) where there is
/// no hiprtc and none is required.
fn compile(source: &str, name: &str, arch: &str) -> Option<Vec<u8>> {
    match hiprtc_compile(source, name, arch) {
        Ok(image) => {
            assert!(
                image.starts_with(b"\x7fELF"),
                "{name} for {arch}: not an ELF code object"
            );
            Some(image)
        }
        Err(Error::Driver(error)) if error.message.starts_with("hiprtc unavailable") => {
            if env::var(REQUIRE_VAR).as_deref() == Ok("1") {
                panic!("{REQUIRE_VAR}=1, but {error}");
            }
            eprintln!("skipped: {error}");
            None
        }
        Err(error) => panic!("{name} does not compile for {arch}: {error}"),
    }
}

fn agrees(image: &[u8], arch: &str, signature: &Signature) {
    match check_code_object(image, signature.name(), signature) {
        Ok(true) => {}
        Ok(false) => panic!("{arch}: the code object's metadata could not be read"),
        Err(error) => panic!("{arch}: {error}"),
    }
}

#[test]
fn the_workload_compiles_for_every_architecture_and_agrees_with_its_signatures() {
    for arch in ARCHES {
        let Some(image) = compile(WORKLOAD, "workload.cu", arch) else {
            return;
        };
        for signature in workload() {
            agrees(&image, arch, &signature);
        }
    }
}

#[test]
fn the_builtins_compile_for_every_architecture_and_agree_with_their_signatures() {
    for arch in ARCHES {
        let Some(image) = compile(BUILTINS, "builtins.hip", arch) else {
            return;
        };
        for which in Builtin::ALL {
            agrees(&image, arch, &which.signature());
        }
    }
}

/// The check `Kernel::from_code_object` and `Kernel::from_hip` make refuses
/// a signature the compiled code contradicts, saying how.
#[test]
fn a_signature_the_code_contradicts_is_refused() {
    let Some(image) = compile(WORKLOAD, "workload.cu", "gfx90a") else {
        return;
    };
    let refusal =
        |signature: Signature| match check_code_object(&image, signature.name(), &signature) {
            Err(Error::Compile { kernel, log }) => {
                assert_eq!(kernel, signature.name());
                log
            }
            other => panic!("{signature} was not refused: {other:?}"),
        };
    // A binding too few.
    let log = refusal(
        Signature::new("residual")
            .binding(Access::ReadWrite)
            .param(4),
    );
    assert!(
        log.contains("takes (pointer, pointer, 4-byte value)")
            && log.contains("declares (pointer, 4-byte value)"),
        "{log}"
    );
    // An info block the kernel does not read.
    let log = refusal(
        Signature::new("silu")
            .binding(Access::ReadWrite)
            .info(16)
            .param(4),
    );
    assert!(log.contains("a pointer to the info bytes"), "{log}");
    // A parameter of the wrong size.
    let log = refusal(Signature::new("silu").binding(Access::ReadWrite).param(8));
    assert!(log.contains("declares (pointer, 8-byte value)"), "{log}");
    // A workgroup past the kernel's launch bounds.
    let log = refusal(
        Signature::new("silu")
            .binding(Access::ReadWrite)
            .param(4)
            .workgroup([128, 1, 1]),
    );
    assert!(log.contains("at most 64 threads"), "{log}");
    // A kernel the source does not have.
    let log = refusal(Signature::new("softmax").binding(Access::ReadWrite));
    assert!(log.contains("no kernel \"softmax\""), "{log}");
}

#[test]
fn a_source_that_does_not_compile_carries_hiprtcs_log() {
    let broken = "extern \"C\" __global__ void broken(float* x) { x[0] = undeclared_value; }";
    match hiprtc_compile(broken, "broken.hip", "gfx90a") {
        Err(Error::Compile { kernel, log }) => {
            assert_eq!(kernel, "broken.hip");
            assert!(log.contains("HIPRTC_ERROR_COMPILATION (6)"), "{log}");
            assert!(
                log.contains("error:") && log.contains("undeclared_value"),
                "hiprtc's log is missing: {log}"
            );
        }
        Err(Error::Driver(error)) if error.message.starts_with("hiprtc unavailable") => {
            if env::var(REQUIRE_VAR).as_deref() == Ok("1") {
                panic!("{REQUIRE_VAR}=1, but {error}");
            }
            eprintln!("skipped: {error}");
        }
        other => panic!("a source using an undeclared name did not fail to compile: {other:?}"),
    }
}

/// The clang that compiles for gfx942, and whether it was asked for.
fn clang() -> (String, bool) {
    match env::var("CAPTURE_HIP_CLANG") {
        Ok(clang) if !clang.is_empty() => (clang, true),
        _ => ("clang++-19".to_owned(), false),
    }
}

/// The folder holding `hip/hip_runtime.h`.
fn hip_include() -> Option<PathBuf> {
    ["HIP_PATH", "ROCM_PATH"]
        .iter()
        .filter_map(|var| env::var_os(var).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
        .chain([PathBuf::from("/opt/rocm"), PathBuf::from("/usr")])
        .map(|root| root.join("include"))
        .find(|dir| dir.join("hip/hip_runtime.h").is_file())
}

/// `source` compiled by `clang` for `arch` as a relocatable device object.
fn clang_compile(clang: &str, source: &Path, arch: &str, out: &Path) -> Result<Vec<u8>, String> {
    let include =
        hip_include().ok_or("no hip/hip_runtime.h under HIP_PATH, ROCM_PATH, /opt/rocm or /usr")?;
    let resource = Command::new(clang)
        .arg("-print-resource-dir")
        .output()
        .map_err(|e| format!("{clang}: {e}"))?;
    let resource = String::from_utf8_lossy(&resource.stdout).trim().to_owned();
    let output = Command::new(clang)
        .args(["-x", "hip", &format!("--offload-arch={arch}")])
        // No device libraries or ROCm install: the installed headers are
        // included by hand, and the object is left unlinked.
        .args(["-nogpulib", "-nogpuinc", "-D__HIP_PLATFORM_AMD__"])
        .args(["-include", "hip/hip_runtime.h"])
        .arg(format!("-I{}", include.display()))
        // ROCm 5's headers include `include/cuda_wrappers/...` from clang's
        // resource folder.
        .arg(format!("-I{resource}"))
        .args([
            "--cuda-device-only",
            "-fgpu-rdc",
            "-c",
            "-Xclang",
            "-emit-obj",
        ])
        .args(["-O3", "-ffp-contract=off", "-o"])
        .arg(out)
        .arg(source)
        .output()
        .map_err(|e| format!("{clang}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{clang} cannot compile {} for {arch}:\n{}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    std::fs::read(out).map_err(|e| format!("{}: {e}", out.display()))
}

#[test]
fn the_sources_compile_for_gfx942_with_clang_and_agree_with_their_signatures() {
    let (clang, asked) = clang();
    if Command::new(&clang).arg("--version").output().is_err() {
        assert!(!asked, "CAPTURE_HIP_CLANG={clang} cannot be run");
        eprintln!("skipped: no {clang} here");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hip-offline");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources: [(PathBuf, Vec<Signature>); 2] = [
        (
            manifest.join("../conformance/kernels/workload.cu"),
            workload().to_vec(),
        ),
        (
            manifest.join("src/kernels.hip"),
            Builtin::ALL.iter().map(|which| which.signature()).collect(),
        ),
    ];
    for (i, (source, signatures)) in sources.iter().enumerate() {
        let out = dir.join(format!("gfx942-{i}.o"));
        let image = clang_compile(&clang, source, "gfx942", &out).unwrap_or_else(|e| panic!("{e}"));
        for signature in signatures {
            agrees(&image, "gfx942", signature);
        }
    }
}
