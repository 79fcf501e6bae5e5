//! Where a generation stops: the reference's tokens, an end token chosen
//! from them so that sequences stop at different steps, and each
//! sequence's tokens up to it.

use super::device::Start;
use super::reference::{Reference, Weights, argmax};

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
