//! Foreign operations: a caller's own commands, recorded where a launch of
//! ours would be, over the buffers it declared.

use std::sync::Arc;

use ash::vk;
use capture_core::{Access, DriverError};

use crate::device::Device;
use crate::error::error;

/// One declared buffer as the operation's commands see it: the range of a
/// `VkBuffer` it may touch, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForeignBuffer {
    /// The buffer.
    pub buffer: vk::Buffer,
    /// Where the declared bytes start in it.
    pub offset: u64,
    /// How many bytes were declared.
    pub len: u64,
    /// What the operation may do to them.
    pub access: Access,
}

/// What a foreign operation records into.
pub struct ForeignCommands<'a> {
    /// The device's function table.
    pub device: &'a ash::Device,
    /// The command buffer being recorded: the stream's eager batch, or a
    /// graph's secondary. Recording, outside any render pass.
    pub command_buffer: vk::CommandBuffer,
    /// The declared buffers, in declaration order.
    pub buffers: &'a [ForeignBuffer],
}

type Op = dyn Fn(&ForeignCommands<'_>) -> Result<(), String> + Send + Sync;

/// A foreign operation's code, and the device it records for.
pub(crate) struct Foreign {
    pub(crate) device: Arc<Device>,
    op: Box<Op>,
}

impl std::fmt::Debug for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Foreign").finish_non_exhaustive()
    }
}

impl Foreign {
    pub(crate) fn new(
        device: &Arc<Device>,
        op: impl Fn(&ForeignCommands<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            device: Arc::clone(device),
            op: Box::new(op),
        }
    }

    /// Runs the operation into `cmd`; its `Err` or panic is a refusal of
    /// the launch that recorded it.
    pub(crate) fn record(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        buffers: &[ForeignBuffer],
    ) -> Result<(), DriverError> {
        const OP: &str = "foreign operation";
        let commands = ForeignCommands {
            device,
            command_buffer: cmd,
            buffers,
        };
        capture_core::run_foreign_code(|| (self.op)(&commands)).map_err(|why| error(OP, why))
    }
}
