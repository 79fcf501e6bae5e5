//! The workload's kernels on Vulkan: the WGSL in `kernels/workload.wgsl`,
//! compiled by naga with bounds-checked accesses, so building them takes no
//! promise about what a launch passes.
#![allow(unsafe_code)]

use std::sync::Arc;

use graph_capture::vulkan::{Device, Kernel, Vulkan};
use graph_capture::{Access, Error, Signature};

use super::{UserKernel, UserKernels};

/// The WGSL source of the workload: a shared prelude, then one section per
/// kernel, each starting at a `// kernel: NAME` line.
const SOURCE: &str = include_str!("../../kernels/workload.wgsl");

/// The line that opens a kernel's section in [`SOURCE`].
const SECTION: &str = "// kernel: ";

/// The module of kernel `name`: the prelude and its own section, with every
/// other section's lines left blank so naga's line numbers are the file's.
/// `None` when the file has no section for `name`.
fn module_source(name: &str) -> Option<String> {
    let mut out = String::with_capacity(SOURCE.len());
    let mut section: Option<&str> = None;
    let mut found = false;
    for line in SOURCE.lines() {
        if let Some(opened) = line.strip_prefix(SECTION) {
            let opened = opened.trim();
            found |= opened == name;
            section = Some(opened);
        }
        if section.is_none_or(|s| s == name) {
            out.push_str(line);
        }
        out.push('\n');
    }
    found.then_some(out)
}

impl UserKernels for Vulkan {
    unsafe fn user_kernel(device: &Arc<Device>, which: UserKernel) -> Result<Kernel, Error> {
        let signature = which.signature();
        let Some(source) = module_source(which.name()) else {
            return Err(Error::Compile {
                kernel: which.name().to_owned(),
                log: format!(
                    "kernels/workload.wgsl has no `{SECTION}{}` section",
                    which.name()
                ),
            });
        };
        Kernel::from_wgsl_checked(device, &source, which.name(), signature)
    }

    fn broken_kernel(device: &Arc<Device>) -> Result<Kernel, Error> {
        // An unclosed parameter list: naga's parser refuses it.
        let source = "@compute @workgroup_size(64)\nfn broken(i: u32 {\n}\n";
        Kernel::from_wgsl_checked(device, source, "broken", Signature::new("broken"))
    }

    fn disagreeing_kernel(device: &Arc<Device>) -> Option<Result<Kernel, Error>> {
        // `residual` binds x and y; this signature declares x alone, so the
        // module's binding 1 has no buffer behind it.
        let which = UserKernel::Residual;
        let signature = Signature::new(which.name())
            .workgroup([super::WORKGROUP, 1, 1])
            .binding(Access::ReadWrite)
            .param(4);
        let built = match module_source(which.name()) {
            Some(source) => Kernel::from_wgsl_checked(device, &source, which.name(), signature),
            None => Err(Error::Compile {
                kernel: which.name().to_owned(),
                log: format!(
                    "kernels/workload.wgsl has no `{SECTION}{}` section",
                    which.name()
                ),
            }),
        };
        Some(built)
    }
}
