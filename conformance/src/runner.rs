//! The runner shared by the binary and the `[[test]]` target: one trial per
//! scenario per backend, named `backend::scenario`, then a table per backend.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;
use std::sync::Mutex;

use capture_core::Availability;
use libtest_mimic::{Arguments, Failed, Trial};

use crate::registry::{AfterTrial, KNOWN, Validation, backends};
use crate::scenarios::scenarios;
use crate::session::Session;

/// Variable listing backends whose unavailability is a failure, not a skip.
pub const REQUIRE_VAR: &str = "CONFORMANCE_REQUIRE";

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    passed: usize,
    failed: usize,
    ignored: usize,
    /// Validation over every trial run, when the backend has it.
    validation: Option<Validation>,
    validated_trials: usize,
}

static TALLY: Mutex<BTreeMap<&'static str, Tally>> = Mutex::new(BTreeMap::new());

fn count(backend: &'static str, f: impl FnOnce(&mut Tally)) {
    if let Ok(mut tally) = TALLY.lock() {
        f(tally.entry(backend).or_default());
    }
}

/// The backends named in `CONFORMANCE_REQUIRE`.
pub fn required() -> Vec<String> {
    std::env::var(REQUIRE_VAR)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Run one scenario on a freshly opened device of `D`, then the backend's
/// own checks on that device.
fn run_trial<D: AfterTrial>(scenario: crate::Scenario<D>) -> Result<(), Failed> {
    let device = D::open().map_err(|err| format!("opening the device: {err}"))?;
    let session = Session::<D>::new(device.clone());
    let outcome = catch_unwind(AssertUnwindSafe(|| (scenario.run)(&session)))
        .unwrap_or_else(|payload| Err(format!("panicked: {}", panic_message(&*payload))));
    drop(session);
    let after = D::after_trial(&device);
    if let Some(v) = D::validation(&device) {
        count(D::NAME, |t| {
            let sum = t.validation.get_or_insert(Validation {
                enabled: true,
                sync: true,
                ..Validation::default()
            });
            sum.enabled &= v.enabled;
            sum.sync &= v.sync;
            sum.errors += v.errors;
            sum.warnings += v.warnings;
            t.validated_trials += 1;
        });
    }
    outcome?;
    after?;
    Ok(())
}

/// The trials of backend `D`: runnable when available; ignored with the
/// reason as their kind when not, or failing with it when required.
pub fn trials<D: AfterTrial>(availability: &Availability, required: bool) -> Vec<Trial> {
    scenarios::<D>()
        .into_iter()
        .map(|scenario| {
            let name = format!("{}::{}", D::NAME, scenario.name);
            match availability {
                Availability::Available(_) => Trial::test(name, move || {
                    let result = run_trial::<D>(scenario);
                    count(D::NAME, |t| match result {
                        Ok(()) => t.passed += 1,
                        Err(_) => t.failed += 1,
                    });
                    result
                }),
                Availability::Unavailable(reason) if required => {
                    let reason = format!(
                        "{} is required ({REQUIRE_VAR}) but unavailable: {reason}",
                        D::NAME
                    );
                    Trial::test(name, move || {
                        count(D::NAME, |t| t.failed += 1);
                        Err(reason.into())
                    })
                }
                Availability::Unavailable(reason) => Trial::test(name, || Ok(()))
                    .with_ignored_flag(true)
                    .with_kind(format!("unavailable: {reason}")),
            }
        })
        .collect()
}

/// Whether libtest's filters select `name`, so the table counts what the
/// run covered.
fn selected(args: &Arguments, name: &str) -> bool {
    let matches = |pattern: &str| {
        if args.exact {
            name == pattern
        } else {
            name.contains(pattern)
        }
    };
    args.filter.as_deref().is_none_or(matches) && !args.skip.iter().any(|s| matches(s))
}

/// Parse libtest's arguments, run every trial, print the table; the exit
/// code is the run's.
pub fn main() -> ExitCode {
    let args = Arguments::from_args();
    let required = required();
    let mut all = Vec::new();
    let mut rows = Vec::new();
    for backend in backends() {
        let availability = (backend.probe)();
        let is_required = required.iter().any(|r| r == backend.name);
        let trials = (backend.trials)(&availability, is_required);
        let ignored = trials
            .iter()
            .filter(|t| t.has_ignored_flag() && selected(&args, t.name()))
            .count();
        if !args.include_ignored && !args.ignored {
            count(backend.name, |t| t.ignored += ignored);
        }
        rows.push((backend.name, availability));
        all.extend(trials);
    }
    for name in &required {
        if !rows.iter().any(|(backend, _)| backend == name) {
            let hint = KNOWN
                .iter()
                .find(|(known, _)| known == name)
                .map_or("no such backend".to_string(), |(_, feature)| {
                    format!("build with {feature}")
                });
            let message = format!("{name} is required ({REQUIRE_VAR}) but not compiled in: {hint}");
            all.push(Trial::test(format!("{name}::compiled_in"), move || {
                Err(message.into())
            }));
        }
    }
    let list_only = args.list;
    let conclusion = libtest_mimic::run(&args, all);
    if !list_only {
        print_table(&rows);
    }
    conclusion.exit_code()
}

fn print_table(rows: &[(&'static str, Availability)]) {
    let tally = TALLY.lock().map(|t| t.clone()).unwrap_or_default();
    println!();
    println!("| backend | device | driver | passed | failed | ignored |");
    println!("|---|---|---|---|---|---|");
    for (name, availability) in rows {
        let t = tally.get(name).copied().unwrap_or_default();
        let (device, driver) = match availability {
            Availability::Available(info) => (info.name.clone(), info.driver_version.clone()),
            Availability::Unavailable(reason) => (format!("unavailable: {reason}"), "-".into()),
        };
        println!(
            "| {name} | {device} | {driver} | {} | {} | {} |",
            t.passed, t.failed, t.ignored
        );
    }
    for (name, feature) in KNOWN {
        if !rows.iter().any(|(row, _)| *row == name) {
            println!("| {name} | not compiled in ({feature}) | - | 0 | 0 | 0 |");
        }
    }
    for (name, t) in &tally {
        if let Some(v) = t.validation {
            let state = match (v.enabled, v.sync) {
                (false, _) => "off (layer missing or disabled)",
                (true, false) => "on",
                (true, true) => "on, with synchronization validation",
            };
            println!(
                "\n{name} validation: {state}; {} error(s), {} warning(s) over {} trial(s)",
                v.errors, v.warnings, t.validated_trials
            );
        }
    }
}

/// A scenario's name and what it found.
pub type ScenarioResult = (&'static str, Result<(), String>);

/// Run every scenario on `D`'s device and return each result, for a backend
/// outside this workspace that wants the suite without the runner. `Err`
/// when the backend has no device, with the reason.
pub fn run_all<D: AfterTrial>() -> Result<Vec<ScenarioResult>, String> {
    if let Availability::Unavailable(reason) = D::probe() {
        return Err(reason);
    }
    Ok(scenarios::<D>()
        .into_iter()
        .map(|scenario| {
            let name = scenario.name;
            let result = run_trial::<D>(scenario).map_err(|failed| {
                failed
                    .message()
                    .map_or_else(|| "failed".to_string(), str::to_string)
            });
            (name, result)
        })
        .collect())
}
