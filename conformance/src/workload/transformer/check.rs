//! A device's generated tokens and final hidden state against the
//! reference.

use super::device::Start;
use super::reference::{Reference, Weights, argmax, top_gap};
use crate::workload::decode::relative_error;

/// How close the reference's best logit and the device's choice may be for
/// a differing token to count as a near-tie rather than a failure.
///
/// The logits are of order one, and a GPU's rounding differences from the
/// reference (tree sums, the last bits of `exp` and `sqrt`, fused
/// multiply-adds) move them by about 1e-6 (lavapipe's hidden state lies
/// 2e-7 from the reference's after 64 steps of the full model); 1e-3 is far
/// above that, while a wrong index, position or stale cache row moves
/// logits by tenths.
pub const NEAR_TIE: f32 = 1e-3;

/// How far the final hidden state may be from the reference's, relative to
/// `1 + max |reference|` ([`relative_error`]).
///
/// The host kernels run the reference's operations in its order and match
/// it bit for bit; the norms keep each layer's input at unit scale, so a
/// GPU's rounding stays near 1e-7 of the state (lavapipe: 2e-7 to 3e-7).
/// 1e-3 leaves room for GPUs with coarser `exp`, and a wrong position,
/// cache row or missing launch changes the state by tenths.
pub const HIDDEN_TOLERANCE: f32 = 1e-3;

/// A step where the device chose another token than the reference, within
/// [`NEAR_TIE`] of its best.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NearTie {
    /// The sequence.
    pub sequence: usize,
    /// The step, from 0.
    pub step: usize,
    /// The reference's choice.
    pub reference: u32,
    /// The device's.
    pub device: u32,
    /// The reference's best logit less its logit of the device's token.
    pub gap: f32,
}

/// What comparing a run with the reference found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Steps compared per sequence.
    pub steps: usize,
    /// Sequences compared.
    pub sequences: usize,
    /// Steps whose token the reference did not choose and whose logit lies
    /// more than [`NEAR_TIE`] below its best: each one a failure.
    pub mismatches: Vec<String>,
    /// Differing steps within [`NEAR_TIE`], reported, not failed.
    pub near_ties: Vec<NearTie>,
    /// The smallest gap between the reference's top two logits seen over
    /// every step: how near the run came to a tie.
    pub closest_gap: f32,
    /// [`relative_error`] of the device's final hidden state.
    pub hidden_error: f32,
}

impl Verdict {
    /// No mismatch, and the hidden state within [`HIDDEN_TOLERANCE`].
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty() && self.hidden_error <= HIDDEN_TOLERANCE
    }

    /// Steps whose token equals the reference's.
    pub fn agreeing(&self) -> usize {
        self.steps * self.sequences - self.mismatches.len() - self.near_ties.len()
    }

    /// One line: agreement, near-ties, closest gap and hidden-state error.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "{}/{} tokens as the reference, {} near-tie(s), closest top-two gap {:.1e}, \
             hidden state {:.1e} from it (tolerance {HIDDEN_TOLERANCE:.0e})",
            self.agreeing(),
            self.steps * self.sequences,
            self.near_ties.len(),
            self.closest_gap,
            self.hidden_error
        );
        for tie in &self.near_ties {
            line.push_str(&format!(
                "; near-tie at sequence {} step {}: {} for {} ({:.1e} below)",
                tie.sequence, tie.step, tie.device, tie.reference, tie.gap
            ));
        }
        if let Some(first) = self.mismatches.first() {
            line.push_str(&format!(
                "; {} mismatch(es), first: {first}",
                self.mismatches.len()
            ));
        }
        line
    }
}

/// Compare `tokens` (each sequence's generated tokens, from `starts`) and
/// `hidden` (the device's residual stream after the last step, row after
/// row) with the reference run on the same inputs.
///
/// The reference is fed the device's own tokens, so a near-tie does not
/// make every later step differ: each step is judged on the input the
/// device had.
pub fn check(weights: &Weights, starts: &[Start], tokens: &[Vec<u32>], hidden: &[f32]) -> Verdict {
    let h = weights.config.hidden as usize;
    let steps = tokens.iter().map(Vec::len).min().unwrap_or(0);
    let mut verdict = Verdict {
        steps,
        sequences: starts.len(),
        mismatches: Vec::new(),
        near_ties: Vec::new(),
        closest_gap: f32::INFINITY,
        hidden_error: 0.0,
    };
    if tokens.len() != starts.len() || hidden.len() != starts.len() * h {
        verdict.mismatches.push(format!(
            "{} token lists and {} hidden values for {} sequences",
            tokens.len(),
            hidden.len(),
            starts.len()
        ));
        return verdict;
    }
    for (b, (start, generated)) in starts.iter().zip(tokens).enumerate() {
        let mut sequence = Reference::new(weights, start.position);
        let mut input = start.token;
        for (step, &device) in generated.iter().enumerate().take(steps) {
            let logits = sequence.step(input);
            let want = argmax(&logits);
            verdict.closest_gap = verdict.closest_gap.min(top_gap(&logits));
            if device != want {
                let gap = match logits.get(device as usize) {
                    Some(&got) => logits[want as usize] - got,
                    None => f32::INFINITY,
                };
                if gap <= NEAR_TIE {
                    verdict.near_ties.push(NearTie {
                        sequence: b,
                        step,
                        reference: want,
                        device,
                        gap,
                    });
                } else {
                    verdict.mismatches.push(format!(
                        "sequence {b} step {step}: {device} where the reference chose {want} \
                         ({gap:.3} above it)"
                    ));
                }
            }
            input = device;
        }
        let error = relative_error(&hidden[b * h..(b + 1) * h], &sequence.hidden);
        verdict.hidden_error = verdict.hidden_error.max(error);
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::transformer::device::starts;
    use crate::workload::transformer::reference::Config;

    fn reference_run(
        weights: &Weights,
        starts: &[Start],
        steps: usize,
    ) -> (Vec<Vec<u32>>, Vec<f32>) {
        let mut tokens = Vec::new();
        let mut hidden = Vec::new();
        for start in starts {
            let mut sequence = Reference::new(weights, start.position);
            let mut input = start.token;
            let mut out = Vec::new();
            for _ in 0..steps {
                input = argmax(&sequence.step(input));
                out.push(input);
            }
            tokens.push(out);
            hidden.extend_from_slice(&sequence.hidden);
        }
        (tokens, hidden)
    }

    #[test]
    fn the_reference_passes_itself_and_a_changed_token_fails() {
        let weights = Weights::new(Config::SMALL);
        let starts = starts(2, &weights.config);
        let (mut tokens, hidden) = reference_run(&weights, &starts, 8);
        let verdict = check(&weights, &starts, &tokens, &hidden);
        assert!(verdict.passed(), "{}", verdict.summary());
        assert_eq!(verdict.agreeing(), 16);
        assert_eq!(verdict.hidden_error, 0.0);
        tokens[1][3] = (tokens[1][3] + 1) % weights.config.vocab;
        let verdict = check(&weights, &starts, &tokens, &hidden);
        assert!(!verdict.passed());
        assert!(
            verdict.mismatches[0].starts_with("sequence 1 step 3:"),
            "{}",
            verdict.summary()
        );
    }

    #[test]
    fn a_shifted_hidden_state_fails() {
        let weights = Weights::new(Config::SMALL);
        let starts = starts(1, &weights.config);
        let (tokens, mut hidden) = reference_run(&weights, &starts, 4);
        hidden[5] += 0.1;
        let verdict = check(&weights, &starts, &tokens, &hidden);
        assert!(verdict.hidden_error > HIDDEN_TOLERANCE);
        assert!(!verdict.passed());
    }
}
