//! A plain-text summary of capture-core's host-side cost on every backend
//! compiled in: short fixed-count runs of the criterion benches'
//! measurements, one markdown table per backend, and each target judged.
//!
//! `cargo run --release -p benches --bin summary [--features vulkan]`
//!
//! Exits non-zero only when a measurement fails or computes a wrong result;
//! a target that does not hold is reported as FAIL in its table.

mod machine;
mod report;
mod table;

use std::process::ExitCode;

use benches::alloc_counter::CountingAlloc;
use benches::validation::validation_off;
use benches::{Backend, SYNC_EVERY, Visit, availability, each_backend};
use conformance::workload::decode::{self, Shape};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// Measures and prints each backend in turn.
#[derive(Default)]
struct Summary {
    failed: bool,
    held: usize,
    judged: usize,
    /// The decode step's row of each backend, printed after every table.
    decode: Vec<String>,
}

/// Decode steps timed each way.
const DECODE_STEPS: usize = 20;

impl Visit for Summary {
    fn visit<D: Backend>(&mut self) {
        let device = match availability::<D>() {
            Ok(device) => device,
            Err(reason) => {
                println!("### {}\n\nunavailable: {reason}\n", D::NAME);
                return;
            }
        };
        match report::measure::<D>(device) {
            Ok(report) => {
                let (text, verdicts) = table::render(D::NAME, &report);
                println!("{text}");
                self.judged += verdicts.len();
                self.held += verdicts.iter().filter(|v| v.pass).count();
            }
            Err(failure) => {
                println!("### {}\n\nmeasurement failed: {failure}\n", D::NAME);
                self.failed = true;
            }
        }
        self.decode.push(decode_row::<D>(&mut self.failed));
    }
}

/// The decode step on `D`: eager against replay per step, and per launch.
fn decode_row<D: Backend>(failed: &mut bool) -> String {
    let shape = Shape::DECODE;
    let figures = capture_core::Client::<D>::open()
        .and_then(|client| decode::measure(&client, shape, DECODE_STEPS));
    match figures {
        Ok(f) => {
            if !f.passed() {
                *failed = true;
            }
            let launches = f64::from(shape.launches());
            format!(
                "| {} | {:.0} | {:.0} | {:.2}x | {:.0} / {:.0} | {} |",
                D::NAME,
                f.eager_step * 1e6,
                f.replay_step * 1e6,
                f.speedup(),
                f.eager_step * 1e9 / launches,
                f.replay_step * 1e9 / launches,
                if f.passed() { "PASS" } else { "FAIL" },
            )
        }
        Err(err) => {
            *failed = true;
            format!("| {} | failed: {err} | | | | |", D::NAME)
        }
    }
}

fn main() -> ExitCode {
    let validation = match validation_off() {
        Ok(validation) => validation,
        Err(code) => return code,
    };
    println!("## capture-core: host-side cost\n");
    println!("- machine: {}", machine::describe());
    println!("- {}", validation.describe());
    println!(
        "- per-call figures: median of {reps} repetitions of {calls} calls, core and raw \
         interleaved, the stream synced every {sync} calls outside the timing; the time \
         the core adds to a replay is judged fastest repetition to fastest, the ones least \
         disturbed by other work; allocations: fewest in any of {rounds} rounds of {round} \
         calls per side, counted on the calling thread only",
        reps = report::REPETITIONS,
        calls = report::CALLS,
        sync = SYNC_EVERY,
        rounds = report::ALLOCATION_ROUNDS,
        round = report::ALLOCATION_CALLS,
    );
    println!(
        "- eager/replay: one graph of N `add` launches replayed against the same N \
         launches issued eagerly, each sequence timed through its final sync, so both \
         sides are timed for the same work done"
    );
    println!(
        "- capture: prepare, warmup run, begin, N recorded launches (timed), \
         instantiate (timed apart)\n"
    );
    let mut summary = Summary::default();
    each_backend(&mut summary);
    let shape = Shape::DECODE;
    println!(
        "### decode step\n\n{} layers, hidden {}, ffn {}: {} user-kernel launches a step, \
         {DECODE_STEPS} steps each way, each run read back and checked against the \
         plain-Rust reference\n",
        shape.layers,
        shape.hidden,
        shape.ffn,
        shape.launches()
    );
    println!(
        "| backend | eager us/step | replay us/step | eager/replay | ns/launch eager / replay | check |"
    );
    println!("|---|---|---|---|---|---|");
    for row in &summary.decode {
        println!("{row}");
    }
    println!();
    println!("targets held: {} of {}", summary.held, summary.judged);
    if summary.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
