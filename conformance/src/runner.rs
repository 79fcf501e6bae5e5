//! The runner shared by the binary and the `[[test]]` target: one trial per
//! scenario per backend, named `backend::scenario`, a line per trial as it
//! finishes (one line for a backend whose trials cannot run), libtest's
//! closing line, then a table per backend.
//!
//! Its command line is libtest's (filters, `--exact`, `--skip`, `--list`,
//! `--ignored`, `--test-threads`, ...) plus `--devices`, `--backend`,
//! `--device` and `--json`; see [`cli::USAGE`].

pub mod cli;
pub mod report;

use std::io::Write as _;
use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Instant;

use graph_capture::{Driver, DriverError, ReplayOrder};

use crate::registry::{self, AfterTrial, Validation, Visit, each_backend};
use crate::scenarios::{Scenario, scenarios};
use crate::session::Session;
use cli::{Options, USAGE};
use report::{Outcome, Record, Report, Row, State};

/// Variable listing backends whose unavailability is a failure, not a skip.
pub const REQUIRE_VAR: &str = "CONFORMANCE_REQUIRE";

/// The exit code of a run with a failed trial (libtest's).
const FAILED_EXIT: u8 = 101;

/// The exit code of a command line the runner cannot follow.
const USAGE_EXIT: u8 = 2;

/// The backends named in `CONFORMANCE_REQUIRE`.
pub fn required() -> Vec<String> {
    std::env::var(REQUIRE_VAR)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Which device a trial opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Open {
    /// The backend's default: the one its `DEVICE_ENV` names, or its first.
    #[default]
    Default,
    /// The device at this index of [`Driver::devices`].
    Index(usize),
}

impl Open {
    /// Open the device this names.
    pub fn open<D: Driver>(self) -> Result<Arc<D::Device>, DriverError> {
        match self {
            Open::Default => D::open(),
            Open::Index(index) => D::open_index(index),
        }
    }
}

/// What running one trial found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialRun {
    /// `Err` says why it failed.
    pub result: Result<(), String>,
    /// What the backend's validation saw, if it has any.
    pub validation: Option<Validation>,
}

type Body = Box<dyn FnOnce() -> TrialRun + Send>;

/// One scenario on one backend, ready to run.
pub struct Trial {
    name: String,
    backend: &'static str,
    body: Body,
}

impl Trial {
    /// `backend::scenario`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The backend it runs on.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// Run it: a panic anywhere in it is a failure, never the caller's.
    pub fn run(self) -> TrialRun {
        catch_unwind(AssertUnwindSafe(self.body)).unwrap_or_else(|payload| TrialRun {
            result: Err(format!("panicked: {}", panic_message(&*payload))),
            validation: None,
        })
    }
}

impl std::fmt::Debug for Trial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trial").field("name", &self.name).finish()
    }
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
fn run_trial<D: AfterTrial>(scenario: Scenario<D>, open: Open, order: ReplayOrder) -> TrialRun {
    let device = match open.open::<D>() {
        Ok(device) => device,
        Err(err) => {
            return TrialRun {
                result: Err(format!("opening the device: {err}")),
                validation: None,
            };
        }
    };
    let session = Session::<D>::keeping(device.clone(), order);
    let outcome = catch_unwind(AssertUnwindSafe(|| (scenario.run)(&session)))
        .unwrap_or_else(|payload| Err(format!("panicked: {}", panic_message(&*payload))));
    drop(session);
    let after = D::after_trial(&device);
    TrialRun {
        result: outcome.and(after),
        validation: D::validation(&device),
    }
}

/// Every scenario as a trial of backend `D`, each opening the device `open`
/// names.
///
/// Each scenario runs twice: its graphs kept as dependency graphs
/// (`host::<name>`), then as chains (`host::chain::<name>`), so that every
/// replay is shown to give the same values either way.
pub fn trials<D: AfterTrial>(open: Open) -> Vec<Trial> {
    let both = [
        (ReplayOrder::Dependencies, ""),
        (ReplayOrder::Chain, "chain::"),
    ];
    both.into_iter()
        .flat_map(|(order, prefix)| {
            scenarios::<D>().into_iter().map(move |scenario| Trial {
                name: format!("{}::{prefix}{}", D::NAME, scenario.name),
                backend: D::NAME,
                body: Box::new(move || run_trial::<D>(scenario, open, order)),
            })
        })
        .collect()
}

/// A scenario's name and what it found.
pub type ScenarioResult = (&'static str, Result<(), String>);

/// Run every scenario on `D`'s default device and return each result, for
/// a backend outside this workspace that wants the suite without the
/// runner. `Err` when the backend has no device, with the reason.
pub fn run_all<D: AfterTrial>() -> Result<Vec<ScenarioResult>, String> {
    if let Err(err) = D::open() {
        return Err(err.message);
    }
    Ok(scenarios::<D>()
        .into_iter()
        .map(|scenario| {
            (
                scenario.name,
                run_trial::<D>(scenario, Open::Default, ReplayOrder::default()).result,
            )
        })
        .collect())
}

/// Parse the command line, run what it selects, print what was found; the
/// exit code is the run's (101 when a trial failed, 2 for a command line it
/// cannot follow).
pub fn main() -> ExitCode {
    let options = match cli::parse(std::env::args_os().skip(1)) {
        Ok(options) => options,
        Err(why) => {
            eprintln!("error: {why}\n\n{USAGE}");
            return ExitCode::from(USAGE_EXIT);
        }
    };
    if options.help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Some(dir) = &options.dot {
        crate::scenarios::write_dot_to(dir.clone());
    }
    if let Err(why) = check_backends(&options) {
        eprintln!("error: {why}");
        return ExitCode::from(USAGE_EXIT);
    }
    if options.devices {
        let mut lister = Lister {
            options: &options,
            listings: Vec::new(),
        };
        each_backend(&mut lister);
        for known in registry::backends() {
            if !options.selects_backend(known.name) {
                continue;
            }
            match lister.listings.iter().find(|(name, _)| *name == known.name) {
                Some((_, listing)) => print!("{listing}"),
                None => println!("{}: not compiled in ({})", known.name, known.how_to_build()),
            }
        }
        return ExitCode::SUCCESS;
    }
    run(&options, &required())
}

/// Every `--backend` name is a backend this build has.
fn check_backends(options: &Options) -> Result<(), String> {
    for name in &options.backends {
        match registry::backend(name) {
            None => {
                let known: Vec<_> = registry::backends().iter().map(|b| b.name).collect();
                return Err(format!(
                    "--backend {name}: no such backend (this build knows {})",
                    known.join(", ")
                ));
            }
            Some(known) if !known.compiled_in => {
                return Err(format!(
                    "--backend {name}: not compiled in; build with {}",
                    known.how_to_build()
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// `--devices`: every selected backend's devices.
struct Lister<'a> {
    options: &'a Options,
    /// Each compiled-in backend's lines.
    listings: Vec<(&'static str, String)>,
}

impl Visit for Lister<'_> {
    fn visit<D: AfterTrial>(&mut self) {
        if !self.options.selects_backend(D::NAME) {
            return;
        }
        let devices = D::devices().map_err(|err| err.message);
        let default = match &devices {
            Ok(list) if !list.is_empty() => D::open()
                .map(|device| D::device_info(&device).index)
                .map_err(|err| err.message),
            _ => Err(String::new()),
        };
        let mut listing = report::device_listing(D::NAME, &devices, &default);
        listing.push_str(&libraries_tried(D::NAME));
        self.listings.push((D::NAME, listing));
    }
}

/// The libraries `backend` looked for and what each answered, for the device
/// listing: its unavailability reason names none of them.
fn libraries_tried(backend: &str) -> String {
    #[cfg(feature = "hip")]
    if backend == <graph_capture::Hip as graph_capture::Driver>::NAME {
        return report::attempts(
            graph_capture::hip::library_search()
                .iter()
                .map(|attempt| (attempt.path.as_str(), attempt.error.as_deref())),
        );
    }
    let _ = backend;
    String::new()
}

/// One compiled-in backend's part of a run.
struct Plan {
    name: &'static str,
    /// What it has to run on; `None` when not asked (`--list`).
    state: Option<State>,
    trials: Vec<Trial>,
}

/// Builds each selected backend's [`Plan`].
struct Planner<'a> {
    options: &'a Options,
    probe: bool,
    plans: Vec<Plan>,
}

impl Visit for Planner<'_> {
    fn visit<D: AfterTrial>(&mut self) {
        if !self.options.selects_backend(D::NAME) {
            return;
        }
        let open = self.options.device.map_or(Open::Default, Open::Index);
        let state = self.probe.then(|| match open.open::<D>() {
            Ok(device) => State::Available(D::device_info(&device)),
            Err(err) => State::Unavailable(err.message),
        });
        self.plans.push(Plan {
            name: D::NAME,
            state,
            trials: trials::<D>(open),
        });
    }
}

/// Why a backend's unavailability fails the run, when it does.
fn requirement(options: &Options, required: &[String], name: &str) -> Option<&'static str> {
    if required.iter().any(|r| r == name) {
        Some(REQUIRE_VAR)
    } else if options.backends.iter().any(|b| b == name) {
        Some("--backend")
    } else {
        None
    }
}

fn run(options: &Options, required: &[String]) -> ExitCode {
    let start = Instant::now();
    let mut planner = Planner {
        options,
        probe: !options.list || options.ignored,
        plans: Vec::new(),
    };
    each_backend(&mut planner);

    let mut rows = Vec::new();
    // Trials decided without running, and the lines announcing each
    // backend's part.
    let mut decided: Vec<Record> = Vec::new();
    let mut headlines = Vec::new();
    let mut runnable = Vec::new();
    let mut listed = Vec::new();
    let mut filtered_out = 0;
    for plan in planner.plans {
        let (selected, left_out): (Vec<_>, Vec<_>) = plan
            .trials
            .into_iter()
            .partition(|trial| options.selects(trial.name()));
        filtered_out += left_out.len();
        let Some(state) = plan.state else {
            listed.extend(selected.iter().map(|t| t.name().to_string()));
            continue;
        };
        match &state {
            State::Available(info) => {
                if options.ignored {
                    // None of these trials is ignored.
                    filtered_out += selected.len();
                } else {
                    if !selected.is_empty() {
                        headlines.push(report::device_line(plan.name, selected.len(), info));
                    }
                    runnable.extend(selected);
                }
            }
            State::Unavailable(why) => {
                let outcome = match requirement(options, required, plan.name) {
                    Some(by) => Outcome::Failed(format!("required ({by}) but unavailable: {why}")),
                    None => Outcome::Ignored(format!("unavailable: {why}")),
                };
                if options.ignored && matches!(outcome, Outcome::Failed(_)) {
                    filtered_out += selected.len();
                } else {
                    if !selected.is_empty() {
                        headlines.push(report::group_line(plan.name, selected.len(), &outcome));
                    }
                    listed.extend(selected.iter().map(|t| t.name().to_string()));
                    decided.extend(selected.into_iter().map(|trial| Record {
                        name: trial.name,
                        backend: trial.backend,
                        outcome: outcome.clone(),
                        duration: None,
                        validation: None,
                    }));
                }
            }
            State::NotCompiledIn(_) => {}
        }
        rows.push(Row {
            name: plan.name,
            state,
        });
    }

    // A required backend this build lacks fails a trial of its own.
    for name in required {
        let known = registry::backend(name);
        if known.is_some_and(|k| k.compiled_in) || !options.selects_backend(name) {
            continue;
        }
        let trial = format!("{name}::compiled_in");
        if !options.selects(&trial) || options.ignored {
            filtered_out += 1;
            continue;
        }
        let why = match known {
            Some(known) => format!(
                "{name} is required ({REQUIRE_VAR}) but not compiled in: build with {}",
                known.how_to_build()
            ),
            None => format!("{name} is required ({REQUIRE_VAR}) but no backend has that name"),
        };
        if !options.list {
            headlines.push(format!("{trial} FAILED, {why}"));
        }
        decided.push(Record {
            name: trial,
            // The report's rows are the registry's backends; an unknown
            // name has none.
            backend: known.map_or("", |k| k.name),
            outcome: Outcome::Failed(why),
            duration: None,
            validation: None,
        });
    }

    if options.list {
        let mut out = std::io::stdout().lock();
        let names = if options.ignored {
            decided
                .iter()
                .filter(|r| matches!(r.outcome, Outcome::Ignored(_)))
                .map(|r| r.name.clone())
                .collect()
        } else {
            listed.extend(decided.iter().map(|r| r.name.clone()));
            listed
        };
        for name in names {
            let _ = writeln!(out, "{name}: test");
        }
        return ExitCode::SUCCESS;
    }

    if options.backends.is_empty() {
        // Every backend this build knows has a row, in the registry's order.
        let mut all = Vec::new();
        for known in registry::backends() {
            match rows.iter().position(|row: &Row| row.name == known.name) {
                Some(at) => all.push(rows.swap_remove(at)),
                None if !known.compiled_in => all.push(Row {
                    name: known.name,
                    state: State::NotCompiledIn(known.how_to_build()),
                }),
                None => {}
            }
        }
        rows = all;
    }

    let total = decided.len() + runnable.len();
    println!(
        "\nrunning {total} test{}",
        if total == 1 { "" } else { "s" }
    );
    for line in &headlines {
        println!("{line}");
    }
    let width = report::name_width(runnable.iter().map(Trial::name));
    let mut records = decided;
    run_trials(runnable, threads(options), |record| {
        if !options.quiet {
            let duration = record.duration.unwrap_or_default();
            println!(
                "{}",
                report::trial_line(&record.name, &record.outcome, duration, width)
            );
        }
        records.push(record);
    });

    let report = Report {
        rows,
        records,
        filtered_out,
        wall: start.elapsed(),
    };
    print!("{}", report.failures());
    println!("\n{}\n", report.result_line());
    print!("{}", report.table());
    let mut failed = report.failed();
    if let Some(path) = &options.json {
        let written = serde_json::to_string_pretty(&report.json())
            .map_err(|err| err.to_string())
            .and_then(|text| std::fs::write(path, text + "\n").map_err(|err| err.to_string()));
        if let Err(why) = written {
            eprintln!("error: writing {}: {why}", path.display());
            failed = true;
        }
    }
    if failed {
        ExitCode::from(FAILED_EXIT)
    } else {
        ExitCode::SUCCESS
    }
}

fn threads(options: &Options) -> usize {
    options
        .test_threads
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get)
}

/// Run `trials` on up to `threads` threads, handing each record to `done`
/// on this thread as its trial finishes.
fn run_trials(trials: Vec<Trial>, threads: usize, mut done: impl FnMut(Record)) {
    let threads = threads.clamp(1, trials.len().max(1));
    let queue = Mutex::new(trials.into_iter());
    let (sender, receiver) = mpsc::channel();
    std::thread::scope(|scope| {
        let mut spawned = 0;
        for index in 0..threads {
            let sender = sender.clone();
            let queue = &queue;
            let worker = std::thread::Builder::new()
                .name(format!("trial-{index}"))
                .spawn_scoped(scope, move || work(queue, &sender));
            if worker.is_ok() {
                spawned += 1;
            }
        }
        if spawned == 0 {
            // No thread to spare: run them here, reporting at the end.
            work(&queue, &sender);
        }
        drop(sender);
        for record in receiver {
            done(record);
        }
    });
}

/// Take trials off `queue` until it is empty, sending each one's record.
fn work(queue: &Mutex<std::vec::IntoIter<Trial>>, sender: &mpsc::Sender<Record>) {
    loop {
        let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
        let Some(trial) = next else {
            return;
        };
        let name = trial.name.clone();
        let backend = trial.backend;
        let started = Instant::now();
        let run = trial.run();
        let record = Record {
            name,
            backend,
            outcome: match run.result {
                Ok(()) => Outcome::Passed,
                Err(why) => Outcome::Failed(why),
            },
            duration: Some(started.elapsed()),
            validation: run.validation,
        };
        if sender.send(record).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::report::Outcome;
    use super::{Open, Trial, TrialRun, run_trials, trials};

    fn trial(name: &str, body: impl FnOnce() -> TrialRun + Send + 'static) -> Trial {
        Trial {
            name: name.into(),
            backend: "host",
            body: Box::new(body),
        }
    }

    #[test]
    fn every_trial_reports_once_whatever_it_does() {
        let list = vec![
            trial("host::ok", || TrialRun {
                result: Ok(()),
                validation: None,
            }),
            trial("host::err", || TrialRun {
                result: Err("wrong".into()),
                validation: None,
            }),
            trial("host::panics", || panic!("boom")),
        ];
        for threads in [1, 2, 8] {
            let mut seen = Vec::new();
            run_trials(
                list.iter()
                    .map(|t| {
                        let name = t.name.clone();
                        trial(&t.name, move || TrialRun {
                            result: if name.ends_with("ok") {
                                Ok(())
                            } else {
                                Err(name)
                            },
                            validation: None,
                        })
                    })
                    .collect(),
                threads,
                |record| seen.push(record),
            );
            seen.sort_by(|a, b| a.name.cmp(&b.name));
            let names: Vec<_> = seen.iter().map(|r| r.name.as_str()).collect();
            assert_eq!(names, ["host::err", "host::ok", "host::panics"]);
            assert!(seen.iter().all(|r| r.duration.is_some()));
        }
        let mut seen = Vec::new();
        run_trials(list, 2, |record| seen.push(record));
        let panicked = seen.iter().find(|r| r.name == "host::panics").unwrap();
        assert_eq!(panicked.outcome, Outcome::Failed("panicked: boom".into()));
    }

    #[test]
    fn host_trials_are_named_after_the_backend_and_open_the_device_asked_for() {
        let list = trials::<graph_capture::host::Host>(Open::Index(7));
        assert!(!list.is_empty());
        assert!(list.iter().all(|t| t.name().starts_with("host::")));
        let run = list.into_iter().next().unwrap().run();
        let err = run.result.unwrap_err();
        assert!(
            err.contains("opening the device") && err.contains('7'),
            "{err}"
        );
    }
}
