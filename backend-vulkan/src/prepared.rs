//! Commands ready to encode, and a capture window's list of them.
//!
//! An eager batch encodes each command as it comes. A capture window keeps
//! its commands prepared instead (a launch's descriptor set allocated and
//! written, its pipeline, layout, push bytes and grid; a copy's buffers and
//! region) and encodes them once instantiation says which order the graph
//! keeps:
//!
//! - [`Order::Chain`]: in issue order, with the barriers an eager batch
//!   would get (one before a command that conflicts with what was recorded
//!   since the last barrier).
//! - [`Order::Dependencies`]: level by level, a command's level being the
//!   length of the longest chain of its predecessors, in issue order within
//!   a level, with one global memory barrier between consecutive levels and
//!   none inside one. Every edge goes from a lower level to a higher one, so
//!   that barrier orders everything an edge asks for, and the commands of a
//!   level may overlap.

use std::ops::Range as Indices;
use std::sync::Arc;

use ash::vk;
use capture_core::{Access, Dependencies, DriverError, Order};

use crate::barriers::{Hazards, Range, device_barrier};
use crate::conditional::{NO_PARENT, Predicates, barrier};
use crate::error::error;
use crate::foreign::{Foreign, ForeignBuffer};
use crate::rendering::Rendering;

/// One command, ready to encode.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Command<'a> {
    /// A dispatch whose descriptor set, when the kernel binds any buffer,
    /// is allocated and written.
    Dispatch {
        pipeline: vk::Pipeline,
        layout: vk::PipelineLayout,
        set: Option<vk::DescriptorSet>,
        /// The parameter bytes, padded to a multiple of 4.
        push: &'a [u8],
        groups: [u32; 3],
    },
    /// A copy of one region between two buffers.
    Copy {
        src: vk::Buffer,
        dst: vk::Buffer,
        region: vk::BufferCopy,
        /// The host reads `dst` back afterwards.
        to_host: bool,
    },
    /// A foreign operation's own commands, over its declared buffers.
    Foreign {
        op: &'a Arc<Foreign>,
        buffers: &'a [ForeignBuffer],
    },
}

/// Encodes `command` into `cmd`; `bound` is the pipeline bound last in
/// `cmd` (null before any), rebound only when the dispatch needs another.
///
/// `cmd` is recording outside a render pass, and every object `command`
/// names is live and kept alive by the command buffer's owner until it has
/// completed: the recorder that prepared it keeps the buffers, kernels and
/// descriptor pools.
pub(crate) fn encode(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    bound: &mut vk::Pipeline,
    command: &Command<'_>,
) -> Result<(), DriverError> {
    match *command {
        Command::Dispatch {
            pipeline,
            layout,
            set,
            push,
            groups: [x, y, z],
        } => {
            // SAFETY: `cmd` is recording outside a render pass; the
            // pipeline, layout and set belong to this device and outlive the
            // command buffer (see above); the pushed bytes lie inside the
            // layout's range, which is the parameter bytes rounded up to a
            // multiple of 4.
            unsafe {
                if *bound != pipeline {
                    device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
                    *bound = pipeline;
                }
                if let Some(set) = set {
                    device.cmd_bind_descriptor_sets(
                        cmd,
                        vk::PipelineBindPoint::COMPUTE,
                        layout,
                        0,
                        &[set],
                        &[],
                    );
                }
                if !push.is_empty() {
                    device.cmd_push_constants(cmd, layout, vk::ShaderStageFlags::COMPUTE, 0, push);
                }
                device.cmd_dispatch(cmd, x, y, z);
            }
        }
        Command::Copy {
            src, dst, region, ..
        } => {
            // SAFETY: `cmd` is recording outside a render pass; both buffers
            // are live, were created with the transfer usages, and the
            // region lies inside both (the recorder checked it).
            unsafe { device.cmd_copy_buffer(cmd, src, dst, std::slice::from_ref(&region)) };
        }
        Command::Foreign { op, buffers } => {
            // Whatever it bound is not ours: the next dispatch binds its
            // pipeline again (and, as every dispatch does, its set and push
            // constants).
            *bound = vk::Pipeline::null();
            op.record(device, cmd, buffers)?;
        }
    }
    Ok(())
}

/// A kept command, its push bytes and ranges stored in the list's shared
/// vectors so a command adds no allocation of its own.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Dispatch {
        pipeline: vk::Pipeline,
        layout: vk::PipelineLayout,
        set: Option<vk::DescriptorSet>,
        groups: [u32; 3],
    },
    Copy {
        src: vk::Buffer,
        dst: vk::Buffer,
        region: vk::BufferCopy,
        to_host: bool,
    },
    /// The foreign operation at this index of [`Prepared::foreign`].
    Foreign(usize),
    /// A copy of no bytes: an operation the core numbers, with nothing to
    /// encode.
    Empty,
    /// The conditional at this index of [`Prepared::nodes`].
    Conditional(usize),
}

/// A conditional: its predicates and its bodies, each with the order its
/// commands keep.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) predicates: Predicates,
    pub(crate) bodies: Vec<(Prepared, Option<Dependencies>)>,
}

/// Where commands are encoded: inside which conditional rendering, if any,
/// whose predicate a nested conditional folds into its own.
#[derive(Clone, Copy)]
pub(crate) struct Scope<'a> {
    /// The device's conditional rendering, where it enabled it.
    pub(crate) rendering: Option<&'a Rendering>,
    /// The active conditional rendering's predicate: buffer and offset.
    pub(crate) active: Option<(vk::Buffer, u64)>,
    /// The active predicate's slot, or [`NO_PARENT`].
    pub(crate) parent: u32,
}

impl<'a> Scope<'a> {
    /// The scope of a recording's own commands.
    pub(crate) fn top(rendering: Option<&'a Rendering>) -> Self {
        Scope {
            rendering,
            active: None,
            parent: NO_PARENT,
        }
    }
}

/// A command and the ranges it touches.
type Touching<'a> = (Command<'a>, &'a [(Range, Access)]);

#[derive(Debug, Clone)]
struct Entry {
    kind: Kind,
    /// Its push bytes in [`Prepared::params`].
    push: Indices<usize>,
    /// The ranges it touches in [`Prepared::accesses`].
    accesses: Indices<usize>,
}

/// A capture window's commands in issue order, not yet encoded.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    entries: Vec<Entry>,
    accesses: Vec<(Range, Access)>,
    params: Vec<u8>,
    nodes: Vec<Node>,
    /// The foreign operations, each with its declared buffers, kept alive
    /// until the list is encoded.
    foreign: Vec<(Arc<Foreign>, Vec<ForeignBuffer>)>,
}

impl Prepared {
    /// Keeps `command`, which touches `accesses`.
    pub(crate) fn push(&mut self, command: &Command<'_>, accesses: &[(Range, Access)]) {
        let first = self.accesses.len();
        self.accesses.extend_from_slice(accesses);
        let accesses = first..self.accesses.len();
        let (kind, push) = match *command {
            Command::Dispatch {
                pipeline,
                layout,
                set,
                push,
                groups,
            } => {
                let first = self.params.len();
                self.params.extend_from_slice(push);
                let kind = Kind::Dispatch {
                    pipeline,
                    layout,
                    set,
                    groups,
                };
                (kind, first..self.params.len())
            }
            Command::Copy {
                src,
                dst,
                region,
                to_host,
            } => {
                let kind = Kind::Copy {
                    src,
                    dst,
                    region,
                    to_host,
                };
                (kind, 0..0)
            }
            Command::Foreign { op, buffers } => {
                self.foreign.push((Arc::clone(op), buffers.to_vec()));
                (Kind::Foreign(self.foreign.len() - 1), 0..0)
            }
        };
        self.entries.push(Entry {
            kind,
            push,
            accesses,
        });
    }

    /// Keeps a copy of no bytes, which the core numbers like any operation.
    pub(crate) fn push_empty(&mut self) {
        self.entries.push(Entry {
            kind: Kind::Empty,
            push: 0..0,
            accesses: 0..0,
        });
    }

    /// Keeps a conditional, one operation of the list.
    pub(crate) fn push_node(&mut self, node: Node) {
        self.entries.push(Entry {
            kind: Kind::Conditional(self.nodes.len()),
            push: 0..0,
            accesses: 0..0,
        });
        self.nodes.push(node);
    }

    /// `entry` as a command and the ranges it touches; `None` for an empty
    /// copy or a conditional.
    fn command(&self, entry: &Entry) -> Result<Option<Touching<'_>>, DriverError> {
        let (Some(push), Some(accesses)) = (
            self.params.get(entry.push.clone()),
            self.accesses.get(entry.accesses.clone()),
        ) else {
            return Err(error(
                "instantiate",
                "a prepared command's bytes lie outside its list",
            ));
        };
        let command = match entry.kind {
            Kind::Dispatch {
                pipeline,
                layout,
                set,
                groups,
            } => Command::Dispatch {
                pipeline,
                layout,
                set,
                push,
                groups,
            },
            Kind::Copy {
                src,
                dst,
                region,
                to_host,
            } => Command::Copy {
                src,
                dst,
                region,
                to_host,
            },
            Kind::Foreign(at) => {
                let Some((op, buffers)) = self.foreign.get(at) else {
                    return Err(error("instantiate", "a foreign operation outside its list"));
                };
                Command::Foreign { op, buffers }
            }
            Kind::Empty | Kind::Conditional(_) => return Ok(None),
        };
        Ok(Some((command, accesses)))
    }

    /// Encodes every command into `cmd` in `order`; returns how many global
    /// memory barriers it placed between commands.
    pub(crate) fn encode(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        order: Order<'_>,
        scope: Scope<'_>,
    ) -> Result<usize, DriverError> {
        match order {
            Order::Chain => self.encode_chain(device, cmd, scope),
            Order::Dependencies(dependencies) => {
                self.encode_levels(device, cmd, dependencies, scope)
            }
        }
    }

    /// Encodes conditional `node`: per run, its predicates, then each body
    /// inside conditional rendering on its own, with a barrier around
    /// each; the scope's rendering ends before and begins again after.
    fn encode_node(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        node: usize,
        scope: Scope<'_>,
    ) -> Result<usize, DriverError> {
        const OP: &str = "instantiate";
        let (Some(node), Some(rendering)) = (self.nodes.get(node), scope.rendering) else {
            return Err(error(OP, "a conditional without conditional rendering"));
        };
        let predicates = &node.predicates;
        if scope.active.is_some() {
            rendering.end(cmd);
        }
        let runs = predicates.runs();
        barrier(device, cmd);
        let mut barriers = 1;
        // A loop's later runs compute their predicates only where the run
        // before ran: an iteration the flag skipped then costs discarded
        // dispatches and barriers, and finds its words zeroed here.
        if runs > 1 {
            predicates.clear(device, cmd);
            barrier(device, cmd);
            barriers += 1;
        }
        for run in 0..runs {
            let before = run.checked_sub(1).map(|r| Predicates::slot(r, 0));
            if let Some(slot) = before {
                rendering.begin(cmd, predicates.buffer.buffer, u64::from(slot) * 4);
            }
            predicates.compute(device, cmd, run, scope.parent);
            if before.is_some() {
                rendering.end(cmd);
            }
            barrier(device, cmd);
            barriers += 1;
            for (body, (prepared, dependencies)) in node.bodies.iter().enumerate() {
                let slot = Predicates::slot(run, body);
                let active = (predicates.buffer.buffer, u64::from(slot) * 4);
                rendering.begin(cmd, active.0, active.1);
                let order = dependencies
                    .as_ref()
                    .map_or(Order::Chain, Order::Dependencies);
                let inner = Scope {
                    rendering: Some(rendering),
                    active: Some(active),
                    parent: slot,
                };
                barriers += prepared.encode(device, cmd, order, inner)?;
                rendering.end(cmd);
                barrier(device, cmd);
                barriers += 1;
            }
        }
        if let Some((buffer, offset)) = scope.active {
            rendering.begin(cmd, buffer, offset);
        }
        Ok(barriers)
    }

    /// Issue order, with a barrier before each command that conflicts with
    /// what was encoded since the last one.
    fn encode_chain(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        scope: Scope<'_>,
    ) -> Result<usize, DriverError> {
        let mut hazards = Hazards::default();
        let mut bound = vk::Pipeline::null();
        let mut barriers = 0;
        for entry in &self.entries {
            if let Kind::Conditional(node) = entry.kind {
                barriers += self.encode_node(device, cmd, node, scope)?;
                // Its barriers ordered everything before it; it bound its
                // own pipeline.
                hazards.clear();
                bound = vk::Pipeline::null();
                continue;
            }
            let Some((command, accesses)) = self.command(entry)? else {
                continue;
            };
            barriers += usize::from(hazards.order(device, cmd, accesses));
            encode(device, cmd, &mut bound, &command)?;
        }
        Ok(barriers)
    }

    /// Level order, with one barrier between consecutive levels.
    fn encode_levels(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        dependencies: &Dependencies,
        scope: Scope<'_>,
    ) -> Result<usize, DriverError> {
        let order = self.level_order(dependencies)?;
        let mut bound = vk::Pipeline::null();
        let mut barriers = 0;
        let mut encoded_level = None;
        for (level, index) in order {
            let Some(entry) = self.entries.get(index) else {
                continue;
            };
            if let Kind::Conditional(node) = entry.kind {
                // Barriers of its own order it after the levels before.
                barriers += self.encode_node(device, cmd, node, scope)?;
                bound = vk::Pipeline::null();
                continue;
            }
            let Some((command, _)) = self.command(entry)? else {
                continue;
            };
            if encoded_level.is_some_and(|last| last != level) {
                device_barrier(device, cmd);
                barriers += 1;
            }
            encoded_level = Some(level);
            encode(device, cmd, &mut bound, &command)?;
        }
        Ok(barriers)
    }

    /// Each operation's `(level, index)`, sorted: level by level, issue
    /// order within a level.
    fn level_order(&self, dependencies: &Dependencies) -> Result<Vec<(usize, usize)>, DriverError> {
        const OP: &str = "instantiate";
        if dependencies.nodes != self.entries.len() {
            return Err(error(
                OP,
                format!(
                    "the dependency graph numbers {} operations; the window recorded {}",
                    dependencies.nodes,
                    self.entries.len()
                ),
            ));
        }
        // The core numbers only copies to the device and launches.
        if self
            .entries
            .iter()
            .any(|e| matches!(e.kind, Kind::Copy { to_host: true, .. }))
        {
            return Err(error(
                OP,
                "a copy to the host has no place in a dependency graph",
            ));
        }
        Ok(dependencies
            .levels()
            .into_iter()
            .enumerate()
            .flat_map(|(level, operations)| operations.into_iter().map(move |op| (level, op)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(operations: usize) -> Prepared {
        let mut prepared = Prepared::default();
        for _ in 0..operations {
            prepared.push_empty();
        }
        prepared
    }

    fn dependencies(nodes: usize, edges: &[(usize, usize)]) -> Dependencies {
        Dependencies {
            nodes,
            edges: edges.to_vec(),
            ..Dependencies::default()
        }
    }

    #[test]
    fn levels_keep_issue_order_within_a_level() {
        // Two chains issued one after the other: 0 -> 1 -> 2 and 3 -> 4.
        let deps = dependencies(5, &[(0, 1), (1, 2), (3, 4)]);
        let order = list(5).level_order(&deps).expect("order");
        assert_eq!(order, vec![(0, 0), (0, 3), (1, 1), (1, 4), (2, 2)]);
    }

    #[test]
    fn a_level_is_the_longest_chain_of_predecessors() {
        // 3 follows 1 (level 1) and 2 (level 0): the longer chain sets it.
        let deps = dependencies(4, &[(0, 1), (1, 3), (2, 3)]);
        let order = list(4).level_order(&deps).expect("order");
        assert_eq!(order, vec![(0, 0), (0, 2), (1, 1), (2, 3)]);
    }

    #[test]
    fn a_graph_of_other_operations_is_an_error() {
        assert!(list(3).level_order(&dependencies(4, &[])).is_err());
        assert!(list(3).level_order(&dependencies(2, &[])).is_err());
    }
}
