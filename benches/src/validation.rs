//! Vulkan's validation layers, off while measuring.
//!
//! The Vulkan backend enables its validation layers unless
//! `CAPTURE_VULKAN_VALIDATION=0`; they check every call, which is what they
//! are for, and would be most of what a host-side timing measures. A process
//! cannot safely change its own environment once threads may be running, so
//! [`validation_off`] runs the binary again with the variable set, unless the
//! caller set it already.

use std::process::ExitCode;

/// Set in the re-run process, so that it knows the variable is ours.
const MARKER: &str = "BENCHES_VALIDATION_SET_BY_BENCHES";

/// How Vulkan validation stands for this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    /// The Vulkan backend is not compiled in.
    NotCompiled,
    /// Turned off: this process was started with the variable set to `0`.
    TurnedOff,
    /// The caller set the variable; it is left as it is.
    SetByCaller(String),
    /// It could not be turned off (the binary could not re-run itself).
    Unchanged(String),
}

impl Validation {
    /// One line for a report.
    pub fn describe(&self) -> String {
        match self {
            Validation::NotCompiled => "Vulkan not compiled in".into(),
            Validation::TurnedOff => format!(
                "Vulkan validation layers off for timing ({} set to 0 at start; \
                 set it yourself to override)",
                variable()
            ),
            Validation::SetByCaller(value) => {
                format!("{}={value}, as set by the caller", variable())
            }
            Validation::Unchanged(why) => format!(
                "Vulkan validation layers left as they were ({why}); \
                 timings include them"
            ),
        }
    }
}

#[cfg(feature = "vulkan")]
fn variable() -> &'static str {
    graph_capture::vulkan::VALIDATION_ENV
}

#[cfg(not(feature = "vulkan"))]
fn variable() -> &'static str {
    "CAPTURE_VULKAN_VALIDATION"
}

/// Make sure Vulkan validation is off for this process, unless the caller
/// chose otherwise.
///
/// Call first thing in `main`. `Err(code)` means the binary ran again as a
/// child with validation off, and has finished with `code`: return it.
pub fn validation_off() -> Result<Validation, ExitCode> {
    if !cfg!(feature = "vulkan") {
        return Ok(Validation::NotCompiled);
    }
    if let Ok(value) = std::env::var(variable()) {
        return Ok(if std::env::var_os(MARKER).is_some() {
            Validation::TurnedOff
        } else {
            Validation::SetByCaller(value)
        });
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => return Ok(Validation::Unchanged(err.to_string())),
    };
    let status = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(variable(), "0")
        .env(MARKER, "1")
        .status();
    match status {
        Ok(status) => Err(status
            .code()
            .and_then(|code| u8::try_from(code).ok())
            .map_or(ExitCode::FAILURE, ExitCode::from)),
        Err(err) => Ok(Validation::Unchanged(err.to_string())),
    }
}
