//! One backend's report as a markdown table, with the targets judged.

use crate::instructions::{CALLS, Counts};
use crate::report::{ALLOCATION_CALLS, Figure, Report, Sequence};
use conformance::workload::Footprint;

/// Most nanoseconds the core may add to a replay whose raw cost is at most
/// [`RELATIVE_FROM_NS`].
const ADDED_NS: f64 = 100.0;

/// On the host backend, where nothing but the core's bookkeeping sits
/// between a call and the worker's queue, the core may add at most this to
/// a replay...
const HOST_REPLAY_ADDED_NS: f64 = 25.0;

/// ...and at most this to an eager launch.
const HOST_EAGER_ADDED_NS: f64 = 50.0;

/// On the host, the instructions the core may add to a replay on the
/// calling thread, counted by callgrind (stable where nanoseconds are not;
/// the nanosecond figures are then information)...
const HOST_REPLAY_ADDED_INSTRUCTIONS: f64 = 250.0;

/// ...and to an eager launch.
const HOST_EAGER_ADDED_INSTRUCTIONS: f64 = 750.0;

/// Raw replay cost above which the core's share is judged relatively.
const RELATIVE_FROM_NS: f64 = 2000.0;

/// Share the core may add to a replay costing over [`RELATIVE_FROM_NS`].
const ADDED_SHARE: f64 = 0.05;

/// How far capture per launch may grow from N = 100 to N = 10,000 (a drop
/// is fixed per-capture costs spread thinner, not a growth).
const CAPTURE_DRIFT: f64 = 1.5;

/// Most device pool bytes per byte of live buffers, once warm.
pub const RESERVED_PER_LIVE: f64 = 1.25;

/// A pool's reserved bytes against the live buffers' bytes.
pub fn reserved_text(f: &Footprint) -> String {
    format!(
        "{:.2}x ({} reserved, {} live)",
        f.reserved_per_live(),
        bytes(f.reserved_bytes),
        bytes(f.live_bytes)
    )
}

/// A graph's pinned bytes against what its recording touched.
pub fn pinned_text(f: &Footprint) -> String {
    format!(
        "{:.2}x ({} pinned, {} touched)",
        f.pinned_per_touched(),
        bytes(f.pinned_bytes),
        bytes(f.touched_bytes)
    )
}

/// `n` bytes in the largest binary unit that keeps a figure of at least 1.
fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / f64::from(1 << 10)),
        n => format!("{n} B"),
    }
}

/// The launch counts whose capture costs are compared.
const CAPTURE_FROM: u64 = 100;
const CAPTURE_TO: u64 = 10_000;

/// A target and whether it held.
pub struct Verdict {
    /// Whether it held.
    pub pass: bool,
}

struct Row {
    what: String,
    figure: String,
    target: String,
    verdict: Option<bool>,
}

fn row(what: impl Into<String>, figure: impl Into<String>) -> Row {
    Row {
        what: what.into(),
        figure: figure.into(),
        target: String::new(),
        verdict: None,
    }
}

fn judged(what: impl Into<String>, figure: String, target: String, pass: bool) -> Row {
    Row {
        what: what.into(),
        figure,
        target,
        verdict: Some(pass),
    }
}

fn ns(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0} ns")
    } else {
        format!("{value:.1} ns")
    }
}

fn us(value_ns: f64) -> String {
    format!("{:.1} µs", value_ns / 1000.0)
}

fn per_call(figure: &Figure, unit: &str) -> String {
    format!(
        "{} per {unit}, {:.3} allocations per {unit}",
        ns(figure.ns),
        figure.allocations_per_call()
    )
}

fn allocations_added(core: &Figure, raw: &Figure, calls: &str) -> Row {
    let added = i128::from(core.allocations) - i128::from(raw.allocations);
    judged(
        format!("{calls}: heap allocations added by the core"),
        format!(
            "{added:+} in {ALLOCATION_CALLS} calls (core {}, raw {}; fewest of any round)",
            core.allocations, raw.allocations
        ),
        "none".into(),
        added <= 0,
    )
}

/// Render `report` for backend `name`; the verdicts of its targets come back
/// alongside.
pub fn render(
    name: &str,
    report: &Report,
    counts: Option<&Result<Counts, String>>,
) -> (String, Vec<Verdict>) {
    let mut rows = Vec::new();
    // With instructions counted, the host's nanosecond targets are
    // information: the VM moves them by 3x between runs.
    let counted = matches!(counts, Some(Ok(_)));

    // Replay: the abstraction's own cost.
    let (core, raw) = (&report.replay_core, &report.replay_raw);
    rows.push(row(
        "replay, raw `GraphDriver::replay`",
        per_call(raw, "replay"),
    ));
    rows.push(row("replay, capture-core", per_call(core, "replay")));
    // Judged on the fastest repetitions: the core's cost is a constant,
    // while a driver's worker threads sharing the cores add noise of their
    // own to whichever repetition they land in.
    let added = core.fastest - raw.fastest;
    let (limit, limit_text) = if raw.fastest > RELATIVE_FROM_NS {
        (
            raw.fastest * ADDED_SHARE,
            format!(
                "≤ {:.0}% of raw ({})",
                ADDED_SHARE * 100.0,
                ns(raw.fastest * ADDED_SHARE)
            ),
        )
    } else if name == "host" {
        (
            HOST_REPLAY_ADDED_NS,
            format!("≤ {}", ns(HOST_REPLAY_ADDED_NS)),
        )
    } else {
        (ADDED_NS, format!("≤ {}", ns(ADDED_NS)))
    };
    let replay_text = format!(
        "{:+.1} ns fastest to fastest (core/raw {:.3}x); {:+.1} ns median to median",
        added,
        core.fastest / raw.fastest,
        core.ns - raw.ns
    );
    rows.push(if counted {
        row("replay: time added by the core", replay_text)
    } else {
        judged(
            "replay: time added by the core",
            replay_text,
            limit_text,
            added <= limit,
        )
    });
    rows.push(allocations_added(core, raw, "replay"));

    // Eager launch.
    let (core, raw) = (&report.eager_core, &report.eager_raw);
    rows.push(row(
        "eager launch, raw `Driver::launch`",
        per_call(raw, "launch"),
    ));
    rows.push(row("eager launch, capture-core", per_call(core, "launch")));
    let eager_added = core.fastest - raw.fastest;
    let eager_text = format!(
        "{:+.1} ns fastest to fastest (core/raw {:.3}x); {:+.1} ns median to median",
        eager_added,
        core.fastest / raw.fastest,
        core.ns - raw.ns
    );
    rows.push(if name == "host" && !counted {
        judged(
            "eager launch: time added by the core",
            eager_text,
            format!("≤ {}", ns(HOST_EAGER_ADDED_NS)),
            eager_added <= HOST_EAGER_ADDED_NS,
        )
    } else {
        row("eager launch: time added by the core", eager_text)
    });
    rows.push(allocations_added(core, raw, "eager launch"));
    match counts {
        Some(Ok(counts)) => rows.extend(instruction_rows(counts)),
        Some(Err(why)) => rows.push(row(
            "instructions added by the core (callgrind)",
            format!("not counted: {why}; the nanosecond targets judge instead"),
        )),
        None => {}
    }

    // Replay against eager, whole sequences through their final sync.
    let sequence = |seq: &Sequence, label: String| {
        row(
            label,
            format!(
                "{:.2}x (eager {}, replay {} per sequence)",
                seq.eager.ns / seq.replay.ns,
                us(seq.eager.ns),
                us(seq.replay.ns)
            ),
        )
    };
    for seq in &report.sequences {
        rows.push(sequence(seq, format!("eager/replay, N={}", seq.launches)));
    }
    let seq = &report.raw_sequence;
    rows.push(sequence(
        seq,
        format!("eager/replay, N={}, raw driver", seq.launches),
    ));

    // Capture per launch.
    for capture in &report.captures {
        rows.push(row(
            format!("capture, N={}", capture.launches),
            format!(
                "{} per recorded launch (instantiate: {} per launch)",
                ns(capture.record_ns),
                ns(capture.instantiate_ns)
            ),
        ));
    }
    let at = |n: u64| {
        report
            .captures
            .iter()
            .find(|c| c.launches == n)
            .map(|c| c.record_ns)
    };
    if let (Some(from), Some(to)) = (at(CAPTURE_FROM), at(CAPTURE_TO)) {
        let ratio = to / from;
        rows.push(judged(
            format!("capture per launch, N={CAPTURE_TO} / N={CAPTURE_FROM}"),
            format!("{ratio:.2}x"),
            format!("≤ {CAPTURE_DRIFT}x"),
            ratio <= CAPTURE_DRIFT,
        ));
    }

    if let Some(capture) = report.captures.iter().find(|c| c.launches == CAPTURE_TO) {
        let f = &capture.footprint;
        rows.push(judged(
            format!("memory, capture N={CAPTURE_TO}: pool reserved / live buffers"),
            reserved_text(f),
            format!("≤ {RESERVED_PER_LIVE}x"),
            f.reserved_per_live() <= RESERVED_PER_LIVE,
        ));
        rows.push(row(
            format!("memory, capture N={CAPTURE_TO}: graph pins / recording touched"),
            pinned_text(f),
        ));
    }

    let mut out = format!(
        "### {name}: {} (driver {})\n\n| measurement | figure | target | result |\n|---|---|---|---|\n",
        report.device.name, report.device.driver_version
    );
    let mut verdicts = Vec::new();
    for r in rows {
        let result = match r.verdict {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "",
        };
        if let Some(pass) = r.verdict {
            verdicts.push(Verdict { pass });
        }
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.what, r.figure, r.target, result
        ));
    }
    (out, verdicts)
}

/// The core's additions in instructions on the calling thread, judged.
fn instruction_rows(counts: &Counts) -> [Row; 2] {
    let judge = |what: &str, core: f64, raw: f64, limit: f64| {
        let added = core - raw;
        judged(
            format!("{what}: instructions added by the core (callgrind)"),
            format!(
                "{added:+.0} ({core:.0} against {raw:.0} per call, core/raw {:.2}x, {CALLS} calls)",
                core / raw
            ),
            format!("≤ {limit:.0}"),
            added <= limit,
        )
    };
    [
        judge(
            "replay",
            counts.replay_core,
            counts.replay_raw,
            HOST_REPLAY_ADDED_INSTRUCTIONS,
        ),
        judge(
            "eager launch",
            counts.eager_core,
            counts.eager_raw,
            HOST_EAGER_ADDED_INSTRUCTIONS,
        ),
    ]
}
