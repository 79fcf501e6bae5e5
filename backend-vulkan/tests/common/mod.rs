//! The kernel the Vulkan tests build in every way a caller can: WGSL, and
//! SPIR-V as an offline compiler writes it.
// Each test crate uses some of these.
#![allow(dead_code)]

use ash::vk;
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

/// A compute pipeline of SCALE on `device`, made as a caller makes its own,
/// with its layouts: one storage buffer at binding 0, 12 push-constant
/// bytes. The caller destroys all three.
pub fn scale_pipeline(
    device: &ash::Device,
) -> (vk::Pipeline, vk::PipelineLayout, vk::DescriptorSetLayout) {
    let bindings = [vk::DescriptorSetLayoutBinding::default()
        .binding(0)
        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
        .descriptor_count(1)
        .stage_flags(vk::ShaderStageFlags::COMPUTE)];
    let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
    // SAFETY: a valid create info.
    let set_layout = unsafe { device.create_descriptor_set_layout(&set_info, None) }.expect("set");
    let set_layouts = [set_layout];
    let ranges = [vk::PushConstantRange::default()
        .stage_flags(vk::ShaderStageFlags::COMPUTE)
        .size(12)];
    let layout_info = vk::PipelineLayoutCreateInfo::default()
        .set_layouts(&set_layouts)
        .push_constant_ranges(&ranges);
    // SAFETY: as above.
    let layout = unsafe { device.create_pipeline_layout(&layout_info, None) }.expect("layout");
    let words = scale_spirv();
    let module_info = vk::ShaderModuleCreateInfo::default().code(&words);
    // SAFETY: SPIR-V naga wrote and validated.
    let module = unsafe { device.create_shader_module(&module_info, None) }.expect("module");
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(module)
        .name(c"scale");
    let info = vk::ComputePipelineCreateInfo::default()
        .stage(stage)
        .layout(layout);
    // SAFETY: the module's interface is the layout's.
    let pipeline =
        unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) }
            .map_err(|(_, e)| e)
            .expect("a pipeline")[0];
    // SAFETY: the pipeline is made.
    unsafe { device.destroy_shader_module(module, None) };
    (pipeline, layout, set_layout)
}
