//! bprof: a sampling profiler that counts stacks inside the kernel with BPF.

mod buildid;
mod cgroup;
mod cli;
mod events;
mod filter;
mod maps;
mod output;
mod preflight;
mod programs;
mod record;
mod sideband;
mod signals;
mod stacks;
mod symbols;
mod target;

/// Generated BPF skeletons, one module per `bpf/*.bpf.c`.
mod skel {
    pub mod profile {
        #![allow(clippy::all, unused_imports)]
        include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
    }
}

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // One line: clap's first line, minus its own "error: " prefix.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("bprof: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    programs::init_libbpf_logging(cli.verbose);
    let settings = match record::Settings::from_cli(cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bprof: {e:#}");
            return ExitCode::from(2);
        }
    };
    match record::run(settings) {
        Ok(o) => ExitCode::from(o.exit_code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("bprof: {e:#}");
            ExitCode::FAILURE
        }
    }
}
