//! The suite under cargo's test conventions (filters, `--list`,
//! `--include-ignored`): the same trials as the binary.

fn main() -> std::process::ExitCode {
    conformance::runner::main()
}
