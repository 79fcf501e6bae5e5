//! The backends this build knows, which are compiled in, and what each
//! needs around a trial.
//!
//! The one list of backends: [`each_backend`] calls a [`Visit`]or for every
//! backend compiled in and [`backends`] names every backend that can be, so
//! the runner, the benches and anything else iterate the same list.

use crate::workload::UserKernels;
use std::sync::Arc;

/// A backend this build knows about, compiled in or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend {
    /// Its name (`host`, `vulkan`, ...): the trial names' first half, and
    /// its driver's [`graph_capture::Driver::NAME`].
    pub name: &'static str,
    /// The Cargo feature of this crate that compiles it in; `None` for the
    /// host backend, always there.
    pub feature: Option<&'static str>,
    /// Whether this build has it.
    pub compiled_in: bool,
}

impl Backend {
    /// How to get it into a build: `--features vulkan`, or `(always)`.
    pub fn how_to_build(&self) -> String {
        match self.feature {
            Some(feature) => format!("--features {feature}"),
            None => "(always)".to_string(),
        }
    }
}

/// Something done once for each backend compiled in.
pub trait Visit {
    /// Do it for backend `D`.
    fn visit<D: AfterTrial>(&mut self);
}

/// The list: the host first, then each optional backend with the feature
/// that compiles it in (the feature is named after the backend).
macro_rules! backend_list {
    ($($feature:literal => $driver:ty),* $(,)?) => {
        const BACKENDS: &[Backend] = &[
            Backend { name: "host", feature: None, compiled_in: true },
            $(Backend {
                name: $feature,
                feature: Some($feature),
                compiled_in: cfg!(feature = $feature),
            },)*
        ];

        /// Call `visitor` for every backend compiled in, in the order of
        /// [`backends`]: the host first.
        pub fn each_backend(visitor: &mut impl Visit) {
            visitor.visit::<graph_capture::host::Host>();
            $(
                #[cfg(feature = $feature)]
                visitor.visit::<$driver>();
            )*
        }
    };
}

backend_list! {
    "vulkan" => graph_capture::vulkan::Vulkan,
    "cuda" => graph_capture::cuda::Cuda,
    "hip" => graph_capture::hip::Hip,
}

/// Every backend this build knows, compiled in or not, the host first.
pub fn backends() -> &'static [Backend] {
    BACKENDS
}

/// The backend called `name`, if this build knows one.
pub fn backend(name: &str) -> Option<&'static Backend> {
    BACKENDS.iter().find(|backend| backend.name == name)
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

impl AfterTrial for graph_capture::host::Host {}

#[cfg(feature = "vulkan")]
impl AfterTrial for graph_capture::vulkan::Vulkan {
    fn validation(device: &Arc<Self::Device>) -> Option<Validation> {
        let counts = graph_capture::vulkan::validation_counts(device);
        Some(Validation {
            enabled: counts.enabled,
            sync: counts.sync,
            errors: counts.errors,
            warnings: counts.warnings,
        })
    }
}

#[cfg(feature = "cuda")]
impl AfterTrial for graph_capture::cuda::Cuda {}

#[cfg(feature = "hip")]
impl AfterTrial for graph_capture::hip::Hip {}

#[cfg(test)]
mod tests {
    use super::{AfterTrial, Visit, backend, backends, each_backend};

    struct Names(Vec<&'static str>);

    impl Visit for Names {
        fn visit<D: AfterTrial>(&mut self) {
            self.0.push(D::NAME);
        }
    }

    #[test]
    fn the_visited_backends_are_the_compiled_in_ones_in_order() {
        let mut names = Names(Vec::new());
        each_backend(&mut names);
        let compiled: Vec<_> = backends()
            .iter()
            .filter(|b| b.compiled_in)
            .map(|b| b.name)
            .collect();
        assert_eq!(names.0, compiled);
        assert_eq!(names.0.first(), Some(&"host"));
    }

    #[test]
    fn every_backend_is_found_by_name() {
        for known in backends() {
            assert_eq!(backend(known.name), Some(known));
        }
        assert_eq!(backend("metal"), None);
        assert_eq!(
            backend("vulkan").map(|b| b.how_to_build()).as_deref(),
            Some("--features vulkan")
        );
    }
}
