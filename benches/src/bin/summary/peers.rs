//! `--peers`: the side-by-side with cubecl, which lives in its own crate
//! (`peers/`, outside the workspace, so that everyday builds do not pay for
//! cubecl), built and run from here.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Run the peers binary in release, its rows printed as they come.
pub fn run() -> ExitCode {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("peers")
        .join("Cargo.toml");
    println!("### side by side with cubecl\n");
    println!(
        "- `peers/`: a chain of K dependent add-one kernels over two buffers (cubecl's own \
         graph bench shape), through cubecl 0.12.0-pre.1 and through graph-capture in one \
         process, interleaved round by round; ours against cubecl's\n"
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["run", "--release", "--manifest-path"])
        .arg(&manifest)
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("peers: {status}");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("peers: could not run cargo: {err}");
            ExitCode::FAILURE
        }
    }
}
