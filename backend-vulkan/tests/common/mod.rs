//! The kernel the Vulkan tests build in every way a caller can: WGSL, and
//! SPIR-V as an offline compiler writes it.

use capture_core::{Access, Signature};

/// `x = x * a + b` over the first `n` elements, with `n`, `a` and `b` by
/// value.
pub const SCALE: &str = "
struct Params { n: u32, a: f32, b: f32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
var<immediate> p: Params;

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < p.n) {
        x[gid.x] = x[gid.x] * p.a + p.b;
    }
}
";

/// What SCALE takes: `x`, then `n`, `a` and `b` by value.
pub fn scale_signature() -> Signature {
    Signature::new("scale")
        .binding(Access::ReadWrite)
        .param(4)
        .param(4)
        .param(4)
}

/// SCALE as SPIR-V, compiled by naga as any offline compiler would.
pub fn scale_spirv() -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(SCALE).expect("SCALE parses");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::IMMEDIATES,
    )
    .validate(&module)
    .expect("SCALE validates");
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "scale".into(),
    };
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline)).expect("SCALE compiles")
}
