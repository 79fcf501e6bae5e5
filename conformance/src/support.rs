//! Checks shared by the scenarios.

use crate::workload::UserKernels;
use graph_capture::{
    Buffer, Builtin, Client, DriverError, Error, GraphDriver, GraphHandle, StreamId,
};

/// What a scenario returns: `Err` says what was wrong.
pub type Outcome = Result<(), String>;

/// Fail the scenario with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!("{} (at {}:{})", format!($($msg)+), file!(), line!()));
        }
    };
}

/// Unwrap a result, failing the scenario with the step's name.
pub trait Step<T> {
    /// `Ok` value, or the scenario's failure naming `step`.
    fn step(self, step: &str) -> Result<T, String>;
}

impl<T> Step<T> for Result<T, Error> {
    fn step(self, step: &str) -> Result<T, String> {
        self.map_err(|err| format!("{step}: {err}"))
    }
}

impl<T> Step<T> for Result<T, DriverError> {
    fn step(self, step: &str) -> Result<T, String> {
        self.map_err(|err| format!("{step}: {err}"))
    }
}

/// Expect an error, failing the scenario if `step` succeeded.
pub fn refused<T, E>(result: Result<T, E>, step: &str) -> Result<E, String> {
    match result {
        Ok(_) => Err(format!("{step} succeeded but must be refused")),
        Err(err) => Ok(err),
    }
}

/// A value every sentinel buffer is filled with, distinct from anything a
/// scenario computes.
pub const SENTINEL: f32 = -7777.0;

/// Compare `got` with `want` element by element, exactly (every builtin
/// computes with exactly representable values in these scenarios).
pub fn same(got: &[f32], want: &[f32], what: &str) -> Outcome {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    if let Some((i, (g, w))) = got.iter().zip(want).enumerate().find(|(_, (g, w))| g != w) {
        return Err(format!("{what}: element {i} is {g}, expected {w}"));
    }
    Ok(())
}

/// Read `buffer` and compare it with `want`.
pub fn expect<D: GraphDriver>(
    client: &Client<D>,
    buffer: &Buffer,
    want: &[f32],
    what: &str,
) -> Outcome {
    let got = client
        .read_f32(buffer)
        .map_err(|err| format!("{what}: read failed: {err}"))?;
    same(&got, want, what)
}

/// Read `buffer` and check every element equals `value`.
pub fn expect_all<D: GraphDriver>(
    client: &Client<D>,
    buffer: &Buffer,
    value: f32,
    what: &str,
) -> Outcome {
    let n = usize::try_from(buffer.len() / 4).unwrap_or(0);
    expect(client, buffer, &vec![value; n], what)
}

/// Expect a read of `buffer` to fail because it is claimed, with a message
/// containing `mentions`.
pub fn expect_claimed<D: GraphDriver>(
    client: &Client<D>,
    buffer: &Buffer,
    mentions: &str,
    what: &str,
) -> Outcome {
    match client.read(buffer) {
        Ok(_) => Err(format!("{what}: read returned bytes nobody wrote")),
        Err(err @ Error::Claimed { .. }) => {
            let text = err.to_string();
            if text.contains(mentions) {
                Ok(())
            } else {
                Err(format!(
                    "{what}: claim `{text}` does not mention `{mentions}`"
                ))
            }
        }
        Err(other) => Err(format!(
            "{what}: read failed with {other}, expected a claim"
        )),
    }
}

/// `n` floats `start, start+1, ...`.
pub fn ramp(n: usize, start: f32) -> Vec<f32> {
    (0..n).map(|i| start + i as f32).collect()
}

/// Prove `stream` does eager work right: fill, add, read back.
pub fn usable<D: UserKernels>(client: &Client<D>, stream: StreamId) -> Outcome {
    let a = client
        .create_f32(stream, &[1.0; 70])
        .step("usable: create")?;
    let b = client
        .create_f32(stream, &[2.0; 70])
        .step("usable: create")?;
    client
        .run_builtin(stream, Builtin::Add, &[&a, &b], 70, 0.0)
        .step("usable: add")?;
    expect_all(client, &a, 3.0, "usable: stream works eagerly")
}

/// The bytes in use by `stream`'s pools after a sync, device and host,
/// leaving out the info cache's ordinary entries (one aligned slice each),
/// which stay cached on purpose.
pub fn in_use<D: GraphDriver>(client: &Client<D>, stream: StreamId) -> Result<(u64, u64), String> {
    client.sync(stream).step("sync for usage")?;
    let usage = client.usage(stream).step("usage")?;
    let info = usage.info_entries as u64 * graph_capture::SLICE_ALIGN;
    Ok((
        usage.device.in_use_bytes.saturating_sub(info),
        usage.host.in_use_bytes,
    ))
}

/// Check that `stream`'s pools hold what they held at `baseline`, once a
/// trim let go of the arena the stream keeps for its graphs' temporaries
/// (which a trim releases only when no graph holds it).
pub fn back_to<D: GraphDriver>(
    client: &Client<D>,
    stream: StreamId,
    baseline: (u64, u64),
    what: &str,
) -> Outcome {
    client.trim(stream).step("trim")?;
    let now = in_use(client, stream)?;
    ensure!(
        now == baseline,
        "{what}: pool usage (device, host) is {now:?}, expected it back at {baseline:?}"
    );
    Ok(())
}

/// Elements most scenarios work on: not a multiple of the workgroup size.
pub const N: u32 = 100;
/// [`N`] as a length.
pub const NU: usize = N as usize;

/// The setup most scenarios share: a stream with `x` (zeros) and `one`
/// (ones) of [`N`] floats, so `x += one` counts the runs that happened.
pub struct Fixture<D: GraphDriver> {
    /// The client.
    pub client: Client<D>,
    /// Its stream.
    pub stream: StreamId,
    /// The accumulator, zeros at first.
    pub x: Buffer,
    /// Ones.
    pub one: Buffer,
}

impl<D: UserKernels> Fixture<D> {
    /// A fresh stream on `client` with `x` and `one`.
    pub fn new(client: Client<D>) -> Result<Self, String> {
        let stream = client.create_stream().step("stream")?;
        let x = client.create_f32(stream, &[0.0; NU]).step("x")?;
        let one = client.create_f32(stream, &[1.0; NU]).step("one")?;
        Ok(Self {
            client,
            stream,
            x,
            one,
        })
    }

    /// Enqueue (or record) `x += one`.
    pub fn add(&self) -> Result<(), Error> {
        self.client
            .run_builtin(self.stream, Builtin::Add, &[&self.x, &self.one], N, 0.0)
    }

    /// Enqueue (or record) `x += one` through an intermediate allocated here
    /// (`tmp = one; x += tmp`), and hand the intermediate back: dropping it
    /// inside a window is how a captured run frees what it no longer needs.
    pub fn add_through_intermediate(&self) -> Result<Buffer, Error> {
        let tmp = self.client.allocate(self.stream, u64::from(N) * 4)?;
        self.client
            .run_builtin(self.stream, Builtin::Copy, &[&self.one, &tmp], N, 0.0)?;
        self.client
            .run_builtin(self.stream, Builtin::Add, &[&self.x, &tmp], N, 0.0)?;
        Ok(tmp)
    }

    /// Capture `x += one` in one call (its warmup adds one).
    pub fn capture_add(&self) -> Result<GraphHandle<D>, String> {
        let (graph, ()) = self
            .client
            .capture(self.stream, |_| self.add())
            .step("capture")?;
        Ok(graph)
    }

    /// Check `x` holds `value` everywhere.
    pub fn expect_x(&self, value: f32, what: &str) -> Outcome {
        expect_all(&self.client, &self.x, value, what)
    }
}

/// Claim `targets` the way a real failure does: fill each inside a window
/// that needs a new page mid-recording, which is refused at `instantiate`.
/// The claims name the allocation (`allocated while`).
pub fn claim_by_refused_window<D: UserKernels>(
    client: &Client<D>,
    stream: StreamId,
    targets: &[&Buffer],
) -> Outcome {
    let window = client.prepare(stream).step("prepare")?;
    client.begin(stream, window).step("begin")?;
    // Nothing was warmed: the recorded run needs a page the pool lacks.
    let grow = client
        .allocate(stream, 32 << 20)
        .step("allocate while recording")?;
    for target in targets {
        let n = u32::try_from(target.len() / 4).unwrap_or(u32::MAX);
        client
            .run_builtin(stream, Builtin::Fill, &[target], n, 9.0)
            .step("recorded fill")?;
    }
    let err = refused(client.instantiate(stream, window), "instantiate")?;
    ensure!(
        matches!(err.root(), Error::AllocationWhileRecording(_)),
        "refused for {err}, expected the allocation"
    );
    drop(grow);
    Ok(())
}

pub use crate::workload::foreign::DELIBERATE;

/// Keep the suite's own deliberate panics off stderr; every other panic is
/// reported as before.
pub fn quiet_deliberate_panics() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied());
            if !message.is_some_and(|m| m.starts_with(DELIBERATE)) {
                previous(info);
            }
        }));
    });
}
