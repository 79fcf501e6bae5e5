//! The same work through cubecl 0.12 and through graph-capture, in one
//! process, interleaved round by round: cubecl's own graph bench shape (a
//! chain of dependent add-one kernels over two buffers), then four graphs'
//! memory. Prints each row as ours against cubecl's.
//!
//! `cargo run --release --manifest-path peers/Cargo.toml` runs every row;
//! `-- --short` runs one short row (what CI runs), `-- --control` the
//! GPU-bound control row alone; `-- --as-cubecl` runs our side with a kernel
//! shaped as cubecl's generated one, so that the control row compares
//! launches and not kernels. Without a Vulkan device
//! it says why and exits successfully (unless `PEERS_REQUIRE_VULKAN=1`).
//! Vulkan validation is off (set `CAPTURE_VULKAN_VALIDATION` yourself to
//! override).

mod memory;
mod ours;
mod shared;
mod side;
mod theirs;

use std::process::ExitCode;

use ours::Ours;
use shared::measure::{Measure, micros_per};
use shared::rows::{self, Row};
use side::Side;
use theirs::Theirs;

/// Set in the re-run process, so that it knows the variable is its own.
const MARKER: &str = "PEERS_VALIDATION_OFF";
/// Set to `1` to fail, not skip, without a Vulkan device.
const REQUIRE: &str = "PEERS_REQUIRE_VULKAN";

fn main() -> ExitCode {
    let variable = graph_capture::vulkan::VALIDATION_ENV;
    // A process cannot safely change its own environment once threads may
    // run, so it runs itself again with validation off.
    if std::env::var_os(variable).is_none()
        && std::env::var_os(MARKER).is_none()
        && let Ok(exe) = std::env::current_exe()
        && let Ok(status) = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(variable, "0")
            .env(MARKER, "1")
            .status()
    {
        return if status.success() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let short = std::env::args().any(|a| a == "--short");
    let control = std::env::args().any(|a| a == "--control");
    let shape = if std::env::args().any(|a| a == "--as-cubecl") {
        ours::Shape::AsCubecl
    } else {
        ours::Shape::Ours
    };
    let mut ours = match Ours::open(shape) {
        Ok(ours) => ours,
        Err(reason) => {
            println!("peers: no Vulkan device for graph-capture ({reason}); nothing to compare");
            // CI requires the device, so that the row cannot pass unrun.
            let required = std::env::var(REQUIRE).is_ok_and(|v| v == "1");
            return if required {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let mut theirs = Theirs::wgpu();
    println!("ours:   {}", ours.describe());
    println!("cubecl: {}", theirs.describe());
    println!(
        "validation: {variable}={}",
        std::env::var(variable).unwrap_or_default()
    );
    println!();
    let rows = match (short, control) {
        (true, _) => rows::short(),
        (false, true) => rows::all().into_iter().filter(|r| r.control).collect(),
        (false, false) => rows::all(),
    };
    let results = match run_rows(&mut ours, &mut theirs, &rows) {
        Ok(results) => results,
        Err(err) => {
            eprintln!("peers: {err}");
            return ExitCode::FAILURE;
        }
    };
    print_rows(&results);
    if !short && !control {
        match memory::compare(&ours, &theirs) {
            Ok((held, theirs_held, alike)) => print_memory(held, theirs_held, alike),
            Err(err) => {
                eprintln!("peers: memory: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// One row's figures, both sides.
struct Figures {
    row: Row,
    eager: [Measure; 2],
    replay: [Measure; 2],
    capture: [std::time::Duration; 2],
}

fn run_rows(ours: &mut Ours, theirs: &mut Theirs, rows: &[Row]) -> Result<Vec<Figures>, String> {
    let mut out = Vec::new();
    for &row in rows {
        let capture = [ours.setup(row)?, theirs.setup(row)?];
        let mut eager = [Measure::default(); 2];
        let mut replay = [Measure::default(); 2];
        for _ in 0..row.rounds {
            // Interleaved, so that a drift over the run lands on both.
            eager[0].round(|| ours.eager(), || ours.sync());
            eager[1].round(|| theirs.eager(), || theirs.sync());
            replay[0].round(|| ours.replay(), || ours.sync());
            replay[1].round(|| theirs.replay(), || theirs.sync());
        }
        let (mine, cubecl) = (ours.outputs()?, theirs.outputs()?);
        if mine != cubecl {
            return Err(format!(
                "{}: the outputs differ: ours start {:?}, cubecl's {:?}",
                row.name(),
                &mine[0][..mine[0].len().min(4)],
                &cubecl[0][..cubecl[0].len().min(4)]
            ));
        }
        ours.teardown();
        theirs.teardown();
        out.push(Figures {
            row,
            eager,
            replay,
            capture,
        });
    }
    Ok(out)
}

fn ratio(ours: f64, theirs: f64) -> f64 {
    ours / theirs
}

fn print_rows(results: &[Figures]) {
    println!(
        "| row | eager, µs per kernel end to end: ours / cubecl | replayed: ours / cubecl | \
         caller-thread µs per replayed pass: ours / cubecl | caller-thread µs per eager pass: \
         ours / cubecl | capture end, µs: ours / cubecl | outputs |"
    );
    println!("|---|---|---|---|---|---|---|");
    let control = results.iter().find(|f| f.row.control);
    let e2e = |m: &Measure, f: &Figures| micros_per(m.total, f.row.rounds * f.row.kernels);
    let ratios = |f: &Figures| {
        (
            ratio(e2e(&f.eager[0], f), e2e(&f.eager[1], f)),
            ratio(e2e(&f.replay[0], f), e2e(&f.replay[1], f)),
        )
    };
    for f in results {
        let (eager, replay) = ratios(f);
        let issue = |m: &Measure| micros_per(m.issue, f.row.rounds);
        println!(
            "| {} | {:.1} / {:.1} ({:.2}x) | {:.1} / {:.1} ({:.2}x) | {:.0} / {:.0} ({:.4}x) | {:.0} / {:.0} ({:.2}x) | {:.0} / {:.0} | equal |",
            f.row.name(),
            e2e(&f.eager[0], f),
            e2e(&f.eager[1], f),
            eager,
            e2e(&f.replay[0], f),
            e2e(&f.replay[1], f),
            replay,
            issue(&f.replay[0]),
            issue(&f.replay[1]),
            ratio(issue(&f.replay[0]), issue(&f.replay[1])),
            issue(&f.eager[0]),
            issue(&f.eager[1]),
            ratio(issue(&f.eager[0]), issue(&f.eager[1])),
            f.capture[0].as_secs_f64() * 1e6,
            f.capture[1].as_secs_f64() * 1e6,
        );
    }
    if let Some(control) = control {
        let (eager_c, replay_c) = ratios(control);
        println!();
        println!(
            "The control row ({}) is GPU-bound: its ratios ({eager_c:.2}x eager, {replay_c:.2}x \
             replayed) measure the two kernels, not launches. Divided by them, the \
             launch-bound rows read:",
            control.row.name()
        );
        for f in results.iter().filter(|f| !f.row.control) {
            let (eager, replay) = ratios(f);
            println!(
                "- {}: eager {:.2}x, replayed {:.2}x",
                f.row.name(),
                eager / eager_c,
                replay / replay_c
            );
        }
    }
}

fn print_memory(ours: u64, theirs: u64, alike: u64) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!();
    println!(
        "Four graphs (batches 8, 4, 2, 1 of 64 Ki floats, each with its scratch), captured \
         largest first: ours hold {:.1} MiB, cubecl's {:.1} MiB ({:.2}x); the inputs and \
         outputs both keep are {:.1} MiB of that.",
        mib(ours),
        mib(theirs),
        ratio(ours as f64, theirs as f64),
        mib(alike)
    );
}
