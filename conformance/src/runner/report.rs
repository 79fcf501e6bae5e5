//! What a run found, as a person reads it (a line per trial, the failures,
//! libtest's closing line, a table per backend) and as a program reads it
//! (JSON).

use std::fmt::Write as _;
use std::time::Duration;

use graph_capture::DeviceInfo;
use serde_json::{Value, json};

use crate::registry::Validation;

/// The widest a trial line is meant to be: an 80-column terminal's, less
/// the last column (where a terminal may wrap).
pub const LINE_WIDTH: usize = 79;

/// Columns a trial line spends after the name: a space, the outcome, a
/// space, the duration (`FAILED 123.45s`).
const AFTER_NAME: usize = 1 + 6 + 1 + 7;

/// The widest any other line of a run is: a backend's reason for being
/// unavailable (a driver's message, a list of paths tried) wraps under the
/// line that names the backend.
pub const WRAP_WIDTH: usize = 100;

/// `text` broken at spaces into lines of at most [`WRAP_WIDTH`] columns, the
/// lines after the first indented by `indent`; a word too long for a line
/// of its own is cut. A line that fits keeps its spacing as it is.
pub fn wrap(text: &str, indent: &str) -> String {
    let indented = WRAP_WIDTH.saturating_sub(indent.chars().count()).max(1);
    let mut lines: Vec<String> = Vec::new();
    for paragraph in text.split('\n') {
        lines.push(String::new());
        for (index, token) in paragraph.split(' ').enumerate() {
            let (mut word, mut spaced) = (token, index > 0);
            loop {
                let room = if lines.len() == 1 {
                    WRAP_WIDTH
                } else {
                    indented
                };
                let Some(line) = lines.last_mut() else { break };
                let used = line.chars().count();
                let gap = usize::from(spaced);
                if used + gap + word.chars().count() <= room {
                    if gap == 1 {
                        line.push(' ');
                    }
                    line.push_str(word);
                    break;
                }
                if used == 0 {
                    let cut = word
                        .char_indices()
                        .nth(room)
                        .map_or(word.len(), |(at, _)| at);
                    line.push_str(&word[..cut]);
                    word = &word[cut..];
                }
                lines.push(String::new());
                spaced = false;
            }
        }
    }
    lines.join(&format!("\n{indent}"))
}

/// What became of one trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and passed.
    Passed,
    /// It failed (ran and failed, or could not run and had to), saying why.
    Failed(String),
    /// It did not run, for this reason.
    Ignored(String),
}

impl Outcome {
    fn word(&self) -> &'static str {
        match self {
            Outcome::Passed => "ok",
            Outcome::Failed(_) => "FAILED",
            Outcome::Ignored(_) => "ignored",
        }
    }

    fn key(&self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed(_) => "failed",
            Outcome::Ignored(_) => "ignored",
        }
    }

    fn message(&self) -> Option<&str> {
        match self {
            Outcome::Passed => None,
            Outcome::Failed(why) | Outcome::Ignored(why) => Some(why),
        }
    }
}

/// One trial's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `backend::scenario`.
    pub name: String,
    /// The backend it belongs to.
    pub backend: &'static str,
    /// What became of it.
    pub outcome: Outcome,
    /// How long it ran; `None` when it did not run.
    pub duration: Option<Duration>,
    /// What the backend's validation saw during it, if the backend has any.
    pub validation: Option<Validation>,
}

/// What a backend had to run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// This device.
    Available(DeviceInfo),
    /// No device, for this reason.
    Unavailable(String),
    /// Not in this build; the string says how to build it in.
    NotCompiledIn(String),
}

/// One backend of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Its name.
    pub name: &'static str,
    /// What it ran on.
    pub state: State,
}

/// One backend's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Trials that passed.
    pub passed: usize,
    /// Trials that failed.
    pub failed: usize,
    /// Trials ignored.
    pub ignored: usize,
    /// Its trials' durations, summed (trials may have run side by side).
    pub time: Duration,
    /// Validation summed over its trials, when the backend has it; enabled
    /// (and sync) only when every trial had it.
    pub validation: Option<Validation>,
    /// Trials the validation sum covers.
    pub validated: usize,
}

/// Everything a run found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The backends, in the registry's order.
    pub rows: Vec<Row>,
    /// Every selected trial, in the order they finished.
    pub records: Vec<Record>,
    /// Trials the filters left out.
    pub filtered_out: usize,
    /// The run's wall-clock time.
    pub wall: Duration,
}

/// The width to pad trial names to so that their outcomes line up: the
/// longest name, unless that would push a line past [`LINE_WIDTH`] (then a
/// longer name only widens its own line).
pub fn name_width<'a>(names: impl IntoIterator<Item = &'a str>) -> usize {
    names
        .into_iter()
        .map(|name| name.chars().count())
        .max()
        .unwrap_or(0)
        .min(LINE_WIDTH - AFTER_NAME)
}

/// The line printed when a trial finishes:
/// `host::replay_matches_eager   ok       0.02s`.
pub fn trial_line(name: &str, outcome: &Outcome, duration: Duration, width: usize) -> String {
    format!(
        "{name:<width$} {:<6} {:>6.2}s",
        outcome.word(),
        duration.as_secs_f64()
    )
}

/// The one line for a backend whose `count` selected trials all share one
/// outcome without running: `cuda: 57 trials ignored, unavailable: ...`.
pub fn group_line(backend: &str, count: usize, outcome: &Outcome) -> String {
    let trials = if count == 1 { "trial" } else { "trials" };
    let line = match outcome.message() {
        Some(why) => format!("{backend}: {count} {trials} {}, {why}", outcome.word()),
        None => format!("{backend}: {count} {trials} {}", outcome.word()),
    };
    wrap(&line, "  ")
}

/// The line naming the device a backend runs its trials on (its driver is
/// in the table).
pub fn device_line(backend: &str, count: usize, info: &DeviceInfo) -> String {
    let trials = if count == 1 { "trial" } else { "trials" };
    format!(
        "{backend}: {count} {trials}, device {}: {}",
        info.index, info.name
    )
}

/// Each library a backend tried, with the loader's answer (`None`: it
/// loaded), as lines under its device listing.
pub fn attempts<'a>(tried: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> String {
    let mut out = String::new();
    for (path, error) in tried {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                &format!("  tried {path}: {}", error.unwrap_or("loaded")),
                "    "
            )
        );
    }
    out
}

/// `--devices`' lines for one backend: every device it sees, the one it
/// opens by default marked `*` (or why that one does not open), or why it
/// sees none.
pub fn device_listing(
    backend: &str,
    devices: &Result<Vec<DeviceInfo>, String>,
    default: &Result<usize, String>,
) -> String {
    let mut out = String::new();
    match devices {
        Err(why) => {
            let _ = writeln!(
                out,
                "{}",
                wrap(&format!("{backend}: no devices: {why}"), "  ")
            );
        }
        Ok(devices) if devices.is_empty() => {
            let _ = writeln!(out, "{backend}: no devices: the driver sees none");
        }
        Ok(devices) => {
            let n = devices.len();
            let plural = if n == 1 { "" } else { "s" };
            let _ = writeln!(out, "{backend}: {n} device{plural} (* opens by default)");
            for info in devices {
                let mark = if default.as_ref().ok() == Some(&info.index) {
                    '*'
                } else {
                    ' '
                };
                let kind = if info.kind.is_empty() {
                    "-"
                } else {
                    &info.kind
                };
                let line = format!(
                    "  {mark}{:>2}  {}; {kind}, {}, driver {}",
                    info.index,
                    info.name,
                    memory(info.memory_bytes),
                    info.driver_version,
                );
                let _ = writeln!(out, "{}", wrap(&line, "      "));
            }
            if let Err(why) = default {
                let line = format!("  the default device does not open: {why}");
                let _ = writeln!(out, "{}", wrap(&line, "    "));
            }
        }
    }
    out
}

/// A memory size as a person reads it.
fn memory(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    // Precision beyond 2^53 bytes does not matter for a size shown to a
    // person.
    #[allow(clippy::cast_precision_loss)]
    let mib = bytes as f64 / MIB;
    match bytes {
        0 => "memory not reported".to_string(),
        _ if mib >= 1024.0 => format!("{:.1} GiB", mib / 1024.0),
        _ => format!("{mib:.0} MiB"),
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.2}s", duration.as_secs_f64())
}

impl Report {
    /// The counts of backend `name`.
    pub fn tally(&self, name: &str) -> Tally {
        let mut tally = Tally::default();
        for record in self.records.iter().filter(|r| r.backend == name) {
            match record.outcome {
                Outcome::Passed => tally.passed += 1,
                Outcome::Failed(_) => tally.failed += 1,
                Outcome::Ignored(_) => tally.ignored += 1,
            }
            tally.time += record.duration.unwrap_or_default();
            if let Some(v) = record.validation {
                let sum = tally.validation.get_or_insert(Validation {
                    enabled: true,
                    sync: true,
                    ..Validation::default()
                });
                sum.enabled &= v.enabled;
                sum.sync &= v.sync;
                sum.errors += v.errors;
                sum.warnings += v.warnings;
                tally.validated += 1;
            }
        }
        tally
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.records.iter().filter(|r| f(&r.outcome)).count()
    }

    /// Whether any trial failed.
    pub fn failed(&self) -> bool {
        self.count(|o| matches!(o, Outcome::Failed(_))) > 0
    }

    /// libtest's closing line, the one CI's log reader looks for:
    /// `test result: ok. 57 passed; 0 failed; 0 ignored; ...`.
    pub fn result_line(&self) -> String {
        format!(
            "test result: {}. {} passed; {} failed; {} ignored; 0 measured; \
             {} filtered out; finished in {}",
            if self.failed() { "FAILED" } else { "ok" },
            self.count(|o| matches!(o, Outcome::Passed)),
            self.count(|o| matches!(o, Outcome::Failed(_))),
            self.count(|o| matches!(o, Outcome::Ignored(_))),
            self.filtered_out,
            seconds(self.wall),
        )
    }

    /// libtest's failures section: each failure's message, then their
    /// names; the trials of a backend that failed without running, once.
    /// Empty when nothing failed.
    pub fn failures(&self) -> String {
        let mut sections = Vec::new();
        let mut names = Vec::new();
        // Failures that did not run, by backend and reason: the first
        // name and how many.
        let mut unrun: Vec<(&str, &str, &str, usize)> = Vec::new();
        for record in &self.records {
            let Outcome::Failed(why) = &record.outcome else {
                continue;
            };
            if record.duration.is_some() {
                sections.push(format!("---- {} ----\n{why}\n", record.name));
                names.push(format!("    {}", record.name));
            } else {
                match unrun
                    .iter_mut()
                    .find(|(b, w, _, _)| *b == record.backend && *w == why)
                {
                    Some((_, _, _, n)) => *n += 1,
                    None => unrun.push((record.backend, why, &record.name, 1)),
                }
            }
        }
        for (backend, why, first, n) in unrun {
            if n == 1 {
                sections.push(format!("---- {first} (not run) ----\n{why}\n"));
                names.push(format!("    {first}"));
            } else {
                sections.push(format!(
                    "---- {backend} ({n} trials, not run) ----\n{why}\n"
                ));
                names.push(format!("    {backend}::* ({n} trials)"));
            }
        }
        if sections.is_empty() {
            return String::new();
        }
        format!(
            "\nfailures:\n\n{}\nfailures:\n{}\n",
            sections.join("\n"),
            names.join("\n")
        )
    }

    /// The table per backend, why each unavailable one is, and each
    /// validation tally.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| backend | device | driver | passed | failed | ignored | time |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
        let mut notes = Vec::new();
        for row in &self.rows {
            let t = self.tally(row.name);
            let (device, driver) = match &row.state {
                State::Available(info) => (
                    format!("{}: {}", info.index, info.name),
                    info.driver_version.clone(),
                ),
                State::Unavailable(why) => {
                    notes.push(wrap(&format!("- {} unavailable: {why}", row.name), "  "));
                    ("unavailable (below)".to_string(), "-".to_string())
                }
                State::NotCompiledIn(how) => (format!("not compiled in ({how})"), "-".to_string()),
            };
            let time = match row.state {
                State::NotCompiledIn(_) => "-".to_string(),
                _ => seconds(t.time),
            };
            let _ = writeln!(
                out,
                "| {} | {device} | {driver} | {} | {} | {} | {time} |",
                row.name, t.passed, t.failed, t.ignored,
            );
        }
        if !notes.is_empty() {
            let _ = writeln!(out, "\n{}", notes.join("\n"));
        }
        for row in &self.rows {
            let t = self.tally(row.name);
            if let Some(v) = t.validation {
                let state = match (v.enabled, v.sync) {
                    (false, _) => "off (layer missing or disabled)",
                    (true, false) => "on",
                    (true, true) => "on, with synchronization validation",
                };
                let line = format!(
                    "{} validation: {state}; {} error(s), {} warning(s) over {} trial(s)",
                    row.name, v.errors, v.warnings, t.validated
                );
                let _ = writeln!(out, "\n{}", wrap(&line, "  "));
            }
        }
        out
    }

    /// The report as JSON: the totals, a `backends` entry per table row
    /// and a `trials` entry per selected trial.
    pub fn json(&self) -> Value {
        let backends: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                let t = self.tally(row.name);
                let (state, reason, info) = match &row.state {
                    State::Available(info) => ("available", None, Some(info)),
                    State::Unavailable(why) => ("unavailable", Some(why.clone()), None),
                    State::NotCompiledIn(how) => {
                        ("not compiled in", Some(format!("build with {how}")), None)
                    }
                };
                json!({
                    "name": row.name,
                    "state": state,
                    "reason": reason,
                    "device": info.map(|i| i.name.clone()),
                    "driver": info.map(|i| i.driver_version.clone()),
                    "index": info.map(|i| i.index),
                    "kind": info.map(|i| i.kind.clone()),
                    "memory_bytes": info.map(|i| i.memory_bytes),
                    "passed": t.passed,
                    "failed": t.failed,
                    "ignored": t.ignored,
                    "seconds": t.time.as_secs_f64(),
                    "validation": t.validation.map(|v| json!({
                        "enabled": v.enabled,
                        "sync": v.sync,
                        "errors": v.errors,
                        "warnings": v.warnings,
                        "trials": t.validated,
                    })),
                })
            })
            .collect();
        let trials: Vec<Value> = self
            .records
            .iter()
            .map(|r| {
                let scenario = r
                    .name
                    .strip_prefix(r.backend)
                    .and_then(|rest| rest.strip_prefix("::"))
                    .unwrap_or(&r.name);
                json!({
                    "name": r.name,
                    "backend": r.backend,
                    "scenario": scenario,
                    "outcome": r.outcome.key(),
                    "ran": r.duration.is_some(),
                    "seconds": r.duration.unwrap_or_default().as_secs_f64(),
                    "message": r.outcome.message(),
                })
            })
            .collect();
        json!({
            "result": if self.failed() { "failed" } else { "ok" },
            "passed": self.count(|o| matches!(o, Outcome::Passed)),
            "failed": self.count(|o| matches!(o, Outcome::Failed(_))),
            "ignored": self.count(|o| matches!(o, Outcome::Ignored(_))),
            "filtered_out": self.filtered_out,
            "seconds": self.wall.as_secs_f64(),
            "backends": backends,
            "trials": trials,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{
        LINE_WIDTH, Outcome, Record, Report, Row, State, WRAP_WIDTH, attempts, group_line,
        name_width, trial_line, wrap,
    };
    use graph_capture::DeviceInfo;
    use std::time::Duration;

    fn record(name: &str, backend: &'static str, outcome: Outcome, ran: bool) -> Record {
        Record {
            name: name.into(),
            backend,
            outcome,
            duration: ran.then(|| Duration::from_millis(250)),
            validation: None,
        }
    }

    #[test]
    fn attempts_say_what_each_library_answered() {
        let lines = attempts([("/a/libx.so", Some("not there")), ("libx.so", None)]);
        assert_eq!(
            lines,
            "  tried /a/libx.so: not there\n  tried libx.so: loaded\n"
        );
        assert!(attempts([]).is_empty());
    }

    #[test]
    fn a_trial_line_fits_80_columns_and_lines_up() {
        let long = format!("vulkan::{}", "a".repeat(53));
        let width = name_width([long.as_str(), "host::x"]);
        let line = trial_line(
            &long,
            &Outcome::Failed("x".into()),
            Duration::from_secs(123),
            width,
        );
        assert!(line.chars().count() <= LINE_WIDTH, "{line}");
        let short = trial_line(
            "host::x",
            &Outcome::Passed,
            Duration::from_millis(20),
            width,
        );
        assert_eq!(short.chars().count(), line.chars().count(), "{short}");
        assert!(
            short.starts_with("host::x ") && short.ends_with("  0.02s"),
            "{short}"
        );
        let huge = "h".repeat(200);
        assert_eq!(name_width([huge.as_str()]), LINE_WIDTH - 15);
    }

    #[test]
    fn a_group_says_the_reason_once() {
        let line = group_line(
            "cuda",
            57,
            &Outcome::Ignored("unavailable: no driver".into()),
        );
        assert_eq!(line, "cuda: 57 trials ignored, unavailable: no driver");
    }

    #[test]
    fn failures_name_each_run_failure_and_each_unrun_backend_once() {
        let report = Report {
            records: vec![
                record("host::a", "host", Outcome::Failed("wrong".into()), true),
                record(
                    "cuda::a",
                    "cuda",
                    Outcome::Failed("no device".into()),
                    false,
                ),
                record(
                    "cuda::b",
                    "cuda",
                    Outcome::Failed("no device".into()),
                    false,
                ),
                record("host::b", "host", Outcome::Passed, true),
            ],
            ..Report::default()
        };
        let text = report.failures();
        assert_eq!(text.matches("no device").count(), 1, "{text}");
        assert!(text.contains("---- host::a ----\nwrong"), "{text}");
        assert!(text.contains("    cuda::* (2 trials)"), "{text}");
        assert!(
            report
                .result_line()
                .starts_with("test result: FAILED. 1 passed; 3 failed; 0 ignored;")
        );
    }

    #[test]
    fn long_lines_wrap_under_their_first_at_word_breaks() {
        let reason = "no HIP device: hipGetDeviceCount answered hipErrorNoDevice (100): \
                      no ROCm-capable device is detected; tried /opt/rocm/lib/libamdhip64.so, \
                      /usr/lib/x86_64-linux-gnu/libamdhip64.so.5 and the loader path";
        let line = group_line(
            "hip",
            71,
            &Outcome::Ignored(format!("unavailable: {reason}")),
        );
        let lines: Vec<_> = line.lines().collect();
        assert!(lines.len() > 1, "{line}");
        assert!(lines[0].starts_with("hip: 71 trials ignored, unavailable: no HIP"));
        for rest in &lines[1..] {
            assert!(rest.starts_with("  ") && !rest.starts_with("   "), "{line}");
        }
        assert!(
            lines.iter().all(|l| l.chars().count() <= WRAP_WIDTH),
            "{line}"
        );
        let words: Vec<_> = line.split_whitespace().collect();
        let want: Vec<_> = format!("hip: 71 trials ignored, unavailable: {reason}")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert_eq!(words, want, "no word is lost or broken");
        // A word longer than a line is cut; a short text stays one line.
        let long = wrap(&"x".repeat(250), "  ");
        assert_eq!(
            long.lines().map(str::len).collect::<Vec<_>>(),
            [100, 100, 54]
        );
        assert_eq!(wrap("a b", "  "), "a b");
        assert_eq!(wrap("  * 0  host", "    "), "  * 0  host", "spacing kept");
        assert_eq!(wrap("why:\nlog line", "  "), "why:\n  log line");
        assert_eq!(wrap("", "  "), "");
    }

    #[test]
    fn the_table_keeps_reasons_out_of_its_rows() {
        let reason = "r".repeat(300);
        let report = Report {
            rows: vec![
                Row {
                    name: "host",
                    state: State::Available(DeviceInfo::new("cpu", "1.0")),
                },
                Row {
                    name: "cuda",
                    state: State::Unavailable(reason.clone()),
                },
            ],
            records: vec![
                record("host::a", "host", Outcome::Passed, true),
                record("cuda::a", "cuda", Outcome::Ignored(reason.clone()), false),
            ],
            ..Report::default()
        };
        let table = report.table();
        let rows: Vec<_> = table.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 4, "{table}");
        assert!(rows.iter().all(|l| !l.contains("rr")), "{table}");
        // Once under the table, wrapped under its backend.
        let notes: String = table.lines().filter(|l| !l.starts_with('|')).collect();
        assert_eq!(notes.matches('r').count(), 300, "{table}");
        assert!(table.contains("- cuda unavailable:\n  rrr"), "{table}");
        assert!(
            table.lines().all(|l| l.chars().count() <= WRAP_WIDTH),
            "{table}"
        );
        assert!(rows[2].contains("| 1 | 0 | 0 | 0.25s |"), "{table}");
        let json = report.json();
        assert_eq!(json["backends"][1]["ignored"], 1);
        assert_eq!(json["trials"][1]["scenario"], "a");
        assert_eq!(json["trials"][1]["ran"], false);
    }
}
