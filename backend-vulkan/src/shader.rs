//! What naga makes of a kernel's code: WGSL compiled to SPIR-V, and a
//! SPIR-V module's interface checked against the kernel's signature.
//!
//! Every module the driver is given has been parsed and validated by naga
//! first, so a malformed module is a log for the caller instead of a driver
//! crash, and its interface (bindings, their access, push constants,
//! workgroup size) is read from the module itself instead of trusted.
//!
//! Every message here says what the module has, then what the signature
//! declares, so a disagreement names both sides.

use capture_core::{Access, Signature};
use naga::valid::{Capabilities, GlobalUse, ModuleInfo, ValidationFlags, Validator};
use naga::{AddressSpace, Module, ShaderStage, StorageAccess};

/// What a module may use: push constants are how by-value parameters
/// arrive; the device is opened with no optional shader features, so
/// nothing else beyond core SPIR-V is allowed.
const CAPABILITIES: Capabilities = Capabilities::IMMEDIATES;

/// How a WGSL kernel's out-of-bounds accesses are compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounds {
    /// As written: the caller promises every access is in bounds.
    Unchecked,
    /// Out-of-bounds reads give zero and out-of-bounds writes are dropped,
    /// for every buffer, workgroup and local array.
    Checked,
}

/// A validator for kernels.
fn validator() -> Validator {
    Validator::new(ValidationFlags::all(), CAPABILITIES)
}

/// `error` and every error behind it, one after the other.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// Compiles the compute entry point `entry` of WGSL `source` to SPIR-V,
/// after checking its interface against `signature`.
///
/// # Errors
///
/// naga's own message for a parse or validation failure (with the source
/// line it points at), or the disagreement with the signature.
pub(crate) fn wgsl_to_spirv(
    source: &str,
    entry: &str,
    signature: &Signature,
    bounds: Bounds,
) -> Result<Vec<u32>, String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let info = validator()
        .validate(&module)
        .map_err(|e| e.emit_to_string(source))?;
    if !module.overrides.is_empty() {
        return Err(
            "the module declares override constants; a kernel takes its values as \
             parameters or constants instead"
                .into(),
        );
    }
    check_interface(&module, &info, entry, signature)?;
    let mut options = naga::back::spv::Options {
        // Vulkan 1.2 accepts SPIR-V 1.5; 1.3 is what every naga release
        // writes reliably.
        lang_version: (1, 3),
        ..Default::default()
    };
    // Debug info only makes the module larger.
    options.flags.remove(naga::back::spv::WriterFlags::DEBUG);
    if bounds == Bounds::Checked {
        let policy = naga::proc::BoundsCheckPolicy::ReadZeroSkipWrite;
        options.bounds_check_policies.index = policy;
        options.bounds_check_policies.buffer = policy;
    }
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: ShaderStage::Compute,
        entry_point: entry.into(),
    };
    naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
        .map_err(|e| format!("writing SPIR-V: {}", chain(&e)))
}

/// Parses and validates SPIR-V `words` and checks the interface of its
/// compute entry point `entry` against `signature`.
///
/// # Errors
///
/// naga's message for a module it cannot parse or that does not validate,
/// or the disagreement with the signature.
pub(crate) fn check_spirv(words: &[u32], entry: &str, signature: &Signature) -> Result<(), String> {
    let options = naga::front::spv::Options {
        adjust_coordinate_space: false,
        strict_capabilities: true,
        block_ctx_dump_prefix: None,
    };
    let module = naga::front::spv::Frontend::new(words.iter().copied(), &options)
        .parse()
        .map_err(|e| format!("parsing SPIR-V: {}", chain(&e)))?;
    let info = validator()
        .validate(&module)
        .map_err(|e| format!("validating SPIR-V: {}", chain(e.as_inner())))?;
    check_interface(&module, &info, entry, signature)
}

/// `binding N` with the variable's name where the module keeps it.
fn describe(binding: u32, name: Option<&str>) -> String {
    match name {
        Some(name) if !name.is_empty() => format!("binding {binding} (`{name}`)"),
        _ => format!("binding {binding}"),
    }
}

fn access_text(access: Access) -> &'static str {
    match access {
        Access::Read => "read",
        Access::Write => "write",
        Access::ReadWrite => "read-write",
    }
}

/// How the module declares a storage buffer, in WGSL's words.
fn storage_text(access: StorageAccess) -> &'static str {
    match (
        access.contains(StorageAccess::LOAD),
        access.contains(StorageAccess::STORE),
    ) {
        (true, true) => "read_write storage",
        (false, true) => "write-only storage",
        (true, false) => "read-only storage",
        (false, false) => "inaccessible storage",
    }
}

/// Whether a module storage buffer declared `module` serves a binding the
/// signature declares `declared`: a read binding must not be writable (the
/// kernel could write memory the core believes unchanged), a written one
/// must be writable, and a read-write one readable too.
fn agrees(module: StorageAccess, declared: Access) -> bool {
    let loads = module.contains(StorageAccess::LOAD);
    let stores = module.contains(StorageAccess::STORE);
    match declared {
        Access::Read => !stores,
        Access::Write => stores,
        Access::ReadWrite => loads && stores,
    }
}

/// Bytes of `ty` a shader reads: a struct's last member's end, without the
/// padding up to its alignment that naga counts in its size, since a
/// SPIR-V block reads no further than its members.
fn extent(module: &Module, ty: naga::Handle<naga::Type>) -> u32 {
    let ctx = module.to_ctx();
    match &module.types[ty].inner {
        naga::TypeInner::Struct { members, .. } => members
            .iter()
            .map(|m| m.offset + module.types[m.ty].inner.size(ctx))
            .max()
            .unwrap_or(0),
        other => other.size(ctx),
    }
}

/// Whether `ty` ends in a runtime-sized array, whose length is the bound
/// range's and not the type's.
fn runtime_sized(module: &Module, ty: naga::Handle<naga::Type>) -> bool {
    match &module.types[ty].inner {
        naga::TypeInner::Array {
            size: naga::ArraySize::Dynamic,
            ..
        } => true,
        naga::TypeInner::Struct { members, .. } => members
            .last()
            .is_some_and(|last| runtime_sized(module, last.ty)),
        _ => false,
    }
}

/// Checks that the compute entry point `entry` of a validated module uses
/// exactly the interface `signature` declares: storage buffers at bindings
/// `0..k` of set 0 with agreeing access, the info block at binding `k` when
/// the signature reads info, push constants of the parameters' size, and
/// the signature's workgroup size.
///
/// Only what the entry point uses counts: a module may hold several
/// kernels whose bindings overlap.
pub(crate) fn check_interface(
    module: &Module,
    info: &ModuleInfo,
    entry: &str,
    signature: &Signature,
) -> Result<(), String> {
    let found = module
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, ep)| ep.name == entry && ep.stage == ShaderStage::Compute);
    let Some((index, ep)) = found else {
        if let Some(other) = module.entry_points.iter().find(|ep| ep.name == entry) {
            return Err(format!(
                "the module's entry point `{entry}` is a {:?} entry point, not a compute one",
                other.stage
            ));
        }
        let names: Vec<&str> = module
            .entry_points
            .iter()
            .map(|ep| ep.name.as_str())
            .collect();
        return Err(format!(
            "the module has no entry point `{entry}` (it has: {})",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        ));
    };

    let [x, y, z] = ep.workgroup_size;
    let [sx, sy, sz] = signature.workgroup_size();
    if ep.workgroup_size_overrides.is_some() {
        return Err(format!(
            "the module's workgroup size is set by override or specialization constants; \
             it must be the literal {sx}x{sy}x{sz} the signature declares"
        ));
    }
    if ep.workgroup_size != signature.workgroup_size() {
        return Err(format!(
            "the module's workgroup size is {x}x{y}x{z}, the signature declares {sx}x{sy}x{sz}"
        ));
    }

    let accesses = signature.accesses();
    let buffers = accesses.len();
    let info_binding = (signature.info_bytes() > 0).then_some(buffers);
    let expected = buffers + usize::from(info_binding.is_some());
    let mut seen = vec![false; expected];
    let mut push_bytes = None;
    let uses = info.get_entry_point(index);
    for (handle, var) in module.global_variables.iter() {
        if uses[handle] == GlobalUse::empty() {
            continue;
        }
        let name = var.name.as_deref();
        let access = match var.space {
            AddressSpace::Function | AddressSpace::Private | AddressSpace::WorkGroup => continue,
            AddressSpace::Immediate => {
                push_bytes = Some(extent(module, var.ty));
                continue;
            }
            AddressSpace::Storage { access } => access,
            AddressSpace::Uniform => {
                return Err(format!(
                    "the module uses a uniform buffer{}; kernels bind only storage buffers",
                    var.binding.map_or(String::new(), |b| format!(
                        " at set {} binding {}",
                        b.group, b.binding
                    ))
                ));
            }
            AddressSpace::Handle => {
                return Err(format!(
                    "the module uses a texture, sampler or other handle{}; kernels bind only \
                     storage buffers",
                    name.map_or(String::new(), |n| format!(" (`{n}`)"))
                ));
            }
            other => {
                return Err(format!(
                    "the module uses {other:?} memory, which a compute kernel has no use for"
                ));
            }
        };
        let Some(binding) = var.binding else {
            return Err(format!(
                "the module uses a storage buffer{} without a binding",
                name.map_or(String::new(), |n| format!(" (`{n}`)"))
            ));
        };
        let what = describe(binding.binding, name);
        if binding.group != 0 {
            return Err(format!(
                "the module uses {what} of set {}; kernels bind only set 0",
                binding.group
            ));
        }
        let index = usize::try_from(binding.binding).unwrap_or(usize::MAX);
        let Some(slot) = seen.get_mut(index) else {
            let info_note = match info_binding {
                Some(k) => format!(" and its info at binding {k}"),
                None => String::new(),
            };
            return Err(format!(
                "the module uses storage buffer {what}; the signature declares {buffers} \
                 buffer(s) at bindings 0..{buffers}{info_note}"
            ));
        };
        if std::mem::replace(slot, true) {
            return Err(format!("the module uses {what} twice"));
        }
        if Some(index) == info_binding {
            if access.contains(StorageAccess::STORE) {
                return Err(format!(
                    "{what} is {} in the module, the signature declares the info there, \
                     which kernels only read",
                    storage_text(access)
                ));
            }
            let bytes = signature.info_bytes();
            if !runtime_sized(module, var.ty) && extent(module, var.ty) != bytes {
                return Err(format!(
                    "the module's info block at {what} is {} bytes, the signature declares \
                     {bytes} info bytes",
                    extent(module, var.ty)
                ));
            }
            continue;
        }
        let declared = accesses.get(index).copied().unwrap_or(Access::Read);
        if !agrees(access, declared) {
            return Err(format!(
                "{what} is {} in the module, the signature declares {}",
                storage_text(access),
                access_text(declared)
            ));
        }
    }
    if let Some(missing) = seen.iter().position(|&used| !used) {
        return Err(match (info_binding, accesses.get(missing)) {
            (_, Some(&access)) => format!(
                "the module does not use binding {missing}, the signature declares a {} \
                 buffer there",
                access_text(access)
            ),
            (Some(_), None) | (None, None) => format!(
                "the module does not use binding {missing}, the signature declares its \
                 {} info bytes there",
                signature.info_bytes()
            ),
        });
    }

    let params = signature.param_bytes();
    match push_bytes {
        None if params > 0 => Err(format!(
            "the module reads no push constants, the signature declares {params} parameter \
             bytes"
        )),
        Some(bytes) if bytes != params => Err(format!(
            "the module's push-constant block is {bytes} bytes, the signature declares \
             {params} parameter bytes"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCALE: &str = "
struct P { n: u32, a: f32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
var<immediate> p: P;

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < p.n) {
        x[gid.x] = x[gid.x] * p.a + y[gid.x];
    }
}

@compute @workgroup_size(32)
fn other(@builtin(global_invocation_id) gid: vec3<u32>) {
    x[gid.x] = 1.0;
}
";

    fn scale_signature() -> Signature {
        Signature::new("scale")
            .binding(Access::ReadWrite)
            .binding(Access::Read)
            .param(4)
            .param(4)
    }

    fn check(source: &str, entry: &str, signature: &Signature) -> Result<(), String> {
        let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
        let info = validator()
            .validate(&module)
            .map_err(|e| e.emit_to_string(source))?;
        check_interface(&module, &info, entry, signature)
    }

    #[test]
    fn an_agreeing_kernel_passes_in_wgsl_and_in_spirv() {
        let sig = scale_signature();
        assert_eq!(check(SCALE, "scale", &sig), Ok(()));
        for bounds in [Bounds::Unchecked, Bounds::Checked] {
            let words = wgsl_to_spirv(SCALE, "scale", &sig, bounds).expect("compiles");
            assert_eq!(check_spirv(&words, "scale", &sig), Ok(()));
        }
    }

    #[test]
    fn only_the_entry_points_own_use_counts() {
        let sig = Signature::new("other")
            .binding(Access::Write)
            .workgroup([32, 1, 1]);
        assert_eq!(check(SCALE, "other", &sig), Ok(()));
        let words = wgsl_to_spirv(SCALE, "other", &sig, Bounds::Unchecked).expect("compiles");
        assert_eq!(check_spirv(&words, "other", &sig), Ok(()));
    }

    #[test]
    fn access_disagreements_name_both_sides() {
        let sig = Signature::new("scale")
            .binding(Access::ReadWrite)
            .binding(Access::Write)
            .param(4)
            .param(4);
        let err = check(SCALE, "scale", &sig).unwrap_err();
        assert!(
            err.contains("binding 1 (`y`) is read-only storage in the module")
                && err.contains("the signature declares write"),
            "{err}"
        );
        let sig = Signature::new("scale")
            .binding(Access::Read)
            .binding(Access::Read)
            .param(4)
            .param(4);
        let err = check(SCALE, "scale", &sig).unwrap_err();
        assert!(
            err.contains("binding 0 (`x`) is read_write storage in the module")
                && err.contains("declares read"),
            "{err}"
        );
    }

    #[test]
    fn binding_counts_must_match() {
        let more = scale_signature().binding(Access::Read);
        let err = check(SCALE, "scale", &more).unwrap_err();
        assert!(
            err.contains("does not use binding 2") && err.contains("read buffer"),
            "{err}"
        );
        let fewer = Signature::new("scale")
            .binding(Access::ReadWrite)
            .param(4)
            .param(4);
        let err = check(SCALE, "scale", &fewer).unwrap_err();
        assert!(
            err.contains("storage buffer binding 1 (`y`)") && err.contains("1 buffer(s)"),
            "{err}"
        );
        let info = scale_signature().info(16);
        let err = check(SCALE, "scale", &info).unwrap_err();
        assert!(err.contains("16 info bytes"), "{err}");
    }

    #[test]
    fn parameters_and_workgroup_must_match() {
        let sig = scale_signature().param(4);
        let err = check(SCALE, "scale", &sig).unwrap_err();
        assert!(
            err.contains("push-constant block is 8 bytes") && err.contains("12 parameter bytes"),
            "{err}"
        );
        let none = Signature::new("scale")
            .binding(Access::ReadWrite)
            .binding(Access::Read);
        assert!(
            check(SCALE, "scale", &none)
                .unwrap_err()
                .contains("8 bytes")
        );
        let wide = scale_signature().workgroup([128, 1, 1]);
        let err = check(SCALE, "scale", &wide).unwrap_err();
        assert!(
            err.contains("workgroup size is 64x1x1") && err.contains("declares 128x1x1"),
            "{err}"
        );
    }

    #[test]
    fn entry_points_must_exist_and_be_compute() {
        let err = check(SCALE, "nope", &scale_signature()).unwrap_err();
        assert!(
            err.contains("no entry point `nope` (it has: scale, other)"),
            "{err}"
        );
        let vertex = "@vertex fn v() -> @builtin(position) vec4<f32> { return vec4<f32>(); }";
        let err = check(vertex, "v", &Signature::new("v")).unwrap_err();
        assert!(err.contains("Vertex entry point"), "{err}");
    }

    #[test]
    fn an_info_block_must_be_read_only_and_of_the_declared_size() {
        let source = "
struct Info { n: u32, s: f32, p0: u32, p1: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> info: Info;
@compute @workgroup_size(64)
fn k(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < info.n) { x[gid.x] = info.s; }
}
";
        let sig = Signature::new("k").binding(Access::Write).info(16);
        assert_eq!(check(source, "k", &sig), Ok(()));
        let short = Signature::new("k").binding(Access::Write).info(8);
        let err = check(source, "k", &short).unwrap_err();
        assert!(
            err.contains("16 bytes") && err.contains("8 info bytes"),
            "{err}"
        );
        let writable = source.replace("read> info", "read_write> info");
        let err = check(&writable, "k", &sig).unwrap_err();
        assert!(err.contains("read_write storage in the module"), "{err}");
    }

    #[test]
    fn other_resources_are_refused() {
        let source = "
@group(0) @binding(0) var<uniform> u: vec4<f32>;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64)
fn k() { x[0] = u.x; }
";
        let sig = Signature::new("k").binding(Access::Write);
        assert!(
            check(source, "k", &sig)
                .unwrap_err()
                .contains("uniform buffer")
        );
        let set1 = "
@group(1) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64)
fn k() { x[0] = 1.0; }
";
        assert!(check(set1, "k", &sig).unwrap_err().contains("set 1"));
    }

    #[test]
    fn bad_wgsl_gives_nagas_message() {
        let err = wgsl_to_spirv(
            "fn broken( {",
            "broken",
            &Signature::new("broken"),
            Bounds::Checked,
        )
        .unwrap_err();
        assert!(err.contains("error"), "{err}");
        let invalid = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@compute @workgroup_size(64)
fn k() { x[0] = 1.0; }
";
        let err = wgsl_to_spirv(invalid, "k", &Signature::new("k"), Bounds::Checked).unwrap_err();
        assert!(err.contains("error"), "{err}");
    }

    #[test]
    fn garbage_spirv_is_a_log_not_a_crash() {
        let err = check_spirv(&[0x0723_0203, 1, 2, 3], "main", &Signature::new("k")).unwrap_err();
        assert!(err.starts_with("parsing SPIR-V"), "{err}");
        assert!(check_spirv(&[], "main", &Signature::new("k")).is_err());
    }
}
