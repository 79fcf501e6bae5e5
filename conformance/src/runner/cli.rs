//! The runner's command line: libtest's filters and flags, and the
//! runner's own choices of backend, device and report.

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::PathBuf;

/// What `--help` prints.
pub const USAGE: &str = "\
usage: conformance [OPTIONS] [FILTER...]

Runs every scenario on every backend compiled in, one trial per scenario per
backend, named backend::scenario. A trial runs when its name contains a FILTER
(or any, without one).

Selection:
  --backend NAME[,NAME]  only these backends (repeatable); a named backend that
                         cannot open a device fails instead of being ignored
  --device INDEX         open the device at INDEX of --devices on each selected
                         backend, instead of the backend's default
  --devices              list every device each backend sees, then exit

Report:
  --json FILE            also write the table and every trial's outcome to FILE
  --dot DIR              write the Graphviz DOT of the scenarios' graphs into DIR

libtest's options:
  --exact                a FILTER must equal the whole name
  --skip PATTERN         leave out trials whose name contains PATTERN
  --list                 list the trials instead of running them
  --ignored              run only ignored trials (those of a backend without a
                         device never run: they stay ignored)
  --include-ignored      run ignored trials too (the same caveat)
  --test-threads N       trials run on N threads at once
  -q, --quiet            no line per trial
  --format pretty|terse  terse is --quiet
  --nocapture, --show-output, --color WHEN, -Z FLAG
                         accepted; trials never have their output captured,
                         and the output is plain text

CONFORMANCE_REQUIRE=host,vulkan makes those backends' unavailability a failure.";

/// Everything the command line asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Trials whose name contains (or, with `exact`, equals) one of these
    /// run; all when empty.
    pub filters: Vec<String>,
    /// Trials whose name contains (or equals) one of these do not.
    pub skip: Vec<String>,
    /// Filters and skips match whole names.
    pub exact: bool,
    /// List the trials instead of running them.
    pub list: bool,
    /// Run only ignored trials.
    pub ignored: bool,
    /// Run ignored trials too.
    pub include_ignored: bool,
    /// How many trials run at once; the machine's parallelism by default.
    pub test_threads: Option<NonZeroUsize>,
    /// No line per trial.
    pub quiet: bool,
    /// List every backend's devices and exit.
    pub devices: bool,
    /// The backends selected by `--backend`, lower-cased; all when empty.
    pub backends: Vec<String>,
    /// The device index `--device` selected.
    pub device: Option<usize>,
    /// Where `--json` writes the report.
    pub json: Option<PathBuf>,
    /// Where `--dot` writes the scenarios' graphs.
    pub dot: Option<PathBuf>,
    /// Print [`USAGE`] and exit.
    pub help: bool,
}

impl Options {
    /// Whether the filters and skips select the trial called `name`.
    pub fn selects(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skip.iter().any(matches)
    }

    /// Whether `--backend` leaves the backend called `name` in.
    pub fn selects_backend(&self, name: &str) -> bool {
        self.backends.is_empty() || self.backends.iter().any(|b| b == name)
    }
}

/// Parse the arguments after the program's name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Options, String> {
    parse_lexopt(args).map_err(|err| err.to_string())
}

fn parse_lexopt(args: impl IntoIterator<Item = OsString>) -> Result<Options, lexopt::Error> {
    use lexopt::prelude::*;

    let mut options = Options::default();
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next()? {
        match arg {
            Value(filter) => options.filters.push(filter.string()?),
            Long("exact") => options.exact = true,
            Long("skip") => options.skip.push(parser.value()?.string()?),
            Long("list") => options.list = true,
            Long("ignored") => options.ignored = true,
            Long("include-ignored") => options.include_ignored = true,
            Long("test-threads") => options.test_threads = Some(parser.value()?.parse()?),
            Short('q') | Long("quiet") => options.quiet = true,
            Long("format") => {
                let format = parser.value()?.string()?;
                match format.as_str() {
                    "pretty" => {}
                    "terse" => options.quiet = true,
                    _ => {
                        return Err(lexopt::Error::UnexpectedValue {
                            option: "--format".into(),
                            value: format.into(),
                        });
                    }
                }
            }
            Long("color") => {
                let when = parser.value()?.string()?;
                if !matches!(when.as_str(), "auto" | "always" | "never") {
                    return Err(lexopt::Error::UnexpectedValue {
                        option: "--color".into(),
                        value: when.into(),
                    });
                }
            }
            Short('Z') => {
                parser.value()?;
            }
            Long("nocapture") | Long("show-output") => {}
            Long("devices") => options.devices = true,
            Long("backend") => {
                let names = parser.value()?.string()?;
                options.backends.extend(
                    names
                        .split(',')
                        .map(|name| name.trim().to_ascii_lowercase())
                        .filter(|name| !name.is_empty()),
                );
            }
            Long("device") => options.device = Some(parser.value()?.parse()?),
            Long("json") => options.json = Some(parser.value()?.into()),
            Long("dot") => options.dot = Some(parser.value()?.into()),
            Short('h') | Long("help") => options.help = true,
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::{Options, parse};

    fn options(args: &[&str]) -> Result<Options, String> {
        parse(args.iter().map(Into::into))
    }

    #[test]
    fn libtest_flags_and_filters() {
        let o = options(&[
            "replay",
            "--exact",
            "--skip",
            "host::x",
            "--test-threads=3",
            "--list",
            "--format",
            "terse",
            "-Z",
            "unstable-options",
            "--nocapture",
            "--color=never",
            "state",
        ])
        .unwrap();
        assert_eq!(o.filters, ["replay", "state"]);
        assert_eq!(o.skip, ["host::x"]);
        assert!(o.exact && o.list && o.quiet);
        assert_eq!(o.test_threads.map(|n| n.get()), Some(3));
    }

    #[test]
    fn backends_devices_and_json() {
        let o = options(&[
            "--backend",
            "host,Vulkan",
            "--backend=cuda",
            "--device",
            "1",
            "--json",
            "out.json",
            "--devices",
        ])
        .unwrap();
        assert_eq!(o.backends, ["host", "vulkan", "cuda"]);
        assert_eq!(o.device, Some(1));
        assert_eq!(o.json.as_deref(), Some(std::path::Path::new("out.json")));
        assert!(o.devices);
        assert!(o.selects_backend("cuda") && !o.selects_backend("hip"));
    }

    #[test]
    fn mistakes_are_refused_with_what_was_wrong() {
        let err = options(&["--device", "one"]).unwrap_err();
        assert!(err.contains("one"), "{err}");
        assert!(options(&["--test-threads", "0"]).is_err());
        assert!(options(&["--format", "json"]).unwrap_err().contains("json"));
        assert!(
            options(&["--frobnicate"])
                .unwrap_err()
                .contains("frobnicate")
        );
        assert!(options(&["--json"]).is_err());
    }

    #[test]
    fn selection_follows_libtest() {
        let o = options(&["replay", "--skip", "eager"]).unwrap();
        assert!(o.selects("host::replay_count"));
        assert!(!o.selects("host::replay_matches_eager"));
        assert!(!o.selects("host::state"));
        let exact = options(&["--exact", "host::a"]).unwrap();
        assert!(exact.selects("host::a") && !exact.selects("host::ab"));
        assert!(Options::default().selects("anything"));
    }
}
