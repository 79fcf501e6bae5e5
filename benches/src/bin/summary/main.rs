//! A plain-text summary of capture-core's host-side cost on every backend
//! compiled in: short fixed-count runs of the criterion benches'
//! measurements, one markdown table per backend, and each target judged.
//!
//! `cargo run --release -p benches --bin summary [--features vulkan]`
//!
//! Exits non-zero only when a measurement fails or computes a wrong result;
//! a target that does not hold is reported as FAIL in its table.

mod chain;
mod instructions;
mod machine;
mod peers;
mod report;
mod table;

use std::process::ExitCode;

use benches::alloc_counter::CountingAlloc;
use benches::validation::validation_off;
use benches::{
    Backend, SYNC_EVERY, Visit, availability, each_backend, generate, looped, pipeline, wide,
};
use conformance::workload::decode::{self, Shape};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// A section that can be measured alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Recapture,
    Pipeline,
    Dependencies,
    Generate,
    Loops,
}

/// Measures and prints each backend in turn.
#[derive(Default)]
struct Summary {
    /// Measure one section only (`--recapture`, `--pipeline`,
    /// `--dependencies`): a quick
    /// look without the full run's quarter of an hour.
    only: Option<Section>,
    failed: bool,
    held: usize,
    judged: usize,
    /// The decode step's row of each backend, printed after every table.
    decode: Vec<String>,
    /// The decode step's pool and graph footprint, per backend.
    memory: Vec<(String, bool)>,
    /// Instantiate against update, capture against re-capture, per backend
    /// and size, and whether the re-capture's target held.
    updates: Vec<(String, bool)>,
    /// The threaded stress workload's row of each backend.
    threads: Vec<String>,
    /// The two-stream pipeline against one stream, per backend.
    pipelines: Vec<String>,
    /// Chain against dependency graph, per backend, and whether the
    /// host's target held (`None` where none is set).
    dependencies: Vec<(String, Option<bool>)>,
    /// Generation per batch size, eager against replayed, per backend.
    generation: Vec<String>,
    /// The largest batch's step with foreign matmuls, where a backend has
    /// a foreign GEMM.
    foreign: Vec<String>,
    /// The graph set's memory per backend, and whether its target held.
    sets: Vec<(String, bool)>,
    /// A whole generation step by step against one replay, per backend.
    wholes: Vec<String>,
    /// A loop in one replay against the host driving it, per backend.
    loops: Vec<String>,
}

/// Operations each stress thread runs.
const STRESS_OPERATIONS: usize = 2000;

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
        match self.only {
            Some(Section::Recapture) => {
                return self.updates.extend(update_rows::<D>(&mut self.failed));
            }
            Some(Section::Pipeline) => {
                return self.pipelines.push(pipeline_row::<D>(&mut self.failed));
            }
            Some(Section::Dependencies) => {
                return self
                    .dependencies
                    .push(dependencies_row::<D>(&mut self.failed));
            }
            Some(Section::Generate) => return self.generate::<D>(),
            Some(Section::Loops) => return self.loops.push(loop_row::<D>(&mut self.failed)),
            None => {}
        }
        match report::measure::<D>(device) {
            Ok(report) => {
                // Counted on the host alone, where the core's bookkeeping is
                // all that sits between a call and the worker's queue.
                let counts = (D::NAME == "host").then(instructions::count);
                let (text, verdicts) = table::render(D::NAME, &report, counts.as_ref());
                println!("{text}");
                self.judged += verdicts.len();
                self.held += verdicts.iter().filter(|v| v.pass).count();
            }
            Err(failure) => {
                println!("### {}\n\nmeasurement failed: {failure}\n", D::NAME);
                self.failed = true;
            }
        }
        self.decode
            .push(decode_row::<D>(&mut self.failed, &mut self.memory));
        self.updates.extend(update_rows::<D>(&mut self.failed));
        self.threads.push(thread_row::<D>(&mut self.failed));
        self.pipelines.push(pipeline_row::<D>(&mut self.failed));
        self.dependencies
            .push(dependencies_row::<D>(&mut self.failed));
        self.generate::<D>();
        self.loops.push(loop_row::<D>(&mut self.failed));
    }
}

/// A loop on `D`: `STEPS` replays each followed by a flag read, against one
/// replay holding the loop, and what an iteration the flag skips costs.
fn loop_row<D: Backend>(failed: &mut bool) -> String {
    match looped::measure::<D>() {
        Ok(Ok(f)) => format!(
            "| {} | {} / 1 | {:.0} | {:.0} | {:.2}x | {:.2} |",
            D::NAME,
            2 * looped::STEPS,
            f.stepwise * 1e6,
            f.looped * 1e6,
            f.speedup(),
            f.skipped() * 1e6,
        ),
        Ok(Err(reason)) => format!("| {} | not recorded: {reason} | | | | |", D::NAME),
        Err(err) => {
            *failed = true;
            format!("| {} | failed: {err} | | | | |", D::NAME)
        }
    }
}

impl Summary {
    /// Generation on `D`: a row per batch size, and the graph set's memory.
    fn generate<D: Backend>(&mut self) {
        match generate::measure::<D>() {
            Ok(figures) => {
                for rate in &figures.rates {
                    self.generation.push(rate_row::<D>(rate));
                }
                self.wholes
                    .push(whole_row::<D>(&figures.whole, &mut self.failed));
                let memory = &figures.memory;
                let kib = |bytes: u64| bytes as f64 / 1024.0;
                let holds = memory.holds();
                self.sets.push((
                    format!(
                        "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}x — {} (≤ {}) |",
                        D::NAME,
                        kib(memory.largest()),
                        kib(memory.sum()),
                        kib(memory.held()),
                        kib(memory.arena),
                        memory.ratio(),
                        if holds { "PASS" } else { "FAIL" },
                        generate::SET_TARGET,
                    ),
                    holds,
                ));
            }
            Err(err) => {
                self.failed = true;
                self.generation
                    .push(format!("| {} | failed: {err} | | | |", D::NAME));
            }
        }
        match generate::foreign_matmuls::<D>() {
            Ok(Some(rate)) => self.foreign.push(rate_row::<D>(&rate)),
            Ok(None) => {}
            Err(err) => {
                self.failed = true;
                self.foreign
                    .push(format!("| {} | failed: {err} | | | |", D::NAME));
            }
        }
    }
}

/// One batch size's tokens per second on `D`, eager and replayed.
fn rate_row<D: Backend>(rate: &generate::Rate) -> String {
    format!(
        "| {} | {} | {:.1} | {:.1} | {:.2}x |",
        D::NAME,
        rate.batch,
        rate.eager,
        rate.replay,
        rate.replay / rate.eager.max(1e-12)
    )
}

/// The largest batch's whole generation on `D`: host calls and tokens per
/// second, step by step against one replay, and whether both gave the
/// reference's tokens.
fn whole_row<D: Backend>(
    whole: &Result<Option<generate::Whole>, String>,
    failed: &mut bool,
) -> String {
    match whole {
        Ok(Some(w)) => {
            let total = w.lengths.iter().sum::<usize>() as f64;
            let ok = w.identical.0 && w.identical.1;
            *failed |= !ok;
            format!(
                "| {} | {} | {:?} | {} / 1 | {:.1} / {:.1} | {} |",
                D::NAME,
                w.batch,
                w.lengths,
                w.stepwise_calls,
                total / w.stepwise.as_secs_f64().max(1e-12),
                total / w.looped.as_secs_f64().max(1e-12),
                if ok { "PASS" } else { "FAIL" },
            )
        }
        Ok(None) => format!(
            "| {} | no end token the reference emits suits | | | | |",
            D::NAME
        ),
        Err(reason) => format!("| {} | not recorded: {reason} | | | | |", D::NAME),
    }
}

/// How much faster the wide workload must replay as a dependency graph on
/// the host backend, where the replay spreads over the machine's cores.
const HOST_WIDE_SPEEDUP: f64 = 1.6;

/// The wide workload and the decode step on `D`, as chains and as
/// dependency graphs.
fn dependencies_row<D: Backend>(failed: &mut bool) -> (String, Option<bool>) {
    match wide::measure::<D>() {
        Ok(f) => {
            let target = (D::NAME == "host").then(|| f.wide_speedup() >= HOST_WIDE_SPEEDUP);
            let verdict = match target {
                Some(true) => format!("≥ {HOST_WIDE_SPEEDUP}x PASS"),
                Some(false) => format!("≥ {HOST_WIDE_SPEEDUP}x FAIL"),
                None => "-".into(),
            };
            let row = format!(
                "| {} | {}x{} | {:.0} | {:.0} | {:.2}x | {verdict} | {:.0} | {:.0} | {:.2}x |",
                D::NAME,
                f.shape.0,
                f.shape.1,
                f.wide.0 * 1e6,
                f.wide.1 * 1e6,
                f.wide_speedup(),
                f.decode.0 * 1e6,
                f.decode.1 * 1e6,
                f.decode_speedup(),
            );
            (row, target)
        }
        Err(err) => {
            *failed = true;
            (
                format!("| {} | failed: {err} | | | | | | | |", D::NAME),
                None,
            )
        }
    }
}

/// Repetitions of each end-to-end capture and re-capture; the median is
/// reported.
const RECAPTURE_REPETITIONS: usize = 11;

/// Capture a decode-shaped step of `launches` launches, then capture it
/// again into the same graph: the driver's instantiate against its update,
/// and what the user waits for, `capture` against `recapture` end to end.
fn update_rows<D: Backend>(failed: &mut bool) -> Vec<(String, bool)> {
    let measure = |launches: u32| -> Result<(String, bool), graph_capture::Error> {
        let client = graph_capture::Client::<D>::open()?;
        let stream = client.create_stream()?;
        let shape = Shape {
            hidden: 64,
            ffn: 128,
            layers: launches / 5,
        };
        let decoder = decode::Decoder::new(&client, stream, &decode::Model::new(shape))?;
        let graph = decoder.capture()?;
        let instantiate = client.graph_info(&graph)?.instantiate_time;
        let (how, ()) = client.recapture(&graph, |_| decoder.step())?;
        let update = client.graph_info(&graph)?.instantiate_time;
        let mut captures = Vec::new();
        let mut recaptures = Vec::new();
        // Each side starts on an idle stream, the graph dropped before it
        // destroyed (a dropped graph is destroyed, with a sync, at the next
        // call on its stream).
        for _ in 0..RECAPTURE_REPETITIONS {
            client.sync(stream)?;
            let started = std::time::Instant::now();
            let fresh = decoder.capture()?;
            captures.push(started.elapsed());
            drop(fresh);
            client.sync(stream)?;
            let started = std::time::Instant::now();
            client.recapture(&graph, |_| decoder.step())?;
            recaptures.push(started.elapsed());
        }
        let (capture, recapture) = (median(&mut captures), median(&mut recaptures));
        let ratio = recapture.as_secs_f64() / capture.as_secs_f64().max(1e-9);
        let holds = ratio <= RECAPTURE_TARGET;
        let verdict = if holds { "PASS" } else { "FAIL" };
        let row = format!(
            "| {} | {} | {:.1} | {:.1} | {how:?} | {:.2} | {:.2} | {ratio:.2}x — {verdict} (≤ {RECAPTURE_TARGET}) |",
            D::NAME,
            shape.launches(),
            instantiate.as_secs_f64() * 1e6,
            update.as_secs_f64() * 1e6,
            capture.as_secs_f64() * 1e3,
            recapture.as_secs_f64() * 1e3,
        );
        Ok((row, holds))
    };
    [100, 1000]
        .into_iter()
        .map(|n| {
            measure(n).unwrap_or_else(|err| {
                *failed = true;
                (
                    format!("| {} | {n} | failed: {err} | | | | | |", D::NAME),
                    false,
                )
            })
        })
        .collect()
}

/// Most a re-capture may take against a fresh capture, end to end: it
/// does the same work, and an update is there to cost no more.
const RECAPTURE_TARGET: f64 = 1.1;

/// The middle of `times`.
fn median(times: &mut [std::time::Duration]) -> std::time::Duration {
    times.sort();
    times[times.len() / 2]
}

/// The two-stream pipeline on `D`: one stream's time, two streams', and
/// the ratio.
fn pipeline_row<D: Backend>(failed: &mut bool) -> String {
    match pipeline::measure::<D>() {
        Ok((one, two)) => format!(
            "| {} | {:.2} | {:.2} | {:.2}x |",
            D::NAME,
            one * 1e3,
            two * 1e3,
            one / two.max(1e-12)
        ),
        Err(err) => {
            *failed = true;
            format!("| {} | failed: {err} | | |", D::NAME)
        }
    }
}

/// The stress workload on one thread, then on four (a stream each): the
/// operations per second each thread gets.
fn thread_row<D: Backend>(failed: &mut bool) -> String {
    let rates = |threads: usize| -> Result<Vec<f64>, String> {
        let client = graph_capture::Client::<D>::open().map_err(|e| e.to_string())?;
        let runs = conformance::stress::run_threads(&client, threads, STRESS_OPERATIONS)?;
        Ok(runs.iter().map(|run| run.rate()).collect())
    };
    // A first run warms the process (page faults, thread start-up), so
    // that neither side pays for it.
    drop(rates(1));
    match (rates(1), rates(4)) {
        (Ok(one), Ok(four)) => {
            let single = one.first().copied().unwrap_or(0.0);
            let per_thread = four.iter().sum::<f64>() / four.len().max(1) as f64;
            format!(
                "| {} | {single:.0} | {per_thread:.0} | {:.2}x |",
                D::NAME,
                four.iter().sum::<f64>() / single.max(1e-9)
            )
        }
        (Err(err), _) | (_, Err(err)) => {
            *failed = true;
            format!("| {} | failed: {err} | | |", D::NAME)
        }
    }
}

/// The decode step on `D`: eager against replay per step, and per launch.
fn decode_row<D: Backend>(failed: &mut bool, memory: &mut Vec<(String, bool)>) -> String {
    let shape = Shape::DECODE;
    let figures = graph_capture::Client::<D>::open()
        .and_then(|client| decode::measure(&client, shape, DECODE_STEPS));
    match figures {
        Ok(f) => {
            if !f.passed() {
                *failed = true;
            }
            let fp = &f.footprint;
            let holds = fp.reserved_per_live() <= table::RESERVED_PER_LIVE;
            memory.push((
                format!(
                    "| {} | {} | ≤ {}x | {} | {} |",
                    D::NAME,
                    table::reserved_text(fp),
                    table::RESERVED_PER_LIVE,
                    if holds { "PASS" } else { "FAIL" },
                    table::pinned_text(fp),
                ),
                holds,
            ));
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--instructions-probe") {
        let name = args.get(at + 1).map_or("", String::as_str);
        return match instructions::probe(name) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("probe {name}: {err}");
                ExitCode::FAILURE
            }
        };
    }
    if std::env::args().skip(1).any(|arg| arg == "--peers") {
        return peers::run();
    }
    let validation = match validation_off() {
        Ok(validation) => validation,
        Err(code) => return code,
    };
    if args.iter().any(|arg| arg == "--chain") {
        return chain::run(&args);
    }
    println!("## capture-core: host-side cost\n");
    println!("- machine: {}", machine::describe());
    println!("- {}", validation.describe());
    println!(
        "- per-call figures: median of {reps} repetitions of {calls} calls, core and raw \
         interleaved, each going first every other time, the stream synced every {sync} \
         calls outside the timing; the time \
         the core adds to an eager launch or a replay is judged fastest repetition to \
         fastest, the ones least disturbed by other work; allocations: fewest in any of \
         {rounds} rounds of {round} calls per side, counted on the calling thread only; \
         sequences: median of {sequence_reps} repetitions",
        reps = report::PER_CALL_REPETITIONS,
        sequence_reps = report::REPETITIONS,
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
    let only = std::env::args().skip(1).find_map(|arg| match arg.as_str() {
        "--recapture" => Some(Section::Recapture),
        "--pipeline" => Some(Section::Pipeline),
        "--dependencies" => Some(Section::Dependencies),
        "--generate" => Some(Section::Generate),
        "--loops" => Some(Section::Loops),
        _ => None,
    });
    let mut summary = Summary {
        only,
        ..Summary::default()
    };
    each_backend(&mut summary);
    match only {
        Some(Section::Recapture) => {
            print_recapture(&mut summary);
            return finish(&summary);
        }
        Some(Section::Pipeline) => {
            print_pipelines(&summary);
            return finish(&summary);
        }
        Some(Section::Dependencies) => {
            print_dependencies(&mut summary);
            return finish(&summary);
        }
        Some(Section::Generate) => {
            print_generation(&mut summary);
            return finish(&summary);
        }
        Some(Section::Loops) => {
            print_loops(&summary);
            return finish(&summary);
        }
        None => {}
    }
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
    println!(
        "### memory of the decode step\n\nOnce warm (after the replays): the stream's device \
         pool against the bytes of the buffers the decoder holds, and the step's graph's \
         pins against the bytes its recording touched\n"
    );
    println!("| backend | pool reserved / live buffers | target | result | graph pins / touched |");
    println!("|---|---|---|---|---|");
    for (row, holds) in &summary.memory {
        println!("{row}");
        summary.judged += 1;
        summary.held += usize::from(*holds);
    }
    println!();
    print_recapture(&mut summary);
    println!(
        "### threads\n\nThe stress workload ({STRESS_OPERATIONS} mixed operations per thread, \
         every read checked against a CPU model) on one thread, then on four threads with a \
         stream each of one client\n"
    );
    println!(
        "| backend | 1 thread: ops/s | 4 threads: ops/s per thread | 4 threads / 1 thread, total |"
    );
    println!("|---|---|---|---|");
    for row in &summary.threads {
        println!("{row}");
    }
    println!();
    print_pipelines(&summary);
    print_dependencies(&mut summary);
    print_generation(&mut summary);
    print_loops(&summary);
    finish(&summary)
}

/// The loops section: a generation of steps driven by the host against one
/// replay.
fn print_loops(summary: &Summary) {
    println!(
        "### loops in a graph\n\n{steps} steps of {launches} `add` launches and a countdown \
         that writes the loop's flag: {steps} replays of a step, each followed by a read of \
         the flag (the host deciding), against one replay of a graph holding a `while` of \
         bound {steps}; median of 7, each through its sync. A skipped iteration: the loop \
         whose flag clears after one step, less one step alone, over the {skipped} \
         iterations left\n",
        steps = looped::STEPS,
        launches = looped::LAUNCHES,
        skipped = looped::STEPS - 1,
    );
    println!(
        "| backend | host calls: step by step / looped | step by step us | looped us | speedup | us per skipped iteration |"
    );
    println!("|---|---|---|---|---|---|");
    for row in &summary.loops {
        println!("{row}");
    }
    println!();
}

/// The generation section: rates per batch size, then the graph set's
/// memory, its target counted.
fn print_generation(summary: &mut Summary) {
    println!(
        "### generation\n\nThe transformer (8 layers, hidden 256, 4 heads, context 256, \
         vocabulary 512), {} tokens per sequence at each batch size, each step issued eagerly \
         or replayed from its batch size's graph (one graph per batch size, captured largest \
         first); the replayed tokens checked equal to the eager ones\n",
        generate::TOKENS
    );
    println!("| backend | batch | eager tok/s | replay tok/s | replay / eager |");
    println!("|---|---|---|---|---|");
    for row in &summary.generation {
        println!("{row}");
    }
    println!();
    println!(
        "With every matmul a foreign operation, another library's GEMM (ndarray's, \
         matrixmultiply underneath, on the host; a backend without one is left out): the \
         largest batch, eager steps against replays of one graph, the tokens checked equal\n"
    );
    println!("| backend | batch | eager tok/s | replay tok/s | replay / eager |");
    println!("|---|---|---|---|---|");
    for row in &summary.foreign {
        println!("{row}");
    }
    println!();
    println!(
        "The graph set's memory: the bytes the device pool holds once the {} graphs are \
         captured, beyond what it held before (the model's buffers), against the largest \
         graph's temporaries, which the graphs share\n",
        generate::BATCHES.len()
    );
    println!(
        "| backend | largest graph's temporaries KiB | sum of the graphs' temporaries KiB | set holds KiB | arena KiB | set / largest |"
    );
    println!("|---|---|---|---|---|---|");
    for (row, holds) in &summary.sets {
        println!("{row}");
        summary.judged += 1;
        summary.held += usize::from(*holds);
    }
    println!();
    println!(
        "A whole generation: the largest batch until each sequence emits its end token (one \
         the reference emits), at most {} each, step by step (a replay of the step, then a \
         read of the loop's flag) against one replay of a graph holding the loop\n",
        generate::TOKENS
    );
    println!(
        "| backend | batch | tokens per sequence | host calls: step by step / one replay | tok/s: step by step / one replay | as the reference |"
    );
    println!("|---|---|---|---|---|---|");
    for row in &summary.wholes {
        println!("{row}");
    }
    println!();
}

/// The dependency-graph section: its table, the host's target counted.
fn print_dependencies(summary: &mut Summary) {
    println!(
        "### dependency graphs\n\n{} independent {size}x{size} matrix-vector products and \
         their sum as a tree of adds (the sum checked), and the decode step, each captured \
         with its graph kept as a chain and as its dependency graph: µs per replay over {} \
         replays, fastest of {}\n",
        wide::BRANCHES,
        wide::REPLAYS,
        wide::RUNS,
        size = wide::SIZE,
    );
    println!(
        "| backend | wide depth x width | wide chain µs | wide dependencies µs | chain / dependencies | target | decode chain µs | decode dependencies µs | chain / dependencies |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (row, target) in &summary.dependencies {
        println!("{row}");
        if let Some(held) = target {
            summary.judged += 1;
            summary.held += usize::from(*held);
        }
    }
    println!();
}

/// The two-stream section.
fn print_pipelines(summary: &Summary) {
    println!(
        "### two streams\n\n{} steps: each uploads the next 1 MiB input and adds the \
         current one into a sum four times, on one stream, then with the uploads on a \
         second stream (the inputs shared, every step ordered on the device); fastest of \
         three, the sum checked\n",
        pipeline::STEPS
    );
    println!("| backend | one stream ms | two streams ms | one / two |");
    println!("|---|---|---|---|");
    for row in &summary.pipelines {
        println!("{row}");
    }
    println!();
}

/// The re-capture section: its table, each row's target counted.
fn print_recapture(summary: &mut Summary) {
    println!(
        "### re-capture against capture\n\nA decode-shaped step (hidden 64, ffn 128) \
         captured, then captured again into the same graph: the driver's instantiate and \
         its update (the new executable swapped in, where the backend takes that path), \
         then `capture` and `recapture` end to end, median of {RECAPTURE_REPETITIONS}\n"
    );
    println!(
        "| backend | launches | instantiate µs | update µs | how | capture ms | recapture ms | recapture/capture |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (row, holds) in &summary.updates {
        println!("{row}");
        summary.judged += 1;
        summary.held += usize::from(*holds);
    }
    println!();
}

/// The closing count, and the exit status: failure only when a measurement
/// failed.
fn finish(summary: &Summary) -> ExitCode {
    println!("targets held: {} of {}", summary.held, summary.judged);
    if summary.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
