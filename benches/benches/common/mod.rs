//! What every criterion bench of this crate shares: its settings, the
//! per-backend loop and the start-up.

use std::process::ExitCode;
use std::time::Duration;

use benches::validation::validation_off;
use benches::{Backend, Visit, availability, each_backend};
use criterion::Criterion;

/// Criterion sized for a small machine: a short warm-up and measurement
/// and few samples.
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args()
}

/// A bench run once per available backend.
pub trait Bench {
    /// Register backend `D`'s benchmarks on `c`.
    fn bench<D: Backend>(c: &mut Criterion);
}

struct Runner<'a, B> {
    criterion: &'a mut Criterion,
    bench: std::marker::PhantomData<B>,
}

impl<B: Bench> Visit for Runner<'_, B> {
    fn visit<D: Backend>(&mut self) {
        match availability::<D>() {
            Ok(_) => B::bench::<D>(self.criterion),
            Err(reason) => eprintln!("{}: skipped, unavailable: {reason}", D::NAME),
        }
    }
}

/// A bench binary's `main`: Vulkan validation off, then `B` on every
/// available backend.
pub fn main<B: Bench>() -> ExitCode {
    match validation_off() {
        Ok(validation) => eprintln!("{}", validation.describe()),
        Err(code) => return code,
    }
    let mut criterion = criterion();
    each_backend(&mut Runner::<B> {
        criterion: &mut criterion,
        bench: std::marker::PhantomData,
    });
    criterion.final_summary();
    ExitCode::SUCCESS
}
