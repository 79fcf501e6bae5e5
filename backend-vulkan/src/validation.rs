//! The Khronos validation layer's messages, counted per opened device.
//!
//! A misuse of Vulkan is silent on most drivers and fatal on a few, so the
//! conformance runner treats any validation error as a failed trial; these
//! counters are how it knows. Each `open()` has its own instance and
//! messenger, hence its own counters, so one trial's errors never leak into
//! another's.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use ash::vk;

/// What the validation layer has reported on one device so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ValidationCounts {
    /// Messages of error severity: each one is a misuse of the API.
    pub errors: u64,
    /// Messages of warning severity: legal but suspect use.
    pub warnings: u64,
    /// Whether the layer runs at all; zero errors mean nothing without it.
    pub enabled: bool,
    /// Whether synchronization validation runs too, the only check that
    /// catches a missing barrier.
    pub sync: bool,
}

/// The shared counters the messenger callback writes into.
///
/// Lives behind an `Arc` that the device keeps until after its instance is
/// destroyed, because the layer may report up to the very last call.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    errors: AtomicU64,
    warnings: AtomicU64,
    pub(crate) enabled: bool,
    pub(crate) sync: bool,
}

impl Counters {
    /// Counters for a device whose layer is `enabled`, with `sync` checks.
    pub(crate) fn new(enabled: bool, sync: bool) -> Self {
        Self {
            enabled,
            sync,
            ..Self::default()
        }
    }

    /// A snapshot of the counts.
    pub(crate) fn snapshot(&self) -> ValidationCounts {
        ValidationCounts {
            errors: self.errors.load(Ordering::Relaxed),
            warnings: self.warnings.load(Ordering::Relaxed),
            enabled: self.enabled,
            sync: self.sync,
        }
    }
}

/// The severities and kinds of message worth counting: errors and warnings
/// of every kind; information and verbose messages are noise here.
pub(crate) fn messenger_info(counters: &Counters) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(on_message))
        .user_data(std::ptr::from_ref(counters).cast_mut().cast::<c_void>())
}

/// The id name the Vulkan loader gives its own messages.
const LOADER_MESSAGE: &std::ffi::CStr = c"Loader Message";

/// Counts and logs one message. Must not unwind: it is called from C.
unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes either null or callback data that stays valid
    // for the duration of this call, with a NUL-terminated message or null.
    let data = unsafe { data.as_ref() };
    // SAFETY: as above, for the message text.
    let message = unsafe { data.and_then(|d| d.message_as_c_str()) }
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_default();
    // SAFETY: as above, for the message's id name.
    let id = unsafe { data.and_then(|d| d.message_id_name_as_c_str()) };
    if id.is_some_and(|id| id == LOADER_MESSAGE) {
        // The loader's complaints about other drivers' manifests say nothing
        // about this device's use of the API, so they are not counted.
        log::warn!("vulkan loader: {message}");
        return vk::FALSE;
    }
    // SAFETY: `user` is the `Counters` the messenger was created with; the
    // device owning it outlives its messenger and instance.
    let counters = unsafe { user.cast_const().cast::<Counters>().as_ref() };
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        if let Some(counters) = counters {
            counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        log::error!("vulkan validation: {message}");
        // A failing trial should show why even when no logger is installed.
        eprintln!("vulkan validation error: {message}");
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        if let Some(counters) = counters {
            counters.warnings.fetch_add(1, Ordering::Relaxed);
        }
        log::warn!("vulkan validation: {message}");
    }
    vk::FALSE
}
