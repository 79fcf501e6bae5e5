//! A recording's work, kept compact for replays.
//!
//! An eager launch carries its bindings and parameters inline, sized for the
//! most a launch may have, so that sending it allocates nothing. A recording
//! keeps its launches instead as steps that index two arrays shared by the
//! whole program, one of ranges and one of parameter bytes: recording a
//! launch allocates nothing of its own (the arrays grow by doubling), and a
//! program of ten thousand launches stays a few hundred kilobytes.

use std::hash::Hasher;
use std::ops::Range as Span;

use capture_core::{Conditional, Dependencies};
use rustc_hash::FxHasher;

use crate::kernels::{Dispatch, Kernel, dispatch};
use crate::level::{self, Work};
use crate::memory::Range;
use crate::op::{Op, copy, run_kernel, touched_released};
use crate::schedule::{Schedule, check_hazards};

/// One step of a program.
#[derive(Debug, Clone)]
enum Step {
    /// Copy the ranges at `src` and `dst` of the program's ranges.
    Copy { src: usize, dst: usize },
    /// Launch `kernel` over the program's ranges at `bindings`, the info
    /// range at `info`, and the parameter bytes at `params`.
    Kernel {
        kernel: Kernel,
        groups: [u32; 3],
        bindings: Span<usize>,
        info: Option<usize>,
        params: Span<usize>,
    },
    /// Run `bodies` as `kind` says on the `u32` flag in the range at `flag`,
    /// read when the replay reaches the step (a loop's, before each
    /// iteration).
    Conditional {
        kind: Conditional,
        flag: usize,
        bodies: Vec<Program>,
    },
}

/// A recorded sequence of work.
#[derive(Debug, Clone, Default)]
pub(crate) struct Program {
    steps: Vec<Step>,
    ranges: Vec<Range>,
    params: Vec<u8>,
    /// The kinds of its steps and their kernels, in order, folded as they
    /// are pushed: an update compares shapes without walking the steps.
    shape: u64,
    /// Its dependency graph's levels, for a program whose independent
    /// steps run at the same time; `None` runs every step in order.
    schedule: Option<Schedule>,
}

impl Program {
    /// Append `op`.
    pub(crate) fn push(&mut self, op: Op) {
        let kind = match &op {
            Op::Copy { .. } => 2,
            // Each kernel of the program is alive as long as the program,
            // so no other kernel can take its address meanwhile.
            Op::Kernel(dispatch) => dispatch.kernel.identity() as u64 | 1,
        };
        self.shape = fold(self.shape, kind);
        let step = match op {
            Op::Copy { src, dst } => {
                let src = self.range(src);
                Step::Copy {
                    src,
                    dst: self.range(dst),
                }
            }
            Op::Kernel(Dispatch {
                kernel,
                groups,
                bindings,
                info,
                params,
            }) => {
                let start = self.ranges.len();
                self.ranges.extend(bindings);
                let bindings = start..self.ranges.len();
                let info = info.map(|info| self.range(info));
                let start = self.params.len();
                self.params.extend_from_slice(&params);
                Step::Kernel {
                    kernel,
                    groups,
                    bindings,
                    info,
                    params: start..self.params.len(),
                }
            }
        };
        self.steps.push(step);
    }

    /// Append a conditional of `kind` on `flag` over `bodies`, each body
    /// already keeping its own order.
    pub(crate) fn push_conditional(
        &mut self,
        kind: Conditional,
        flag: Range,
        bodies: Vec<Program>,
    ) {
        // Even tags, apart from a kernel's odd word and a copy's 2.
        let (tag, bound) = match kind {
            Conditional::If => (4, 0),
            Conditional::IfElse => (6, 0),
            Conditional::While { bound } => (8, bound),
        };
        let mut shape = fold(fold(self.shape, tag), u64::from(bound));
        for body in &bodies {
            shape = fold(shape, body.shape);
        }
        self.shape = shape;
        let flag = self.range(flag);
        self.steps.push(Step::Conditional { kind, flag, bodies });
    }

    /// An empty program with room for one as large as `like`.
    pub(crate) fn sized_like(like: (usize, usize, usize)) -> Self {
        Self {
            steps: Vec::with_capacity(like.0),
            ranges: Vec::with_capacity(like.1),
            params: Vec::with_capacity(like.2),
            shape: 0,
            schedule: None,
        }
    }

    /// Give back room reserved for a larger program than this one, so that
    /// a graph keeps no more than it recorded (give or take doubling).
    pub(crate) fn fit(&mut self) {
        fn fit<T>(v: &mut Vec<T>) {
            if v.capacity() > 2 * v.len() {
                v.shrink_to_fit();
            }
        }
        fit(&mut self.steps);
        fit(&mut self.ranges);
        fit(&mut self.params);
    }

    /// How large the program is: steps, ranges and parameter bytes.
    pub(crate) fn size(&self) -> (usize, usize, usize) {
        (self.steps.len(), self.ranges.len(), self.params.len())
    }

    fn range(&mut self, range: Range) -> usize {
        self.ranges.push(range);
        self.ranges.len() - 1
    }

    /// Steps recorded.
    pub(crate) fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether `other` does the same kinds of work in the same order with
    /// the same kernels: what an update in place may change is only what
    /// the work runs on (buffers, grids, parameters, info).
    pub(crate) fn same_shape(&self, other: &Program) -> bool {
        self.steps.len() == other.steps.len() && self.shape == other.shape
    }

    /// The first released page any step touches, in a body or not.
    pub(crate) fn released(&self) -> Option<&Range> {
        self.ranges
            .iter()
            .find(|range| range.memory.is_released())
            .or_else(|| self.bodies().find_map(Program::released))
    }

    /// The bodies of its conditionals, one level down.
    fn bodies(&self) -> impl Iterator<Item = &Program> {
        self.steps.iter().flat_map(|step| match step {
            Step::Conditional { bodies, .. } => bodies.as_slice(),
            _ => &[],
        })
    }

    /// Run only as `dependencies` orders: its independent steps at the same
    /// time. Refused where the dependency graph is not this program's, or
    /// leaves two steps that touch one byte, one writing it, unordered.
    pub(crate) fn keep_dependencies(&mut self, dependencies: &Dependencies) -> Result<(), String> {
        if dependencies.nodes != self.steps.len() {
            return Err(format!(
                "the dependency graph has {} operation(s) and the recording {} step(s)",
                dependencies.nodes,
                self.steps.len()
            ));
        }
        let accesses: Vec<Vec<(&Range, bool)>> = (0..self.steps.len())
            .map(|step| self.accesses(step))
            .collect();
        check_hazards(&accesses, &dependencies.edges)?;
        // A conditional runs its bodies on the replay's thread, taking the
        // locks a spread level would hold: its level is never spread.
        let bytes = |step: usize| match self.steps[step] {
            Step::Conditional { .. } => None,
            _ => Some(
                accesses[step]
                    .iter()
                    .map(|(range, _)| range.len as u64)
                    .sum(),
            ),
        };
        self.schedule = Some(Schedule::of(dependencies, bytes));
        Ok(())
    }

    /// The ranges step `step` touches, and whether it writes each.
    fn accesses(&self, step: usize) -> Vec<(&Range, bool)> {
        match &self.steps[step] {
            Step::Copy { src, dst } => {
                vec![(&self.ranges[*src], false), (&self.ranges[*dst], true)]
            }
            Step::Kernel {
                kernel,
                bindings,
                info,
                ..
            } => {
                let accesses = kernel.signature().accesses();
                self.ranges[bindings.clone()]
                    .iter()
                    .zip(accesses)
                    .map(|(range, access)| (range, access.writes()))
                    .chain(info.map(|at| (&self.ranges[at], false)))
                    .collect()
            }
            // Its flag, and whatever any body touches.
            Step::Conditional { flag, bodies, .. } => {
                let mut accesses = vec![(&self.ranges[*flag], false)];
                for body in bodies {
                    accesses.extend((0..body.steps.len()).flat_map(|step| body.accesses(step)));
                }
                accesses
            }
        }
    }

    /// Run every step, in order or as its schedule allows; the first error
    /// stops the program.
    pub(crate) fn run(&self) -> Result<(), String> {
        if let Some(released) = self.released() {
            return Err(touched_released(released));
        }
        match &self.schedule {
            Some(schedule) => schedule.run(
                |step| self.run_step(step),
                |steps, pool| {
                    let work: Option<Vec<Work<'_>>> =
                        steps.iter().map(|&step| self.work(step as usize)).collect();
                    level::run(&work.ok_or("a conditional was handed to a level")?, pool)
                },
            ),
            None => (0..self.steps.len()).try_for_each(|step| self.run_step(step)),
        }
    }

    /// Step `step`, with the ranges and bytes it runs on; `None` for a
    /// conditional, which runs alone.
    fn work(&self, step: usize) -> Option<Work<'_>> {
        Some(match &self.steps[step] {
            Step::Copy { src, dst } => Work::Copy {
                src: &self.ranges[*src],
                dst: &self.ranges[*dst],
            },
            Step::Kernel {
                kernel,
                groups,
                bindings,
                info,
                params,
            } => Work::Kernel {
                kernel,
                groups: *groups,
                bindings: &self.ranges[bindings.clone()],
                info: info.map(|at| &self.ranges[at]),
                params: &self.params[params.clone()],
            },
            Step::Conditional { .. } => return None,
        })
    }

    /// Run step `step` alone.
    fn run_step(&self, step: usize) -> Result<(), String> {
        if let Step::Conditional { kind, flag, bodies } = &self.steps[step] {
            return self.run_conditional(*kind, &self.ranges[*flag], bodies);
        }
        match self.work(step) {
            Some(Work::Copy { src, dst }) => copy(src, dst),
            Some(Work::Kernel {
                kernel,
                groups,
                bindings,
                info,
                params,
            }) => run_kernel(kernel, || dispatch(kernel, groups, bindings, info, params)),
            None => Err("a conditional was handed to a level".into()),
        }
    }

    /// Run a conditional's bodies as the flag says when it is reached.
    fn run_conditional(
        &self,
        kind: Conditional,
        flag: &Range,
        bodies: &[Program],
    ) -> Result<(), String> {
        let set = || -> Result<bool, String> {
            let bytes = flag.load().ok_or("a conditional's flag is out of range")?;
            let word: [u8; 4] = bytes
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or("a conditional's flag holds fewer than 4 bytes")?;
            Ok(u32::from_le_bytes(word) != 0)
        };
        match (kind, bodies) {
            (Conditional::If, [then]) => {
                if set()? {
                    then.run()?;
                }
                Ok(())
            }
            (Conditional::IfElse, [then, otherwise]) => {
                if set()? {
                    then.run()
                } else {
                    otherwise.run()
                }
            }
            (Conditional::While { bound }, [body]) => {
                for _ in 0..bound {
                    if !set()? {
                        break;
                    }
                    body.run()?;
                }
                Ok(())
            }
            (kind, bodies) => Err(format!(
                "the {} conditional holds {} body(ies)",
                kind.name(),
                bodies.len()
            )),
        }
    }
}

/// `shape` with `word` folded in: a program's shape is its steps' words
/// hashed in order.
fn fold(shape: u64, word: u64) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write_u64(shape);
    hasher.write_u64(word);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Memory, PageKind};
    use crate::schedule::SPREAD_BYTES;
    use std::sync::Arc;

    fn deps(nodes: usize, edges: &[(usize, usize)]) -> Dependencies {
        Dependencies {
            nodes,
            edges: edges.to_vec(),
            ..Dependencies::default()
        }
    }

    fn copies(memory: &Arc<Memory>, n: usize) -> Program {
        let mut program = Program::default();
        (0..n).for_each(|_| program.push(copy_op(memory)));
        program
    }

    fn conditional(memory: &Arc<Memory>, kind: Conditional, bodies: Vec<Program>) -> Program {
        let mut program = Program::default();
        program.push_conditional(kind, Range::new(memory, 8, 4), bodies);
        program
    }

    fn copy_op(memory: &std::sync::Arc<Memory>) -> Op {
        Op::Copy {
            src: Range::new(memory, 0, 4),
            dst: Range::new(memory, 4, 4),
        }
    }

    #[test]
    fn a_program_sized_like_another_holds_it_and_fits_to_what_it_holds() {
        let memory = Memory::new(PageKind::Device, 16).expect("a page");
        let mut big = Program::default();
        (0..50).for_each(|_| big.push(copy_op(&memory)));
        assert_eq!(big.size(), (50, 100, 0));
        let mut next = Program::sized_like(big.size());
        assert!(next.steps.capacity() >= 50 && next.ranges.capacity() >= 100);
        next.push(copy_op(&memory));
        next.fit();
        assert_eq!(next.len(), 1);
        assert!(next.steps.capacity() <= 2 && next.ranges.capacity() <= 4);
        big.fit();
        assert!(big.steps.capacity() >= 50, "a full program keeps its room");
        assert!(next.run().is_ok());
    }

    #[test]
    fn shapes_tell_conditionals_apart_by_kind_bound_and_bodies() {
        let memory = Memory::new(PageKind::Device, 16).expect("a page");
        let programs = || {
            [
                conditional(&memory, Conditional::If, vec![copies(&memory, 1)]),
                conditional(&memory, Conditional::If, vec![copies(&memory, 2)]),
                conditional(
                    &memory,
                    Conditional::IfElse,
                    vec![copies(&memory, 1), copies(&memory, 0)],
                ),
                conditional(
                    &memory,
                    Conditional::IfElse,
                    vec![copies(&memory, 0), copies(&memory, 1)],
                ),
                conditional(
                    &memory,
                    Conditional::While { bound: 3 },
                    vec![copies(&memory, 1)],
                ),
                conditional(
                    &memory,
                    Conditional::While { bound: 4 },
                    vec![copies(&memory, 1)],
                ),
                copies(&memory, 1),
            ]
        };
        let (ours, again) = (programs(), programs());
        for (i, a) in ours.iter().enumerate() {
            for (j, b) in again.iter().enumerate() {
                assert_eq!(a.same_shape(b), i == j, "programs {i} and {j}");
            }
        }
        assert!(!copies(&memory, 3).same_shape(&copies(&memory, 2)));
    }

    #[test]
    fn a_released_page_inside_a_body_is_found_and_refuses_the_run() {
        let outer = Memory::new(PageKind::Device, 16).expect("a page");
        let inner = Memory::new(PageKind::Device, 16).expect("a page");
        let mut program = copies(&outer, 1);
        program.push_conditional(
            Conditional::If,
            Range::new(&outer, 8, 4),
            vec![copies(&inner, 1)],
        );
        assert!(program.released().is_none());
        inner.release();
        let released = program.released().expect("the body's page");
        assert!(Arc::ptr_eq(&released.memory, &inner));
        assert!(program.run().is_err());
    }

    #[test]
    fn dependencies_of_another_program_are_refused() {
        let memory = Memory::new(PageKind::Device, 16).expect("a page");
        let mut program = copies(&memory, 2);
        let refused = program.keep_dependencies(&deps(3, &[(0, 1)]));
        assert!(refused.is_err_and(|e| e.contains("3 operation(s) and the recording 2")));
        assert!(program.schedule.is_none());
        program
            .keep_dependencies(&deps(2, &[(0, 1)]))
            .expect("its own");
        assert!(program.schedule.is_some());
    }

    #[test]
    fn a_conditional_runs_alone_beside_a_level_worth_spreading() {
        let half = SPREAD_BYTES / 2;
        let len = usize::try_from(half).expect("fits");
        let halves = |memory: &Arc<Memory>| Op::Copy {
            src: Range::new(memory, 0, half),
            dst: Range::new(memory, half, half),
        };
        let (a, b) = (
            Memory::new(PageKind::Device, 2 * len).expect("a page"),
            Memory::new(PageKind::Device, 2 * len).expect("a page"),
        );
        for memory in [&a, &b] {
            assert!(Range::new(memory, 0, half).store(&vec![7; len]));
        }
        let flag = Memory::new(PageKind::Device, 16).expect("a page");
        assert!(Range::new(&flag, 8, 4).store(&1u32.to_le_bytes()));
        assert!(Range::new(&flag, 0, 4).store(&[9; 4]));
        let mut program = Program::default();
        program.push(halves(&a));
        program.push(halves(&b));
        program.push_conditional(
            Conditional::If,
            Range::new(&flag, 8, 4),
            vec![copies(&flag, 1)],
        );
        // Three independent steps: one level, the copies' bytes enough to
        // spread it were the conditional not there.
        program
            .keep_dependencies(&deps(3, &[]))
            .expect("independent");
        program.run().expect("the level runs step by step");
        for memory in [&a, &b] {
            assert_eq!(Range::new(memory, half, half).load(), Some(vec![7; len]));
        }
        assert_eq!(
            Range::new(&flag, 4, 4).load(),
            Some(vec![9; 4]),
            "the body ran"
        );
    }
}
