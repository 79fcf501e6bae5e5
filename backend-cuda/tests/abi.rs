//! The driver declarations of `src/sys.rs` against NVIDIA's real `cuda.h`,
//! with no GPU: a C compiler checks that every function the backend
//! resolves has the prototype its Rust declaration spells, and that every
//! constant, size and offset the backend relies on has the value it gives;
//! the table naming result codes is compared with the header's enum. The
//! NVRTC functions of `src/nvrtc.rs` are checked the same way against
//! `nvrtc.h` (`nvidia/cuda_nvrtc/include`, `nvidia/cu13/include`).
//!
//! The headers come from `CAPTURE_CUDA_INCLUDE` (directories separated by
//! `:`) when set, and otherwise from NVIDIA's PyPI wheels:
//! `nvidia-cuda-runtime-cu12` (`nvidia/cuda_runtime/include`) and the CUDA
//! 13 `nvidia-cuda-runtime` (`nvidia/cu13/include`). A missing header or
//! compiler is reported and the check passes, unless
//! `CAPTURE_REQUIRE_OFFLINE_TOOLS=1`, which makes it a failure and wants
//! both a CUDA 12 and a CUDA 13 header (`scripts/cuda-offline-tools
//! --cuda13` installs them).
#![cfg(target_os = "linux")]

mod common;

use common::{missing, pip_nvidia_dirs};

use std::collections::BTreeMap;
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use backend_cuda::abi::{NVRTC_PROTOTYPES, PROTOTYPES, Prototype, abi_facts, result_names};

const INCLUDE_ENV: &str = "CAPTURE_CUDA_INCLUDE";

/// One `cuda.h` found, and the `CUDA_VERSION` it declares.
struct Header {
    include: PathBuf,
    version: u32,
}

impl Header {
    fn path(&self) -> PathBuf {
        self.include.join("cuda.h")
    }

    fn text(&self) -> String {
        std::fs::read_to_string(self.path()).expect("the header is readable")
    }
}

fn headers() -> Vec<Header> {
    let candidates: Vec<PathBuf> = match env::var_os(INCLUDE_ENV) {
        Some(dirs) => env::split_paths(&dirs).collect(),
        None => pip_nvidia_dirs()
            .into_iter()
            .flat_map(|dir| [dir.join("cuda_runtime/include"), dir.join("cu13/include")])
            .collect(),
    };
    let mut found: Vec<Header> = Vec::new();
    for include in candidates {
        let Ok(text) = std::fs::read_to_string(include.join("cuda.h")) else {
            continue;
        };
        let version = text
            .lines()
            .find_map(|line| line.trim().strip_prefix("#define CUDA_VERSION "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if !found.iter().any(|h| h.version == version) {
            found.push(Header { include, version });
        }
    }
    found
}

/// The headers to check, or `None` (after saying why) when they are not
/// all here.
fn checked_headers() -> Option<Vec<Header>> {
    let found = headers();
    for header in &found {
        println!("cuda.h {} at {}", header.version, header.path().display());
    }
    let has = |major: u32| found.iter().any(|h| h.version / 1000 == major);
    if found.is_empty() {
        missing("no cuda.h found (neither nvidia-cuda-runtime-cu12 nor nvidia-cuda-runtime)");
        return None;
    }
    for (major, package) in [
        (12, "nvidia-cuda-runtime-cu12"),
        (13, "nvidia-cuda-runtime"),
    ] {
        if !has(major) {
            missing(&format!("no CUDA {major} cuda.h found ({package})"));
        }
    }
    Some(found)
}

/// The headers found, as [`checked_headers`], where there is also a C
/// compiler to compile sources over them; `None` (said, or failed where
/// the tools are required) otherwise.
fn headers_to_compile() -> Option<Vec<Header>> {
    let headers = checked_headers()?;
    if Command::new(compiler()).arg("--version").output().is_err() {
        missing(&format!("no C compiler ({})", compiler()));
        return None;
    }
    Some(headers)
}

/// The C compiler the build script found, or `cc`.
fn compiler() -> String {
    option_env!("CUDA_TEST_CC").unwrap_or("cc").to_owned()
}

/// A Rust parameter type of `sys.rs`, spelled in C.
fn c_type(rust: &str) -> String {
    let rust = rust
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("* mut ", "*mut ")
        .replace("* const ", "*const ");
    let rust = rust.trim();
    if let Some(inner) = rust.strip_prefix("*mut ") {
        return format!("{} *", c_type(inner));
    }
    if let Some(inner) = rust.strip_prefix("*const ") {
        let inner = c_type(inner);
        // `const` binds to what the pointer points at.
        return if inner.ends_with('*') {
            format!("{inner} const *")
        } else {
            format!("const {inner} *")
        };
    }
    match rust {
        "c_void" => "void",
        "c_char" => "char",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "c_ulonglong" => "unsigned long long",
        "usize" => "size_t",
        other => other,
    }
    .to_owned()
}

/// The C source asserting every fact and prototype but the legacy ones,
/// plus `extra` lines.
fn assertions(extra: &str) -> String {
    let mut c = String::from("#include <cuda.h>\n#include <stddef.h>\n\n");
    for fact in abi_facts() {
        c.push_str(&format!(
            "_Static_assert((long long)({expr}) == {value}LL, \"{expr} is {value} in Rust\");\n",
            expr = fact.c,
            value = fact.value
        ));
    }
    for prototype in PROTOTYPES.iter().filter(|p| !p.legacy) {
        c.push_str(&prototype_assertion(prototype));
    }
    c.push_str(extra);
    c
}

/// A static assertion that `prototype`'s symbol has the type its Rust
/// declaration spells.
fn prototype_assertion(prototype: &Prototype) -> String {
    let params: Vec<String> = prototype.params.iter().map(|p| c_type(p)).collect();
    let spelled = format!("CUresult (*)({})", params.join(", "));
    format!(
        "_Static_assert(__builtin_types_compatible_p(__typeof__(&{symbol}), {spelled}), \
         \"{symbol} is {spelled} in Rust\");\n",
        symbol = prototype.symbol
    )
}

/// The C source asserting the legacy prototypes, plus `extra` lines. CUDA
/// 13's header declares them only for the driver's own build, whose macro
/// is defined first; CUDA 12's declares them either way.
fn legacy_assertions(extra: &str) -> String {
    let mut c = String::from(
        "#define __CUDA_API_VERSION_INTERNAL 1\n#include <cuda.h>\n#include <stddef.h>\n\n",
    );
    for prototype in PROTOTYPES.iter().filter(|p| p.legacy) {
        c.push_str(&prototype_assertion(prototype));
    }
    c.push_str(extra);
    c
}

/// Compile `source` against `header`, without linking: `Ok` when it
/// compiles, else the compiler's words.
fn compile(header: &Header, source: &str, name: &str) -> Result<(), String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("abi");
    std::fs::create_dir_all(&dir).expect("the scratch directory is writable");
    let file = dir.join(format!("{name}-{}.c", header.version));
    std::fs::write(&file, source).expect("the check is writable");
    let out = Command::new(compiler())
        .args(["-fsyntax-only", "-std=gnu11", "-Werror", "-I"])
        .arg(&header.include)
        .arg(&file)
        .output()
        .map_err(|e| format!("{} cannot run: {e}", compiler()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn declarations_agree_with_cuda_h() {
    let Some(headers) = headers_to_compile() else {
        return;
    };
    assert!(PROTOTYPES.len() > 40, "the table lists every function");
    let source = assertions("");
    for header in &headers {
        if let Err(words) = compile(header, &source, "abi") {
            panic!(
                "the declarations disagree with {} (CUDA {}):\n{words}",
                header.path().display(),
                header.version
            );
        }
        println!(
            "CUDA {}: {} prototypes and {} constants, sizes and offsets agree",
            header.version,
            PROTOTYPES.iter().filter(|p| !p.legacy).count(),
            abi_facts().len()
        );
        // The check can fail: a value and a prototype made wrong on
        // purpose are refused.
        let wrong = assertions(
            "_Static_assert(CUDA_ERROR_STUB_LIBRARY == 35, \"a wrong value\");\n\
             _Static_assert(__builtin_types_compatible_p(__typeof__(&cuMemAlloc_v2), \
             CUresult (*)(CUdeviceptr *, unsigned int)), \"a wrong prototype\");\n",
        );
        let refused = compile(header, &wrong, "wrong").expect_err("wrong facts are refused");
        assert!(refused.contains("a wrong value"), "{refused}");
        assert!(refused.contains("a wrong prototype"), "{refused}");
    }
}

/// The functions that rewrite a captured graph's edges are checked like
/// every other, and are the 12.3 spellings with edge data: the ones CUDA
/// 13's header declares under the plain names, where CUDA 12's plain names
/// are the older prototypes without it.
#[test]
fn edge_functions_are_the_edge_data_spellings() {
    let edge_functions = [
        "cuGraphGetRootNodes",
        "cuGraphNodeGetDependentNodes_v2",
        "cuGraphAddDependencies_v2",
        "cuGraphRemoveDependencies_v2",
    ];
    for symbol in edge_functions {
        let prototype = PROTOTYPES
            .iter()
            .find(|p| p.symbol == symbol)
            .unwrap_or_else(|| panic!("{symbol} is not declared"));
        assert!(prototype.optional, "{symbol} is required of every driver");
    }
    let Some(headers) = headers_to_compile() else {
        return;
    };
    for header in &headers {
        let same = header.version >= 13000;
        let mut source = String::from("#include <cuda.h>\n");
        for plain in [
            "cuGraphNodeGetDependentNodes",
            "cuGraphAddDependencies",
            "cuGraphRemoveDependencies",
        ] {
            source.push_str(&format!(
                "_Static_assert(__builtin_types_compatible_p(__typeof__(&{plain}), \
                 __typeof__(&{plain}_v2)) == {}, \"{plain} and {plain}_v2\");\n",
                i32::from(same)
            ));
        }
        if let Err(words) = compile(header, &source, "edges") {
            panic!(
                "CUDA {}: the plain edge functions are {}the _v2 ones:\n{words}",
                header.version,
                if same { "not " } else { "" }
            );
        }
    }
}

/// The 10.0 edge functions a driver before 12.3 offers in place of the
/// `_v2` ones are declared as every header spells them under the plain
/// names: CUDA 12's, and CUDA 13's for the driver's own build.
#[test]
fn plain_edge_functions_agree_with_cuda_h() {
    let legacy: Vec<&str> = PROTOTYPES
        .iter()
        .filter(|p| p.legacy)
        .map(|p| p.symbol)
        .collect();
    assert_eq!(
        legacy,
        [
            "cuGraphNodeGetDependentNodes",
            "cuGraphAddDependencies",
            "cuGraphRemoveDependencies"
        ]
    );
    assert!(PROTOTYPES.iter().filter(|p| p.legacy).all(|p| p.optional));
    let Some(headers) = headers_to_compile() else {
        return;
    };
    for header in &headers {
        if let Err(words) = compile(header, &legacy_assertions(""), "legacy") {
            panic!(
                "the plain edge functions disagree with {} (CUDA {}):\n{words}",
                header.path().display(),
                header.version
            );
        }
        // The check can fail: the edge-data prototype under the plain name
        // is refused.
        let wrong = legacy_assertions(
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&cuGraphAddDependencies), \
             CUresult (*)(CUgraph, const CUgraphNode *, const CUgraphNode *, \
             const CUgraphEdgeData *, size_t)), \"a wrong prototype\");\n",
        );
        let refused = compile(header, &wrong, "legacy-wrong").expect_err("a wrong one is refused");
        assert!(refused.contains("a wrong prototype"), "{refused}");
        println!(
            "CUDA {}: the {} plain edge functions agree",
            header.version,
            legacy.len()
        );
    }
}

/// The conditional-node functions are optional, so that a driver before
/// 12.3 still loads the library, and are the 12.3 spellings with edge data
/// that CUDA 13's header declares under the plain names; the node
/// parameters' layout is among the facts checked, and a wrong one is
/// refused.
#[test]
fn conditional_functions_are_optional_and_their_layouts_agree() {
    for symbol in [
        "cuGraphConditionalHandleCreate",
        "cuGraphAddNode_v2",
        "cuStreamBeginCaptureToGraph",
        "cuStreamGetCaptureInfo_v3",
        "cuStreamUpdateCaptureDependencies_v2",
    ] {
        let prototype = PROTOTYPES
            .iter()
            .find(|p| p.symbol == symbol)
            .unwrap_or_else(|| panic!("{symbol} is not declared"));
        assert!(prototype.optional && !prototype.legacy, "{symbol}");
    }
    let facts: Vec<&str> = abi_facts().iter().map(|f| f.c).collect();
    for fact in [
        "sizeof(CUgraphNodeParams)",
        "offsetof(CUgraphNodeParams, conditional)",
        "offsetof(CUgraphNodeParams, reserved2)",
        "sizeof(CUDA_CONDITIONAL_NODE_PARAMS)",
        "offsetof(CUDA_CONDITIONAL_NODE_PARAMS, phGraph_out)",
        "CU_GRAPH_NODE_TYPE_CONDITIONAL",
        "CU_GRAPH_COND_TYPE_WHILE",
        "sizeof(CUgraphConditionalHandle)",
    ] {
        assert!(facts.contains(&fact), "{fact} is not checked");
    }
    let Some(headers) = headers_to_compile() else {
        return;
    };
    for header in &headers {
        let same = header.version >= 13000;
        let mut source = String::from("#include <cuda.h>\n");
        for (plain, newer) in [
            ("cuGraphAddNode", "cuGraphAddNode_v2"),
            ("cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v3"),
            (
                "cuStreamUpdateCaptureDependencies",
                "cuStreamUpdateCaptureDependencies_v2",
            ),
        ] {
            source.push_str(&format!(
                "_Static_assert(__builtin_types_compatible_p(__typeof__(&{plain}), \
                 __typeof__(&{newer})) == {}, \"{plain} and {newer}\");\n",
                i32::from(same)
            ));
        }
        if let Err(words) = compile(header, &source, "conditionals") {
            panic!(
                "CUDA {}: the plain conditional-node functions are {}the newer ones:\n{words}",
                header.version,
                if same { "not " } else { "" }
            );
        }
        // The check can fail: a conditional member at another offset.
        let wrong = assertions(
            "_Static_assert(offsetof(CUgraphNodeParams, conditional) == 8, \
             \"a wrong offset\");\n",
        );
        let refused = compile(header, &wrong, "conditionals-wrong").expect_err("refused");
        assert!(refused.contains("a wrong offset"), "{refused}");
        println!(
            "CUDA {}: the conditional-node declarations agree",
            header.version
        );
    }
}

/// `NAME = value` of every entry of the header's `CUresult` enum.
fn header_results(text: &str) -> BTreeMap<String, i32> {
    let start = text
        .find("typedef enum cudaError_enum")
        .expect("cuda.h declares CUresult");
    let body = &text[start..];
    let body = &body[..body.find('}').expect("the enum closes")];
    let mut results = BTreeMap::new();
    for line in body.lines() {
        let line = line.trim();
        let Some((name, rest)) = line.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if !name.starts_with("CUDA_") {
            continue;
        }
        let value: String = rest
            .trim()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        results.insert(name.to_owned(), value.parse().expect("a decimal code"));
    }
    results
}

#[test]
fn result_names_agree_with_cuda_h() {
    let Some(headers) = checked_headers() else {
        return;
    };
    let table: BTreeMap<&str, i32> = result_names().iter().map(|&(v, n)| (n, v)).collect();
    let mut named_somewhere = BTreeMap::new();
    for header in &headers {
        let results = header_results(&header.text());
        assert!(results.len() > 90, "{}: {results:?}", header.version);
        for (name, value) in &results {
            assert_eq!(
                table.get(name.as_str()),
                Some(value),
                "CUDA {}: {name} = {value}, and the table says otherwise",
                header.version
            );
            named_somewhere.insert(name.clone(), *value);
        }
        println!(
            "CUDA {}: the table names all {} result codes",
            header.version,
            results.len()
        );
    }
    // The table is CUDA 13's: only a CUDA 13 header names all of it.
    if !headers.iter().any(|h| h.version >= 13000) {
        return;
    }
    for (name, value) in &table {
        assert_eq!(
            named_somewhere.get(*name),
            Some(value),
            "the table names {name} = {value}, which no header found declares"
        );
    }
}

#[test]
fn rust_types_are_spelled_in_c() {
    assert_eq!(c_type("*mut *const c_char"), "const char * *");
    assert_eq!(c_type("*const c_void"), "const void *");
    assert_eq!(c_type("*mut CUdeviceptr"), "CUdeviceptr *");
    assert_eq!(c_type("usize"), "size_t");
    assert_eq!(c_type("* mut * mut c_void"), "void * *");
}

// ---- nvrtc.h -------------------------------------------------------------

/// Every directory holding an `nvrtc.h` of NVIDIA's wheels (or those
/// `CAPTURE_CUDA_INCLUDE` names), with the release it declares.
fn nvrtc_headers() -> Vec<(PathBuf, String)> {
    let candidates: Vec<PathBuf> = match env::var_os(INCLUDE_ENV) {
        Some(dirs) => env::split_paths(&dirs).collect(),
        None => pip_nvidia_dirs()
            .into_iter()
            .flat_map(|dir| [dir.join("cuda_nvrtc/include"), dir.join("cu13/include")])
            .collect(),
    };
    candidates
        .into_iter()
        .filter(|dir| dir.join("nvrtc.h").is_file())
        .map(|dir| {
            let release = dir.to_string_lossy().into_owned();
            (dir, release)
        })
        .collect()
}

/// A Rust type of `src/nvrtc.rs`, spelled in C.
fn nvrtc_c_type(rust: &str) -> String {
    c_type(
        &rust
            .replace("NvrtcResult", "nvrtcResult")
            .replace("Program", "nvrtcProgram"),
    )
}

/// The C source asserting every NVRTC prototype, plus `extra` lines.
fn nvrtc_assertions(extra: &str) -> String {
    let mut c = String::from(
        "#include <nvrtc.h>\n#include <stddef.h>\n\n\
         _Static_assert(sizeof(nvrtcResult) == sizeof(int), \"nvrtcResult is an int in Rust\");\n\
         _Static_assert(NVRTC_SUCCESS == 0, \"NVRTC_SUCCESS is 0 in Rust\");\n",
    );
    for prototype in NVRTC_PROTOTYPES {
        let params: Vec<String> = prototype.params.iter().map(|p| nvrtc_c_type(p)).collect();
        let spelled = format!(
            "{} (*)({})",
            nvrtc_c_type(prototype.result),
            params.join(", ")
        );
        c.push_str(&format!(
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{symbol}), {spelled}), \
             \"{symbol} is {spelled} in Rust\");\n",
            symbol = prototype.symbol
        ));
    }
    c.push_str(extra);
    c
}

#[test]
fn nvrtc_declarations_agree_with_nvrtc_h() {
    let headers = nvrtc_headers();
    if headers.is_empty() {
        return missing("no nvrtc.h found (nvidia-cuda-nvrtc-cu12 or nvidia-cuda-nvrtc)");
    }
    if Command::new(compiler()).arg("--version").output().is_err() {
        return missing(&format!("no C compiler ({})", compiler()));
    }
    let symbols: Vec<&str> = NVRTC_PROTOTYPES.iter().map(|p| p.symbol).collect();
    for needed in [
        "nvrtcGetCUBINSize",
        "nvrtcGetCUBIN",
        "nvrtcGetSupportedArchs",
    ] {
        assert!(symbols.contains(&needed), "{needed} is not listed");
    }
    for (index, (include, release)) in headers.iter().enumerate() {
        let header = Header {
            include: include.clone(),
            version: u32::try_from(index).unwrap_or(0),
        };
        if let Err(words) = compile(&header, &nvrtc_assertions(""), "nvrtc") {
            panic!("the NVRTC declarations disagree with {release}/nvrtc.h:\n{words}");
        }
        println!(
            "{release}/nvrtc.h: {} prototypes agree",
            NVRTC_PROTOTYPES.len()
        );
        // The check can fail: a prototype made wrong on purpose is refused.
        let wrong = nvrtc_assertions(
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&nvrtcGetCUBIN), \
             nvrtcResult (*)(nvrtcProgram, size_t *)), \"a wrong prototype\");\n",
        );
        let refused = compile(&header, &wrong, "nvrtc-wrong").expect_err("a wrong one is refused");
        assert!(refused.contains("a wrong prototype"), "{refused}");
    }
}
