//! The barriers a batch of commands needs, and no more.
//!
//! Commands in one command buffer may overlap on the GPU unless a barrier
//! orders them. A barrier is placed only before a command that reads or
//! writes a range an earlier command (since the last barrier) wrote, or that
//! writes a range an earlier command read; independent launches run
//! together. Since a barrier here is a global memory barrier, it orders
//! everything before it, so the tracked ranges start over after one.
//!
//! The tracked ranges have a fixed room: a command whose ranges would not
//! fit gets a barrier too (always correct, merely less overlap), so tracking
//! never allocates and its checks stay short.

use ash::vk;
use capture_core::Access;

/// A byte range of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) buffer: vk::Buffer,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

impl Range {
    fn overlaps(&self, other: &Range) -> bool {
        self.buffer == other.buffer && self.start < other.end && other.start < self.end
    }
}

/// Ranges read, and ranges written, tracked between two barriers.
pub(crate) const TRACKED: usize = 128;

/// What the commands since the last barrier read and wrote.
#[derive(Debug)]
pub(crate) struct Hazards {
    reads: Vec<Range>,
    writes: Vec<Range>,
}

impl Default for Hazards {
    fn default() -> Self {
        Self {
            reads: Vec::with_capacity(TRACKED),
            writes: Vec::with_capacity(TRACKED),
        }
    }
}

impl Hazards {
    /// Whether a command making `accesses` must wait for earlier ones: it
    /// touches what they wrote or writes what they read, or its ranges do
    /// not fit the room left.
    pub(crate) fn conflicts(&self, accesses: &[(Range, Access)]) -> bool {
        let reads = accesses.iter().filter(|(_, a)| a.reads()).count();
        let writes = accesses.iter().filter(|(_, a)| a.writes()).count();
        if self.reads.len() + reads > TRACKED || self.writes.len() + writes > TRACKED {
            return true;
        }
        accesses.iter().any(|(range, access)| {
            self.writes.iter().any(|w| w.overlaps(range))
                || (access.writes() && self.reads.iter().any(|r| r.overlaps(range)))
        })
    }

    /// Notes a recorded command's `accesses`, which fit the room left (the
    /// caller placed a barrier and cleared first otherwise).
    pub(crate) fn add(&mut self, accesses: &[(Range, Access)]) {
        for (range, access) in accesses {
            if access.reads() {
                self.reads.push(*range);
            }
            if access.writes() {
                self.writes.push(*range);
            }
        }
    }

    /// Records a barrier in `cmd` first if a command making `accesses`
    /// must wait for earlier ones, then notes them; says whether it did.
    pub(crate) fn order(
        &mut self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        accesses: &[(Range, Access)],
    ) -> bool {
        let barrier = self.conflicts(accesses);
        if barrier {
            device_barrier(device, cmd);
            self.clear();
        }
        self.add(accesses);
        barrier
    }

    /// Forgets everything: a barrier was just recorded.
    pub(crate) fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }
}

const DEVICE_STAGES: vk::PipelineStageFlags = vk::PipelineStageFlags::from_raw(
    vk::PipelineStageFlags::COMPUTE_SHADER.as_raw() | vk::PipelineStageFlags::TRANSFER.as_raw(),
);

/// Orders every earlier compute and transfer command before every later one
/// and makes their writes visible to it.
///
/// Also what every submitted command buffer starts with: its first sync
/// scope reaches back over earlier submissions on the queue, so their writes
/// become visible too.
pub(crate) fn device_barrier(device: &ash::Device, cmd: vk::CommandBuffer) {
    memory_barrier(device, cmd, DEVICE_STAGES, vk::AccessFlags::empty());
}

/// A global memory barrier from every earlier command of `stages` to every
/// later one: shader and transfer writes made visible to shader and
/// transfer accesses, and to `also` (the access of a stage `stages` adds).
pub(crate) fn memory_barrier(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    stages: vk::PipelineStageFlags,
    also: vk::AccessFlags,
) {
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(
            vk::AccessFlags::SHADER_READ
                | vk::AccessFlags::SHADER_WRITE
                | vk::AccessFlags::TRANSFER_READ
                | vk::AccessFlags::TRANSFER_WRITE
                | also,
        );
    // SAFETY: `cmd` is in the recording state, outside any render pass, on
    // a device that enabled whatever stage `stages` names.
    unsafe {
        device.cmd_pipeline_barrier(
            cmd,
            stages,
            stages,
            vk::DependencyFlags::empty(),
            std::slice::from_ref(&barrier),
            &[],
            &[],
        );
    }
}

/// Makes every earlier write visible to host reads, which a fence alone
/// does not do.
pub(crate) fn host_barrier(device: &ash::Device, cmd: vk::CommandBuffer) {
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ);
    // SAFETY: `cmd` is in the recording state, outside any render pass.
    unsafe {
        device.cmd_pipeline_barrier(
            cmd,
            DEVICE_STAGES,
            vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            std::slice::from_ref(&barrier),
            &[],
            &[],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk::Handle;

    fn range(buffer: u64, start: u64, end: u64) -> Range {
        Range {
            buffer: vk::Buffer::from_raw(buffer),
            start,
            end,
        }
    }

    #[test]
    fn independent_commands_need_no_barrier() {
        let mut h = Hazards::default();
        h.add(&[
            (range(1, 0, 256), Access::Write),
            (range(1, 256, 512), Access::Read),
        ]);
        assert!(!h.conflicts(&[(range(1, 512, 768), Access::Write)]));
        assert!(!h.conflicts(&[(range(2, 0, 256), Access::ReadWrite)]));
        assert!(!h.conflicts(&[(range(1, 256, 512), Access::Read)]));
    }

    #[test]
    fn read_after_write_write_after_read_and_write_after_write_conflict() {
        let mut h = Hazards::default();
        h.add(&[
            (range(1, 0, 256), Access::Write),
            (range(1, 256, 512), Access::Read),
        ]);
        assert!(h.conflicts(&[(range(1, 100, 101), Access::Read)]));
        assert!(h.conflicts(&[(range(1, 255, 300), Access::Write)]));
        assert!(h.conflicts(&[(range(1, 0, 1), Access::Write)]));
        h.clear();
        assert!(!h.conflicts(&[(range(1, 0, 512), Access::ReadWrite)]));
    }

    #[test]
    fn ranges_past_the_room_need_a_barrier_and_never_grow_it() {
        let mut h = Hazards::default();
        let capacity = (h.reads.capacity(), h.writes.capacity());
        for i in 0..TRACKED as u64 {
            let access = [(range(i + 10, 0, 4), Access::Write)];
            assert!(!h.conflicts(&access));
            h.add(&access);
        }
        // Independent, but the written ranges are full.
        assert!(h.conflicts(&[(range(1, 0, 4), Access::Write)]));
        assert!(!h.conflicts(&[(range(1, 0, 4), Access::Read)]));
        assert_eq!((h.reads.capacity(), h.writes.capacity()), capacity);
    }
}
