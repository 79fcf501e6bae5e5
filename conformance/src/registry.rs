//! The backends compiled into this build, and what each needs around a trial.

use crate::workload::UserKernels;
use std::sync::Arc;

use capture_core::Availability;

/// A backend the runner knows how to run the suite on.
pub struct Backend {
    /// Its name (`host`, `vulkan`, ...), the trial names' first half.
    pub name: &'static str,
    /// Whether it has a device here, and why not.
    pub probe: fn() -> Availability,
    /// Build its trials, given what `probe` said.
    pub trials: fn(&Availability, bool) -> Vec<libtest_mimic::Trial>,
}

/// What a backend's validation layer saw during one trial.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Validation {
    /// Whether validation ran at all.
    pub enabled: bool,
    /// Whether synchronization validation ran too.
    pub sync: bool,
    /// Error messages.
    pub errors: u64,
    /// Warning messages.
    pub warnings: u64,
}

/// Checks a backend runs on its device after each trial, beyond the
/// scenario's own (Vulkan: no validation errors).
pub trait AfterTrial: UserKernels {
    /// What the backend's validation saw on `device`, if it has any.
    fn validation(_device: &Arc<Self::Device>) -> Option<Validation> {
        None
    }

    /// `Err` fails the trial: by default, any validation error.
    fn after_trial(device: &Arc<Self::Device>) -> Result<(), String> {
        match Self::validation(device) {
            Some(v) if v.errors > 0 => Err(format!(
                "{} validation error(s) and {} warning(s) during the trial (see stderr)",
                v.errors, v.warnings
            )),
            _ => Ok(()),
        }
    }
}

impl AfterTrial for backend_host::Host {}

#[cfg(feature = "vulkan")]
impl AfterTrial for backend_vulkan::Vulkan {
    fn validation(device: &Arc<Self::Device>) -> Option<Validation> {
        let counts = backend_vulkan::validation_counts(device);
        Some(Validation {
            enabled: counts.enabled,
            sync: counts.sync,
            errors: counts.errors,
            warnings: counts.warnings,
        })
    }
}

#[cfg(feature = "cuda")]
impl AfterTrial for backend_cuda::Cuda {}

#[cfg(feature = "hip")]
impl AfterTrial for backend_hip::Hip {}

fn backend<D: AfterTrial>() -> Backend {
    Backend {
        name: D::NAME,
        probe: D::probe,
        trials: crate::runner::trials::<D>,
    }
}

/// Every backend compiled in, the host always first.
pub fn backends() -> Vec<Backend> {
    #[cfg_attr(
        not(any(feature = "vulkan", feature = "cuda", feature = "hip")),
        allow(unused_mut)
    )]
    let mut list = vec![backend::<backend_host::Host>()];
    #[cfg(feature = "vulkan")]
    list.push(backend::<backend_vulkan::Vulkan>());
    #[cfg(feature = "cuda")]
    list.push(backend::<backend_cuda::Cuda>());
    #[cfg(feature = "hip")]
    list.push(backend::<backend_hip::Hip>());
    list
}

/// Backends that can be compiled in, with the feature that does it.
pub const KNOWN: [(&str, &str); 4] = [
    ("host", "(always)"),
    ("vulkan", "--features vulkan"),
    ("cuda", "--features cuda"),
    ("hip", "--features hip"),
];
