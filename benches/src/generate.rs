//! Greedy generation with the transformer: one graph per batch size, their
//! temporaries shared, against the same steps issued eagerly; and what the
//! graph set holds in memory.

use std::time::Instant;

use conformance::workload::UserKernels;
pub use conformance::workload::transformer::SET_TARGET;
pub use conformance::workload::transformer::Whole;
use conformance::workload::transformer::{
    Config, GraphSet, SetMemory, Transformer, Weights, starts, whole_generation,
};
use graph_capture::{Client, Error};

/// The batch sizes, each with a graph.
pub const BATCHES: [u32; 4] = [1, 2, 4, 8];
/// Tokens per sequence timed each way.
pub const TOKENS: u32 = 16;

/// One batch size's rates.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    /// Sequences.
    pub batch: u32,
    /// Tokens per second, each step's launches issued eagerly.
    pub eager: f64,
    /// Tokens per second, each step its graph replayed.
    pub replay: f64,
}

/// Every batch size's rates and the graph set's memory.
#[derive(Debug, Clone)]
pub struct Figures {
    /// By batch size, smallest first.
    pub rates: Vec<Rate>,
    /// What the graph set holds.
    pub memory: SetMemory,
    /// The largest batch generated to each sequence's end token, at most
    /// `TOKENS` each, step by step and in one replay; the reason where the
    /// backend records no loop, `None` where the reference emits no usable
    /// end token.
    pub whole: Result<Option<Whole>, String>,
}

/// The model's tokens of every sequence after `TOKENS` steps of `step`.
fn generate<D: UserKernels>(
    client: &Client<D>,
    model: &Transformer<D>,
    batch: u32,
    mut step: impl FnMut() -> Result<(), Error>,
) -> Result<(f64, Vec<Vec<u32>>), Error> {
    let first = starts(batch, &model.config());
    model.reset(&first)?;
    client.sync(model.stream())?;
    let started = Instant::now();
    for _ in 0..TOKENS {
        step()?;
    }
    client.sync(model.stream())?;
    let rate = f64::from(batch * TOKENS) / started.elapsed().as_secs_f64().max(1e-12);
    Ok((rate, model.generated(&first)?))
}

/// Generate `TOKENS` tokens for each batch size on `D`, eagerly and
/// replayed. The replayed tokens must be the eager ones.
pub fn measure<D: UserKernels>() -> Result<Figures, Error> {
    let client = Client::<D>::open()?;
    let stream = client.create_stream()?;
    let weights = Weights::new(Config::FULL);
    let model = Transformer::new(&client, stream, &weights, BATCHES[BATCHES.len() - 1])?;
    // One step first, so neither side pays for a first use.
    model.reset(&starts(model.max_batch(), &model.config()))?;
    model.step(model.max_batch())?;
    let mut set = GraphSet::capture(&client, &model, &BATCHES)?;
    let mut rates = Vec::new();
    for batch in BATCHES {
        let (eager, eager_tokens) = generate(&client, &model, batch, || model.step(batch))?;
        let (replay, replayed) = generate(&client, &model, batch, || set.step(batch).map(drop))?;
        if replayed != eager_tokens {
            return Err(Error::BadLaunch(format!(
                "batch {batch}: the replayed tokens are not the eager ones"
            )));
        }
        rates.push(Rate {
            batch,
            eager,
            replay,
        });
    }
    let memory = set.memory.clone();
    drop(set);
    let largest = BATCHES[BATCHES.len() - 1];
    let whole = match whole_generation(&client, &weights, &model, largest, TOKENS) {
        Ok(whole) => Ok(whole),
        Err(err) if matches!(err.root(), Error::NoConditionals { .. }) => {
            Err(err.root().to_string())
        }
        Err(err) => return Err(err),
    };
    Ok(Figures {
        rates,
        memory,
        whole,
    })
}

/// The largest batch's steps with every matmul a foreign operation (the
/// backend's GEMM from another library: a CPU GEMM on the host), eagerly
/// and replayed from one graph, the tokens checked equal; `None` where the
/// backend has no foreign GEMM.
pub fn foreign_matmuls<D: UserKernels>() -> Result<Option<Rate>, Error> {
    let client = Client::<D>::open()?;
    let stream = client.create_stream()?;
    let weights = Weights::new(Config::FULL);
    let batch = BATCHES[BATCHES.len() - 1];
    let model = match Transformer::with_foreign_matmuls(&client, stream, &weights, batch) {
        Ok(model) => model,
        Err(Error::BadLaunch(why)) if why.contains("no foreign GEMM") => return Ok(None),
        Err(err) => return Err(err),
    };
    model.reset(&starts(batch, &model.config()))?;
    model.step(batch)?;
    let (graph, ()) = client.capture(stream, |_| model.step(batch))?;
    let (eager, eager_tokens) = generate(&client, &model, batch, || model.step(batch))?;
    let (replay, replayed) = generate(&client, &model, batch, || graph.replay())?;
    if replayed != eager_tokens {
        return Err(Error::BadLaunch(
            "with foreign matmuls, the replayed tokens are not the eager ones".into(),
        ));
    }
    Ok(Some(Rate {
        batch,
        eager,
        replay,
    }))
}
