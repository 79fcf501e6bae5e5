//! `peers/python/torch_peer.py`, the PyTorch and CuPy side of the GPU run,
//! checked here without CUDA: against stand-ins for `torch` and `cupy` that
//! compute on the host, and with neither importable. Skips, saying why,
//! where no `python3` runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use benches::chain::rows;

fn peers_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("peers")
        .join("python")
}

/// The script's run with `path` as PYTHONPATH, or `None` without python3.
fn run(path: &Path) -> Option<Output> {
    run_with(path, "--short")
}

fn run_with(path: &Path, arg: &str) -> Option<Output> {
    let script = peers_python().join("torch_peer.py");
    let mut command = Command::new("python3");
    command
        .arg(&script)
        .arg(arg)
        .env("PYTHONPATH", path)
        .env_remove("PEERS_REQUIRE_CUDA");
    python(command, &script)
}

/// `command`'s output, or `None`, saying so, where python3 does not run.
fn python(mut command: Command, script: &Path) -> Option<Output> {
    match command.output() {
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

#[test]
fn the_peer_scripts_rows_are_the_benches_rows() {
    let Some(output) = run_with(&peers_python().join("fake"), "--rows") else {
        return;
    };
    assert!(output.status.success(), "{output:?}");
    let theirs: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let ours: Vec<serde_json::Value> = rows::all()
        .into_iter()
        .chain(rows::short())
        .map(|row| {
            serde_json::json!({
                "row": row.name(),
                "elems": row.elems,
                "kernels": row.kernels,
                "rounds": row.rounds,
                "control": row.control,
            })
        })
        .collect();
    assert_eq!(theirs, ours);
}

#[test]
fn our_chain_prints_the_peer_scripts_fields() {
    let Some(output) = run(&peers_python().join("fake")) else {
        return;
    };
    let theirs: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .expect("a row"),
    )
    .expect("JSON");
    let ours = Command::new(env!("CARGO_BIN_EXE_summary"))
        .args(["--chain", "--short", "--backend", "host"])
        .output()
        .expect("the summary runs");
    let stdout = String::from_utf8_lossy(&ours.stdout);
    assert!(
        ours.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let ours: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON row");
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&ours), keys(&theirs));
    assert_eq!(ours["peer"], "ours/host");
    assert_eq!(
        ours["outputs"], theirs["outputs"],
        "the same work on both sides"
    );
}

/// `scripts/peers-table` over `lines`, written to a file of their own, or
/// `None` without python3.
fn table(name: &str, lines: &str) -> Option<Output> {
    let file =
        std::env::temp_dir().join(format!("peers-table-{name}-{}.jsonl", std::process::id()));
    std::fs::write(&file, lines).expect("a file");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/peers-table");
    let mut command = Command::new("python3");
    command.arg(&script).arg(&file);
    let output = python(command, &script);
    std::fs::remove_file(&file).ok();
    output
}

#[test]
fn the_table_sets_ours_against_each_peer_and_refuses_differing_outputs() {
    let Some(peers) = run(&peers_python().join("fake")) else {
        return;
    };
    let ours = Command::new(env!("CARGO_BIN_EXE_summary"))
        .args(["--chain", "--short", "--backend", "host"])
        .output()
        .expect("the summary runs");
    let lines = format!(
        "{}{}",
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&peers.stdout)
    );
    let Some(output) = table("same", &lines) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for wanted in [
        "| row | cupy | ours/host | torch | ours/host / cupy | ours/host / torch |",
        "caller-thread time per replayed pass at most 0.5x PyTorch's: worst",
    ] {
        assert!(stdout.contains(wanted), "{wanted} missing from {stdout}");
    }
    let differing = lines.replacen("[70.0, 69.0]", "[71.0, 69.0]", 1);
    assert_ne!(differing, lines);
    let Some(output) = table("differing", &differing) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{stdout}");
    assert!(stdout.contains("the sides' outputs differ"), "{stdout}");
}
