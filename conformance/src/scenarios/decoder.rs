//! The decoder-only transformer of user kernels: eager and replayed, at
//! every batch size, it generates the reference's tokens for 64 steps, and
//! a run whose live sequences shrink picks each step's graph by their
//! number.
//!
//! The model is [`Config::SMALL`] (2 layers, hidden 64, 4 heads, context
//! 128, vocabulary 512), so the debug-build suite stays quick on every
//! backend; the example runs [`Config::FULL`].

use graph_capture::{Error, GraphCache, Pass, Ran, Served};

use crate::ensure;
use crate::session::Session;
use crate::support::{Outcome, Step, usable};
use crate::workload::UserKernels;
use crate::workload::transformer::{
    Config, Start, Transformer, Weights, check, end_token, reference_tokens, starts, until_end,
};

/// Steps each sequence generates and is compared over.
const STEPS: u32 = 64;

/// The batch sizes a step's graph is captured for.
const BATCHES: [u32; 4] = [1, 2, 4, 8];

/// The smallest batch size holding `live` sequences.
fn bucket(live: u32) -> u32 {
    BATCHES
        .into_iter()
        .find(|&b| b >= live)
        .unwrap_or(BATCHES[BATCHES.len() - 1])
}

/// Whether `graph` holds exactly one step's launches (foreign operations
/// count as launches).
fn holds_one_step<D: UserKernels>(
    client: &graph_capture::Client<D>,
    graph: &graph_capture::GraphHandle<D>,
    batch: u32,
) -> Outcome {
    let info = client.graph_info(graph).step("graph info")?;
    ensure!(
        info.launches == Config::SMALL.launches() as usize,
        "batch {batch}'s graph holds {} launches, a step is {}",
        info.launches,
        Config::SMALL.launches()
    );
    Ok(())
}

/// Compare what `model` generated from `starts` with the reference.
fn judge<D: UserKernels>(
    weights: &Weights,
    model: &Transformer<D>,
    starts: &[Start],
    steps: u32,
    what: &str,
) -> Outcome {
    let tokens = model.generated(starts).step("read the tokens")?;
    for (b, list) in tokens.iter().enumerate() {
        ensure!(
            list.len() == steps as usize,
            "{what}: sequence {b} generated {} tokens in {steps} steps",
            list.len()
        );
    }
    let hidden = model
        .hidden(starts.len() as u32)
        .step("read the hidden state")?;
    let verdict = check(weights, starts, &tokens, &hidden);
    ensure!(verdict.passed(), "{what}: {}", verdict.summary());
    Ok(())
}

/// From `starts`, `STEPS` eager steps of `batch` generate the reference's
/// tokens.
fn eager_steps_match<D: UserKernels>(
    weights: &Weights,
    model: &Transformer<D>,
    starts: &[Start],
    batch: u32,
) -> Outcome {
    model.reset(starts).step("reset")?;
    for _ in 0..STEPS {
        model.step(batch).step("eager step")?;
    }
    judge(
        weights,
        model,
        starts,
        STEPS,
        &format!("eager batch {batch}"),
    )
}

/// Launched eagerly, a batch of every size generates the reference's tokens
/// for 64 steps, each sequence from its own token and position.
pub fn transformer_eager_tokens_match_the_reference<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let weights = Weights::new(Config::SMALL);
    let model = Transformer::new(&client, stream, &weights, 8).step("the model")?;
    for batch in BATCHES {
        eager_steps_match(&weights, &model, &starts(batch, &weights.config), batch)?;
    }
    usable(&client, stream)
}

/// One captured step per batch size, replayed 63 times after its capture's
/// warmup, generates the reference's tokens for 64 steps: the token,
/// position and context length the step reads live on the device, so one
/// recording serves every step.
pub fn transformer_replayed_tokens_match_the_reference<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let weights = Weights::new(Config::SMALL);
    let model = Transformer::new(&client, stream, &weights, 8).step("the model")?;
    let mut cache = GraphCache::new(&client, stream, BATCHES.len(), None);
    for batch in BATCHES {
        let starts = starts(batch, &weights.config);
        model.reset(&starts).step("reset")?;
        for step in 0..STEPS {
            let served = cache
                .run(batch, u64::from(batch), |_| model.step(batch))
                .step("cached step")?;
            let want = if step == 0 { Served::Miss } else { Served::Hit };
            ensure!(
                served == want,
                "batch {batch} step {step} was served {served:?}, expected {want:?}"
            );
        }
        let graph = cache.graph(&batch).ok_or("the batch's graph is cached")?;
        holds_one_step(&client, graph, batch)?;
        judge(
            &weights,
            &model,
            &starts,
            STEPS,
            &format!("replayed batch {batch}"),
        )?;
    }
    let stats = cache.stats();
    ensure!(
        stats.misses == 4 && stats.hits == 4 * u64::from(STEPS - 1),
        "four captures and the rest replays, got {stats:?}"
    );
    drop(cache);
    usable(&client, stream)
}

/// With every matmul a foreign operation (another library's GEMM: a CPU
/// GEMM on the host), eager steps and replayed ones both generate the
/// reference's tokens, the foreign nodes in the graph with the kernels.
pub fn transformer_with_foreign_matmuls_matches_the_reference<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let weights = Weights::new(Config::SMALL);
    let model = match Transformer::with_foreign_matmuls(&client, stream, &weights, 8) {
        Ok(model) => model,
        // A backend without a foreign GEMM says so, and has nothing to prove.
        Err(Error::BadLaunch(why)) if why.contains("no foreign GEMM") => return Ok(()),
        Err(err) => return Err(format!("the model: {err}")),
    };
    // A full batch and a partial one, each its own shapes of GEMM.
    for batch in [8, 3] {
        let starts = starts(batch, &weights.config);
        eager_steps_match(&weights, &model, &starts, batch)?;
        model.reset(&starts).step("reset")?;
        let (graph, ()) = client
            .capture(stream, |_| model.step(batch))
            .step("capture")?;
        for _ in 1..STEPS {
            graph.replay().step("replay")?;
        }
        holds_one_step(&client, &graph, batch)?;
        judge(
            &weights,
            &model,
            &starts,
            STEPS,
            &format!("replayed batch {batch}"),
        )?;
    }
    usable(&client, stream)
}

/// Eight sequences with budgets of 16, 32, 48 and 64 tokens: each step runs
/// the graph of the smallest batch holding the live ones, so the run passes
/// through the graphs for 8, 4, 2 and 1, and every sequence still generates
/// the reference's tokens over its budget, its rows left alone once it
/// stops.
pub fn transformer_graphs_follow_the_live_sequences<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let weights = Weights::new(Config::SMALL);
    let model = Transformer::new(&client, stream, &weights, 8).step("the model")?;
    let budgets: [u32; 8] = [64, 48, 32, 32, 16, 16, 16, 16];
    let starts = starts(8, &weights.config);
    model.reset(&starts).step("reset")?;
    let mut cache = GraphCache::new(&client, stream, BATCHES.len(), None);
    let mut served = Vec::new();
    for step in 0..STEPS {
        let live = budgets.iter().filter(|&&b| b > step).count() as u32;
        let batch = bucket(live);
        cache
            .run(batch, u64::from(batch), |_| model.step(batch))
            .step("cached step")?;
        if served.last() != Some(&batch) {
            served.push(batch);
        }
    }
    ensure!(
        served == [8, 4, 2, 1],
        "the steps ran the graphs for {served:?}, expected 8, 4, 2, 1"
    );
    let tokens = model.generated(&starts).step("read the tokens")?;
    let hidden = model.hidden(8).step("read the hidden state")?;
    let h = weights.config.hidden as usize;
    for (b, (list, budget)) in tokens.iter().zip(budgets).enumerate() {
        ensure!(
            list.len() == budget as usize,
            "sequence {b} generated {} tokens, its budget is {budget}",
            list.len()
        );
        let verdict = check(
            &weights,
            &starts[b..=b],
            std::slice::from_ref(list),
            &hidden[b * h..(b + 1) * h],
        );
        ensure!(verdict.passed(), "sequence {b}: {}", verdict.summary());
    }
    drop(cache);
    usable(&client, stream)
}

/// A whole generation in one replay: a graph holding a loop of steps, each
/// sequence stopping at an end token the reference emits (chosen so they
/// stop at different steps) and held from then on, generates the
/// reference's tokens up to it, as the loop run on the host's word does;
/// a second replay starts afresh from kernels at its head.
pub fn transformer_generation_in_one_replay_matches_the_reference<D: UserKernels>(
    session: &Session<D>,
) -> Outcome {
    const BATCH: u32 = 4;
    const TOKENS: u32 = 24;
    let client = session.client();
    let stream = client.create_stream().step("stream")?;
    let weights = Weights::new(Config::SMALL);
    let model = Transformer::new(&client, stream, &weights, BATCH).step("model")?;
    let first = starts(BATCH, &weights.config);
    let reference = reference_tokens(&weights, &first, TOKENS);
    let end = end_token(&reference).ok_or("the reference emits no usable end token")?;
    let want = until_end(&reference, end);
    let lengths: Vec<usize> = want.iter().map(Vec::len).collect();
    ensure!(
        lengths.iter().min() != lengths.iter().max(),
        "every sequence stops at the same step: {lengths:?}"
    );

    model.reset(&first).step("reset")?;
    let ran = model.generation(BATCH, end, TOKENS).step("eager loop")?;
    let longest = *lengths.iter().max().unwrap_or(&0) as u32;
    ensure!(
        ran == Ran::Loop {
            iterations: longest,
            bound_reached: longest == TOKENS && model.running().step("flag")?
        },
        "eagerly: {ran:?} for {lengths:?}"
    );
    let eager = model.generated(&first).step("eager tokens")?;
    ensure!(eager == want, "eagerly {eager:?}, the reference {want:?}");

    let captured = client.capture(stream, |pass| {
        let bound = if pass == Pass::Warmup { 1 } else { TOKENS };
        model.generation(BATCH, end, bound)
    });
    let graph = match captured {
        Ok((graph, _)) => graph,
        Err(err) if matches!(err.root(), Error::NoConditionals { .. }) => {
            return usable(&client, stream);
        }
        Err(err) => return Err(format!("capture: {err}")),
    };
    for replay in 0..2 {
        model.reset(&first).step("reset")?;
        client.replay(&graph).step("replay")?;
        let replayed = model.generated(&first).step("replayed tokens")?;
        ensure!(
            replayed == want,
            "replay {replay}: {replayed:?}, the reference {want:?}"
        );
    }
    Ok(())
}
