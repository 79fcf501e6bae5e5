//! Checks that need NVIDIA's compilers but no GPU: every PTX text the crate
//! can hand a driver (the builtins, the conditional setters) assembles for
//! every GPU generation it may meet, the
//! workload's CUDA C++ compiles with NVRTC and assembles too, each
//! assembled kernel takes exactly the parameters a launch passes, and NVRTC
//! makes a cubin for an architecture it knows and PTX only for one it does
//! not.
//!
//! The tools come from `CAPTURE_PTXAS` (a `:`-separated list) and
//! `CAPTURE_NVRTC_LIBRARY` when set, and otherwise from NVIDIA's PyPI
//! packages (`nvidia-cuda-nvcc-cu12`,
//! `nvidia-cuda-nvrtc-cu12`, and the CUDA 13 `nvidia-cuda-nvcc` /
//! `nvidia-cuda-nvrtc`) or a toolkit in `/usr/local/cuda`. A missing tool is
//! reported and the check passes, unless `CAPTURE_REQUIRE_OFFLINE_TOOLS=1`,
//! which makes it a failure (as CI sets it).
#![cfg(target_os = "linux")]

mod common;

use common::{missing, pip_nvidia_dirs};

use std::collections::BTreeSet;
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use backend_cuda::{
    NVRTC_ENV, NvrtcOutput, builtin_ptx_variants, check_module_image, nvrtc_compile_for,
    nvrtc_compile_ptx, setter_entries, setter_ptx_variants,
};
use capture_core::{Builtin, Error};

/// Set to `1` to make a missing tool a failure.
/// The ptxas to use (several separated by `:`); when set, no other is
/// looked for.
const PTXAS_ENV: &str = "CAPTURE_PTXAS";
/// Set in a child run with one NVRTC library: check and report coverage.
const CHILD: &str = "BACKEND_CUDA_OFFLINE_CHILD";
const COVERED: &str = "NVRTC_COVERED=";
const MISSING: &str = "NVRTC_MISSING=";

/// GPU generations the builtins are assembled for: Maxwell to Blackwell.
const BUILTIN_ARCHS: &[u32] = &[50, 52, 60, 70, 75, 80, 86, 89, 90, 100, 120];
/// Those some ptxas must have assembled when tools are required; sm_120
/// only where the ptxas knows it.
const REQUIRED_BUILTIN_ARCHS: &[u32] = &[50, 52, 75, 80, 90, 100];
/// Virtual architectures the workload is compiled for.
const WORKLOAD_ARCHS: &[u32] = &[52, 75, 80, 90, 100, 120];
const REQUIRED_WORKLOAD_ARCHS: &[u32] = &[52, 75, 80, 90, 100];

const WORKLOAD: &str = include_str!("../../conformance/kernels/workload.cu");

/// Each workload kernel's parameter sizes as `UserKernel::signature` in
/// `conformance/src/workload/mod.rs` makes a launch pass them: one pointer
/// per buffer, then the by-value parameters (none reads info bytes).
const WORKLOAD_PARAMS: &[(&str, &[usize])] = &[
    ("rmsnorm", &[8, 8, 8, 4, 4]),
    ("matvec", &[8, 8, 8, 4, 4]),
    ("silu", &[8, 4]),
    ("residual", &[8, 8, 4]),
    ("scale", &[8, 4, 4, 4]),
    ("embed", &[8, 8, 8, 4, 4, 4]),
    ("rmsnorm_rows", &[8, 8, 8, 4, 4, 4]),
    ("matmul", &[8, 8, 8, 4, 4, 4]),
    ("rope", &[8, 8, 8, 4, 4, 4, 4]),
    ("kv_append", &[8, 8, 8, 8, 8, 4, 4, 4]),
    ("attn_scores", &[8, 8, 8, 8, 4, 4, 4, 4, 4]),
    ("attn_softmax", &[8, 8, 4, 4, 4]),
    ("attn_values", &[8, 8, 8, 8, 4, 4, 4, 4]),
    ("silu_mul", &[8, 8, 4]),
    ("argmax", &[8, 8, 8, 8, 4, 4, 4]),
    ("advance", &[8, 4, 4]),
];
/// The workload's block size, which its `__launch_bounds__` announce.
const WORKLOAD_THREADS: u32 = 64;

// ---- finding the tools -------------------------------------------------

struct Ptxas {
    path: PathBuf,
    release: String,
}

/// Every ptxas found: those [`PTXAS_ENV`] lists (separated by `:`) alone
/// when set, else the PyPI ones (CUDA 12 first), a toolkit's, and one on the
/// search path.
fn ptxas_tools() -> Vec<Ptxas> {
    let candidates: Vec<PathBuf> = match env::var_os(PTXAS_ENV) {
        Some(paths) => env::split_paths(&paths).collect(),
        None => {
            let mut found = Vec::new();
            for dir in pip_nvidia_dirs() {
                found.push(dir.join("cuda_nvcc/bin/ptxas"));
                found.push(dir.join("cu13/bin/ptxas"));
            }
            found.push(PathBuf::from("/usr/local/cuda/bin/ptxas"));
            found.push(PathBuf::from("ptxas"));
            found
        }
    };
    let mut tools: Vec<Ptxas> = Vec::new();
    for path in candidates {
        let Ok(out) = Command::new(&path).arg("--version").output() else {
            continue;
        };
        if !out.status.success() {
            continue;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let release = text
            .split("release ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .unwrap_or("unknown")
            .to_owned();
        // The same tool under two names is run once.
        if tools.iter().any(|t| t.release == release) {
            continue;
        }
        tools.push(Ptxas { path, release });
    }
    tools
}

/// NVRTC libraries from the PyPI wheels, CUDA 12 first.
fn pip_nvrtc_libraries() -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in pip_nvidia_dirs() {
        for path in [
            dir.join("cuda_nvrtc/lib/libnvrtc.so.12"),
            dir.join("cu13/lib/libnvrtc.so.13"),
        ] {
            if path.is_file() {
                found.push(path);
            }
        }
    }
    found
}

// ---- assembling --------------------------------------------------------

enum Assembled {
    /// The cubin.
    Cubin(Vec<u8>),
    /// This ptxas cannot target the architecture or read the PTX version.
    Unsupported(String),
}

/// A fresh scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = env::temp_dir().join(format!(
            "backend-cuda-offline-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("the scratch directory can be made");
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Assemble `ptx` for `sm_<arch>`, treating every warning as an error.
/// Panics on any failure but the tool not knowing the target or version.
fn assemble(tool: &Ptxas, ptx: &str, arch: u32, what: &str) -> Assembled {
    let scratch = Scratch::new();
    let input = scratch.path("in.ptx");
    let output = scratch.path("out.cubin");
    // A PTX string handed to the driver may end in its NUL; ptxas reads a
    // file, which must not.
    std::fs::write(&input, ptx.trim_end_matches('\0')).expect("the PTX can be written");
    let out = Command::new(&tool.path)
        .arg("--warning-as-error")
        .arg(format!("-arch=sm_{arch}"))
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .expect("ptxas runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        return Assembled::Cubin(std::fs::read(&output).expect("ptxas wrote the cubin"));
    }
    if stderr.contains("is not defined for option 'gpu-name'")
        || stderr.contains("Unsupported .version")
    {
        let first = stderr.lines().next().unwrap_or_default();
        return Assembled::Unsupported(first.trim().to_owned());
    }
    panic!(
        "ptxas {} could not assemble {what} for sm_{arch}:\n{stderr}",
        tool.release
    );
}

/// The `.target sm_XX` a PTX text declares.
fn ptx_target(ptx: &str) -> u32 {
    ptx.lines()
        .find_map(|line| line.trim().strip_prefix(".target sm_"))
        .and_then(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("the PTX declares no .target sm_XX:\n{ptx}"))
}

// ---- reading a cubin ---------------------------------------------------

/// What a cubin's `.nv.info.<entry>` section says about an entry.
#[derive(Debug, Default)]
struct EntryInfo {
    /// Each parameter's size in bytes, by ordinal.
    params: Vec<usize>,
    /// `.reqntid`, the block size the entry requires.
    required_block: Option<[u32; 3]>,
    /// `.maxntid` / `__launch_bounds__`, the largest block it allows.
    max_block: Option<[u32; 3]>,
}

/// `EIATTR_KPARAM_INFO`: one parameter's ordinal, offset and size.
const EIATTR_KPARAM_INFO: u8 = 0x17;
/// `EIATTR_MAX_THREADS`: the `.maxntid` of the entry.
const EIATTR_MAX_THREADS: u8 = 0x05;
/// `EIATTR_REQNTID`: the `.reqntid` of the entry.
const EIATTR_REQNTID: u8 = 0x10;
/// `EIFMT_SVAL`: an attribute with a sized payload.
const EIFMT_SVAL: u8 = 0x04;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("two bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("four bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

/// The bytes of the ELF section called `name`.
fn section<'a>(elf: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let shoff = u64_at(elf, 0x28) as usize;
    let shentsize = u16_at(elf, 0x3a) as usize;
    let shnum = u16_at(elf, 0x3c) as usize;
    let shstrndx = u16_at(elf, 0x3e) as usize;
    let header = |i: usize| shoff + i * shentsize;
    let strings = u64_at(elf, header(shstrndx) + 0x18) as usize;
    (0..shnum).find_map(|i| {
        let at = header(i);
        let name_at = strings + u32_at(elf, at) as usize;
        let end = name_at + elf[name_at..].iter().position(|&b| b == 0)?;
        if &elf[name_at..end] != name.as_bytes() {
            return None;
        }
        let offset = u64_at(elf, at + 0x18) as usize;
        let size = u64_at(elf, at + 0x20) as usize;
        elf.get(offset..offset + size)
    })
}

fn entry_info(cubin: &[u8], entry: &str) -> EntryInfo {
    let info = section(cubin, &format!(".nv.info.{entry}"))
        .unwrap_or_else(|| panic!("the cubin has no .nv.info.{entry}"));
    let mut result = EntryInfo::default();
    let mut params: Vec<(u16, usize)> = Vec::new();
    let mut at = 0;
    while at + 4 <= info.len() {
        let (format, attribute) = (info[at], info[at + 1]);
        if format != EIFMT_SVAL {
            at += 4;
            continue;
        }
        let size = u16_at(info, at + 2) as usize;
        let payload = &info[at + 4..at + 4 + size];
        let dims = || [u32_at(payload, 0), u32_at(payload, 4), u32_at(payload, 8)];
        match attribute {
            EIATTR_KPARAM_INFO => {
                // index u32, ordinal u16, offset u16, then flags whose top
                // 14 bits are the size.
                let ordinal = u16_at(payload, 4);
                let bytes = (u32_at(payload, 8) >> 18) as usize;
                params.push((ordinal, bytes));
            }
            EIATTR_REQNTID => result.required_block = Some(dims()),
            EIATTR_MAX_THREADS => result.max_block = Some(dims()),
            _ => {}
        }
        at += 4 + size;
    }
    params.sort_unstable();
    for (position, &(ordinal, _)) in params.iter().enumerate() {
        assert_eq!(
            usize::from(ordinal),
            position,
            "{entry}: ordinals {params:?}"
        );
    }
    result.params = params.into_iter().map(|(_, size)| size).collect();
    result
}

/// `EM_CUDA`, the ELF machine of a cubin.
const EM_CUDA: u16 = 190;
/// `EI_OSABI` of a cubin of the older ABI (ABI version 7), whose `e_flags`
/// holds the `sm_XY` in its low byte.
const ELFOSABI_CUDA_V7: u8 = 0x33;
/// `EI_OSABI` of a cubin of the newer ABI (ABI version 8, CUDA 13 and
/// Blackwell), whose `e_flags` holds the `sm_XY` in its second byte.
const ELFOSABI_CUDA_V8: u8 = 0x41;

/// The `sm_XY` number a cubin's ELF header names, after checking that it
/// is a 64-bit little-endian ELF for `EM_CUDA`.
fn cubin_arch(cubin: &[u8]) -> u32 {
    assert!(cubin.len() > 0x40, "a cubin of {} bytes", cubin.len());
    assert_eq!(&cubin[..4], b"\x7fELF", "not an ELF image");
    assert_eq!(cubin[4], 2, "not a 64-bit ELF");
    assert_eq!(cubin[5], 1, "not a little-endian ELF");
    assert_eq!(u16_at(cubin, 18), EM_CUDA, "not a CUDA ELF");
    let flags = u32_at(cubin, 48);
    match cubin[7] {
        ELFOSABI_CUDA_V7 => flags & 0xff,
        ELFOSABI_CUDA_V8 => (flags >> 8) & 0xff,
        other => panic!("a cubin of an unknown ABI: EI_OSABI {other:#x}, e_flags {flags:#x}"),
    }
}

// ---- the checks --------------------------------------------------------

/// The cubin reader agrees with ptxas: what ptxas made for `sm_XY` names
/// `sm_XY`, in either ABI.
#[test]
fn cubin_headers_name_the_architecture_ptxas_assembled_for() {
    let tools = ptxas_tools();
    if tools.is_empty() {
        return missing("no ptxas found (CAPTURE_PTXAS, the nvidia-cuda-nvcc wheels, PATH)");
    }
    let (label, ptx) = builtin_ptx_variants().pop().expect("a variant");
    for tool in &tools {
        for arch in [75, 80, 90, 100, 120] {
            match assemble(tool, &ptx, arch, &label) {
                Assembled::Cubin(cubin) => {
                    assert_eq!(cubin_arch(&cubin), arch, "ptxas {}", tool.release);
                    println!(
                        "ptxas {}: sm_{arch}, EI_OSABI {:#x}, e_flags {:#x}",
                        tool.release,
                        cubin[7],
                        u32_at(&cubin, 48)
                    );
                }
                Assembled::Unsupported(why) => {
                    println!("ptxas {} skips sm_{arch}: {why}", tool.release);
                }
            }
        }
    }
}

/// NVRTC makes a cubin for an architecture it knows, whose header names
/// that architecture and which holds the kernels with their parameters; for
/// one it does not know it makes PTX for the newest it knows below. Each
/// NVRTC found is loaded in a child process of its own.
#[test]
fn nvrtc_makes_a_cubin_for_a_known_architecture_and_ptx_for_an_unknown_one() {
    let test = "nvrtc_makes_a_cubin_for_a_known_architecture_and_ptx_for_an_unknown_one";
    if env::var_os(CHILD).is_some() {
        return check_nvrtc_outputs();
    }
    let mut checked = 0;
    let mut absent = Vec::new();
    for library in nvrtc_libraries() {
        let (stdout, _) = run_child(test, library.as_deref());
        for line in stdout.lines() {
            if let Some(why) = line.strip_prefix(MISSING) {
                absent.push(why.to_owned());
            } else if line.starts_with(COVERED) {
                checked += 1;
            } else if !line.trim().is_empty()
                && line.trim() != "ok"
                && !line.starts_with("running ")
                && !line.starts_with("test ")
            {
                println!("{line}");
            }
        }
    }
    if checked == 0 {
        missing(&format!("no NVRTC was checked ({})", absent.join("; ")));
    }
}

/// In the child: the cubin and the PTX path with the NVRTC this process
/// loads.
fn check_nvrtc_outputs() {
    let info = match backend_cuda::nvrtc_info() {
        Ok(info) => info,
        Err(e) => {
            println!("\n{MISSING}{e}");
            return;
        }
    };
    let nvrtc = format!("NVRTC {}.{}", info.version.0, info.version.1);
    println!("{nvrtc} ({}): {:?}", info.path, info.archs);
    assert!(!info.archs.is_empty(), "{nvrtc} lists no architectures");
    let mut cubins = 0;
    for (major, minor) in [(8, 0), (9, 0), (10, 0), (12, 0)] {
        let arch = major * 10 + minor;
        if !info.archs.contains(&arch) {
            println!("{nvrtc} does not know sm_{arch}");
            continue;
        }
        let output = nvrtc_compile_for(WORKLOAD, (major as i32, minor as i32))
            .unwrap_or_else(|e| panic!("{nvrtc} could not compile the workload: {e}"));
        let NvrtcOutput::Cubin { arch: made, image } = output else {
            panic!("{nvrtc} knows sm_{arch} and made PTX: {output:?}");
        };
        assert_eq!(made, arch);
        assert_eq!(cubin_arch(&image), arch, "{nvrtc}'s cubin for sm_{arch}");
        assert_eq!(check_module_image(&image), Ok("cubin"));
        for &(entry, params) in WORKLOAD_PARAMS {
            assert_eq!(
                entry_info(&image, entry).params,
                params,
                "{nvrtc}, sm_{arch}: {entry}"
            );
        }
        println!("{nvrtc}: a cubin for sm_{arch}, EI_OSABI {:#x}", image[7]);
        cubins += 1;
    }
    assert!(cubins >= 2, "{nvrtc} made a cubin for sm_80 and sm_90");

    // A made-up sm_99 between Hopper and Blackwell, and an sm_250 from the
    // future: PTX for the newest architecture NVRTC knows below each.
    for (major, minor) in [(9, 9), (25, 0)] {
        let device = major * 10 + minor;
        assert!(!info.archs.contains(&device), "{nvrtc} knows sm_{device}");
        let expected = info
            .archs
            .iter()
            .copied()
            .filter(|&arch| arch <= device)
            .max()
            .expect("an older architecture");
        let output = nvrtc_compile_for(WORKLOAD, (major as i32, minor as i32))
            .unwrap_or_else(|e| panic!("{nvrtc} could not compile the workload: {e}"));
        let NvrtcOutput::Ptx { arch, text } = output else {
            panic!("{nvrtc} made a cubin for the unknown sm_{device}");
        };
        assert_eq!(arch, expected, "{nvrtc} for sm_{device}");
        assert_eq!(ptx_target(&text), expected, "{nvrtc} for sm_{device}");
        println!("{nvrtc}: PTX for compute_{arch} for the unknown sm_{device}");
    }

    // A device older than every architecture NVRTC knows is refused.
    match nvrtc_compile_for(WORKLOAD, (1, 0)) {
        Err(Error::Compile { log, .. }) => {
            assert!(log.contains("sm_10"), "{log}");
        }
        other => panic!("{nvrtc} compiled for sm_10: {other:?}"),
    }
    println!("\n{COVERED}{}", info.version.0);
}

/// The builtins' PTX, every variant, for every generation at or past its
/// target: it assembles without a warning, each entry takes one pointer per
/// binding and the info pointer (what a launch passes), and requires the
/// block size of its signature.
#[test]
fn builtin_ptx_assembles_for_every_target_and_takes_what_a_launch_passes() {
    let tools = ptxas_tools();
    if tools.is_empty() {
        return missing("no ptxas found (CAPTURE_PTXAS, the nvidia-cuda-nvcc wheels, PATH)");
    }
    assemble_everywhere(&tools, &builtin_ptx_variants(), |label, arch, cubin| {
        for which in Builtin::ALL {
            let entry = format!("builtin_{}", which.name());
            let info = entry_info(cubin, &entry);
            let expected = vec![8; which.accesses().len() + 1];
            assert_eq!(info.params, expected, "{label}, sm_{arch}: {entry}");
            assert_eq!(
                info.required_block,
                Some(which.signature().workgroup_size()),
                "{label}, sm_{arch}: {entry}"
            );
        }
    });
}

/// Assemble every variant of `variants` with every ptxas of `tools` for
/// every generation at or past its target, each cubin checked by `check`
/// (after its header); then every device must have a variant it can run,
/// assembled for its generation: the pre-Turing one below 7.5, the other
/// from 7.5 on.
fn assemble_everywhere(
    tools: &[Ptxas],
    variants: &[(String, String)],
    check: impl Fn(&str, u32, &[u8]),
) {
    // Each arch the variants must cover, and what covered it.
    let mut covered: BTreeSet<(usize, u32)> = BTreeSet::new();
    for (index, (label, ptx)) in variants.iter().enumerate() {
        assert!(!ptx.contains('\0'), "{label} holds a NUL");
        let target = ptx_target(ptx);
        for &arch in BUILTIN_ARCHS.iter().filter(|&&arch| arch >= target) {
            for tool in tools {
                match assemble(tool, ptx, arch, label) {
                    Assembled::Cubin(cubin) => {
                        assert_eq!(check_module_image(&cubin), Ok("cubin"));
                        check(label, arch, &cubin);
                        covered.insert((index, arch));
                        println!("{label}: sm_{arch} assembled by ptxas {}", tool.release);
                    }
                    Assembled::Unsupported(why) => {
                        println!("{label}: ptxas {} skips sm_{arch}: {why}", tool.release);
                    }
                }
            }
        }
    }
    let mut uncovered = Vec::new();
    for &arch in REQUIRED_BUILTIN_ARCHS {
        let index = usize::from(arch >= 75);
        assert!(
            ptx_target(&variants[index].1) <= arch,
            "{} is given to sm_{arch}, whose driver cannot run its target",
            variants[index].0
        );
        if !covered.contains(&(index, arch)) {
            uncovered.push(format!("{} for sm_{arch}", variants[index].0));
        }
    }
    if !uncovered.is_empty() {
        let releases: Vec<&str> = tools.iter().map(|t| t.release.as_str()).collect();
        missing(&format!(
            "no ptxas found ({releases:?}) assembles {}",
            uncovered.join(", ")
        ));
    }
}

/// The conditional setters assemble for every target the builtins do, each
/// entry taking exactly the parameters its launch passes in one thread,
/// and calling `cudaGraphSetConditional`, which ptxas knows as the
/// driver's (a name it does not know is refused) and leaves for the
/// driver to link when it loads the module.
#[test]
fn setter_ptx_assembles_for_every_target_and_takes_what_a_launch_passes() {
    let tools = ptxas_tools();
    if tools.is_empty() {
        return missing("no ptxas found (CAPTURE_PTXAS, the nvidia-cuda-nvcc wheels, PATH)");
    }
    let variants = setter_ptx_variants();
    let entries = setter_entries();
    assert_eq!(entries.len(), 5, "{entries:?}");
    for (label, ptx) in &variants {
        for (entry, _) in &entries {
            assert!(
                ptx.contains(&format!(".visible .entry {entry}(")),
                "{label} lacks {entry}"
            );
        }
    }
    // The check below can fail: an extern function ptxas does not know is
    // refused, so the name it finds is one it knows as the driver's.
    let (label, ptx) = &variants[1];
    let misspelled = ptx.replace("cudaGraphSetConditional", "cudaGraphSetConditionl");
    let tool = &tools[0];
    let scratch = Scratch::new();
    let input = scratch.path("misspelled.ptx");
    std::fs::write(&input, &misspelled).expect("the PTX can be written");
    let out = Command::new(&tool.path)
        .arg(format!("-arch=sm_{}", ptx_target(ptx)))
        .arg(&input)
        .arg("-o")
        .arg(scratch.path("misspelled.cubin"))
        .output()
        .expect("ptxas runs");
    assert!(!out.status.success(), "{label} with a misspelled extern");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cudaGraphSetConditionl"), "{stderr}");
    assemble_everywhere(&tools, &variants, |label, arch, cubin| {
        for &(entry, params) in &entries {
            let info = entry_info(cubin, entry);
            assert_eq!(info.params, params, "{label}, sm_{arch}: {entry}");
            assert_eq!(
                info.required_block,
                Some([1, 1, 1]),
                "{label}, sm_{arch}: {entry}"
            );
        }
        let name = b"cudaGraphSetConditional";
        assert!(
            cubin.windows(name.len()).any(|w| w == name),
            "{label}, sm_{arch}: the cubin names no cudaGraphSetConditional"
        );
    });
}

/// The workload's CUDA C++ compiles with NVRTC for each architecture, the
/// PTX assembles for the matching GPU, and every kernel takes what its
/// signature makes a launch pass. Each NVRTC found is loaded in a child
/// process of its own, since a process loads one.
#[test]
fn workload_compiles_with_nvrtc_and_assembles_with_its_parameters() {
    if env::var_os(CHILD).is_some() {
        return check_workload_with_loaded_nvrtc();
    }
    let libraries = nvrtc_libraries();
    let mut covered: BTreeSet<u32> = BTreeSet::new();
    let mut absent = Vec::new();
    for library in libraries {
        let (stdout, stderr) = run_child(
            "workload_compiles_with_nvrtc_and_assembles_with_its_parameters",
            library.as_deref(),
        );
        for line in stdout.lines() {
            if let Some(arch) = line.strip_prefix(COVERED) {
                covered.insert(arch.trim().parse().expect("an arch number"));
            } else if let Some(why) = line.strip_prefix(MISSING) {
                absent.push(why.to_owned());
            } else if !line.trim().is_empty()
                && !line.starts_with("running ")
                && !line.starts_with("test ")
            {
                // The child's own harness lines are left out, so that this
                // run reports one test, not three.
                println!("{line}");
            }
        }
        if !stderr.trim().is_empty() {
            eprintln!("{stderr}");
        }
    }
    let uncovered: Vec<String> = REQUIRED_WORKLOAD_ARCHS
        .iter()
        .filter(|arch| !covered.contains(arch))
        .map(|arch| format!("compute_{arch}"))
        .collect();
    if !uncovered.is_empty() {
        missing(&format!(
            "the workload was not compiled and assembled for {} ({})",
            uncovered.join(", "),
            if absent.is_empty() {
                "no NVRTC and ptxas pair knows them".to_owned()
            } else {
                absent.join("; ")
            }
        ));
    }
}

/// The NVRTC libraries to check, one child each: this process's own
/// setting when [`NVRTC_ENV`] is set or no wheel is found, else every
/// wheel's.
fn nvrtc_libraries() -> Vec<Option<PathBuf>> {
    if env::var_os(NVRTC_ENV).is_some() {
        return vec![None];
    }
    let found = pip_nvrtc_libraries();
    if found.is_empty() {
        vec![None]
    } else {
        found.into_iter().map(Some).collect()
    }
}

/// Run `test` again in a child, with `library` as its NVRTC (or this
/// process's own setting), and return what it printed.
fn run_child(test: &str, library: Option<&Path>) -> (String, String) {
    let exe = env::current_exe().expect("the test binary knows its path");
    let mut command = Command::new(exe);
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    if let Some(library) = library {
        command.env(NVRTC_ENV, library);
    }
    let output = command.output().expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the check with NVRTC {library:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    (stdout, stderr)
}

/// In the child: compile with the NVRTC this process loads, assemble with
/// every ptxas, and print each architecture covered.
fn check_workload_with_loaded_nvrtc() {
    let info = match backend_cuda::nvrtc_info() {
        Ok(info) => info,
        Err(e) => {
            let why = e.to_string();
            assert!(why.contains("NVRTC unavailable"), "{why}");
            println!("\n{MISSING}{why}");
            return;
        }
    };
    let nvrtc = format!(
        "NVRTC {}.{} ({})",
        info.version.0, info.version.1, info.path
    );
    println!("{nvrtc}: compute_{:?}", info.archs);

    // A source that does not compile is refused with NVRTC's own log.
    match nvrtc_compile_ptx("extern \"C\" __global__ void broken( { }", "compute_75") {
        Err(Error::Compile { log, .. }) => {
            assert!(log.contains("error"), "{nvrtc} gave no diagnostic: {log}");
        }
        other => panic!("{nvrtc} compiled a broken source: {other:?}"),
    }

    let tools = ptxas_tools();
    if tools.is_empty() {
        println!("\n{MISSING}no ptxas found to assemble {nvrtc}'s PTX");
        return;
    }
    for &arch in WORKLOAD_ARCHS {
        if !info.archs.is_empty() && !info.archs.contains(&arch) {
            println!("{nvrtc} does not compile for compute_{arch}");
            continue;
        }
        let ptx = nvrtc_compile_ptx(WORKLOAD, &format!("compute_{arch}"))
            .unwrap_or_else(|e| panic!("{nvrtc} could not compile the workload: {e}"));
        assert!(!ptx.contains('\0'), "the PTX holds a NUL");
        assert_eq!(ptx_target(&ptx), arch, "{nvrtc} targets another GPU");
        for tool in &tools {
            let what = format!("the workload from {nvrtc}");
            match assemble(tool, &ptx, arch, &what) {
                Assembled::Cubin(cubin) => {
                    for &(entry, params) in WORKLOAD_PARAMS {
                        let entry_info = entry_info(&cubin, entry);
                        assert_eq!(entry_info.params, params, "{what}, sm_{arch}: {entry}");
                        assert_eq!(
                            entry_info.max_block,
                            Some([WORKLOAD_THREADS, 1, 1]),
                            "{what}, sm_{arch}: {entry}'s launch bounds"
                        );
                    }
                    println!("compute_{arch}: assembled by ptxas {}", tool.release);
                    println!("\n{COVERED}{arch}");
                }
                Assembled::Unsupported(why) => {
                    println!("compute_{arch}: ptxas {} skips it: {why}", tool.release);
                }
            }
        }
    }
}

/// A cubin from ptxas and a fatbin from nvcc pass the check
/// `Kernel::from_image` makes before the driver reads them; cut short,
/// neither does.
#[test]
fn whole_images_pass_the_image_check_and_cut_ones_do_not() {
    let Some(tool) = ptxas_tools().into_iter().next() else {
        return missing("no ptxas found to make a cubin");
    };
    let (label, ptx) = builtin_ptx_variants().pop().expect("a variant");
    let Assembled::Cubin(cubin) = assemble(&tool, &ptx, 80, &label) else {
        return missing(&format!("ptxas {} cannot target sm_80", tool.release));
    };
    assert_eq!(check_module_image(&cubin), Ok("cubin"));
    for cut in [cubin.len() - 1, cubin.len() / 2, 70, 8] {
        assert!(
            check_module_image(&cubin[..cut]).is_err(),
            "a cubin cut to {cut} of {} bytes passed",
            cubin.len()
        );
    }

    // A fatbin needs nvcc, which only the CUDA 13 wheel or a toolkit has;
    // it is an extra here, not a required tool.
    let nvcc = pip_nvidia_dirs()
        .into_iter()
        .map(|dir| dir.join("cu13/bin/nvcc"))
        .chain([
            PathBuf::from("/usr/local/cuda/bin/nvcc"),
            PathBuf::from("nvcc"),
        ])
        .find(|nvcc| {
            Command::new(nvcc)
                .arg("--version")
                .output()
                .is_ok_and(|out| out.status.success())
        });
    let Some(nvcc) = nvcc else {
        println!("skipped the fatbin: no nvcc found");
        return;
    };
    let scratch = Scratch::new();
    let input = scratch.path("builtins.ptx");
    let output = scratch.path("builtins.fatbin");
    std::fs::write(&input, &ptx).expect("the PTX can be written");
    let out = Command::new(&nvcc)
        .args(["-fatbin", "-arch=sm_80"])
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .expect("nvcc runs");
    assert!(
        out.status.success(),
        "nvcc could not make a fatbin:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fatbin = std::fs::read(&output).expect("nvcc wrote the fatbin");
    assert_eq!(check_module_image(&fatbin), Ok("fatbin"));
    assert!(check_module_image(&fatbin[..fatbin.len() - 1]).is_err());
}
