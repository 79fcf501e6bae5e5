//! Work a dependency graph runs side by side: eight matrix-vector products
//! of one input, then their sum as a tree of adds, replayed with the graph
//! kept as a chain and as its dependency graph; and the decode step, which
//! is one chain whichever way it is kept.

use std::time::Instant;

use conformance::workload::decode::{self, Shape};
use conformance::workload::{UserKernels, Workload};
use graph_capture::{Client, Config, Error, GraphInfo, ReplayOrder};

/// Independent products.
pub const BRANCHES: usize = 8;
/// Rows and columns of each product's matrix.
pub const SIZE: u32 = 512;
/// Replays timed per measurement.
pub const REPLAYS: usize = 100;

/// A client whose graphs keep `order`.
fn client<D: UserKernels>(order: ReplayOrder) -> Result<Client<D>, Error> {
    Client::open_with(Config {
        replay_order: order,
        ..Config::default()
    })
}

/// Deterministic values in [-0.5, 0.5).
fn values(seed: u32, n: usize) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let mut v = (i ^ seed.rotate_left(16)).wrapping_mul(0x9E37_79B9) ^ seed;
            v ^= v >> 15;
            v = v.wrapping_mul(0x85EB_CA6B);
            v ^= v >> 13;
            (v >> 8) as f32 / (1 << 24) as f32 - 0.5
        })
        .collect()
}

/// The products and their tree of sums, on the host, in the kernels' order.
fn reference(weights: &[Vec<f32>], x: &[f32]) -> Vec<f32> {
    let n = SIZE as usize;
    let mut ys: Vec<Vec<f32>> = weights
        .iter()
        .map(|w| {
            (0..n)
                .map(|r| (0..n).fold(0.0f32, |sum, c| sum + w[r * n + c] * x[c]))
                .collect()
        })
        .collect();
    let mut stride = 1;
    while stride < BRANCHES {
        for i in (0..BRANCHES).step_by(2 * stride) {
            let (left, right) = ys.split_at_mut(i + stride);
            for (a, b) in left[i].iter_mut().zip(&right[0]) {
                *a += b;
            }
        }
        stride *= 2;
    }
    ys.swap_remove(0)
}

/// Seconds per replay of the wide graph kept as `order`, and its info; the
/// sum is checked against the host's.
pub fn wide_seconds<D: UserKernels>(order: ReplayOrder) -> Result<(f64, GraphInfo), Error> {
    let client = client::<D>(order)?;
    let stream = client.create_stream()?;
    let kernels = Workload::<D>::new(client.device())?;
    let n = SIZE as usize;
    let weights: Vec<Vec<f32>> = (0..BRANCHES as u32).map(|b| values(b + 1, n * n)).collect();
    let input = values(99, n);
    let x = client.create_f32(stream, &input)?;
    let ws = weights
        .iter()
        .map(|w| client.create_f32(stream, w))
        .collect::<Result<Vec<_>, _>>()?;
    let ys = (0..BRANCHES)
        .map(|_| client.create_f32(stream, &vec![0.0; n]))
        .collect::<Result<Vec<_>, _>>()?;
    let (graph, ()) = client.capture(stream, |_| {
        for (w, y) in ws.iter().zip(&ys) {
            kernels.matvec(&client, stream, w, &x, y, SIZE, SIZE)?;
        }
        let mut stride = 1;
        while stride < BRANCHES {
            for i in (0..BRANCHES).step_by(2 * stride) {
                kernels.residual(&client, stream, &ys[i], &ys[i + stride], SIZE)?;
            }
            stride *= 2;
        }
        Ok(())
    })?;
    graph.replay()?;
    client.sync(stream)?;
    let want = reference(&weights, &input);
    let got = client.read_f32(&ys[0])?;
    let error = decode::relative_error(&got, &want);
    if error > 1e-4 {
        return Err(Error::BadLaunch(format!(
            "the wide graph kept as {order:?} summed with relative error {error}"
        )));
    }
    let started = Instant::now();
    for _ in 0..REPLAYS {
        graph.replay()?;
    }
    client.sync(stream)?;
    let seconds = started.elapsed().as_secs_f64() / REPLAYS as f64;
    Ok((seconds, client.graph_info(&graph)?))
}

/// Seconds per replay of the decode step kept as `order`.
pub fn decode_seconds<D: UserKernels>(order: ReplayOrder) -> Result<f64, Error> {
    let client = client::<D>(order)?;
    let stream = client.create_stream()?;
    let model = decode::Model::new(Shape::DECODE);
    let decoder = decode::Decoder::new(&client, stream, &model)?;
    let graph = decoder.capture()?;
    graph.replay()?;
    client.sync(stream)?;
    let started = Instant::now();
    for _ in 0..REPLAYS {
        graph.replay()?;
    }
    client.sync(stream)?;
    Ok(started.elapsed().as_secs_f64() / REPLAYS as f64)
}

/// One backend's figures: seconds per replay, chain then dependency graph.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// The wide workload.
    pub wide: (f64, f64),
    /// Its dependency graph's depth and width.
    pub shape: (usize, usize),
    /// The decode step.
    pub decode: (f64, f64),
}

impl Figures {
    /// How much faster the wide workload replays as a dependency graph.
    pub fn wide_speedup(&self) -> f64 {
        self.wide.0 / self.wide.1
    }

    /// How much faster the decode step replays as a dependency graph.
    pub fn decode_speedup(&self) -> f64 {
        self.decode.0 / self.decode.1
    }
}

/// Runs of each measurement; the fastest counts.
pub const RUNS: usize = 5;

/// Both workloads both ways, the fastest of [`RUNS`] runs of each.
pub fn measure<D: UserKernels>() -> Result<Figures, Error> {
    let best = |f: &dyn Fn() -> Result<f64, Error>| -> Result<f64, Error> {
        (0..RUNS).try_fold(f64::MAX, |best, _| Ok(best.min(f()?)))
    };
    let (_, info) = wide_seconds::<D>(ReplayOrder::Dependencies)?;
    Ok(Figures {
        wide: (
            best(&|| wide_seconds::<D>(ReplayOrder::Chain).map(|(s, _)| s))?,
            best(&|| wide_seconds::<D>(ReplayOrder::Dependencies).map(|(s, _)| s))?,
        ),
        shape: (info.depth, info.width),
        decode: (
            best(&|| decode_seconds::<D>(ReplayOrder::Chain))?,
            best(&|| decode_seconds::<D>(ReplayOrder::Dependencies))?,
        ),
    })
}
