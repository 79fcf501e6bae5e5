//! One unit of work as the worker runs it, eager, and what every unit
//! shares: a copy, a kernel's fault handling, a released page's error.

use crate::kernels::{Dispatch, Kernel};
use crate::memory::Range;

/// One unit of eager work.
#[derive(Debug, Clone)]
// Held inline on purpose, however large a launch is next to a copy: boxing
// it would make every launch allocate.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Op {
    /// Copy bytes between pages (host to device, or device to host).
    Copy { src: Range, dst: Range },
    /// Run a kernel over bound ranges.
    Kernel(Dispatch),
}

impl Op {
    /// The first released page the op touches.
    fn released(&self) -> Option<&Range> {
        match self {
            Op::Copy { src, dst } => [src, dst].into_iter().find(|r| r.memory.is_released()),
            Op::Kernel(dispatch) => dispatch.ranges().find(|r| r.memory.is_released()),
        }
    }

    pub(crate) fn run(&self) -> Result<(), String> {
        if let Some(released) = self.released() {
            return Err(touched_released(released));
        }
        match self {
            Op::Copy { src, dst } => copy(src, dst),
            Op::Kernel(dispatch) => run_kernel(&dispatch.kernel, || dispatch.run()),
        }
    }
}

/// The error of work that touched `range` after its page was released.
pub(crate) fn touched_released(range: &Range) -> String {
    format!(
        "work touched {}, which was released",
        range.memory.describe()
    )
}

/// Copy `src` to `dst`.
pub(crate) fn copy(src: &Range, dst: &Range) -> Result<(), String> {
    let data = src.load().ok_or("copy source out of range")?;
    if dst.store(&data) {
        Ok(())
    } else {
        Err("copy destination out of range".into())
    }
}

/// Run `kernel`'s work: a panicking kernel is a faulting kernel, reported
/// by the next fence, never the end of the worker.
pub(crate) fn run_kernel(
    kernel: &Kernel,
    work: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        Err(format!(
            "kernel {} panicked: {}",
            kernel.signature().name(),
            capture_core::panic_message(&*panic)
        ))
    })
}
