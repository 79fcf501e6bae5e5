//! A device, buffers and kernels the caller made with `ash`, handed in.
//!
//! What the library then needs from the caller is stated once, on
//! [`Device::from_raw`]: the library checks what the driver can tell it and
//! relies on the caller's promise for the rest.

use std::sync::{Arc, Mutex};

use ash::vk;
use capture_core::{DeviceInfo, DriverError, Error, KeepAlive, Rejected, Signature};

use crate::device::{self, Device, Owner};
use crate::error::{error, vk_error};
use crate::kernels::{self, Kernel, KernelObjects};
use crate::rendering::Rendering;
use crate::validation::{Counters, messenger_info};

/// The handles of a device the caller made, for [`Device::from_raw`].
pub struct RawDevice {
    /// The loader the instance was made with; kept loaded while the device
    /// lives.
    pub entry: ash::Entry,
    /// The instance the device was made on.
    pub instance: ash::Instance,
    /// The physical device it was made on.
    pub physical: vk::PhysicalDevice,
    /// The logical device.
    pub device: ash::Device,
    /// The family of `queue`, which must support compute.
    pub queue_family: u32,
    /// The queue every stream of the library submits to.
    pub queue: vk::Queue,
    /// Whether `device` was created with `VK_EXT_conditional_rendering` and
    /// its `conditionalRendering` feature enabled: graphs on it may then
    /// hold conditionals and loops (`Client::while_flag`), which are refused
    /// otherwise.
    pub conditional_rendering: bool,
    /// Whether `instance` was created with the Khronos validation layer
    /// and `VK_EXT_debug_utils` enabled: the library then counts the
    /// layer's messages through a debug messenger of its own on the
    /// instance, destroyed with the device, and
    /// [`validation_counts`](crate::validation_counts) reads them (every
    /// message of the instance, the caller's own included).
    pub validation: bool,
}

impl Device {
    /// A device over the caller's own instance, device and queue, in the
    /// style of wgpu-hal's `Device::from_raw`. The library never destroys
    /// any of them: it drops `keep_alive` once the last stream, page,
    /// kernel and graph made on the device is gone, so a caller who hands
    /// ownership over destroys them in `keep_alive`'s `Drop`.
    ///
    /// Refused, with nothing made and `keep_alive` handed back untouched in
    /// the [`Rejected`]: a physical device below Vulkan 1.2 or without
    /// timeline semaphores, a queue family that does not exist or lacks
    /// compute, a null device or queue, and `conditional_rendering` on a
    /// physical device that does not offer the extension.
    ///
    /// The library's validation counts ([`crate::validation_counts`]) are
    /// live where `validation` says the instance has the layer and
    /// `VK_EXT_debug_utils`, and read "disabled" otherwise. Streams on the
    /// device come from [`Client::create_stream`](capture_core::Client::create_stream)
    /// of a client made with [`Client::with_device`](capture_core::Client::with_device);
    /// all of them submit to `queue`.
    ///
    /// # Safety
    ///
    /// Until `keep_alive` is dropped:
    /// - the handles are live and belong together: `instance` was created
    ///   with `apiVersion` 1.2 or later, `device` was created from
    ///   `physical` of `instance` with the `timelineSemaphore` feature
    ///   enabled (and any feature the caller's own kernels need), with
    ///   `VK_EXT_conditional_rendering` and its `conditionalRendering`
    ///   feature enabled where `conditional_rendering` says so, `instance`
    ///   with `VK_EXT_debug_utils` enabled where `validation` says so, and
    ///   `queue` is a queue of `queue_family` of `device`;
    /// - the library alone submits to `queue`, and waits on it, except
    ///   inside [`Device::with_queue`], which holds the library's lock:
    ///   `vkQueueSubmit` and `vkQueueWaitIdle` need the queue externally
    ///   synchronized, and `vkDeviceWaitIdle` needs every queue of the
    ///   device so;
    /// - the caller destroys nothing the library made, and does not destroy
    ///   `device` or `instance` while the library uses them.
    pub unsafe fn from_raw<K: Send + 'static>(
        raw: RawDevice,
        keep_alive: K,
    ) -> Result<Arc<Device>, Rejected<K>> {
        let info = match check_device(&raw) {
            Ok(info) => info,
            Err(err) => return Err(Rejected::new(err, keep_alive)),
        };
        let instance = &raw.instance;
        let family = raw.queue_family;
        // SAFETY: `physical` is one of the instance's (checked above).
        let props = unsafe { instance.get_physical_device_properties(raw.physical) };
        // SAFETY: as above.
        let memory = unsafe { instance.get_physical_device_memory_properties(raw.physical) };
        log::debug!(
            "vulkan: adopted device {} ({}), queue family {family}",
            info.index,
            info.name,
        );
        // The caller's promise: the device enabled what the field says.
        let rendering = raw
            .conditional_rendering
            .then(|| Rendering::load(instance, &raw.device));
        let counters = Arc::new(Counters::new(raw.validation, false));
        let messenger = if raw.validation {
            let utils = ash::ext::debug_utils::Instance::new(&raw.entry, instance);
            let create = messenger_info(&counters);
            // SAFETY: the instance enabled VK_EXT_debug_utils (the caller's
            // promise); the user data is `counters`, which the device keeps
            // until after it destroys the messenger.
            match unsafe { utils.create_debug_utils_messenger(&create, None) } {
                Ok(messenger) => Some((utils, messenger)),
                Err(e) => {
                    return Err(Rejected::new(
                        vk_error("adopt device: create debug messenger", e),
                        keep_alive,
                    ));
                }
            }
        } else {
            None
        };
        Ok(Arc::new(Device {
            rendering,
            device: raw.device,
            queue: Mutex::new(raw.queue),
            queue_family: family,
            memory,
            limits: props.limits,
            info,
            counters,
            idle_before_destroying_waited: device::is_lavapipe(instance, raw.physical),
            owner: Owner::Caller {
                messenger,
                _keep_alive: KeepAlive::new(keep_alive),
                _entry: raw.entry,
            },
        }))
    }

    /// Runs `f` with the device's queue, under the lock every submission of
    /// the library takes: the caller's own submissions to an adopted
    /// device's queue go here. `f` must not call the library, whose
    /// submissions would wait for the lock `f` holds.
    pub fn with_queue<R>(&self, f: impl FnOnce(vk::Queue) -> R) -> R {
        f(*self.queue())
    }

    /// The logical device, for the caller's own calls.
    pub fn raw(&self) -> &ash::Device {
        &self.device
    }

    /// The family of the device's queue.
    pub fn queue_family(&self) -> u32 {
        self.queue_family
    }

    /// The physical device's memory types and heaps, for the caller's own
    /// allocations.
    pub fn memory_properties(&self) -> &vk::PhysicalDeviceMemoryProperties {
        &self.memory
    }
}

/// What [`Device::from_raw`] checks before adopting: the device's listing
/// entry, or why it is refused.
fn check_device(raw: &RawDevice) -> Result<DeviceInfo, DriverError> {
    const OP: &str = "adopt device";
    if raw.device.handle() == vk::Device::null() || raw.queue == vk::Queue::null() {
        return Err(error(OP, "a null VkDevice or VkQueue"));
    }
    let listed = device::list(&raw.instance)?;
    let Some(chosen) = listed.into_iter().find(|a| a.physical == raw.physical) else {
        return Err(error(
            OP,
            "the physical device is not one of the instance's",
        ));
    };
    if let Err(lack) = chosen.queue_family {
        return Err(error(OP, format!("{}: {lack}", chosen.info.name)));
    }
    let instance = &raw.instance;
    // SAFETY: `physical` is one of the instance's (checked above).
    let families = unsafe { instance.get_physical_device_queue_family_properties(raw.physical) };
    let family = raw.queue_family;
    let computes = usize::try_from(family)
        .ok()
        .and_then(|i| families.get(i))
        .is_some_and(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE));
    if !computes {
        return Err(error(
            OP,
            format!(
                "{}: queue family {family} does not exist or lacks compute",
                chosen.info.name
            ),
        ));
    }
    if raw.conditional_rendering && !device::has_conditional_rendering(instance, raw.physical) {
        return Err(error(
            OP,
            format!(
                "{}: conditional_rendering is set, but the device offers no \
                 VK_EXT_conditional_rendering with its conditionalRendering feature",
                chosen.info.name
            ),
        ));
    }
    Ok(chosen.info)
}

impl Kernel {
    /// A kernel over the caller's own compute pipeline, taking `signature`.
    /// The library never destroys the pipeline or its layouts: it drops
    /// `keep_alive` once no recorded work can use them.
    ///
    /// Refused, with nothing made and `keep_alive` handed back untouched in
    /// the [`Rejected`]: a null handle, and a signature no backend or this
    /// device can launch (as [`Kernel::from_spirv`] refuses it).
    ///
    /// # Safety
    ///
    /// The promises of [`Kernel::from_spirv`], made for the pipeline's
    /// shader: it follows the backend's binding convention (storage buffers
    /// at bindings `0..k` of set 0 for the `k` bound buffers, then the info
    /// when the signature reads it; the parameters as one push-constant
    /// range at offset 0, rounded up to a multiple of 4; the signature's
    /// workgroup size), it touches its buffers only within what the
    /// launch's counts allow, and writes only the bindings declared written.
    /// `pipeline` is a compute pipeline of `device` made with `layout`,
    /// whose set 0 is `set_layout`, a layout of exactly those storage
    /// buffer bindings (compute stage, one descriptor each). All three stay
    /// live until `keep_alive` is dropped.
    pub unsafe fn from_raw<K: Send + 'static>(
        device: &Arc<Device>,
        pipeline: vk::Pipeline,
        layout: vk::PipelineLayout,
        set_layout: vk::DescriptorSetLayout,
        signature: Signature,
        keep_alive: K,
    ) -> Result<Kernel, Rejected<K>> {
        if pipeline == vk::Pipeline::null()
            || layout == vk::PipelineLayout::null()
            || set_layout == vk::DescriptorSetLayout::null()
        {
            let err = Error::Compile {
                kernel: signature.name().to_owned(),
                log: "a null VkPipeline, VkPipelineLayout or VkDescriptorSetLayout".into(),
            };
            return Err(Rejected::new(err, keep_alive));
        }
        if let Err(err) = kernels::check_limits(device, &signature) {
            return Err(Rejected::new(err, keep_alive));
        }
        Ok(Kernel {
            code: kernels::Code::Pipeline(Arc::new(KernelObjects {
                device: Arc::clone(device),
                pipeline,
                layout,
                set_layout,
                descriptors: kernels::descriptor_count(&signature),
                keep_alive: Some(KeepAlive::new(keep_alive)),
            })),
            signature,
        })
    }
}
