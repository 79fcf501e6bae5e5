//! How a Vulkan result becomes the contract's error: the result code's own
//! name is the message, so a report names exactly what the driver said.

use ash::vk;
use capture_core::DriverError;

/// The backend name every error of this crate carries.
pub(crate) const BACKEND: &str = "vulkan";

/// `op` failed with the driver's `result`.
pub(crate) fn vk_error(op: &'static str, result: vk::Result) -> DriverError {
    DriverError::new(BACKEND, op, format!("{result:?}"))
}

/// `op` failed for a reason this crate found, not the driver.
pub(crate) fn error(op: &'static str, message: impl Into<String>) -> DriverError {
    DriverError::new(BACKEND, op, message)
}
