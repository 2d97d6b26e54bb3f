//! Sessions: one profile ([`profile`]), one `bprof stat` run ([`stat`]) or
//! one live `bprof top` ([`top`]),
//! from validated settings to outputs and an exit code.

mod outputs;
pub(crate) mod periodic;
pub(crate) mod profile;
pub(crate) mod python;
pub(crate) mod runner;
pub(crate) mod settings;
pub(crate) mod signals;
pub(crate) mod stat;
pub(crate) mod top;
pub(crate) mod unwinding;

use std::process::ExitCode;

use clap::Parser;

use crate::{bpf, cli, output};

/// Parses the command line, runs the session it asks for and returns the
/// process exit code. Bad input gets one line on stderr and exit status 2.
pub fn run() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            eprintln!("bprof: {}", usage_line(&e));
            return ExitCode::from(2);
        }
    };
    if let Some(cli::Sub::Stat(args)) = cli.sub {
        bpf::profile::init_libbpf_logging(args.verbose > 1);
        return match stat::StatSettings::from_args(args) {
            Ok(s) => finish(stat::run(s)),
            Err(e) => usage_error(e),
        };
    }
    if let Some(cli::Sub::Top(args)) = cli.sub {
        bpf::profile::init_libbpf_logging(args.profile.verbose > 1);
        return match top::TopSettings::from_args(args) {
            Ok(s) => finish(top::run(s)),
            Err(e) => usage_error(e),
        };
    }
    let cli = cli.profile;
    bpf::profile::init_libbpf_logging(cli.verbose > 1);
    let settings = match profile::ProfileSettings::from_cli(cli) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    finish(profile::run(settings).map(|o| o.exit_code))
}

/// clap's error in one line: its first line, minus its own "error: "
/// prefix, and its suggestion for a mistyped flag or value, if any.
fn usage_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let text = e.to_string();
    let first = text
        .lines()
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ");
    let suggested = [
        ContextKind::SuggestedArg,
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .find_map(|k| match e.get(k)? {
        ContextValue::String(s) => Some(s.clone()),
        ContextValue::Strings(v) if !v.is_empty() => Some(v.join("' or '")),
        _ => None,
    });
    match suggested {
        Some(s) => format!("{first} (did you mean '{s}'?)"),
        None => first.to_string(),
    }
}

/// Bad input: one line, exit status 2, before anything was loaded.
fn usage_error(e: anyhow::Error) -> ExitCode {
    eprintln!("bprof: {e:#}");
    ExitCode::from(2)
}

/// Exits with the session's code, or reports its error in one line.
fn finish(result: anyhow::Result<i32>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        // A reader that stopped reading (`| head`) is not a failure.
        Err(e) if output::file::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bprof: {e:#}");
            ExitCode::FAILURE
        }
    }
}
