//! Checks shared by the scenarios.

use capture_core::{Buffer, Builtin, Builtins, Client, Error, GraphDriver, StreamId};

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

/// Expect an error, failing the scenario if `step` succeeded.
pub fn refused<T>(result: Result<T, Error>, step: &str) -> Result<Error, String> {
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
pub fn usable<D: GraphDriver + Builtins>(client: &Client<D>, stream: StreamId) -> Outcome {
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
    let info = usage.info_entries as u64 * capture_core::pool::SLICE_ALIGN;
    Ok((
        usage.device.in_use_bytes.saturating_sub(info),
        usage.host.in_use_bytes,
    ))
}

/// Check that `stream`'s pools hold what they held at `baseline`.
pub fn back_to<D: GraphDriver>(
    client: &Client<D>,
    stream: StreamId,
    baseline: (u64, u64),
    what: &str,
) -> Outcome {
    let now = in_use(client, stream)?;
    ensure!(
        now == baseline,
        "{what}: pool usage (device, host) is {now:?}, expected it back at {baseline:?}"
    );
    Ok(())
}
