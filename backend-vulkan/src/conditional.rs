//! Conditionals on Vulkan, which has no conditional nodes: a body is
//! encoded once per run it may make (a loop's up to its bound), each copy
//! inside conditional rendering (`VK_EXT_conditional_rendering`) on a
//! predicate that a small kernel computes just before it from the flag and
//! the enclosing body's predicate.
//!
//! A predicate is its own word, written before the rendering that reads it
//! begins: the flag itself may change inside the body, and some
//! implementations read the predicate at every dispatch. Conditional
//! rendering does not nest, so a nested conditional ends its enclosing
//! one's, and its predicate folds the enclosing one in.

use std::sync::Arc;

use ash::vk;
use capture_core::{Access, Conditional, DriverError, Signature};

use crate::barriers::memory_barrier;
use crate::device::Device;
use crate::error::error;
use crate::kernels::{Kernel, KernelObjects};
use crate::memory::Buffer;

/// The enclosing predicate a top-level conditional does not have.
pub(crate) const NO_PARENT: u32 = u32::MAX;

/// The predicate kernel: `out[2r] = parent && flag`, `out[2r + 1] = parent
/// && !flag` for run `r`, the enclosing body's predicate read only where
/// there is one.
const PREDICATE: &str = "
struct Slots {
    parent: u32,
    out: u32,
}

@group(0) @binding(0) var<storage, read> flag: array<u32>;
@group(0) @binding(1) var<storage, read> enclosing: array<u32>;
@group(0) @binding(2) var<storage, read_write> predicates: array<u32>;
var<immediate> slots: Slots;

@compute @workgroup_size(64)
fn predicate(@builtin(local_invocation_index) t: u32) {
    if (t != 0u) {
        return;
    }
    var parent = 1u;
    if (slots.parent != 0xffffffffu) {
        parent = enclosing[slots.parent];
    }
    let raised = flag[0] != 0u;
    predicates[slots.out] = select(0u, 1u, parent != 0u && raised);
    predicates[slots.out + 1u] = select(0u, 1u, parent != 0u && !raised);
}
";

/// The predicate kernel's signature: the flag, the enclosing predicates
/// and its own, and two slot indices.
fn signature() -> Signature {
    Signature::new("predicate")
        .workgroup([64, 1, 1])
        .bindings(&[Access::Read, Access::Read, Access::ReadWrite])
        .param(4)
        .param(4)
}

/// The predicate kernel for `device`, bounds-checked like any WGSL kernel.
pub(crate) fn predicate_kernel(device: &Arc<Device>) -> Result<Arc<KernelObjects>, DriverError> {
    let kernel = Kernel::from_wgsl_checked(device, PREDICATE, "predicate", signature())
        .map_err(|e| error("conditional", format!("the predicate kernel: {e}")))?;
    kernel
        .pipeline()
        .cloned()
        .ok_or_else(|| error("conditional", "the predicate kernel has no pipeline"))
}

/// A conditional node's predicates: two words per run, and the set the
/// predicate kernel reads the flag and the enclosing predicates through.
#[derive(Debug, Clone)]
pub(crate) struct Predicates {
    pub(crate) kind: Conditional,
    pub(crate) buffer: Arc<Buffer>,
    pub(crate) set: vk::DescriptorSet,
    pub(crate) pipeline: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
}

impl Predicates {
    /// Runs the node may make.
    pub(crate) fn runs(&self) -> u32 {
        self.kind.most_runs()
    }

    /// Encodes the kernel that fills run `run`'s two words from the flag
    /// and the enclosing predicate at `parent`.
    pub(crate) fn compute(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        run: u32,
        parent: u32,
    ) {
        let mut push = [0u8; 8];
        push[..4].copy_from_slice(&parent.to_le_bytes());
        push[4..].copy_from_slice(&(2 * run).to_le_bytes());
        // SAFETY: `cmd` is recording outside a render pass and no
        // conditional rendering is active; the pipeline, layout and set
        // belong to this device and the recording keeps them; the push
        // range is the kernel's eight parameter bytes.
        unsafe {
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            device.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[self.set],
                &[],
            );
            device.cmd_push_constants(cmd, self.layout, vk::ShaderStageFlags::COMPUTE, 0, &push);
            device.cmd_dispatch(cmd, 1, 1, 1);
        }
    }

    /// Encodes zeroing every word, so a run whose predicates are not
    /// computed reads false.
    pub(crate) fn clear(&self, device: &ash::Device, cmd: vk::CommandBuffer) {
        // SAFETY: `cmd` is recording outside a render pass; the buffer is
        // live, kept by the recording, made with the transfer-destination
        // usage, and the whole size is a multiple of 4.
        unsafe { device.cmd_fill_buffer(cmd, self.buffer.buffer, 0, vk::WHOLE_SIZE, 0) };
    }

    /// Where body `body`'s predicate of run `run` lies in the buffer.
    pub(crate) fn slot(run: u32, body: usize) -> u32 {
        2 * run + u32::from(body > 0)
    }
}

/// The words a node of `kind` needs, refused past what one buffer holds.
pub(crate) fn words(kind: Conditional) -> Result<u64, DriverError> {
    let words = 2 * u64::from(kind.most_runs().max(1));
    if words > u64::from(u32::MAX / 2) {
        return Err(error(
            "open conditional",
            format!(
                "a bound of {} iterations is more than a recording unrolls",
                kind.most_runs()
            ),
        ));
    }
    Ok(words)
}

const STAGES: vk::PipelineStageFlags = vk::PipelineStageFlags::from_raw(
    vk::PipelineStageFlags::COMPUTE_SHADER.as_raw()
        | vk::PipelineStageFlags::TRANSFER.as_raw()
        | vk::PipelineStageFlags::CONDITIONAL_RENDERING_EXT.as_raw(),
);

/// Orders everything before, predicate reads included, before everything
/// after, and makes earlier writes visible to shaders, copies and the
/// predicate reads after: placed around every predicate and body.
pub(crate) fn barrier(device: &ash::Device, cmd: vk::CommandBuffer) {
    memory_barrier(
        device,
        cmd,
        STAGES,
        vk::AccessFlags::CONDITIONAL_RENDERING_READ_EXT,
    );
}
