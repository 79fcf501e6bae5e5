//! The suite under cargo's test conventions (filters, `--list`,
//! `--exact`, `--test-threads`, ...): the same trials and options as the
//! binary.

fn main() -> std::process::ExitCode {
    conformance::runner::main()
}
