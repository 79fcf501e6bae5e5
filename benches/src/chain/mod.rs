//! The side-by-side chain on any backend: K dependent add-one kernels
//! ping-ponging between two buffers of N floats, issued and then synced,
//! eagerly and as a replayed graph, timed round by round with the two paths
//! interleaved. Its figures are the JSON lines `peers/python/torch_peer.py`
//! prints for PyTorch and CuPy, so that `scripts/peers-table` sets them
//! side by side.

pub mod measure;
pub mod rows;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use conformance::workload::{UserKernel, grid};
use graph_capture::{Buffer, Client, Error, GraphHandle, Kernel, Params, StreamId};
use serde_json::json;

use crate::Backend;
use measure::{Measure, micros_per};
pub use rows::Row;

/// One backend's client, stream and add-one kernel.
pub struct Chain<D: Backend> {
    client: Client<D>,
    stream: StreamId,
    kernel: Kernel<D>,
}

/// One row's figures, as the peer script names them.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// End to end, through the sync, per kernel of an eager pass.
    pub eager_us_per_kernel: f64,
    /// End to end, through the sync, per kernel of a replayed pass.
    pub replay_us_per_kernel: f64,
    /// The caller's time to issue one eager pass.
    pub issue_us_per_eager: f64,
    /// The caller's time to issue one replay.
    pub issue_us_per_replay: f64,
    /// Recording the pass and making its graph, through a sync.
    pub capture_us: f64,
    /// The first element of each buffer at the end: the kernels run in all.
    pub outputs: [f32; 2],
}

impl Figures {
    /// The row as one JSON object, the peer script's fields, with `peer`
    /// naming the side.
    pub fn json(&self, peer: &str, row: &Row) -> serde_json::Value {
        json!({
            "peer": peer,
            "row": row.name(),
            "elems": row.elems,
            "kernels": row.kernels,
            "rounds": row.rounds,
            "control": row.control,
            "eager_us_per_kernel": self.eager_us_per_kernel,
            "replay_us_per_kernel": self.replay_us_per_kernel,
            "issue_us_per_eager": self.issue_us_per_eager,
            "issue_us_per_replay": self.issue_us_per_replay,
            "capture_us": self.capture_us,
            "outputs": self.outputs,
        })
    }
}

/// What both buffers' first elements hold after `row`: a warmup pass,
/// then an eager pass and a replay per round, each kernel writing its
/// source plus one into the other buffer.
pub fn expected_outputs(row: &Row) -> [f32; 2] {
    let mut values = [0.0f32; 2];
    for _ in 0..1 + 2 * row.rounds {
        for i in 0..row.kernels {
            let (src, dst) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
            values[dst] = values[src] + 1.0;
        }
    }
    values
}

impl<D: Backend> Chain<D> {
    /// Open `D`'s default device and build the kernel.
    pub fn open() -> Result<Self, Error> {
        let client = Client::<D>::open()?;
        Self::on(client)
    }

    /// The chain on `client`'s device, on a stream of its own.
    pub fn on(client: Client<D>) -> Result<Self, Error> {
        let stream = client.create_stream()?;
        let device: &Arc<D::Device> = client.device();
        // SAFETY: every launch of this kernel goes through `add_one`, which
        // checks that both buffers hold the `n` elements the kernel touches.
        #[allow(unsafe_code)]
        let kernel = unsafe { D::user_kernel(device, UserKernel::AddOne) }?;
        Ok(Self {
            client,
            stream,
            kernel: Kernel::new(kernel),
        })
    }

    /// The client, for what a caller reads of the device.
    pub fn client(&self) -> &Client<D> {
        &self.client
    }

    /// `dst[i] = src[i] + 1` for the first `n` elements.
    pub fn add_one(&self, src: &Buffer, dst: &Buffer, n: u32) -> Result<(), Error> {
        let need = u64::from(n) * 4;
        if src.len() < need || dst.len() < need {
            return Err(Error::BadLaunch(format!(
                "add_one over {n} elements needs {need} bytes in each buffer, \
                 {} holds {} and {} holds {}",
                src.id(),
                src.len(),
                dst.id(),
                dst.len()
            )));
        }
        let params = Params::new().u32(n);
        self.client.launch(
            self.stream,
            &self.kernel,
            grid(n),
            &[src, dst],
            &[],
            params.as_bytes(),
        )
    }

    /// One pass: `row.kernels` add-ones, `a` into `b`, then back.
    fn pass(&self, a: &Buffer, b: &Buffer, row: &Row) -> Result<(), Error> {
        let n = row.elems as u32;
        for i in 0..row.kernels {
            if i % 2 == 0 {
                self.add_one(a, b, n)?;
            } else {
                self.add_one(b, a, n)?;
            }
        }
        Ok(())
    }

    /// The graph of one pass, made as the peers make theirs: a warmup pass
    /// synced, then the pass recorded and instantiated (timed, through a
    /// sync).
    fn capture(&self, a: &Buffer, b: &Buffer, row: &Row) -> Result<(GraphHandle<D>, f64), Error> {
        let window = self.client.prepare(self.stream)?;
        self.pass(a, b, row)?;
        self.client.sync(self.stream)?;
        let start = Instant::now();
        self.client.begin(self.stream, window)?;
        self.pass(a, b, row)?;
        let graph = self.client.instantiate(self.stream, window)?;
        self.client.sync(self.stream)?;
        Ok((graph, start.elapsed().as_secs_f64() * 1e6))
    }

    /// `row`'s figures: its rounds, an eager pass then a replay in each,
    /// each timed through its sync. The outputs are read back and checked.
    pub fn run(&self, row: &Row) -> Result<Figures, String> {
        let err = |e: Error| e.to_string();
        let zeros = vec![0.0f32; row.elems];
        let a = self.client.create_f32(self.stream, &zeros).map_err(err)?;
        let b = self.client.create_f32(self.stream, &zeros).map_err(err)?;
        let (graph, capture_us) = self.capture(&a, &b, row).map_err(err)?;
        let mut eager = Measure::default();
        let mut replay = Measure::default();
        let failed = RefCell::new(None);
        let keep = |result: Result<(), Error>| {
            if let Err(e) = result {
                failed.borrow_mut().get_or_insert(e);
            }
        };
        for _ in 0..row.rounds {
            eager.round(
                || keep(self.pass(&a, &b, row)),
                || keep(self.client.sync(self.stream)),
            );
            replay.round(
                || keep(graph.replay()),
                || keep(self.client.sync(self.stream)),
            );
        }
        if let Some(e) = failed.into_inner() {
            return Err(err(e));
        }
        let first = |buffer: &Buffer| -> Result<f32, String> {
            let values = self.client.read_f32(buffer).map_err(err)?;
            Ok(values.first().copied().unwrap_or(f32::NAN))
        };
        let outputs = [first(&a)?, first(&b)?];
        if outputs != expected_outputs(row) {
            return Err(format!(
                "the chain's outputs are {outputs:?}, {:?} expected",
                expected_outputs(row)
            ));
        }
        let kernels = row.rounds * row.kernels;
        Ok(Figures {
            eager_us_per_kernel: micros_per(eager.total, kernels),
            replay_us_per_kernel: micros_per(replay.total, kernels),
            issue_us_per_eager: micros_per(eager.issue, row.rounds),
            issue_us_per_replay: micros_per(replay.issue, row.rounds),
            capture_us,
            outputs,
        })
    }
}
