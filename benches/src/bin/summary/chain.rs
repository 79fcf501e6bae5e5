//! `--chain`: the side-by-side rows on our backends, one JSON object per
//! backend and row on stdout, the fields `peers/python/torch_peer.py` prints
//! for PyTorch and CuPy.
//!
//! `--chain [--short | --control] [--backend NAME]`: every row, the short
//! one, or the GPU-bound control alone; on every backend compiled in and
//! available, or on NAME alone, which must then be available.

use std::process::ExitCode;

use benches::chain::{Chain, Row, rows};
use benches::{Backend, Visit, availability, each_backend};

/// What the chain's arguments ask for.
struct Ask {
    rows: Vec<Row>,
    backend: Option<String>,
}

fn ask(args: &[String]) -> Result<Ask, String> {
    let mut rows = rows::all();
    let mut backend = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--chain" => {}
            "--short" => rows = rows::short(),
            "--control" => rows.retain(|row| row.control),
            "--backend" => {
                let name = args.next().ok_or("--backend takes a backend's name")?;
                if benches_backend(name).is_none() {
                    return Err(format!("--backend {name}: no such backend"));
                }
                backend = Some(name.clone());
            }
            other => return Err(format!("--chain does not take {other}")),
        }
    }
    Ok(Ask { rows, backend })
}

fn benches_backend(name: &str) -> Option<&'static conformance::registry::Backend> {
    conformance::registry::backend(name)
}

struct Rows<'a> {
    ask: &'a Ask,
    ran: usize,
    failed: bool,
}

impl Visit for Rows<'_> {
    fn visit<D: Backend>(&mut self) {
        if self
            .ask
            .backend
            .as_deref()
            .is_some_and(|name| name != D::NAME)
        {
            return;
        }
        if let Err(reason) = availability::<D>() {
            eprintln!("chain: {}: unavailable: {reason}", D::NAME);
            self.failed |= self.ask.backend.is_some();
            return;
        }
        let chain = match Chain::<D>::open() {
            Ok(chain) => chain,
            Err(err) => {
                eprintln!("chain: {}: {err}", D::NAME);
                self.failed = true;
                return;
            }
        };
        let info = chain.client().device_info();
        eprintln!("# ours/{}: {}, {}", D::NAME, info.name, info.driver_version);
        for row in &self.ask.rows {
            match chain.run(row) {
                Ok(figures) => {
                    println!("{}", figures.json(&format!("ours/{}", D::NAME), row));
                    self.ran += 1;
                }
                Err(err) => {
                    eprintln!("chain: {}: {}: {err}", D::NAME, row.name());
                    self.failed = true;
                }
            }
        }
    }
}

/// Run the rows; a failed or unavailable named backend fails the run.
pub fn run(args: &[String]) -> ExitCode {
    let ask = match ask(args) {
        Ok(ask) => ask,
        Err(err) => {
            eprintln!("chain: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(name) = &ask.backend
        && !benches_backend(name).is_some_and(|b| b.compiled_in)
    {
        eprintln!("chain: {name} is not compiled into this build");
        return ExitCode::FAILURE;
    }
    let mut rows = Rows {
        ask: &ask,
        ran: 0,
        failed: false,
    };
    each_backend(&mut rows);
    if rows.failed || rows.ran == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
