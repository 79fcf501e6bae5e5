//! `cargo run --release -p conformance [--features vulkan,cuda,hip] -- [OPTIONS] [FILTER...]`:
//! every scenario on every backend compiled in, a line per trial, then a
//! table per backend. `--help` lists the options (`--devices`,
//! `--backend`, `--device`, `--json`, and libtest's).

fn main() -> std::process::ExitCode {
    conformance::runner::main()
}
