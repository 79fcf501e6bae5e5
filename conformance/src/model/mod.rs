//! The whole-API model: random programs over every public call of the
//! `Client`, run on a backend and on a plain-Rust model of what each call
//! means, compared after every operation ([`World`]). Scenarios prove each
//! rule; the model proves the rules still hold where features meet.
//!
//! Programs come from a seed ([`Draw`]); a failing one shrinks to a short
//! program, printed as code that [`check_program`] runs again.

use std::collections::{BTreeMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

pub mod ops;
mod world;

pub use ops::{Cond, Draw, Op, Part, Style, Target, Work, as_code};
pub use world::{Disagreement, ELEMENTS, World};

use crate::registry::AfterTrial;
use crate::session::Session;
use graph_capture::ReplayOrder;

/// How much to run: programs, operations each, and the first seed.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Programs per backend.
    pub programs: usize,
    /// Operations per program.
    pub ops: usize,
    /// The first program's seed; program `i` has seed `seed + i`.
    pub seed: u64,
    /// Runs the shrinker may make of one failing program.
    pub shrink_runs: usize,
    /// Failing programs after which the run stops.
    pub failures: usize,
}

impl Budget {
    /// The budget `MODEL_PROGRAMS`, `MODEL_OPS` and `MODEL_SEED` set, with
    /// `programs` where the first is unset.
    pub fn from_env(programs: usize) -> Self {
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(default)
        };
        Self {
            programs: number("MODEL_PROGRAMS", programs as u64) as usize,
            ops: number("MODEL_OPS", 60) as usize,
            seed: number("MODEL_SEED", 1),
            shrink_runs: number("MODEL_SHRINK_RUNS", 300) as usize,
            failures: number("MODEL_FAILURES", 3) as usize,
        }
    }
}

/// A program that disagreed with the model.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Its seed.
    pub seed: u64,
    /// The operation (from 0) that disagreed.
    pub at: usize,
    /// How.
    pub what: Disagreement,
    /// The shortest failing program the shrinker found.
    pub shrunk: Vec<Op>,
    /// How the shrunk program fails.
    pub shrunk_what: Disagreement,
}

/// What a run of programs on one backend did.
#[derive(Debug, Default)]
pub struct Report {
    /// Programs run.
    pub programs: usize,
    /// Operations run.
    pub operations: usize,
    /// Kinds of operation run.
    pub kinds: HashSet<&'static str>,
    /// Faults injected, per primitive.
    pub injected: BTreeMap<String, u64>,
    /// Programs that disagreed.
    pub failures: Vec<Failure>,
    /// Time taken.
    pub time: Duration,
}

/// Run `program` on a fresh world of `session`, after each operation the
/// backend's own checks (validation); the operation (from 0) that
/// disagreed, and how.
pub fn check_program<D: AfterTrial>(
    session: &Session<D>,
    program: &[Op],
    kinds: &mut HashSet<&'static str>,
    injected: &mut BTreeMap<String, u64>,
) -> Result<(), (usize, Disagreement)> {
    let ran = catch_unwind(AssertUnwindSafe(|| -> Result<(), (usize, Disagreement)> {
        let mut world = World::new(session).map_err(|e| (0, e))?;
        for (at, op) in program.iter().enumerate() {
            world.step(op).map_err(|what| (at, what))?;
        }
        kinds.extend(world.kinds.iter().copied());
        for primitive in crate::faulty::Primitive::ALL {
            let n = world.faults().injected_of(primitive);
            if n > 0 {
                *injected.entry(format!("{primitive:?}")).or_default() += n;
            }
        }
        drop(world);
        D::after_trial(session.device()).map_err(|what| (program.len(), what))
    }));
    match ran {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_default();
            Err((program.len(), format!("a panic: {what}")))
        }
    }
}

/// Run `budget`'s programs on `session`'s device, each in both replay
/// orders in turn, shrinking each one that fails.
pub fn run<D: AfterTrial>(device: &std::sync::Arc<D::Device>, budget: &Budget) -> Report {
    let start = Instant::now();
    let mut report = Report::default();
    for i in 0..budget.programs {
        if report.failures.len() >= budget.failures.max(1) {
            break;
        }
        let seed = budget.seed + i as u64;
        let order = if i % 2 == 0 {
            ReplayOrder::Dependencies
        } else {
            ReplayOrder::Chain
        };
        let session = Session::<D>::keeping(device.clone(), order);
        let program = Draw::new(seed).program(budget.ops);
        report.programs += 1;
        report.operations += program.len();
        if let Err((at, what)) =
            check_program(&session, &program, &mut report.kinds, &mut report.injected)
        {
            let (shrunk, shrunk_what) = shrink(
                &session,
                &program[..=at.min(program.len() - 1)],
                budget.shrink_runs,
            )
            .unwrap_or_else(|| (program.clone(), what.clone()));
            report.failures.push(Failure {
                seed,
                at,
                what,
                shrunk,
                shrunk_what,
            });
        }
    }
    report.time = start.elapsed();
    report
}

/// The shortest failing program found by dropping operations (halves,
/// quarters, ... single ones) and then the work inside captures, while it
/// still fails; `None` if `program` does not fail again.
pub fn shrink<D: AfterTrial>(
    session: &Session<D>,
    program: &[Op],
    runs: usize,
) -> Option<(Vec<Op>, Disagreement)> {
    let mut left = runs;
    let mut sink = HashSet::new();
    let mut fails = |candidate: &[Op]| -> Option<Disagreement> {
        if left == 0 {
            return None;
        }
        left -= 1;
        check_program(session, candidate, &mut sink, &mut BTreeMap::new())
            .err()
            .map(|(_, what)| what)
    };
    let mut what = fails(program)?;
    let mut best = program.to_vec();
    let mut chunk = best.len().div_ceil(2);
    while chunk >= 1 {
        let mut i = 0;
        let mut dropped = false;
        while i < best.len() {
            let mut candidate = best.clone();
            candidate.drain(i..(i + chunk).min(best.len()));
            match fails(&candidate) {
                Some(found) => {
                    best = candidate;
                    what = found;
                    dropped = true;
                }
                None => i += chunk,
            }
        }
        if !dropped {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    // The work inside captures and eager conditionals, one piece at a time.
    let mut at = 0;
    while at < best.len() {
        let mut pieces = 0;
        if let Op::Capture(_, _, works) | Op::Recapture(_, _, works) | Op::Cached(.., works) =
            &best[at]
        {
            pieces = works.len();
        }
        let mut piece = 0;
        while piece < pieces {
            let mut candidate = best.clone();
            if let Op::Capture(_, _, works) | Op::Recapture(_, _, works) | Op::Cached(.., works) =
                &mut candidate[at]
                && works.len() > 1
            {
                works.remove(piece);
            } else {
                break;
            }
            match fails(&candidate) {
                Some(found) => {
                    best = candidate;
                    what = found;
                    pieces -= 1;
                }
                None => piece += 1,
            }
        }
        at += 1;
    }
    Some((best, what))
}
