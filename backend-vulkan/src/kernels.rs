//! Kernels: a SPIR-V module (or WGSL that naga compiles to one) checked
//! against its signature, turned into a compute pipeline that the kernel
//! owns.
//!
//! Every kernel follows one binding convention, so a launch needs nothing
//! from the module: its buffers at bindings `0..k` of set 0 and, when the
//! signature reads info, the info slice at binding `k`, all storage
//! buffers; its by-value parameters as one push-constant range starting at
//! 0. The builtins are ordinary kernels built this way.

use std::ffi::CString;
use std::sync::Arc;

use ash::vk;
use capture_core::{Builtin, DriverError, Error, KeepAlive, Signature};

use crate::device::Device;
use crate::error::{BACKEND, error, vk_error};
use crate::foreign::{Foreign, ForeignCommands};
use crate::shader::{self, Bounds};

const FILL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fill.spv"));
const ADD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/add.spv"));
const COPY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/copy.spv"));
const AXPY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/axpy.spv"));

/// The Vulkan objects of one kernel, destroyed with the last reference.
///
/// A recorder keeps a reference next to the buffers its commands use, so a
/// kernel dropped while a batch or an executable may still run its pipeline
/// leaves the pipeline alive until that work has completed.
pub(crate) struct KernelObjects {
    /// For a caller's pipeline ([`Kernel::from_raw`]), what it keeps alive;
    /// the library destroys only the objects it made (`None`). Dropped
    /// before `device`, which it may need.
    pub(crate) keep_alive: Option<KeepAlive>,
    pub(crate) device: Arc<Device>,
    pub(crate) pipeline: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    /// Storage-buffer descriptors a launch writes: the buffers, then the info.
    pub(crate) descriptors: u32,
}

impl Drop for KernelObjects {
    fn drop(&mut self) {
        if self.keep_alive.is_some() {
            return;
        }
        let device = &self.device.device;
        // SAFETY: this is the last reference; every command buffer that
        // recorded the pipeline held one until it completed or was
        // discarded, so nothing pending uses these objects. Each is
        // destroyed once.
        unsafe {
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

impl std::fmt::Debug for KernelObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelObjects")
            .field("pipeline", &self.pipeline)
            .field("descriptors", &self.descriptors)
            .finish_non_exhaustive()
    }
}

/// A compiled kernel: its compute pipeline and its [`Signature`]. Cheap to
/// clone; clones share the pipeline.
///
/// Built from SPIR-V ([`Kernel::from_spirv`]) or WGSL
/// ([`Kernel::from_wgsl`], [`Kernel::from_wgsl_checked`]). Either way naga
/// parses and validates the module first and reads its interface, so a
/// module that disagrees with the signature is refused before the driver
/// sees it.
///
/// The module's interface follows one convention: storage buffers at
/// bindings `0..k` of descriptor set 0 for the `k` bound buffers (`read`
/// storage for a binding the signature declares read, `read_write`
/// otherwise); when the signature reads info bytes, a read-only storage
/// buffer at binding `k` holding them; the by-value parameters, packed in
/// declaration order without padding, as one push-constant block (none when
/// the kernel takes no parameters); and a workgroup size equal to the
/// signature's.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) code: Code,
    pub(crate) signature: Signature,
}

/// What a launch of a kernel records: a dispatch of its pipeline, or a
/// foreign operation's own commands.
#[derive(Clone, Debug)]
pub(crate) enum Code {
    Pipeline(Arc<KernelObjects>),
    Foreign(Arc<Foreign>),
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Kernel").field(&self.signature).finish()
    }
}

/// A kernel that could not be built, with `log` saying why.
fn compile_error(signature: &Signature, log: impl Into<String>) -> Error {
    Error::Compile {
        kernel: signature.name().to_owned(),
        log: log.into(),
    }
}

impl Kernel {
    /// Builds the compute entry point `entry` of the SPIR-V module `words`
    /// on `device`, as a kernel taking `signature`.
    ///
    /// ```no_run
    /// use backend_vulkan::{Kernel, Vulkan};
    /// use capture_core::{Access, Driver, Signature};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let device = Vulkan::open()?;
    /// // SPIR-V from any compiler (glslc, dxc, naga), with one read-write
    /// // storage buffer at binding 0 and a 4-byte push-constant block.
    /// let bytes = std::fs::read("scale.spv")?;
    /// let words = ash::util::read_spv(&mut std::io::Cursor::new(bytes))?;
    /// let signature = Signature::new("scale").binding(Access::ReadWrite).param(4);
    /// // SAFETY: `scale` writes only `x[i]` for `i` below the element count
    /// // it is given, and the caller passes at most the buffer's length.
    /// let kernel = unsafe { Kernel::from_spirv(&device, &words, "main", signature) }?;
    /// assert_eq!(Vulkan::signature(&kernel).param_bytes(), 4);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] with naga's message when the module does not parse
    /// or validate, with both sides named when its interface disagrees with
    /// the signature (its bindings, their access, its push-constant block
    /// or its workgroup size), with the reason when the signature exceeds
    /// the device's limits, and with the driver's result when the driver
    /// refuses the module; a [`DriverError`] when a layout cannot be made.
    ///
    /// # Safety
    ///
    /// For every launch it is given, the kernel reads and writes only
    /// inside its bound buffers (whose byte lengths it is not told), given
    /// the info and by-value parameters passed, and does what its signature
    /// declares (it writes no binding declared read).
    pub unsafe fn from_spirv(
        device: &Arc<Device>,
        words: &[u32],
        entry: &str,
        signature: Signature,
    ) -> Result<Kernel, Error> {
        check_limits(device, &signature)?;
        shader::check_spirv(words, entry, &signature)
            .map_err(|log| compile_error(&signature, log))?;
        let objects = build(device, words, entry, &signature)?;
        Ok(Kernel {
            code: Code::Pipeline(Arc::new(objects)),
            signature,
        })
    }

    /// Compiles the compute entry point `entry` of WGSL `source` with naga
    /// and builds it on `device`, as a kernel taking `signature`.
    ///
    /// By-value parameters are a push-constant block, which WGSL spells
    /// `var<immediate>`. Accesses are compiled as written; see
    /// [`Kernel::from_wgsl_checked`] for a build that needs no promise.
    ///
    /// ```
    /// use backend_vulkan::{Kernel, Vulkan};
    /// use capture_core::{Access, Driver, Signature};
    ///
    /// const SCALE: &str = "
    /// struct Params { n: u32, a: f32 }
    /// @group(0) @binding(0) var<storage, read_write> x: array<f32>;
    /// var<immediate> p: Params;
    ///
    /// @compute @workgroup_size(64)
    /// fn scale(@builtin(global_invocation_id) gid: vec3<u32>) {
    ///     if (gid.x < p.n) {
    ///         x[gid.x] = x[gid.x] * p.a;
    ///     }
    /// }
    /// ";
    ///
    /// # fn main() -> Result<(), capture_core::Error> {
    /// let Ok(device) = Vulkan::open() else { return Ok(()) };
    /// let signature = Signature::new("scale")
    ///     .binding(Access::ReadWrite)
    ///     .param(4)
    ///     .param(4);
    /// // SAFETY: `scale` touches only `x[i]` for `i < n`, and every launch
    /// // passes an `n` no larger than the bound buffer's element count.
    /// let kernel = unsafe { Kernel::from_wgsl(&device, SCALE, "scale", signature) }?;
    /// assert_eq!(Vulkan::signature(&kernel).param_bytes(), 8);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Kernel::from_spirv`]; a source that does not parse or validate
    /// is an [`Error::Compile`] whose log is naga's message, pointing at the
    /// source line.
    ///
    /// # Safety
    ///
    /// For every launch it is given, the kernel reads and writes only
    /// inside its bound buffers (whose byte lengths it is not told), given
    /// the info and by-value parameters passed, and does what its signature
    /// declares (it writes no binding declared read).
    pub unsafe fn from_wgsl(
        device: &Arc<Device>,
        source: &str,
        entry: &str,
        signature: Signature,
    ) -> Result<Kernel, Error> {
        Self::compile(device, source, entry, signature, Bounds::Unchecked)
    }

    /// As [`Kernel::from_wgsl`], but every buffer and array access is
    /// compiled with a bounds check: a read outside the bound range gives
    /// zero and a write outside it is dropped. With naga's validation
    /// keeping a read binding unwritable, the kernel cannot touch memory
    /// outside its bindings whatever a launch passes, so no promise is
    /// needed; the checks cost a comparison per access.
    ///
    /// ```
    /// use backend_vulkan::{Kernel, Vulkan};
    /// use capture_core::{Access, Driver, Signature};
    ///
    /// const SILU: &str = "
    /// @group(0) @binding(0) var<storage, read_write> x: array<f32>;
    /// var<immediate> n: u32;
    ///
    /// @compute @workgroup_size(64)
    /// fn silu(@builtin(global_invocation_id) gid: vec3<u32>) {
    ///     if (gid.x < n) {
    ///         x[gid.x] = x[gid.x] / (1.0 + exp(-x[gid.x]));
    ///     }
    /// }
    /// ";
    ///
    /// # fn main() -> Result<(), capture_core::Error> {
    /// let Ok(device) = Vulkan::open() else { return Ok(()) };
    /// let signature = Signature::new("silu").binding(Access::ReadWrite).param(4);
    /// let kernel = Kernel::from_wgsl_checked(&device, SILU, "silu", signature)?;
    /// assert_eq!(Vulkan::signature(&kernel).name(), "silu");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Kernel::from_wgsl`].
    pub fn from_wgsl_checked(
        device: &Arc<Device>,
        source: &str,
        entry: &str,
        signature: Signature,
    ) -> Result<Kernel, Error> {
        Self::compile(device, source, entry, signature, Bounds::Checked)
    }

    /// Compiles WGSL to SPIR-V and builds it through the SPIR-V path, so
    /// the driver sees only a module naga has parsed back and validated.
    fn compile(
        device: &Arc<Device>,
        source: &str,
        entry: &str,
        signature: Signature,
        bounds: Bounds,
    ) -> Result<Kernel, Error> {
        check_limits(device, &signature)?;
        let words = shader::wgsl_to_spirv(source, entry, &signature, bounds)
            .map_err(|log| compile_error(&signature, log))?;
        shader::check_spirv(&words, entry, &signature)
            .map_err(|log| compile_error(&signature, format!("naga's own output: {log}")))?;
        let objects = build(device, &words, entry, &signature)?;
        Ok(Kernel {
            code: Code::Pipeline(Arc::new(objects)),
            signature,
        })
    }

    /// A foreign operation named `name` over buffers of `accesses`: the
    /// caller's own commands (its pipelines from raw handles,
    /// `vkCmdFillBuffer`, `vkCmdCopyBuffer`, `vkCmdUpdateBuffer`), recorded
    /// by `op` where a launch of ours would be: into the stream's eager
    /// batch, or into a graph's secondary command buffer when the graph is
    /// made (so inside a window, an `Err` or panic of `op` refuses the
    /// instantiate, and claims what the window wrote). `op` is handed the
    /// command buffer and each declared buffer's `VkBuffer` range.
    /// [`Client::foreign`](capture_core::Client::foreign) issues it.
    ///
    /// The library places the barriers before and after from the declared
    /// accesses, as for a dispatch (compute and transfer stages), and binds
    /// its own pipeline, descriptor set and push constants again for the
    /// launch after. A foreign operation inside a conditional body is
    /// refused: conditional rendering predicates dispatches, not the
    /// transfer commands `op` may record.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] for more buffers than a launch may bind.
    ///
    /// # Safety
    ///
    /// Every time it is called, `op` records only into the command buffer
    /// it is given, outside any render pass, and only commands of the
    /// compute and transfer stages that read and write nothing but the
    /// declared ranges as declared (nothing written that was declared
    /// read); it submits and waits on nothing, allocates only from its
    /// own pools (a descriptor set, say), records no barrier, event or
    /// query that outlives it, and calls no method of the client (it runs
    /// with the stream's lock held). Every object its commands
    /// name (pipelines, layouts, descriptor sets) stays alive until the
    /// work recorded with it has completed: as long as the kernel, and any
    /// graph made from a window holding it, lives.
    pub unsafe fn foreign(
        device: &Arc<Device>,
        name: &str,
        accesses: &[capture_core::Access],
        op: impl Fn(&ForeignCommands<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Kernel, Error> {
        let signature = Signature::foreign(name, accesses);
        check_limits(device, &signature)?;
        Ok(Kernel {
            code: Code::Foreign(Arc::new(Foreign::new(device, op))),
            signature,
        })
    }

    /// What the kernel takes.
    #[inline]
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// Its pipeline's objects; `None` for a foreign operation.
    pub(crate) fn pipeline(&self) -> Option<&Arc<KernelObjects>> {
        match &self.code {
            Code::Pipeline(objects) => Some(objects),
            Code::Foreign(_) => None,
        }
    }
}

/// Refuses a signature no backend, or this device, can build.
pub(crate) fn check_limits(device: &Device, signature: &Signature) -> Result<(), Error> {
    signature
        .validate()
        .map_err(|reason| compile_error(signature, reason))?;
    let limits = &device.limits;
    let size = signature.workgroup_size();
    let max = limits.max_compute_work_group_size;
    if size.iter().zip(max).any(|(&s, m)| s > m) {
        return Err(compile_error(
            signature,
            format!("a workgroup of {size:?} exceeds the device's maxComputeWorkGroupSize {max:?}"),
        ));
    }
    let invocations = limits.max_compute_work_group_invocations;
    if signature.threads() > u64::from(invocations) {
        return Err(compile_error(
            signature,
            format!(
                "a workgroup of {} invocations exceeds the device's \
                 maxComputeWorkGroupInvocations {invocations}",
                signature.threads()
            ),
        ));
    }
    let push = push_range(signature);
    if push > limits.max_push_constants_size {
        return Err(compile_error(
            signature,
            format!(
                "{push} push-constant bytes exceed the device's maxPushConstantsSize {}",
                limits.max_push_constants_size
            ),
        ));
    }
    let descriptors = descriptor_count(signature);
    let storage = limits
        .max_per_stage_descriptor_storage_buffers
        .min(limits.max_descriptor_set_storage_buffers)
        .min(limits.max_per_stage_resources);
    if descriptors > storage {
        return Err(compile_error(
            signature,
            format!(
                "{descriptors} storage buffers (bindings and info) exceed the device's \
                 limit of {storage} per stage and set"
            ),
        ));
    }
    Ok(())
}

/// Storage-buffer descriptors a launch of `signature` binds.
pub(crate) fn descriptor_count(signature: &Signature) -> u32 {
    let buffers = u32::try_from(signature.accesses().len()).unwrap_or(u32::MAX);
    buffers.saturating_add(u32::from(signature.info_bytes() > 0))
}

/// The push-constant range a kernel's layout declares: the parameter
/// bytes, rounded up to the multiple of 4 Vulkan requires.
pub(crate) fn push_range(signature: &Signature) -> u32 {
    signature.param_bytes().next_multiple_of(4)
}

/// Creates the pipeline of the checked module `words` and its layouts.
fn build(
    device: &Arc<Device>,
    words: &[u32],
    entry: &str,
    signature: &Signature,
) -> Result<KernelObjects, Error> {
    const OP: &str = "create kernel";
    let entry_name = CString::new(entry).map_err(|_| {
        compile_error(
            signature,
            format!("the entry point name {entry:?} contains a NUL byte"),
        )
    })?;
    let vk_device = &device.device;
    let descriptors = descriptor_count(signature);
    let bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = (0..descriptors)
        .map(|binding| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(binding)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
    // SAFETY: a valid create info whose pointers outlive the call; the
    // binding count is within the device's limits (checked before).
    let set_layout = unsafe { vk_device.create_descriptor_set_layout(&set_info, None) }
        .map_err(|e| vk_error(OP, e))?;
    let set_layouts = [set_layout];
    let push = push_range(signature);
    let ranges = [vk::PushConstantRange::default()
        .stage_flags(vk::ShaderStageFlags::COMPUTE)
        .offset(0)
        .size(push)];
    let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
    if push > 0 {
        layout_info = layout_info.push_constant_ranges(&ranges);
    }
    // SAFETY: as above; `set_layout` is live and the push range is a
    // nonzero multiple of 4 within maxPushConstantsSize.
    let layout = match unsafe { vk_device.create_pipeline_layout(&layout_info, None) } {
        Ok(layout) => layout,
        Err(e) => {
            // SAFETY: unused and destroyed once.
            unsafe { vk_device.destroy_descriptor_set_layout(set_layout, None) };
            return Err(vk_error(OP, e).into());
        }
    };
    let destroy_layouts = || {
        // SAFETY: unused (no pipeline was made) and destroyed once.
        unsafe {
            vk_device.destroy_pipeline_layout(layout, None);
            vk_device.destroy_descriptor_set_layout(set_layout, None);
        }
    };
    let driver_refused =
        |call: &str, e: vk::Result| compile_error(signature, format!("{call} failed: {e:?}"));
    let module_info = vk::ShaderModuleCreateInfo::default().code(words);
    // SAFETY: `words` is a SPIR-V module naga parsed and validated, so it
    // is well formed.
    let module = match unsafe { vk_device.create_shader_module(&module_info, None) } {
        Ok(module) => module,
        Err(e) => {
            destroy_layouts();
            return Err(driver_refused("vkCreateShaderModule", e));
        }
    };
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(module)
        .name(&entry_name);
    let pipeline_info = vk::ComputePipelineCreateInfo::default()
        .stage(stage)
        .layout(layout);
    // SAFETY: the module and layout are live, `entry` is a compute entry
    // point of the module, and the module's interface was checked to be
    // what the layout declares (bindings 0..descriptors of set 0, the push
    // range, the workgroup size within the device's limits).
    let created = unsafe {
        vk_device.create_compute_pipelines(
            vk::PipelineCache::null(),
            std::slice::from_ref(&pipeline_info),
            None,
        )
    };
    // SAFETY: a module may be destroyed once its pipelines are created.
    unsafe { vk_device.destroy_shader_module(module, None) };
    let pipeline = match created {
        Ok(pipelines) => pipelines.into_iter().next(),
        Err((pipelines, e)) => {
            for pipeline in pipelines {
                // SAFETY: never used; null handles are ignored.
                unsafe { vk_device.destroy_pipeline(pipeline, None) };
            }
            destroy_layouts();
            return Err(driver_refused("vkCreateComputePipelines", e));
        }
    };
    let Some(pipeline) = pipeline else {
        destroy_layouts();
        return Err(error(OP, "no pipeline returned").into());
    };
    Ok(KernelObjects {
        device: Arc::clone(device),
        pipeline,
        layout,
        set_layout,
        descriptors,
        keep_alive: None,
    })
}

fn spirv(which: Builtin) -> &'static [u8] {
    match which {
        Builtin::Fill => FILL,
        Builtin::Add => ADD,
        Builtin::Copy => COPY,
        Builtin::Axpy => AXPY,
    }
}

/// The builtin `which` on `device`, built from the SPIR-V `build.rs`
/// compiled, through the same path as any other kernel.
pub(crate) fn builtin(device: &Arc<Device>, which: Builtin) -> Result<Kernel, DriverError> {
    let words = decode(spirv(which));
    // SAFETY: each builtin touches element `i` of its buffers only for
    // `i < n`, the element count in its info, and writes only the bindings
    // its signature declares written. That keeps it inside its buffers only
    // when `n` fits them, which is why the core launches builtins only
    // through `Client::run_builtin`, which checks `n` against the buffers.
    let built = unsafe { Kernel::from_spirv(device, &words, "main", which.signature()) };
    built.map_err(|e| match e {
        Error::Driver(e) => e,
        other => DriverError::new(BACKEND, "compile builtin", other.to_string()),
    })
}

/// SPIR-V words from the little-endian bytes `build.rs` wrote.
fn decode(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}
