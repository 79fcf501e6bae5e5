//! Listing the physical devices, choosing one and opening it with one
//! compute queue.
//!
//! Every physical device is listed, including ones that cannot run the
//! backend: their [`DeviceInfo::kind`] names what they lack
//! (`CPU (no timeline semaphores)`), and opening one says the same.

use std::ffi::CStr;
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;
use capture_core::{DeviceInfo, DriverError, KeepAlive};

use crate::error::{error, vk_error};
use crate::instance::{self, API_VERSION, InstanceParts, Layers};
use crate::rendering::Rendering;
use crate::validation::{Counters, ValidationCounts};

/// Env var that picks the device [`Driver::open`](capture_core::Driver::open)
/// opens: an index into [`Driver::devices`](capture_core::Driver::devices)
/// (the driver's enumeration order) or a case-insensitive substring of a
/// device's name. Unset or empty, the most capable device is opened.
pub const DEVICE_ENV: &str = "CAPTURE_VULKAN_DEVICE";

/// An opened Vulkan device: its own instance and its one compute queue.
///
/// Every stream, page, kernel and executable holds an `Arc` of it, so it is
/// destroyed only after the last object created from it. Each opened device
/// has its own instance, so two devices opened in one process (the same
/// physical device twice, or two) share nothing.
pub struct Device {
    pub(crate) device: ash::Device,
    /// One queue shared by every stream; `vkQueueSubmit` requires external
    /// synchronization, hence the lock.
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    pub(crate) memory: vk::PhysicalDeviceMemoryProperties,
    pub(crate) limits: vk::PhysicalDeviceLimits,
    pub(crate) info: DeviceInfo,
    pub(crate) counters: Arc<Counters>,
    /// `VK_EXT_conditional_rendering`, where the device enabled it: what
    /// conditionals in graphs need.
    pub(crate) rendering: Option<Rendering>,
    /// Whether a timeline another submission waited on must wait for the
    /// queue to go idle before it is destroyed (see [`Device::before_destroying_waited`]).
    pub(crate) idle_before_destroying_waited: bool,
    pub(crate) owner: Owner,
}

/// Who destroys the device and its instance.
pub(crate) enum Owner {
    /// The backend, which created them.
    Backend(Box<InstanceParts>),
    /// The caller, who handed them in ([`Device::from_raw`]): the library
    /// keeps the loader loaded and drops the keep-alive last.
    Caller {
        /// The library's own messenger on the caller's instance, where
        /// `RawDevice::validation` asked for one; destroyed with the device.
        messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
        // Dropped before the loader: it may destroy what the caller made.
        _keep_alive: KeepAlive,
        _entry: ash::Entry,
    },
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// One physical device, as the listing sees it.
pub(crate) struct Assessed {
    pub(crate) physical: vk::PhysicalDevice,
    pub(crate) info: DeviceInfo,
    /// The compute queue family the backend would use, or what the device
    /// lacks to run the backend.
    pub(crate) queue_family: Result<u32, &'static str>,
    /// Lower is preferred when no device is asked for.
    rank: u8,
}

/// What the API calls a device type.
fn kind_text(kind: vk::PhysicalDeviceType) -> &'static str {
    match kind {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete GPU",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated GPU",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual GPU",
        vk::PhysicalDeviceType::CPU => "CPU",
        _ => "other",
    }
}

/// The rank of a device type: lower is preferred.
fn rank(kind: vk::PhysicalDeviceType) -> u8 {
    match kind {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

/// The largest device-local heap of `memory`, in bytes; 0 when none is.
fn device_local_bytes(memory: &vk::PhysicalDeviceMemoryProperties) -> u64 {
    let count = usize::try_from(memory.memory_heap_count).unwrap_or(0);
    memory
        .memory_heaps
        .get(..count)
        .unwrap_or(&memory.memory_heaps)
        .iter()
        .filter(|heap| heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|heap| heap.size)
        .max()
        .unwrap_or(0)
}

/// The compute queue family of `physical`, or what it lacks to run the
/// backend.
fn queue_family(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    api_version: u32,
) -> Result<u32, &'static str> {
    if api_version < API_VERSION {
        return Err("Vulkan 1.2 needed for timeline semaphores");
    }
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
    // SAFETY: `physical` was enumerated from `instance` and supports 1.2, so
    // the 1.2 feature struct may be chained.
    unsafe { instance.get_physical_device_features2(physical, &mut features) };
    if v12.timeline_semaphore == vk::FALSE {
        return Err("no timeline semaphores");
    }
    // SAFETY: `physical` was enumerated from `instance`.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    families
        .iter()
        .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or("no compute queue")
}

/// The driver's own name for itself, or its packed version number.
fn driver_version(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    props: &vk::PhysicalDeviceProperties,
) -> String {
    let version = props.driver_version;
    let packed = || {
        format!(
            "{}.{}.{}",
            vk::api_version_major(version),
            vk::api_version_minor(version),
            vk::api_version_patch(version)
        )
    };
    if props.api_version < API_VERSION {
        return packed();
    }
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver);
    // SAFETY: the device supports 1.2 (checked above), where the driver
    // properties struct is core.
    unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
    let text = |r: Result<&CStr, _>| {
        r.map(|s: &CStr| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let name = text(driver.driver_name_as_c_str());
    let info = text(driver.driver_info_as_c_str());
    match (name.is_empty(), info.is_empty()) {
        (false, false) => format!("{name} {info}"),
        (false, true) => name,
        (true, false) => info,
        (true, true) => packed(),
    }
}

/// Every physical device of `instance`, in enumeration order.
pub(crate) fn list(instance: &ash::Instance) -> Result<Vec<Assessed>, DriverError> {
    // SAFETY: a valid instance; enumeration has no preconditions.
    let physicals = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| vk_error("list devices", e))?;
    Ok(physicals
        .into_iter()
        .enumerate()
        .map(|(index, physical)| {
            // SAFETY: `physical` was enumerated from `instance`.
            let props = unsafe { instance.get_physical_device_properties(physical) };
            // SAFETY: as above.
            let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
            let family = queue_family(instance, physical, props.api_version);
            let kind = kind_text(props.device_type);
            let info = DeviceInfo {
                name: props
                    .device_name_as_c_str()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| "unnamed device".to_owned()),
                driver_version: driver_version(instance, physical, &props),
                max_groups: props.limits.max_compute_work_group_count,
                index,
                memory_bytes: device_local_bytes(&memory),
                kind: match family {
                    Ok(_) => kind.to_owned(),
                    Err(lack) => format!("{kind} ({lack})"),
                },
            };
            Assessed {
                physical,
                info,
                queue_family: family,
                rank: rank(props.device_type),
            }
        })
        .collect())
}

/// Every physical device this machine's Vulkan driver sees, in enumeration
/// order, usable or not (see the module's documentation).
pub(crate) fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
    let mut parts = instance::create(Layers::None)?;
    let listed = list(&parts.instance);
    parts.destroy();
    Ok(listed?.into_iter().map(|a| a.info).collect())
}

/// Device `index` of `list`, if it can run the backend; `asked` says who
/// asked for it, for the error.
fn pick_index(list: &[Assessed], index: usize, asked: &str) -> Result<usize, DriverError> {
    let Some(device) = list.get(index) else {
        return Err(error(
            "open",
            format!(
                "{asked}: there is no device {index}, the driver sees {}",
                list.len()
            ),
        ));
    };
    match device.queue_family {
        Ok(_) => Ok(index),
        Err(lack) => Err(error(
            "open",
            format!(
                "{asked}: {} cannot run the backend: {lack}",
                device.info.name
            ),
        )),
    }
}

/// The device [`DEVICE_ENV`] selects, or the most capable one.
fn pick_default(list: &[Assessed]) -> Result<usize, DriverError> {
    if list.is_empty() {
        return Err(error("open", "no Vulkan device"));
    }
    if let Ok(wanted) = std::env::var(DEVICE_ENV) {
        let wanted = wanted.trim();
        if !wanted.is_empty() {
            let asked = format!("{DEVICE_ENV}={wanted}");
            if let Ok(index) = wanted.parse::<usize>() {
                return pick_index(list, index, &asked);
            }
            let needle = wanted.to_lowercase();
            let index = list
                .iter()
                .position(|a| a.info.name.to_lowercase().contains(&needle))
                .ok_or_else(|| error("open", format!("{asked} matches no device")))?;
            return pick_index(list, index, &asked);
        }
    }
    list.iter()
        .enumerate()
        .filter(|(_, a)| a.queue_family.is_ok())
        .min_by_key(|(index, a)| (a.rank, *index))
        .map(|(index, _)| index)
        .ok_or_else(|| {
            let reasons: Vec<String> = list
                .iter()
                .map(|a| match a.queue_family {
                    Ok(_) => a.info.name.clone(),
                    Err(lack) => format!("{}: {lack}", a.info.name),
                })
                .collect();
            error(
                "open",
                format!("no usable Vulkan device: {}", reasons.join("; ")),
            )
        })
}

/// Whether `physical` offers `VK_EXT_conditional_rendering` with its
/// `conditionalRendering` feature. [`NO_CONDITIONAL_RENDERING_ENV`] set
/// to `1` says no, to see what a device without it does.
pub(crate) fn has_conditional_rendering(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
) -> bool {
    if std::env::var(NO_CONDITIONAL_RENDERING_ENV).is_ok_and(|v| v == "1") {
        return false;
    }
    // SAFETY: the physical device was enumerated from this instance.
    let Ok(extensions) = (unsafe { instance.enumerate_device_extension_properties(physical) })
    else {
        return false;
    };
    let named = extensions.iter().any(|e| {
        e.extension_name_as_c_str()
            .is_ok_and(|name| name == ash::ext::conditional_rendering::NAME)
    });
    if !named {
        return false;
    }
    let mut rendering = vk::PhysicalDeviceConditionalRenderingFeaturesEXT::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut rendering);
    // SAFETY: as above; the chain holds a structure the extension defines.
    unsafe { instance.get_physical_device_features2(physical, &mut features) };
    rendering.conditional_rendering == vk::TRUE
}

/// Whether `physical` is lavapipe, whose queue thread (Mesa 22.3's emulated
/// timelines) still releases a waited timeline's point after the waiting
/// batch's signal is visible to the host.
pub(crate) fn is_lavapipe(instance: &ash::Instance, physical: vk::PhysicalDevice) -> bool {
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut driver);
    // SAFETY: `physical` was enumerated from `instance` and supports 1.2
    // (checked before a device is opened or adopted), where the driver
    // properties struct is core.
    unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
    driver.driver_id == vk::DriverId::MESA_LLVMPIPE
}

/// Env var that, set to `1`, opens devices without conditional rendering,
/// so that recording a conditional is refused as on a device that lacks it.
pub const NO_CONDITIONAL_RENDERING_ENV: &str = "CAPTURE_VULKAN_NO_CONDITIONAL_RENDERING";

impl Device {
    /// Opens the device [`DEVICE_ENV`] selects, or the most capable one.
    pub(crate) fn open() -> Result<Arc<Device>, DriverError> {
        Self::open_with(pick_default)
    }

    /// Opens device `index` of [`devices`].
    pub(crate) fn open_index(index: usize) -> Result<Arc<Device>, DriverError> {
        Self::open_with(|list| pick_index(list, index, "open_index"))
    }

    /// Creates an instance, lists its devices and opens the one `pick`
    /// chooses.
    fn open_with(
        pick: impl FnOnce(&[Assessed]) -> Result<usize, DriverError>,
    ) -> Result<Arc<Device>, DriverError> {
        let mut parts = instance::create(Layers::AsConfigured)?;
        let chosen = list(&parts.instance).and_then(|mut list| {
            let index = pick(&list)?;
            Ok(list.swap_remove(index))
        });
        match chosen.and_then(|chosen| Self::create(&parts, chosen)) {
            Ok((device, queue, family, chosen, conditional)) => {
                let rendering = conditional.then(|| Rendering::load(&parts.instance, &device));
                let mut device = Self::assemble(parts, device, queue, family, chosen);
                device.rendering = rendering;
                Ok(Arc::new(device))
            }
            Err(e) => {
                parts.destroy();
                Err(e)
            }
        }
    }

    /// Creates the logical device of `chosen`, with one compute queue, and
    /// conditional rendering where it has it.
    fn create(
        parts: &InstanceParts,
        chosen: Assessed,
    ) -> Result<(ash::Device, vk::Queue, u32, Assessed, bool), DriverError> {
        let family = chosen
            .queue_family
            .map_err(|lack| error("open", format!("{}: {lack}", chosen.info.name)))?;
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let conditional = has_conditional_rendering(&parts.instance, chosen.physical);
        let extensions = [ash::ext::conditional_rendering::NAME.as_ptr()];
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut rendering = vk::PhysicalDeviceConditionalRenderingFeaturesEXT::default()
            .conditional_rendering(true);
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .push_next(&mut v12);
        if conditional {
            info = info
                .enabled_extension_names(&extensions)
                .push_next(&mut rendering);
        }
        // SAFETY: the device supports timeline semaphores and the queue
        // family exists (both checked by the listing), and conditional
        // rendering where it is enabled (checked above); every pointer
        // refers to locals alive for the call.
        let device = unsafe { parts.instance.create_device(chosen.physical, &info, None) }
            .map_err(|e| vk_error("open", e))?;
        // SAFETY: one queue of this family was requested above.
        let queue = unsafe { device.get_device_queue(family, 0) };
        Ok((device, queue, family, chosen, conditional))
    }

    fn assemble(
        parts: InstanceParts,
        device: ash::Device,
        queue: vk::Queue,
        queue_family: u32,
        chosen: Assessed,
    ) -> Device {
        let instance = &parts.instance;
        // SAFETY: the physical device was enumerated from this instance.
        let memory = unsafe { instance.get_physical_device_memory_properties(chosen.physical) };
        // SAFETY: as above.
        let props = unsafe { instance.get_physical_device_properties(chosen.physical) };
        log::debug!(
            "vulkan: opened device {} ({}, {}), queue family {queue_family}",
            chosen.info.index,
            chosen.info.name,
            chosen.info.kind,
        );
        Device {
            device,
            queue: Mutex::new(queue),
            queue_family,
            memory,
            limits: props.limits,
            info: chosen.info,
            counters: Arc::clone(&parts.counters),
            rendering: None,
            idle_before_destroying_waited: is_lavapipe(instance, chosen.physical),
            owner: Owner::Backend(Box::new(parts)),
        }
    }

    /// Whether the caller made the device and handed it in.
    pub(crate) fn is_adopted(&self) -> bool {
        matches!(self.owner, Owner::Caller { .. })
    }

    /// The queue, locked for one submission. A poisoned lock only means
    /// another thread panicked between submissions; the queue is fine.
    pub(crate) fn queue(&self) -> MutexGuard<'_, vk::Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the validation layer reported on this device so far.
    pub(crate) fn validation(&self) -> ValidationCounts {
        self.counters.snapshot()
    }

    /// Submits `cmds`, in order, as one batch that signals `timeline` to
    /// `value` when it completes.
    pub(crate) fn submit(
        &self,
        cmds: &[vk::CommandBuffer],
        timeline: vk::Semaphore,
        value: u64,
        waits: &[(vk::Semaphore, u64)],
    ) -> Result<(), vk::Result> {
        let semaphores = [timeline];
        let values = [value];
        // Empty, and so allocation-free, unless the stream waits for another.
        let wait_semaphores: Vec<_> = waits.iter().map(|&(semaphore, _)| semaphore).collect();
        let wait_values: Vec<_> = waits.iter().map(|&(_, value)| value).collect();
        let wait_stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; waits.len()];
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .signal_semaphore_values(&values)
            .wait_semaphore_values(&wait_values);
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&wait_semaphores)
            .wait_dst_stage_mask(&wait_stages)
            .command_buffers(cmds)
            .signal_semaphores(&semaphores)
            .push_next(&mut timeline_info);
        let queue = self.queue();
        // SAFETY: the queue is externally synchronized by the guard; every
        // command buffer in `cmds` is executable, and `value` exceeds every
        // value signaled on `timeline` (each stream counts its own values up
        // under `&mut`). Each waited semaphore is a live timeline of this
        // device whose value was submitted, kept alive by the waiting stream
        // until this submission completes.
        unsafe {
            self.device
                .queue_submit(*queue, std::slice::from_ref(&submit), vk::Fence::null())
        }
    }

    /// Called before destroying a timeline semaphore that another
    /// submission waited on, once the host saw that submission complete.
    ///
    /// Destroying it then is legal, but lavapipe's queue thread installs a
    /// batch's signals before it releases the timelines the batch waited
    /// on, and would write into the freed semaphore; waiting for the queue
    /// to go idle, under the queue's lock, lets it finish. Other drivers
    /// keep the spec's order and skip the wait.
    pub(crate) fn before_destroying_waited(&self) {
        if !self.idle_before_destroying_waited {
            return;
        }
        let queue = self.queue();
        // SAFETY: the queue is externally synchronized by the guard. A
        // failure (device lost) leaves nothing running to wait for.
        if let Err(e) = unsafe { self.device.queue_wait_idle(*queue) } {
            log::warn!("vulkan: waiting for the queue before destroying a timeline failed: {e:?}");
        }
    }

    /// Blocks until `timeline` reaches `value`.
    pub(crate) fn wait(&self, timeline: vk::Semaphore, value: u64) -> Result<(), vk::Result> {
        let semaphores = [timeline];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: `timeline` is a live timeline semaphore of this device.
        unsafe { self.device.wait_semaphores(&info, u64::MAX) }
    }

    /// The value `timeline` has reached (`vkGetSemaphoreCounterValue`).
    pub(crate) fn reached(&self, timeline: vk::Semaphore) -> Result<u64, vk::Result> {
        // SAFETY: `timeline` is a live timeline semaphore of this device.
        unsafe { self.device.get_semaphore_counter_value(timeline) }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // A caller's device stays theirs; what the library made on it is
        // already gone, each object having held an `Arc` of this, but for
        // the messenger, destroyed before the keep-alive may destroy the
        // instance.
        let parts = match &mut self.owner {
            Owner::Backend(parts) => parts,
            Owner::Caller { messenger, .. } => {
                if let Some((utils, messenger)) = messenger.take() {
                    // SAFETY: the library made the messenger on the caller's
                    // instance, which lives until the keep-alive is dropped,
                    // after this; it is destroyed once, here.
                    unsafe { utils.destroy_debug_utils_messenger(messenger, None) };
                }
                return;
            }
        };
        // SAFETY: no other handle to the device remains (this is the last
        // `Arc`); waiting for idle has no other precondition. A failure
        // (device lost) leaves nothing to wait for.
        let _ = unsafe { self.device.device_wait_idle() };
        // SAFETY: every object created from the device was destroyed: each
        // (streams, pages, kernels, executables) holds an `Arc` of it.
        unsafe { self.device.destroy_device(None) };
        parts.destroy();
    }
}
