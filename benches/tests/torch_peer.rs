//! `peers/python/torch_peer.py`, the PyTorch and CuPy side of the GPU run,
//! checked here without CUDA: against stand-ins for `torch` and `cupy` that
//! compute on the host, and with neither importable. Skips, saying why,
//! where no `python3` runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn peers_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("peers")
        .join("python")
}

/// The script's run with `path` as PYTHONPATH, or `None` without python3.
fn run(path: &Path) -> Option<Output> {
    let script = peers_python().join("torch_peer.py");
    match Command::new("python3")
        .arg(&script)
        .arg("--short")
        .env("PYTHONPATH", path)
        .env_remove("PEERS_REQUIRE_CUDA")
        .output()
    {
        Ok(output) => Some(output),
        Err(err) => {
            println!("skipped: no python3 to run {}: {err}", script.display());
            None
        }
    }
}

#[test]
fn the_peer_script_prints_each_peers_row_with_equal_outputs() {
    let Some(output) = run(&peers_python().join("fake")) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let peers: Vec<&str> = rows.iter().filter_map(|r| r["peer"].as_str()).collect();
    assert_eq!(peers, ["torch", "cupy"], "{stdout}");
    for row in &rows {
        assert_eq!(row["row"], "256 x10");
        for field in [
            "eager_us_per_kernel",
            "replay_us_per_kernel",
            "issue_us_per_eager",
            "issue_us_per_replay",
            "capture_us",
        ] {
            let value = row[field].as_f64().unwrap_or(-1.0);
            assert!(value > 0.0, "{field} is {value} in {row}");
        }
        // The warmup, three eager passes and three replays of ten add-ones
        // each, ping-ponging: the second buffer was written last.
        assert_eq!(row["outputs"], serde_json::json!([70.0, 69.0]), "{row}");
    }
}

#[test]
fn without_cuda_the_peer_script_says_so_in_one_line() {
    let none = std::env::temp_dir().join(format!("torch-peer-none-{}", std::process::id()));
    for module in ["torch", "cupy"] {
        let dir = none.join(module);
        std::fs::create_dir_all(&dir).expect("a folder");
        std::fs::write(
            dir.join("__init__.py"),
            format!("raise ImportError('no {module} here')\n"),
        )
        .expect("a module");
    }
    let Some(output) = run(&none) else {
        return;
    };
    std::fs::remove_dir_all(&none).ok();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.starts_with("torch_peer: no CUDA") && stdout.contains("no torch here"),
        "{stdout}"
    );
}
