//! A loop inside a graph against the host driving it: `N` steps as `N`
//! replays, each followed by a read of the loop's flag (the host deciding
//! whether to go on), against one replay of a graph whose loop runs the `N`
//! steps on the device; and what an iteration the flag skips costs (on
//! Vulkan every iteration up to the bound is encoded, run or not).

use std::time::{Duration, Instant};

use conformance::workload::{UserKernels, Workload};
use graph_capture::{Buffer, Builtin, Client, Error, GraphHandle, StreamId};

/// Steps each generation makes.
pub const STEPS: u32 = 64;
/// Launches per step, besides the countdown that writes the flag.
pub const LAUNCHES: u32 = 8;
/// Elements each launch adds.
const ELEMENTS: u32 = 256;
/// Generations timed each way; the median is reported.
const ROUNDS: usize = 7;

/// What [`measure`] found, in seconds per generation.
#[derive(Debug, Clone, Copy)]
pub struct Looped {
    /// `STEPS` replays of a step, each followed by a read of the flag.
    pub stepwise: f64,
    /// One replay of the loop.
    pub looped: f64,
    /// One replay of the loop whose flag clears after one step.
    pub one_step: f64,
    /// One replay of one step, then a sync: the loop's floor.
    pub single: f64,
}

impl Looped {
    /// How much faster one replay generates than the host driving it.
    pub fn speedup(&self) -> f64 {
        self.stepwise / self.looped.max(1e-12)
    }

    /// Seconds an iteration the flag skips adds: the loop of one step run
    /// against one step alone, over the `STEPS - 1` iterations skipped.
    pub fn skipped(&self) -> f64 {
        (self.one_step - self.single).max(0.0) / f64::from(STEPS - 1)
    }
}

/// What a loop's generations run on: a step's buffers and kernels, and
/// the graphs that replay them.
pub struct Loop<D: UserKernels> {
    client: Client<D>,
    stream: StreamId,
    kernels: Workload<D>,
    counter: Buffer,
    flag: Buffer,
    x: Buffer,
    ones: Buffer,
    graphs: Option<Graphs<D>>,
}

/// The graphs a [`Loop`] replays: a step; the loop of `STEPS` armed for
/// `STEPS`; the same loop armed for one step.
struct Graphs<D: UserKernels> {
    step: GraphHandle<D>,
    looped: GraphHandle<D>,
    one_step: GraphHandle<D>,
}

impl<D: UserKernels> Loop<D> {
    /// The step's buffers and graphs on a new client of `D`; the reason,
    /// where the backend records no conditional.
    pub fn open() -> Result<Result<Self, String>, Error> {
        let client = Client::<D>::open()?;
        let stream = client.create_stream()?;
        let mut me = Self {
            kernels: Workload::new(client.device())?,
            counter: client.create_f32(stream, &[0.0])?,
            flag: client.create(stream, &0u32.to_le_bytes())?,
            x: client.create_f32(stream, &[0.0; ELEMENTS as usize])?,
            ones: client.create_f32(stream, &[1.0; ELEMENTS as usize])?,
            client,
            stream,
            graphs: None,
        };
        match me.capture() {
            Ok(graphs) => me.graphs = Some(graphs),
            Err(err) if matches!(err.root(), Error::NoConditionals { .. }) => {
                return Ok(Err(err.root().to_string()));
            }
            Err(err) => return Err(err),
        }
        Ok(Ok(me))
    }

    fn step(&self) -> Result<(), Error> {
        for _ in 0..LAUNCHES {
            self.client.run_builtin(
                self.stream,
                Builtin::Add,
                &[&self.x, &self.ones],
                ELEMENTS,
                0.0,
            )?;
        }
        self.kernels
            .countdown(&self.client, self.stream, &self.counter, &self.flag)
    }

    /// The counter set to `steps`, the flag raised, by kernels.
    fn arm(&self, steps: u32) -> Result<(), Error> {
        let c = &self.client;
        c.run_builtin(
            self.stream,
            Builtin::Fill,
            &[&self.counter],
            1,
            steps as f32,
        )?;
        c.run_builtin(self.stream, Builtin::Fill, &[&self.flag], 1, 1.0)
    }

    fn raised(&self) -> Result<bool, Error> {
        let bytes = self.client.read(&self.flag)?;
        Ok(bytes.iter().take(4).any(|&b| b != 0))
    }

    fn capture(&self) -> Result<Graphs<D>, Error> {
        let (c, s) = (&self.client, self.stream);
        let (step, ()) = c.capture(s, |_| self.step())?;
        let looped_with = |steps: u32| {
            c.capture(s, |_| {
                self.arm(steps)?;
                c.while_flag(s, &self.flag, STEPS, || self.step())
            })
            .map(|(graph, _)| graph)
        };
        Ok(Graphs {
            step,
            looped: looped_with(STEPS)?,
            one_step: looped_with(1)?,
        })
    }

    fn graphs(&self) -> Result<&Graphs<D>, Error> {
        self.graphs
            .as_ref()
            .ok_or_else(|| Error::BadLaunch("the loop was not captured".into()))
    }

    /// One generation the host drives: `STEPS` replays of a step, each
    /// followed by a read of the flag, through the last read.
    pub fn stepwise(&self) -> Result<(), Error> {
        let step = &self.graphs()?.step;
        self.arm(STEPS)?;
        for _ in 0..STEPS {
            self.client.replay(step)?;
            if !self.raised()? {
                break;
            }
        }
        Ok(())
    }

    /// One generation in one replay, through its sync.
    pub fn looped(&self) -> Result<(), Error> {
        self.client.replay(&self.graphs()?.looped)?;
        self.client.sync(self.stream)
    }

    /// The median of `ROUNDS` timings of `run`, each from an idle stream.
    fn time(&self, mut run: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
        let mut times: Vec<Duration> = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            self.client.sync(self.stream)?;
            let started = Instant::now();
            run()?;
            self.client.sync(self.stream)?;
            times.push(started.elapsed());
        }
        times.sort();
        Ok(times[times.len() / 2].as_secs_f64())
    }

    /// Each way timed; the loop's sum checked against its steps'.
    pub fn measure(&self) -> Result<Looped, Error> {
        let graphs = self.graphs()?;
        let stepwise = self.time(|| self.stepwise())?;
        let before = self.client.read_f32(&self.x)?[0];
        let looped = self.time(|| self.looped())?;
        let after = self.client.read_f32(&self.x)?[0];
        // Each replay of the loop adds `STEPS` steps of `LAUNCHES` ones.
        let want = (ROUNDS as u32 * STEPS * LAUNCHES) as f32;
        if after - before != want {
            return Err(Error::BadLaunch(format!(
                "the loops added {} where their steps add {want}",
                after - before
            )));
        }
        let one_step = self.time(|| self.client.replay(&graphs.one_step))?;
        let single = self.time(|| self.client.replay(&graphs.step))?;
        Ok(Looped {
            stepwise,
            looped,
            one_step,
            single,
        })
    }
}

/// The loop on `D` each way; the reason, where the backend records no
/// conditional.
pub fn measure<D: UserKernels>() -> Result<Result<Looped, String>, Error> {
    match Loop::<D>::open()? {
        Ok(fixture) => fixture.measure().map(Ok),
        Err(reason) => Ok(Err(reason)),
    }
}
