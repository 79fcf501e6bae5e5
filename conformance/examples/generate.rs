//! Greedy generation with the decoder-only transformer of user kernels, on
//! one backend: each batch size eagerly and through a graph cache holding
//! one captured step per batch size, then a run whose live sequences
//! shrink, each step replaying the graph its live sequences pick. Every
//! generated token is checked against the plain-Rust reference, and the
//! memory the graph set holds (its graphs share their temporaries) against
//! the largest graph's temporaries.
//!
//! Then whole generations: each sequence stops at an end token (one the
//! reference emits, chosen so that the sequences stop at different steps)
//! and is held from then on. Step by step, the host replays a step and
//! reads whether any sequence runs on; in one replay, the graph holds the
//! loop and the device decides. Both must give the reference's tokens.
//!
//! ```sh
//! cargo run --release -p conformance --example generate -- --backend host
//! cargo run --release -p conformance --features vulkan --example generate -- --backend vulkan
//! ```
//!
//! Options: `--backend host|vulkan|cuda|hip` (default host), `--batch
//! 1,2,4,8` (the batch sizes, each at most 8; default all four), `--tokens
//! N` (per sequence, default 64), `--small` for the tests' 2-layer model.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use conformance::UserKernels;
use conformance::workload::transformer::{
    Config, GraphSet, HIDDEN_TOLERANCE, NEAR_TIE, Start, Transformer, Verdict, Weights, check,
    starts, whole_generation,
};
use graph_capture::{Client, Error};

struct Options {
    backend: String,
    batches: Vec<u32>,
    tokens: u32,
    config: Config,
}

fn parse() -> Result<Options, lexopt::Error> {
    use lexopt::prelude::*;
    let mut options = Options {
        backend: "host".into(),
        batches: vec![1, 2, 4, 8],
        tokens: 64,
        config: Config::FULL,
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("backend") => options.backend = parser.value()?.string()?,
            Long("batch") => {
                let list = parser.value()?.string()?;
                options.batches = list
                    .split(',')
                    .map(|b| b.trim().parse::<u32>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--batch {list}: {e}"))?;
            }
            Long("tokens") => options.tokens = parser.value()?.parse()?,
            Long("small") => options.config = Config::SMALL,
            Long("help") | Short('h') => {
                println!(
                    "usage: generate [--backend host|vulkan|cuda|hip] [--batch 1,2,4,8] \
                     [--tokens N] [--small]"
                );
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    options.batches.sort_unstable();
    options.batches.dedup();
    if options.batches.is_empty() || options.batches.iter().any(|&b| b == 0 || b > 8) {
        return Err("--batch takes sizes from 1 to 8".into());
    }
    // The last sequence of the largest batch starts at position 7.
    let room = options.config.context - 8;
    if options.tokens < 2 || options.tokens > room {
        return Err(format!("--tokens must be from 2 to {room}").into());
    }
    Ok(options)
}

/// Each sequence's tokens and final hidden state against the reference,
/// one sequence at a time (their lengths may differ), merged into one
/// verdict.
fn judge<D: UserKernels>(
    weights: &Weights,
    model: &Transformer<D>,
    starts: &[Start],
) -> Result<Verdict, Error> {
    let tokens = model.generated(starts)?;
    let hidden = model.hidden(starts.len() as u32)?;
    let h = weights.config.hidden as usize;
    let mut all: Option<Verdict> = None;
    for (b, list) in tokens.iter().enumerate() {
        let mut one = check(
            weights,
            &starts[b..=b],
            std::slice::from_ref(list),
            &hidden[b * h..(b + 1) * h],
        );
        for tie in &mut one.near_ties {
            tie.sequence = b;
        }
        all = Some(match all {
            None => one,
            Some(mut v) => {
                v.steps = v.steps.min(one.steps);
                v.sequences += 1;
                v.mismatches.extend(one.mismatches);
                v.near_ties.extend(one.near_ties);
                v.closest_gap = v.closest_gap.min(one.closest_gap);
                v.hidden_error = v.hidden_error.max(one.hidden_error);
                v
            }
        });
    }
    all.ok_or_else(|| Error::BadLaunch("no sequences".into()))
}

struct Row {
    batch: u32,
    /// Seconds per step, launched eagerly.
    eager: f64,
    /// Seconds per step, replayed.
    replay: f64,
    capture: Duration,
    eager_verdict: Verdict,
    replay_verdict: Verdict,
}

fn run<D: UserKernels>(options: &Options) -> Result<bool, Error> {
    let client = Client::<D>::open()?;
    let info = client.device_info();
    println!("{}: {} ({})", D::NAME, info.name, info.driver_version);
    let config = options.config;
    let (batches, tokens) = (&options.batches, options.tokens);
    println!(
        "model: {} layers, hidden {}, {} heads, ffn {}, context {}, vocabulary {}: \
         {} launches a step; {tokens} tokens per sequence",
        config.layers,
        config.hidden,
        config.heads,
        config.ffn,
        config.context,
        config.vocab,
        config.launches()
    );
    let weights = Weights::new(config);
    let stream = client.create_stream()?;
    let max_batch = batches[batches.len() - 1];
    let model = Transformer::new(&client, stream, &weights, max_batch)?;
    // One step first, so no timing pays for a first use (kernel builds,
    // pool growth).
    model.reset(&starts(max_batch, &config))?;
    model.step(max_batch)?;
    client.sync(stream)?;

    // One graph per batch size, the largest captured first: the others'
    // temporaries then fit in the arena its own made.
    let mut set = GraphSet::capture(&client, &model, batches)?;
    let mut rows = Vec::new();
    let captures = set.captures.clone();
    for (&batch, &(_, capture)) in batches.iter().zip(&captures) {
        let first = starts(batch, &config);
        model.reset(&first)?;
        client.sync(stream)?;
        let started = Instant::now();
        for _ in 0..tokens {
            model.step(batch)?;
        }
        client.sync(stream)?;
        let eager = started.elapsed();
        let eager_verdict = judge(&weights, &model, &first)?;

        // Every sequence is live all the way, so each step replays
        // `batch`'s graph.
        model.reset(&first)?;
        client.sync(stream)?;
        let started = Instant::now();
        for _ in 0..tokens {
            set.step(batch)?;
        }
        client.sync(stream)?;
        let replay = started.elapsed();
        let replay_verdict = judge(&weights, &model, &first)?;
        rows.push(Row {
            batch,
            eager: eager.as_secs_f64() / f64::from(tokens),
            replay: replay.as_secs_f64() / f64::from(tokens),
            capture,
            eager_verdict,
            replay_verdict,
        });
    }

    // The largest batch with budgets falling from `tokens` to a quarter of
    // it: as sequences finish, each step replays the smallest graph that
    // holds the live ones (those past their budget inside it run along).
    let all = starts(max_batch, &config);
    let span = (max_batch - 1).max(1);
    let budgets: Vec<u32> = (0..max_batch)
        .map(|b| tokens - tokens * 3 / 4 * b / span)
        .collect();
    model.reset(&all)?;
    client.sync(stream)?;
    let mut used: Vec<u32> = Vec::new();
    let mut live_tokens = 0u64;
    let started = Instant::now();
    for step in 0..tokens {
        let live = budgets.iter().filter(|&&b| b > step).count() as u32;
        let key = set.step(live)?;
        live_tokens += u64::from(live);
        if used.last() != Some(&key) {
            used.push(key);
        }
    }
    client.sync(stream)?;
    let serving = started.elapsed();
    let serving_verdict = judge(&weights, &model, &all)?;

    println!();
    println!("batch | eager tok/s | replay tok/s | replay/eager | capture ms");
    for row in &rows {
        let batch = f64::from(row.batch);
        println!(
            "{:>5} | {:>11.1} | {:>12.1} | {:>11.2}x | {:>10.1}",
            row.batch,
            batch / row.eager,
            batch / row.replay,
            row.eager / row.replay,
            row.capture.as_secs_f64() * 1e3
        );
    }
    println!();
    let mut passed = true;
    for row in &rows {
        for (how, verdict) in [
            ("eager", &row.eager_verdict),
            ("replay", &row.replay_verdict),
        ] {
            passed &= verdict.passed();
            println!("{how:>6} batch {}: {}", row.batch, verdict.summary());
        }
    }
    passed &= serving_verdict.passed();
    println!(
        "serving: {max_batch} sequences with budgets {budgets:?}; graphs by live count {used:?}; \
         {:.1} live tok/s; {}",
        live_tokens as f64 / serving.as_secs_f64(),
        serving_verdict.summary()
    );
    println!(
        "tolerances: a differing token within {NEAR_TIE:.0e} of the reference's best logit is a \
         near-tie; the hidden state within {HIDDEN_TOLERANCE:.0e} of it"
    );

    let mut wholes = Vec::new();
    for &batch in batches {
        wholes.extend(whole_generation(&client, &weights, &model, batch, tokens)?);
    }
    println!();
    println!(
        "whole generation | end token | tokens per sequence | host calls: step by step / one \
         replay | tok/s: step by step / one replay | as the reference"
    );
    for w in &wholes {
        let total = w.lengths.iter().sum::<usize>() as f64;
        let ok = w.identical.0 && w.identical.1;
        passed &= ok;
        println!(
            "batch {:>2} | {:>5} | {:?} | {} / 1 | {:.1} / {:.1} | {}",
            w.batch,
            w.end,
            w.lengths,
            w.stepwise_calls,
            total / w.stepwise.as_secs_f64(),
            total / w.looped.as_secs_f64(),
            if ok { "PASS" } else { "FAIL" }
        );
    }

    let memory = &set.memory;
    println!();
    for (batch, bytes) in &memory.temporaries {
        println!(
            "graph for batch {batch}: temporaries {:.1} KiB",
            *bytes as f64 / 1024.0
        );
    }
    let holds = memory.holds();
    passed &= holds;
    println!(
        "memory: {}: {}; the model's buffers are {:.2} MiB",
        memory.describe(),
        if holds { "PASS" } else { "FAIL" },
        model.live_bytes() as f64 / (1024.0 * 1024.0)
    );
    drop(set);
    drop(model);
    client.destroy_stream(stream)?;
    Ok(passed)
}

fn dispatch(options: &Options) -> Result<bool, String> {
    let result = match options.backend.as_str() {
        "host" => run::<graph_capture::host::Host>(options),
        #[cfg(feature = "vulkan")]
        "vulkan" => run::<graph_capture::vulkan::Vulkan>(options),
        #[cfg(feature = "cuda")]
        "cuda" => run::<graph_capture::cuda::Cuda>(options),
        #[cfg(feature = "hip")]
        "hip" => run::<graph_capture::hip::Hip>(options),
        other => {
            return Err(format!(
                "backend {other} is not compiled in (build with --features {other})"
            ));
        }
    };
    result.map_err(|err| err.to_string())
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(err) => {
            eprintln!("generate: {err}");
            return ExitCode::from(2);
        }
    };
    match dispatch(&options) {
        Ok(true) => {
            println!("PASS");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("FAIL");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("generate: {err}");
            ExitCode::FAILURE
        }
    }
}
