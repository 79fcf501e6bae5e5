//! The builtin kernels: WGSL compiled to SPIR-V at build time, turned into
//! compute pipelines once per device.
//!
//! Each kernel binds its buffers at bindings `0..k` and the 16-byte info at
//! binding `k`, all as storage buffers in set 0, so one descriptor set layout
//! shape serves every kernel and a launch needs no push constants.

use std::sync::{Arc, Mutex};

use ash::vk;
use capture_core::{Builtin, DriverError};

use crate::device::Device;
use crate::error::{error, vk_error};

const FILL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fill.spv"));
const ADD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/add.spv"));
const COPY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/copy.spv"));
const AXPY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/axpy.spv"));

/// The Vulkan objects of one kernel. Owned by the device's cache, which
/// destroys them with the device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelObjects {
    pub(crate) pipeline: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    /// Buffers bound before the info binding.
    pub(crate) buffers: u32,
}

/// A compiled kernel: a cheap handle to pipelines the device caches.
///
/// Holds the device so the pipeline outlives every launch recorded with it.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) device: Arc<Device>,
    pub(crate) objects: KernelObjects,
    pub(crate) which: Builtin,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Kernel").field(&self.which).finish()
    }
}

/// Pipelines built so far, indexed like [`Builtin::ALL`].
#[derive(Default)]
pub(crate) struct KernelCache {
    built: Mutex<[Option<KernelObjects>; 4]>,
}

fn spirv(which: Builtin) -> &'static [u8] {
    match which {
        Builtin::Fill => FILL,
        Builtin::Add => ADD,
        Builtin::Copy => COPY,
        Builtin::Axpy => AXPY,
    }
}

impl KernelCache {
    /// Destroys every pipeline; called once the device is idle.
    pub(crate) fn destroy(&self, device: &ash::Device) {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        for objects in built.iter_mut().filter_map(Option::take) {
            // SAFETY: the device is idle and no kernel handle outlives it
            // (each holds the device), so nothing uses these objects.
            unsafe {
                device.destroy_pipeline(objects.pipeline, None);
                device.destroy_pipeline_layout(objects.layout, None);
                device.destroy_descriptor_set_layout(objects.set_layout, None);
            }
        }
    }
}

/// The kernel `which` on `device`, built on first use.
pub(crate) fn builtin(device: &Arc<Device>, which: Builtin) -> Result<Kernel, DriverError> {
    let mut built = device
        .kernels
        .built
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let slot = built
        .get_mut(which.index())
        .ok_or_else(|| error("compile kernel", "unknown builtin"))?;
    let objects = match slot {
        Some(objects) => *objects,
        None => {
            let objects = build(&device.device, which)?;
            *slot = Some(objects);
            objects
        }
    };
    Ok(Kernel {
        device: Arc::clone(device),
        objects,
        which,
    })
}

/// Creates the pipeline of `which` and its layouts.
fn build(device: &ash::Device, which: Builtin) -> Result<KernelObjects, DriverError> {
    const OP: &str = "compile kernel";
    let buffers = u32::try_from(which.accesses().len()).unwrap_or(u32::MAX);
    let bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = (0..=buffers)
        .map(|binding| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(binding)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let words = decode(spirv(which));

    let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
    // SAFETY: a valid create info whose pointers outlive the call.
    let set_layout = unsafe { device.create_descriptor_set_layout(&set_info, None) }
        .map_err(|e| vk_error(OP, e))?;
    let set_layouts = [set_layout];
    let layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
    // SAFETY: as above; `set_layout` is live.
    let layout = match unsafe { device.create_pipeline_layout(&layout_info, None) } {
        Ok(layout) => layout,
        Err(e) => {
            // SAFETY: unused and destroyed once.
            unsafe { device.destroy_descriptor_set_layout(set_layout, None) };
            return Err(vk_error(OP, e));
        }
    };
    let destroy_layouts = || {
        // SAFETY: unused (no pipeline was made) and destroyed once.
        unsafe {
            device.destroy_pipeline_layout(layout, None);
            device.destroy_descriptor_set_layout(set_layout, None);
        }
    };
    let module_info = vk::ShaderModuleCreateInfo::default().code(&words);
    // SAFETY: `words` is SPIR-V that naga produced and validated at build time.
    let module = match unsafe { device.create_shader_module(&module_info, None) } {
        Ok(module) => module,
        Err(e) => {
            destroy_layouts();
            return Err(vk_error(OP, e));
        }
    };
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(module)
        .name(c"main");
    let pipeline_info = vk::ComputePipelineCreateInfo::default()
        .stage(stage)
        .layout(layout);
    // SAFETY: the module and layout are live and match the shader's
    // interface (bindings 0..=buffers in set 0).
    let created = unsafe {
        device.create_compute_pipelines(
            vk::PipelineCache::null(),
            std::slice::from_ref(&pipeline_info),
            None,
        )
    };
    // SAFETY: a module may be destroyed once its pipelines are created.
    unsafe { device.destroy_shader_module(module, None) };
    let pipeline = match created {
        Ok(pipelines) => pipelines.into_iter().next(),
        Err((pipelines, e)) => {
            for pipeline in pipelines {
                // SAFETY: never used; null handles are ignored.
                unsafe { device.destroy_pipeline(pipeline, None) };
            }
            destroy_layouts();
            return Err(vk_error(OP, e));
        }
    };
    let Some(pipeline) = pipeline else {
        destroy_layouts();
        return Err(error(OP, "no pipeline returned"));
    };
    Ok(KernelObjects {
        pipeline,
        layout,
        set_layout,
        buffers,
    })
}

/// SPIR-V words from the little-endian bytes `build.rs` wrote.
fn decode(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}
