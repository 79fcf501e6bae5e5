//! `cargo run --release -p conformance`: every scenario on every backend
//! compiled in, then a table per backend.

fn main() -> std::process::ExitCode {
    conformance::runner::main()
}
