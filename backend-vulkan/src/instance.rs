//! Loading libvulkan at run time and creating an instance, with the
//! validation layer when it is installed and wanted.
//!
//! Loading at run time is what lets the crate build and run on a machine with
//! no Vulkan at all: a missing loader is a reason to report, not a link error.

use std::ffi::CStr;
use std::sync::Arc;

use ash::vk;
use capture_core::DriverError;

use crate::error::{error, vk_error};
use crate::validation::{Counters, messenger_info};

/// Env var that turns the validation layer off when set to `0`.
pub const VALIDATION_ENV: &str = "CAPTURE_VULKAN_VALIDATION";
/// Env var that adds synchronization validation when set to `1`.
pub const SYNC_VALIDATION_ENV: &str = "CAPTURE_VULKAN_SYNC_VALIDATION";

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// The lowest API version with timeline semaphores in core, which every
/// stream's signals are built on.
pub(crate) const API_VERSION: u32 = vk::API_VERSION_1_2;

/// A created instance and what must outlive it.
pub(crate) struct InstanceParts {
    /// Keeps libvulkan loaded: the instance's function pointers live in it.
    _entry: ash::Entry,
    pub(crate) instance: ash::Instance,
    pub(crate) messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    pub(crate) counters: Arc<Counters>,
}

impl InstanceParts {
    /// Destroys the messenger and the instance; the caller has destroyed
    /// every object created from the instance.
    pub(crate) fn destroy(&mut self) {
        if let Some((utils, messenger)) = self.messenger.take() {
            // SAFETY: the messenger was created from this instance and is
            // destroyed once, here.
            unsafe { utils.destroy_debug_utils_messenger(messenger, None) };
        }
        // SAFETY: every child of the instance is gone (the caller's promise)
        // and the instance is not used after this.
        unsafe { self.instance.destroy_instance(None) };
    }
}

/// Whether `name` is among `props`.
fn has_extension(props: &[vk::ExtensionProperties], name: &CStr) -> bool {
    props
        .iter()
        .any(|p| p.extension_name_as_c_str().is_ok_and(|n| n == name))
}

/// Whether an instance may load the validation layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layers {
    /// As [`VALIDATION_ENV`] and [`SYNC_VALIDATION_ENV`] say, where the
    /// layer is installed: for an instance a device is opened on.
    AsConfigured,
    /// None: for an instance that only lists the devices.
    None,
}

/// Loads the loader and creates an instance.
pub(crate) fn create(layers: Layers) -> Result<InstanceParts, DriverError> {
    // SAFETY: loading libvulkan runs its initializers; the loader is a
    // well-behaved system library and nothing else is loaded concurrently
    // under the same name by this crate.
    let entry = unsafe { ash::Entry::load() }
        .map_err(|e| error("open", format!("no Vulkan loader: {e}")))?;

    // SAFETY: a valid entry; the call only reads the loader's version.
    let version = unsafe { entry.try_enumerate_instance_version() }
        .map_err(|e| vk_error("open", e))?
        .unwrap_or(vk::API_VERSION_1_0);
    if version < API_VERSION {
        return Err(error(
            "open",
            format!(
                "Vulkan loader too old: {}.{}, 1.2 needed",
                vk::api_version_major(version),
                vk::api_version_minor(version)
            ),
        ));
    }

    let wanted = layers == Layers::AsConfigured
        && std::env::var(VALIDATION_ENV).map_or(true, |v| v.trim() != "0");
    let sync_wanted = std::env::var(SYNC_VALIDATION_ENV).is_ok_and(|v| v.trim() == "1");

    // SAFETY: a valid entry; enumeration has no preconditions.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
    let layer_present = layers
        .iter()
        .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION_LAYER));
    let validation = wanted && layer_present;
    if wanted && !layer_present {
        log::info!("{VALIDATION_LAYER:?} is not installed; running without validation");
    }
    match create_instance(entry.clone(), validation, sync_wanted) {
        Err(e) if validation && !e.message.starts_with("no Vulkan driver") => {
            // A broken layer install must not take the device away.
            log::warn!("creating an instance with validation failed ({e}); retrying without");
            create_instance(entry, false, false)
        }
        other => other,
    }
}

/// Creates the instance, with the validation layer when `validation`.
fn create_instance(
    entry: ash::Entry,
    validation: bool,
    sync_wanted: bool,
) -> Result<InstanceParts, DriverError> {
    // SAFETY: a valid entry; enumeration has no preconditions.
    let loader_exts =
        unsafe { entry.enumerate_instance_extension_properties(None) }.unwrap_or_default();
    let layer_exts = if validation {
        // SAFETY: the layer name is a valid C string of an installed layer.
        unsafe { entry.enumerate_instance_extension_properties(Some(VALIDATION_LAYER)) }
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let debug_utils = validation
        && (has_extension(&loader_exts, ash::ext::debug_utils::NAME)
            || has_extension(&layer_exts, ash::ext::debug_utils::NAME));
    let sync = validation
        && sync_wanted
        && has_extension(&layer_exts, ash::ext::validation_features::NAME);
    if validation && sync_wanted && !sync {
        log::info!("the validation layer lacks VK_EXT_validation_features; no sync validation");
    }

    let counters = Arc::new(Counters::new(debug_utils, sync));

    let mut layer_names = Vec::new();
    let mut ext_names = Vec::new();
    if validation {
        layer_names.push(VALIDATION_LAYER.as_ptr());
    }
    if debug_utils {
        ext_names.push(ash::ext::debug_utils::NAME.as_ptr());
    }
    if sync {
        ext_names.push(ash::ext::validation_features::NAME.as_ptr());
    }

    let app = vk::ApplicationInfo::default()
        .application_name(c"capture")
        .engine_name(c"capture")
        .api_version(API_VERSION);
    let enabled_features = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
    let mut features =
        vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled_features);
    // Also reports what goes wrong while the instance is created and destroyed.
    let mut creation_messenger = messenger_info(&counters);
    let mut info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layer_names)
        .enabled_extension_names(&ext_names);
    if debug_utils {
        info = info.push_next(&mut creation_messenger);
    }
    if sync {
        info = info.push_next(&mut features);
    }

    // SAFETY: every pointer in `info` refers to locals that outlive the call;
    // the messenger's user data is `counters`, which the returned parts keep.
    let instance = unsafe { entry.create_instance(&info, None) }.map_err(|e| match e {
        vk::Result::ERROR_INCOMPATIBLE_DRIVER => {
            error("open", "no Vulkan driver: ERROR_INCOMPATIBLE_DRIVER")
        }
        other => vk_error("open", other),
    })?;

    let messenger = if debug_utils {
        let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
        let create = messenger_info(&counters);
        // SAFETY: the instance enabled VK_EXT_debug_utils; the user data
        // pointer is `counters`, kept alive by the returned parts.
        match unsafe { utils.create_debug_utils_messenger(&create, None) } {
            Ok(messenger) => Some((utils, messenger)),
            Err(e) => {
                // SAFETY: nothing was created from the instance yet.
                unsafe { instance.destroy_instance(None) };
                return Err(vk_error("create debug messenger", e));
            }
        }
    } else {
        None
    };

    Ok(InstanceParts {
        _entry: entry,
        instance,
        messenger,
        counters,
    })
}
