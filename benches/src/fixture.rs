//! One client, one stream and the two buffers every measured `add` launch
//! works on, with the count of adds that tells what `x` must hold.

use graph_capture::{Buffer, Builtin, Client, GraphHandle, StreamId};

use crate::backends::Backend;
use crate::failure::{Failure, Result};
use crate::sizes::ELEMENTS;

/// Adds beyond which an `f32` counter no longer counts exactly (2^24).
const EXACT_LIMIT: u64 = 1 << 24;

/// A captured graph of `add` launches, with their number.
pub struct AddGraph<D: Backend> {
    /// The graph.
    pub graph: GraphHandle<D>,
    /// Adds one replay of it runs.
    pub launches: u64,
}

/// A client on backend `D` with `x` (all zero) and `y` (all one): every
/// `add` launch (`x += y`) raises each element of `x` by one, so after `k`
/// adds `x` holds `k` everywhere.
pub struct Fixture<D: Backend> {
    /// The client every measurement goes through.
    pub client: Client<D>,
    /// The stream everything runs on.
    pub stream: StreamId,
    /// The accumulator, read back by [`Fixture::check`].
    pub x: Buffer,
    /// The addend, all ones.
    pub y: Buffer,
    adds: u64,
}

impl<D: Backend> Fixture<D> {
    /// Open `D`'s device and set up the stream and buffers.
    pub fn open() -> Result<Self> {
        let client = Client::<D>::open()?;
        let stream = client.create_stream()?;
        let len = ELEMENTS as usize;
        let x = client.create_f32(stream, &vec![0.0; len])?;
        let y = client.create_f32(stream, &vec![1.0; len])?;
        // Compile the kernel now, not inside the first measured launch:
        // one add, then x back to zeros.
        client.run_builtin(stream, Builtin::Add, &[&x, &y], ELEMENTS, 0.0)?;
        client.write_f32(&x, &vec![0.0; len])?;
        client.sync(stream)?;
        Ok(Self {
            client,
            stream,
            x,
            y,
            adds: 0,
        })
    }

    /// Issue one `add` through capture-core (recorded, inside a window).
    /// Does not count it: call [`Fixture::count`] for the adds that run.
    pub fn add(&self) -> Result<()> {
        self.client
            .run_builtin(
                self.stream,
                Builtin::Add,
                &[&self.x, &self.y],
                ELEMENTS,
                0.0,
            )
            .map_err(Failure::from)
    }

    /// A graph of `launches` adds, captured in one call (its warmup pass runs
    /// the adds for real, and is counted).
    pub fn graph(&mut self, launches: u64) -> Result<AddGraph<D>> {
        let (graph, ()) = self.client.capture(self.stream, |_pass| {
            for _ in 0..launches {
                self.client.run_builtin(
                    self.stream,
                    Builtin::Add,
                    &[&self.x, &self.y],
                    ELEMENTS,
                    0.0,
                )?;
            }
            Ok(())
        })?;
        self.count(launches);
        Ok(AddGraph { graph, launches })
    }

    /// Record that `adds` more adds were issued to run.
    pub fn count(&mut self, adds: u64) {
        self.adds += adds;
    }

    /// Read `x` back and compare every element with the adds counted; then
    /// zero `x` and the count, so that the next measurement starts afresh
    /// and the count stays where `f32` is exact.
    pub fn check(&mut self) -> Result<()> {
        let expected = self.adds;
        if expected > EXACT_LIMIT {
            return Err(Failure(format!(
                "{expected} adds since the last check: more than an f32 counts exactly; \
                 check more often"
            )));
        }
        let values = self.client.read_f32(&self.x)?;
        if let Some((i, v)) = values
            .iter()
            .enumerate()
            .find(|(_, v)| **v != expected as f32)
        {
            return Err(Failure(format!(
                "{}: x[{i}] = {v} after {expected} adds of 1.0",
                D::NAME
            )));
        }
        self.client
            .write_f32(&self.x, &vec![0.0; ELEMENTS as usize])?;
        self.adds = 0;
        Ok(())
    }
}
