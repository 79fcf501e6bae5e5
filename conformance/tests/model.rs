//! The whole-API model against every backend compiled in: random programs
//! over every public call of the `Client`, each compared with the model
//! after every operation, a failing one shrunk and printed as code.
//!
//! `MODEL_PROGRAMS`, `MODEL_OPS` and `MODEL_SEED` set the budget;
//! `CONFORMANCE_REQUIRE=host,vulkan` fails a run where a named backend is
//! unavailable rather than skipping it; `MODEL_BACKENDS=vulkan` runs only
//! the backends it names.

use std::process::ExitCode;

use conformance::model::{Budget, Report, as_code, run};
use conformance::registry::{AfterTrial, Visit, each_backend};

/// What the model's panicking bodies panic with: expected, so not printed.
const BODY_PANIC: &str = "the body panics";

/// Programs per backend when `MODEL_PROGRAMS` is unset: about two minutes
/// of CI per backend.
const PROGRAMS: usize = 200;

struct Runner {
    budget: Budget,
    required: Vec<String>,
    only: Vec<String>,
    failed: usize,
    passed: usize,
}

impl Visit for Runner {
    fn visit<D: AfterTrial>(&mut self) {
        if !self.only.is_empty() && !self.only.iter().any(|name| name == D::NAME) {
            println!("model: {}: not in MODEL_BACKENDS", D::NAME);
            return;
        }
        let device = match D::open() {
            Ok(device) => device,
            Err(err) => {
                if self.required.iter().any(|name| name == D::NAME) {
                    println!("model: {}: unavailable and required: {err}", D::NAME);
                    self.failed += 1;
                } else {
                    println!("model: {}: skipped, unavailable: {err}", D::NAME);
                }
                return;
            }
        };
        let report: Report = run::<D>(&device, &self.budget);
        for failure in &report.failures {
            println!(
                "model: {}: seed {} failed at operation {}: {}\n  shrunk to {} operation(s), \
                 failing with: {}\n  reproduce with conformance::model::check_program on:\n{}",
                D::NAME,
                failure.seed,
                failure.at,
                failure.what,
                failure.shrunk.len(),
                failure.shrunk_what,
                as_code(&failure.shrunk)
            );
        }
        println!(
            "model: {}: {} programs, {} operations, {} kinds of operation, {} failed ({:.1}s)",
            D::NAME,
            report.programs,
            report.operations,
            report.kinds.len(),
            report.failures.len(),
            report.time.as_secs_f64()
        );
        let injected: Vec<String> = report
            .injected
            .iter()
            .map(|(primitive, n)| format!("{primitive} {n}"))
            .collect();
        println!(
            "model: {}: faults injected: {}",
            D::NAME,
            injected.join(", ")
        );
        self.failed += report.failures.len();
        self.passed += report.programs - report.failures.len();
    }
}

fn main() -> ExitCode {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&BODY_PANIC) {
            hook(info);
        }
    }));
    let names = |var: &str| -> Vec<String> {
        std::env::var(var)
            .unwrap_or_default()
            .split(',')
            .map(|name| name.trim().to_string())
            .filter(|name| !name.is_empty())
            .collect()
    };
    let required = names("CONFORMANCE_REQUIRE");
    let only = names("MODEL_BACKENDS");
    let budget = Budget::from_env(PROGRAMS);
    println!(
        "model: {} programs of {} operations per backend from seed {}",
        budget.programs, budget.ops, budget.seed
    );
    let mut runner = Runner {
        budget,
        required,
        only,
        failed: 0,
        passed: 0,
    };
    each_backend(&mut runner);
    println!("{} passed, {} failed", runner.passed, runner.failed);
    if runner.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
