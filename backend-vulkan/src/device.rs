//! Choosing a physical device and opening it with one compute queue.

use std::ffi::CStr;
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;
use capture_core::{DeviceInfo, DriverError};

use crate::error::{error, vk_error};
use crate::instance::{self, API_VERSION, InstanceParts};
use crate::validation::{Counters, ValidationCounts};

/// Env var that picks a device by index (in the driver's enumeration order)
/// or by a case-insensitive substring of its name.
pub const DEVICE_ENV: &str = "CAPTURE_VULKAN_DEVICE";

/// An opened Vulkan device: its instance and its one compute queue.
///
/// Every stream, page, kernel and executable holds an `Arc` of it, so it is
/// destroyed only after the last object created from it.
pub struct Device {
    pub(crate) device: ash::Device,
    /// One queue shared by every stream; `vkQueueSubmit` requires external
    /// synchronization, hence the lock.
    queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    pub(crate) memory: vk::PhysicalDeviceMemoryProperties,
    pub(crate) limits: vk::PhysicalDeviceLimits,
    pub(crate) info: DeviceInfo,
    counters: Arc<Counters>,
    parts: InstanceParts,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// A physical device that can run the backend, with what was learned about it.
struct Candidate {
    physical: vk::PhysicalDevice,
    name: String,
    kind: vk::PhysicalDeviceType,
    queue_family: u32,
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

/// Why `physical` cannot run the backend, or what it offers.
fn assess(instance: &ash::Instance, physical: vk::PhysicalDevice) -> Result<Candidate, String> {
    // SAFETY: `physical` was enumerated from `instance`.
    let props = unsafe { instance.get_physical_device_properties(physical) };
    let name = props
        .device_name_as_c_str()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unnamed device".to_owned());
    if props.api_version < API_VERSION {
        return Err(format!("{name}: Vulkan 1.2 needed for timeline semaphores"));
    }
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
    // SAFETY: `physical` is valid and supports 1.2, so the 1.2 feature
    // struct may be chained.
    unsafe { instance.get_physical_device_features2(physical, &mut features) };
    if v12.timeline_semaphore == vk::FALSE {
        return Err(format!("{name}: no timeline semaphores"));
    }
    // SAFETY: `physical` was enumerated from `instance`.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    let queue_family = families
        .iter()
        .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or_else(|| format!("no compute queue on {name}"))?;
    Ok(Candidate {
        physical,
        name,
        kind: props.device_type,
        queue_family,
    })
}

/// The device the environment asks for, or the most capable one.
fn choose(instance: &ash::Instance) -> Result<Candidate, DriverError> {
    // SAFETY: a valid instance; enumeration has no preconditions.
    let physicals =
        unsafe { instance.enumerate_physical_devices() }.map_err(|e| vk_error("open", e))?;
    if physicals.is_empty() {
        return Err(error("open", "no Vulkan device"));
    }
    let assessed: Vec<Result<Candidate, String>> =
        physicals.iter().map(|&p| assess(instance, p)).collect();

    if let Ok(wanted) = std::env::var(DEVICE_ENV) {
        let wanted = wanted.trim();
        if !wanted.is_empty() {
            return choose_named(instance, &physicals, assessed, wanted);
        }
    }

    let mut reasons = Vec::new();
    let mut best: Option<Candidate> = None;
    for candidate in assessed {
        match candidate {
            Ok(c) => {
                if best.as_ref().is_none_or(|b| rank(c.kind) < rank(b.kind)) {
                    best = Some(c);
                }
            }
            Err(reason) => reasons.push(reason),
        }
    }
    best.ok_or_else(|| {
        let reason = reasons.join("; ");
        if reasons.iter().all(|r| r.starts_with("no compute queue")) {
            error("open", reason)
        } else {
            error("open", format!("no usable Vulkan device: {reason}"))
        }
    })
}

/// The device [`DEVICE_ENV`] names, by index or by name.
fn choose_named(
    instance: &ash::Instance,
    physicals: &[vk::PhysicalDevice],
    assessed: Vec<Result<Candidate, String>>,
    wanted: &str,
) -> Result<Candidate, DriverError> {
    let index = match wanted.parse::<usize>() {
        Ok(i) if i < physicals.len() => i,
        Ok(i) => {
            return Err(error(
                "open",
                format!(
                    "{DEVICE_ENV}={i}, but there are {} devices",
                    physicals.len()
                ),
            ));
        }
        Err(_) => {
            let needle = wanted.to_lowercase();
            physicals
                .iter()
                .position(|&p| {
                    // SAFETY: `p` was enumerated from `instance`.
                    let props = unsafe { instance.get_physical_device_properties(p) };
                    props
                        .device_name_as_c_str()
                        .is_ok_and(|n| n.to_string_lossy().to_lowercase().contains(&needle))
                })
                .ok_or_else(|| error("open", format!("{DEVICE_ENV}={wanted} matches no device")))?
        }
    };
    assessed
        .into_iter()
        .nth(index)
        .ok_or_else(|| error("open", "device index out of range"))?
        .map_err(|reason| error("open", format!("{DEVICE_ENV}={wanted}: {reason}")))
}

/// The driver's own name for itself, or its packed version number.
fn driver_version(instance: &ash::Instance, physical: vk::PhysicalDevice) -> String {
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut driver);
    // SAFETY: the device supports 1.2 (checked in `assess`), where the driver
    // properties struct is core.
    unsafe { instance.get_physical_device_properties2(physical, &mut props) };
    let version = props.properties.driver_version;
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
        (true, true) => format!(
            "{}.{}.{}",
            vk::api_version_major(version),
            vk::api_version_minor(version),
            vk::api_version_patch(version)
        ),
    }
}

impl Device {
    /// Opens the device [`DEVICE_ENV`] selects, or the most capable one.
    pub(crate) fn open() -> Result<Arc<Device>, DriverError> {
        let mut parts = instance::create()?;
        match Self::open_on(&parts) {
            Ok((device, queue, candidate)) => {
                Ok(Arc::new(Self::assemble(parts, device, queue, candidate)))
            }
            Err(e) => {
                parts.destroy();
                Err(e)
            }
        }
    }

    fn open_on(parts: &InstanceParts) -> Result<(ash::Device, vk::Queue, Candidate), DriverError> {
        let instance = &parts.instance;
        let candidate = choose(instance)?;
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(candidate.queue_family)
            .queue_priorities(&priorities)];
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .push_next(&mut v12);
        // SAFETY: the candidate supports timeline semaphores and the queue
        // family exists; every pointer refers to locals alive for the call.
        let device = unsafe { instance.create_device(candidate.physical, &info, None) }
            .map_err(|e| vk_error("open", e))?;
        // SAFETY: one queue of this family was requested above.
        let queue = unsafe { device.get_device_queue(candidate.queue_family, 0) };
        Ok((device, queue, candidate))
    }

    fn assemble(
        parts: InstanceParts,
        device: ash::Device,
        queue: vk::Queue,
        candidate: Candidate,
    ) -> Device {
        let instance = &parts.instance;
        // SAFETY: the physical device was enumerated from this instance.
        let memory = unsafe { instance.get_physical_device_memory_properties(candidate.physical) };
        // SAFETY: as above.
        let props = unsafe { instance.get_physical_device_properties(candidate.physical) };
        let info = DeviceInfo {
            name: candidate.name.clone(),
            driver_version: driver_version(instance, candidate.physical),
            max_groups: props.limits.max_compute_work_group_count,
        };
        log::debug!(
            "vulkan: opened {} ({:?}), queue family {}",
            candidate.name,
            candidate.kind,
            candidate.queue_family
        );
        Device {
            device,
            queue: Mutex::new(queue),
            queue_family: candidate.queue_family,
            memory,
            limits: props.limits,
            info,
            counters: Arc::clone(&parts.counters),
            parts,
        }
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

    /// Submits `cmd` and signals `timeline` to `value` when it completes.
    pub(crate) fn submit(
        &self,
        cmd: vk::CommandBuffer,
        timeline: vk::Semaphore,
        value: u64,
    ) -> Result<(), vk::Result> {
        let cmds = [cmd];
        let semaphores = [timeline];
        let values = [value];
        let mut timeline_info =
            vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
        let submit = vk::SubmitInfo::default()
            .command_buffers(&cmds)
            .signal_semaphores(&semaphores)
            .push_next(&mut timeline_info);
        let queue = self.queue();
        // SAFETY: the queue is externally synchronized by the guard; `cmd` is
        // executable, and `value` exceeds every value signaled on `timeline`
        // (each stream counts its own values up under `&mut`).
        unsafe {
            self.device
                .queue_submit(*queue, std::slice::from_ref(&submit), vk::Fence::null())
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

    /// The value `timeline` has reached.
    pub(crate) fn reached(&self, timeline: vk::Semaphore) -> Result<u64, vk::Result> {
        // SAFETY: `timeline` is a live timeline semaphore of this device.
        unsafe { self.device.get_semaphore_counter_value(timeline) }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: no other handle to the device remains (this is the last
        // `Arc`); waiting for idle has no other precondition. A failure
        // (device lost) leaves nothing to wait for.
        let _ = unsafe { self.device.device_wait_idle() };
        // SAFETY: every object created from the device was destroyed: each
        // (streams, pages, kernels, executables) holds an `Arc` of it.
        unsafe { self.device.destroy_device(None) };
        self.parts.destroy();
    }
}
