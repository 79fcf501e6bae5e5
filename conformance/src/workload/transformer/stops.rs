//! Where a generation stops: the reference's tokens, an end token chosen
//! from them so that sequences stop at different steps, and each
//! sequence's tokens up to it; and a whole generation to its end, step by
//! step against one replay of a graph holding the loop.

use std::time::{Duration, Instant};

use graph_capture::{Client, Error, Pass};

use super::device::{Start, Transformer, starts};
use super::reference::{Reference, Weights, argmax};
use crate::workload::UserKernels;

/// The reference's `steps` tokens for each of `starts`.
pub fn reference_tokens(weights: &Weights, starts: &[Start], steps: u32) -> Vec<Vec<u32>> {
    starts
        .iter()
        .map(|start| {
            let mut sequence = Reference::new(weights, start.position);
            let mut input = start.token;
            (0..steps)
                .map(|_| {
                    input = argmax(&sequence.step(input));
                    input
                })
                .collect()
        })
        .collect()
}

/// An end token the reference emits, chosen so that the sequences stop at
/// as many different steps as can be (then: as many stop as can, the first
/// stops nearest the middle), none at its first token.
pub fn end_token(reference: &[Vec<u32>]) -> Option<u32> {
    let first_at = |list: &Vec<u32>, token: u32| list.iter().position(|&t| t == token);
    let mut candidates: Vec<u32> = reference
        .iter()
        .flat_map(|l| l.iter().skip(1))
        .copied()
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    let middle = reference.first().map_or(0, |l| l.len() / 2);
    candidates
        .into_iter()
        .filter(|&t| reference.iter().all(|l| first_at(l, t) != Some(0)))
        .max_by_key(|&t| {
            let mut stops: Vec<usize> = reference.iter().filter_map(|l| first_at(l, t)).collect();
            let stopping = stops.len();
            stops.sort_unstable();
            stops.dedup();
            let first = reference
                .first()
                .and_then(|l| first_at(l, t))
                .unwrap_or(usize::MAX);
            (
                stops.len(),
                stopping,
                std::cmp::Reverse(first.abs_diff(middle)),
                std::cmp::Reverse(t),
            )
        })
}

/// Each list up to and including its first `end`.
pub fn until_end(lists: &[Vec<u32>], end: u32) -> Vec<Vec<u32>> {
    lists
        .iter()
        .map(|l| match l.iter().position(|&t| t == end) {
            Some(at) => l[..=at].to_vec(),
            None => l.clone(),
        })
        .collect()
}

/// One batch's whole generation, step by step and in one replay.
#[derive(Debug, Clone)]
pub struct Whole {
    /// Sequences.
    pub batch: u32,
    /// The end token.
    pub end: u32,
    /// Tokens each sequence generated, its end token included.
    pub lengths: Vec<usize>,
    /// Host calls per generation: replays and flag reads, step by step.
    pub stepwise_calls: u32,
    /// The generation step by step.
    pub stepwise: Duration,
    /// The generation in one replay.
    pub looped: Duration,
    /// Step by step and in one replay, each equal to the reference's.
    pub identical: (bool, bool),
}

/// Generate `batch` sequences until each emits its end token, at most
/// `tokens` each: step by step (a replay of one step, then a read of the
/// loop's flag) and in one replay of a graph holding the loop. `None` where
/// the reference emits no usable end token; a backend that records no
/// conditional refuses the loop's capture with its reason.
pub fn whole_generation<D: UserKernels>(
    client: &Client<D>,
    weights: &Weights,
    model: &Transformer<D>,
    batch: u32,
    tokens: u32,
) -> Result<Option<Whole>, Error> {
    let stream = model.stream();
    let first = starts(batch, &weights.config);
    let reference = reference_tokens(weights, &first, tokens);
    let Some(end) = end_token(&reference) else {
        return Ok(None);
    };
    let want = until_end(&reference, end);
    let generated = |model: &Transformer<D>| model.generated(&first);

    let (step, ()) = client.capture(stream, |_| {
        model.step(batch)?;
        model.settle(batch, end)
    })?;
    // The warmup runs the loop once, as much as it needs to warm the
    // pools; the recorded loop runs to the end.
    let (whole, _) = client.capture(stream, |pass| {
        let bound = if pass == Pass::Warmup { 1 } else { tokens };
        model.generation(batch, end, bound)
    })?;

    model.reset(&first)?;
    model.start_generation(batch)?;
    client.sync(stream)?;
    let mut calls = 0;
    let started = Instant::now();
    for _ in 0..tokens {
        client.replay(&step)?;
        calls += 2;
        if !model.running()? {
            break;
        }
    }
    let stepwise = started.elapsed();
    let by_step = generated(model)?;

    model.reset(&first)?;
    client.sync(stream)?;
    let started = Instant::now();
    client.replay(&whole)?;
    client.sync(stream)?;
    let looped = started.elapsed();
    let by_loop = generated(model)?;
    Ok(Some(Whole {
        batch,
        end,
        lengths: by_loop.iter().map(Vec::len).collect(),
        stepwise_calls: calls,
        stepwise,
        looped,
        identical: (by_step == want, by_loop == want && by_loop == by_step),
    }))
}
