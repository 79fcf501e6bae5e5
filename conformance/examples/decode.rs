//! A decode step of a small transformer-like model, written as user kernels
//! and run on one backend: eagerly and as a replayed graph, both checked
//! against a plain-Rust reference.
//!
//! ```sh
//! cargo run --release -p conformance --example decode -- --backend host
//! cargo run --release -p conformance --features vulkan --example decode -- --backend vulkan
//! ```
//!
//! Options: `--backend host|vulkan|cuda|hip` (default host), `--steps N`
//! (default 100), `--small` for the 8-layer model the tests use.

use std::process::ExitCode;

use conformance::UserKernels;
use conformance::workload::decode::{Figures, Shape, TOLERANCE, measure};
use graph_capture::{Client, Error};

struct Options {
    backend: String,
    steps: usize,
    shape: Shape,
}

fn parse() -> Result<Options, lexopt::Error> {
    use lexopt::prelude::*;
    let mut options = Options {
        backend: "host".into(),
        steps: 100,
        shape: Shape::DECODE,
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("backend") => options.backend = parser.value()?.string()?,
            Long("steps") => options.steps = parser.value()?.parse()?,
            Long("small") => options.shape = Shape::SMALL,
            Long("help") | Short('h') => {
                println!("usage: decode [--backend host|vulkan|cuda|hip] [--steps N] [--small]");
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    if options.steps == 0 {
        return Err("--steps must be at least 1".into());
    }
    Ok(options)
}

fn run<D: UserKernels>(options: &Options) -> Result<Figures, Error> {
    let client = Client::<D>::open()?;
    let info = client.device_info();
    println!("{}: {} ({})", D::NAME, info.name, info.driver_version);
    measure(&client, options.shape, options.steps)
}

fn dispatch(options: &Options) -> Result<Figures, String> {
    let result = match options.backend.as_str() {
        "host" => run::<graph_capture::host::Host>(options),
        #[cfg(feature = "vulkan")]
        "vulkan" => run::<graph_capture::vulkan::Vulkan>(options),
        #[cfg(feature = "cuda")]
        "cuda" => run::<graph_capture::cuda::Cuda>(options),
        #[cfg(feature = "hip")]
        "hip" => run::<graph_capture::hip::Hip>(options),
        other => {
            return Err(format!(
                "backend {other} is not compiled in (build with --features {other})"
            ));
        }
    };
    result.map_err(|err| err.to_string())
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(err) => {
            eprintln!("decode: {err}");
            return ExitCode::from(2);
        }
    };
    let figures = match dispatch(&options) {
        Ok(figures) => figures,
        Err(err) => {
            eprintln!("decode: {err}");
            return ExitCode::FAILURE;
        }
    };
    let shape = figures.shape;
    let launches = f64::from(shape.launches());
    println!(
        "model: {} layers, hidden {}, ffn {}: {} launches a step; {} steps each way",
        shape.layers,
        shape.hidden,
        shape.ffn,
        shape.launches(),
        figures.steps
    );
    for (what, step) in [
        ("eager", figures.eager_step),
        ("replay", figures.replay_step),
    ] {
        println!(
            "{what:>6}: {:>9.1} us/step  {:>8.1} steps/s  {:>7.0} ns/launch",
            step * 1e6,
            1.0 / step,
            step * 1e9 / launches
        );
    }
    println!(
        "replay is {:.2}x eager; capture took {:.1} ms",
        figures.speedup(),
        figures.capture * 1e3
    );
    println!(
        "check: eager {:.1e}, replay {:.1e} from the reference (tolerance {TOLERANCE:.0e}); \
         replay {} eager bit for bit",
        figures.eager_error,
        figures.replay_error,
        if figures.bitwise_equal {
            "equals"
        } else {
            "differs from"
        }
    );
    if figures.passed() {
        println!("PASS");
        ExitCode::SUCCESS
    } else {
        println!("FAIL");
        ExitCode::FAILURE
    }
}
