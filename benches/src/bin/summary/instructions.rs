//! The host's per-call costs as instructions on the calling thread, counted
//! by callgrind: unlike nanoseconds, which a shared VM moves by 3x between
//! runs, an instruction count changes only when the code does.
//!
//! The summary runs itself under `valgrind --tool=callgrind` once per probe
//! (`--instructions-probe NAME`), collecting only inside [`probe_region`],
//! where the probe makes [`CALLS`] calls and nothing else; the queue is
//! synced outside it.

use std::path::Path;
use std::process::Command;

use benches::failure::Failure;
use benches::fixture::Fixture;
use benches::raw::{RawAdd, raw_sync};
use graph_capture::host::Host;
use graph_capture::{Driver, GraphDriver};

/// Calls each probe makes inside the collected region.
pub const CALLS: u64 = 2_000;

/// The probes: a replay and an eager launch, each through the core and
/// through the raw driver.
pub const PROBES: [&str; 4] = ["replay-core", "replay-raw", "eager-core", "eager-raw"];

/// Instructions per call of each probe, on the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// A replay through the core.
    pub replay_core: f64,
    /// The same replay through the raw driver.
    pub replay_raw: f64,
    /// An eager launch through the core.
    pub eager_core: f64,
    /// The same launch through the raw driver.
    pub eager_raw: f64,
}

/// Run every probe under callgrind; `Err` says why not (no valgrind).
pub fn count() -> Result<Counts, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("summary-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut per_call = [0.0; 4];
    for (probe, out) in PROBES.iter().zip(per_call.iter_mut()) {
        *out = run_probe(&exe, &dir, probe)? / CALLS as f64;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Counts {
        replay_core: per_call[0],
        replay_raw: per_call[1],
        eager_core: per_call[2],
        eager_raw: per_call[3],
    })
}

/// The instructions callgrind counted inside the probe's region.
fn run_probe(exe: &Path, dir: &Path, probe: &str) -> Result<f64, String> {
    let out = dir.join(format!("{probe}.out"));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=*probe_region*")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .args(["--instructions-probe", probe])
        .env("CAPTURE_HOST_DEVICE", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("valgrind: {e}"))?;
    if !status.success() {
        return Err(format!("valgrind on probe {probe}: {status}"));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|line| {
            line.strip_prefix("totals:")
                .or_else(|| line.strip_prefix("summary:"))
        })
        .and_then(|n| n.split_whitespace().next()?.parse::<f64>().ok())
        .ok_or_else(|| format!("no totals in {}", out.display()))
}

/// The probe's calls, the only code callgrind collects.
#[inline(never)]
fn probe_region(calls: &mut dyn FnMut() -> Result<(), String>) -> Result<(), String> {
    for _ in 0..CALLS {
        calls()?;
    }
    Ok(())
}

/// Run probe `name` (in the child callgrind runs).
pub fn probe(name: &str) -> Result<(), String> {
    let err = |e: Failure| e.to_string();
    let mut fx = Fixture::<Host>::open().map_err(err)?;
    let graph = fx.graph(1).map_err(err)?;
    let raw = RawAdd::new(&fx).map_err(err)?;
    let fx = &fx;
    match name {
        "replay-core" => {
            fx.client.replay(&graph.graph).map_err(|e| e.to_string())?;
            probe_region(&mut || fx.client.replay(&graph.graph).map_err(|e| e.to_string()))?;
        }
        "replay-raw" => fx
            .client
            .with_raw_graph(&graph.graph, |exec, stream| {
                Host::replay(exec, stream).map_err(|e| e.to_string())?;
                probe_region(&mut || Host::replay(exec, stream).map_err(|e| e.to_string()))?;
                raw_sync::<Host>(stream).map_err(|e| e.to_string())
            })
            .map_err(|e| e.to_string())??,
        "eager-core" => {
            fx.add().map_err(err)?;
            probe_region(&mut || fx.add().map_err(err))?;
        }
        "eager-raw" => {
            let buffers = [&fx.x, &fx.y, &raw.info];
            fx.client
                .with_raw_stream(fx.stream, &buffers, |stream, slices| {
                    let bindings = RawAdd::<Host>::bindings(slices);
                    let launch = |s: &mut <Host as Driver>::Stream| {
                        Host::launch(s, raw.launch(&bindings, slices[2])).map_err(|e| e.to_string())
                    };
                    launch(stream)?;
                    probe_region(&mut || launch(stream))?;
                    raw_sync::<Host>(stream).map_err(|e| e.to_string())
                })
                .map_err(|e| e.to_string())??;
        }
        other => return Err(format!("no probe {other}")),
    }
    fx.client.sync(fx.stream).map_err(|e| e.to_string())
}
