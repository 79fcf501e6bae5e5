//! What the offline checks share: whether a missing tool fails them, and
//! where NVIDIA's PyPI wheels install.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Set to `1`, a missing tool or header fails the check instead of
/// skipping it.
pub const REQUIRE: &str = "CAPTURE_REQUIRE_OFFLINE_TOOLS";

/// Whether [`REQUIRE`] asks for the checks to be enforced.
pub fn required() -> bool {
    env::var(REQUIRE).is_ok_and(|v| v.trim() == "1")
}

/// A tool or header is missing: fail when they are required, otherwise
/// say so.
pub fn missing(what: &str) {
    assert!(
        !required(),
        "{what}, and {REQUIRE}=1 requires it (scripts/cuda-offline-tools --cuda13 installs it)"
    );
    println!("skipped: {what} (set {REQUIRE}=1 to make this a failure)");
}

/// The directories of the `nvidia` Python namespace package, where NVIDIA's
/// PyPI wheels install their tools and headers.
pub fn pip_nvidia_dirs() -> Vec<PathBuf> {
    let script = "import nvidia\nfor p in nvidia.__path__: print(p)";
    let Ok(out) = Command::new("python3").args(["-c", script]).output() else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| PathBuf::from(line.trim()))
        .filter(|dir| dir.is_dir())
        .collect()
}
