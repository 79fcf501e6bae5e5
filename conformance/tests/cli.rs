//! The runner's command line as a person uses it: `--devices`, `--json`,
//! `--backend`, `--device`, the one line of a backend that cannot run, and
//! libtest's closing line. Each run is filtered to a trial or two.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// Two quick host trials.
const ONE: &str = "host::replay_matches_eager";
const TWO: &str = "host::recorded_write_replays_its_bytes";

struct Run {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn conformance(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(args)
        .env_remove("CONFORMANCE_REQUIRE")
        .env_remove(graph_capture::host::DEVICE_ENV)
        .output()
        .expect("the conformance binary runs");
    Run {
        ok: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn scratch(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}.json", std::process::id()))
}

/// The lines a trial printed as it finished: they start with its name.
fn trial_lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

#[test]
fn devices_lists_the_host_and_each_of_its_devices() {
    let run = conformance(&["--devices"]);
    assert!(run.ok, "{}{}", run.stdout, run.stderr);
    let plural = if graph_capture::host::DEVICES == 1 {
        ""
    } else {
        "s"
    };
    assert!(
        run.stdout.contains(&format!(
            "host: {} device{plural}",
            graph_capture::host::DEVICES
        )),
        "{}",
        run.stdout
    );
    for index in 0..graph_capture::host::DEVICES {
        assert!(
            run.stdout.contains(&format!("host reference {index}")),
            "device {index} is listed:\n{}",
            run.stdout
        );
    }
    assert!(run.stdout.contains("CPU"), "its kind:\n{}", run.stdout);
    assert!(
        run.stdout.contains("  * 0  host reference 0"),
        "the default is marked:\n{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("test result"),
        "nothing runs:\n{}",
        run.stdout
    );
    // Every backend this build knows says what it sees, or that it is not
    // compiled in.
    for known in conformance::backends() {
        assert!(
            run.stdout.contains(&format!("{}: ", known.name)),
            "{} is listed:\n{}",
            known.name,
            run.stdout
        );
    }
}

#[test]
fn devices_with_backend_lists_only_that_backend() {
    let run = conformance(&["--devices", "--backend", "host"]);
    assert!(run.ok, "{}{}", run.stdout, run.stderr);
    let backends: Vec<_> = run.stdout.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(backends.len(), 1, "{}", run.stdout);
    assert!(backends[0].starts_with("host: "), "{}", run.stdout);
}

#[cfg(feature = "hip")]
#[test]
fn devices_lists_every_library_hip_tried() {
    let run = conformance(&["--devices", "--backend", "hip"]);
    assert!(run.ok, "{}{}", run.stdout, run.stderr);
    let tried: Vec<_> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("  tried "))
        .collect();
    assert_eq!(
        tried.len(),
        graph_capture::hip::library_search().len(),
        "{}",
        run.stdout
    );
}

#[test]
fn json_has_the_table_and_every_selected_trial() {
    let path = scratch("two-trials");
    let run = conformance(&["--exact", ONE, TWO, "--json", path.to_str().unwrap()]);
    assert!(run.ok, "{}{}", run.stdout, run.stderr);
    let text = std::fs::read_to_string(&path).expect("--json wrote its file");
    let _ = std::fs::remove_file(&path);
    let json: Value = serde_json::from_str(&text).expect("the file is JSON");
    for key in [
        "result",
        "passed",
        "failed",
        "ignored",
        "filtered_out",
        "seconds",
        "backends",
        "trials",
    ] {
        assert!(json.get(key).is_some(), "no {key}: {json}");
    }
    assert_eq!(json["result"], "ok");
    assert_eq!(json["passed"], 2);
    assert!(json["filtered_out"].as_u64().unwrap() > 0, "{json}");

    let trials = json["trials"].as_array().unwrap();
    let mut names: Vec<_> = trials.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    let mut expected = [ONE, TWO];
    expected.sort_unstable();
    assert_eq!(names, expected);
    for trial in trials {
        for key in [
            "backend", "scenario", "outcome", "seconds", "ran", "message",
        ] {
            assert!(trial.get(key).is_some(), "no {key}: {trial}");
        }
        assert_eq!(trial["backend"], "host");
        assert_eq!(trial["outcome"], "passed");
        assert!(trial["seconds"].as_f64().unwrap() >= 0.0);
    }

    let backends = json["backends"].as_array().unwrap();
    let host = backends
        .iter()
        .find(|b| b["name"] == "host")
        .expect("a host entry");
    for key in [
        "state",
        "device",
        "driver",
        "index",
        "kind",
        "memory_bytes",
        "passed",
        "failed",
        "ignored",
        "seconds",
        "validation",
    ] {
        assert!(host.get(key).is_some(), "no {key}: {host}");
    }
    assert_eq!(host["state"], "available");
    assert_eq!(host["passed"], 2);
    assert_eq!(host["failed"], 0);
    assert_eq!(host["index"], 0);
    assert!(
        host["validation"].is_null(),
        "the host has no validation layer"
    );
    assert!(
        host["device"]
            .as_str()
            .unwrap()
            .contains("host reference 0"),
        "{host}"
    );
    assert_eq!(
        backends.len(),
        conformance::backends().len(),
        "a row per known backend: {json}"
    );
}

#[test]
fn backend_host_runs_only_host_trials() {
    // The filter matches this scenario on every backend.
    let run = conformance(&["--backend", "host", "::replay_matches_eager"]);
    assert!(run.ok, "{}{}", run.stdout, run.stderr);
    // Once kept as a dependency graph, once as a chain.
    let mut ran: Vec<&str> = trial_lines(&run.stdout, "host::")
        .iter()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    ran.sort_unstable();
    assert_eq!(ran, ["host::chain::replay_matches_eager", ONE]);
    for other in conformance::backends().iter().filter(|b| b.name != "host") {
        assert!(
            !run.stdout.contains(&format!("{}:", other.name))
                && !run.stdout.contains(&format!("| {} |", other.name)),
            "{} is left out:\n{}",
            other.name,
            run.stdout
        );
    }
    assert!(
        run.stdout
            .contains("test result: ok. 2 passed; 0 failed; 0 ignored;"),
        "{}",
        run.stdout
    );

    let list = conformance(&["--backend=host", "--list"]);
    assert!(list.ok, "{}{}", list.stdout, list.stderr);
    let listed: Vec<_> = list.stdout.lines().collect();
    assert!(!listed.is_empty());
    assert!(
        listed
            .iter()
            .all(|l| l.starts_with("host::") && l.ends_with(": test")),
        "{}",
        list.stdout
    );
}

#[test]
fn device_opens_the_index_asked_for() {
    let path = scratch("device-one");
    let run = conformance(&[
        "--backend",
        "host",
        "--device",
        "1",
        "--exact",
        ONE,
        "--json",
        path.to_str().unwrap(),
    ]);
    assert!(run.ok, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("host: 1 trial, device 1: host reference 1"),
        "{}",
        run.stdout
    );
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(json["backends"][0]["index"], 1);
    assert_eq!(json["backends"][0]["passed"], 1);
}

#[test]
fn a_backend_without_its_device_prints_one_line_with_the_reason() {
    let missing = graph_capture::host::DEVICES + 5;
    let index = missing.to_string();
    let run = conformance(&["--device", &index, "host::"]);
    assert!(
        run.ok,
        "ignored is not failed:\n{}{}",
        run.stdout, run.stderr
    );
    let lines: Vec<_> = run
        .stdout
        .lines()
        .filter(|l| l.contains(&format!("host device {missing} does not exist")))
        .collect();
    // Every scenario runs twice: as dependency graphs and as chains.
    let scenarios = 2 * conformance::scenarios::<graph_capture::host::Host>().len();
    // Once where the trials would run, once under the table.
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(
        lines[0].starts_with(&format!("host: {scenarios} trials ignored, unavailable: ")),
        "{}",
        run.stdout
    );
    assert!(
        trial_lines(&run.stdout, "host::").is_empty(),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "test result: ok. 0 passed; 0 failed; {scenarios} ignored;"
        )),
        "{}",
        run.stdout
    );

    // Named by --backend, it must run: the same line fails the run.
    let run = conformance(&["--backend", "host", "--device", &index, "--exact", ONE]);
    assert_eq!(run.code, Some(101), "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("host: 1 trial FAILED, required (--backend) but unavailable: "),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("test result: FAILED. 0 passed; 1 failed;"),
        "{}",
        run.stdout
    );
}

#[test]
fn every_trial_line_fits_80_columns() {
    let run = conformance(&["--exact", ONE, TWO]);
    assert!(run.ok, "{}{}", run.stdout, run.stderr);
    let lines = trial_lines(&run.stdout, "host::");
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    for line in lines {
        assert!(line.chars().count() < 80, "{line}");
        assert!(line.contains(" ok ") && line.ends_with('s'), "{line}");
    }
}

#[test]
fn every_line_of_a_run_fits_100_columns() {
    // Every backend compiled into this build, available or not, with the
    // reasons of those that are not (a driver's message, paths tried).
    for args in [&["--exact", ONE][..], &["--devices"]] {
        let run = conformance(args);
        assert!(run.ok, "{}{}", run.stdout, run.stderr);
        // A markdown table row cannot wrap; everything else does.
        for line in run.stdout.lines().filter(|l| !l.starts_with('|')) {
            assert!(
                line.chars().count() <= conformance::runner::report::WRAP_WIDTH,
                "{} columns: {line}",
                line.chars().count()
            );
        }
    }
}

#[test]
fn a_command_line_it_cannot_follow_is_refused() {
    for args in [
        &["--backend", "metal"][..],
        &["--device", "first"],
        &["--no-such-flag"],
    ] {
        let run = conformance(args);
        assert_eq!(run.code, Some(2), "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.starts_with("error: "),
            "{args:?}: {}",
            run.stderr
        );
    }
    let help = conformance(&["--help"]);
    assert!(
        help.ok && help.stdout.contains("--devices"),
        "{}",
        help.stdout
    );
}

#[test]
fn a_required_backend_this_build_lacks_fails_its_own_trial() {
    let Some(absent) = conformance::backends().iter().find(|b| !b.compiled_in) else {
        eprintln!("skipped: every backend is compiled in");
        return;
    };
    let output = Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(["--exact", ONE, &format!("{}::compiled_in", absent.name)])
        .env("CONFORMANCE_REQUIRE", absent.name)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(101), "{text}");
    assert!(text.contains(&absent.how_to_build()), "{text}");
    assert!(
        text.contains("test result: FAILED. 1 passed; 1 failed;"),
        "{text}"
    );
}

#[test]
fn dot_writes_the_graph_of_the_dependencies_scenario() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dot-{}", std::process::id()));
    let run = conformance(&[
        "--backend",
        "host",
        "--dot",
        dir.to_str().expect("a UTF-8 path"),
        "--exact",
        "host::a_graph_draws_its_dependencies",
    ]);
    assert!(run.ok, "{}\n{}", run.stdout, run.stderr);
    let dot = std::fs::read_to_string(dir.join("host-dependencies.dot")).expect("the DOT file");
    assert!(
        dot.starts_with("digraph \"graph ") && dot.contains(" -> "),
        "{dot}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
