//! `VK_EXT_conditional_rendering`'s two commands, which the device loads
//! where it enabled the extension.

use ash::vk;

/// `VK_EXT_conditional_rendering`'s commands, loaded where the device
/// enabled it.
pub(crate) struct Rendering {
    fp: ash::ext::conditional_rendering::DeviceFn,
}

impl Rendering {
    /// The commands of `device`, which enabled the extension.
    pub(crate) fn load(instance: &ash::Instance, device: &ash::Device) -> Rendering {
        Rendering {
            fp: ash::ext::conditional_rendering::Device::new(instance, device)
                .fp()
                .clone(),
        }
    }

    /// Begins rendering conditional on the word at `offset` of `buffer`.
    pub(crate) fn begin(&self, cmd: vk::CommandBuffer, buffer: vk::Buffer, offset: u64) {
        let info = vk::ConditionalRenderingBeginInfoEXT::default()
            .buffer(buffer)
            .offset(offset);
        // SAFETY: `cmd` is recording with no conditional rendering active;
        // `buffer` is live, made with the conditional-rendering usage, and
        // `offset` is a multiple of 4 inside it.
        unsafe { (self.fp.cmd_begin_conditional_rendering_ext)(cmd, &info) };
    }

    /// Ends the active conditional rendering.
    pub(crate) fn end(&self, cmd: vk::CommandBuffer) {
        // SAFETY: `cmd` is recording, and this command buffer began the
        // conditional rendering that is active.
        unsafe { (self.fp.cmd_end_conditional_rendering_ext)(cmd) };
    }
}
