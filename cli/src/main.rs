//! The `outpost` command.
//!
//! `outpost run` runs a capability on this machine; `outpost vectors check` checks this build
//! against the published protocol vectors. The daemon and the reference server arrive with
//! their issues; until then they are not offered.
//!
//! `outpost confine …` is hidden: the Landlock helper a `confine: true` shell run starts
//! through (see `outpost_exec_shell::confine`). It is dispatched before the command line is
//! parsed, so its exit statuses (125, 126) and its program's arguments pass untouched.

mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use outpost_exec_shell::confine;

/// outpost: run code on machines you do not own, safely.
#[derive(Parser)]
#[command(name = "outpost", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the capability in DIR on this machine and print its result.
    Run {
        /// The capability folder (holding manifest.yaml).
        dir: PathBuf,
        /// Print one JSON object instead of the capability's own output.
        #[arg(long)]
        json: bool,
        /// The network a capability that asks for it (`connect:` permissions) may reach:
        /// `none`, or `all`. Containers get no network unless this allows it.
        #[arg(long, value_enum, default_value_t = run::EgressArg::None)]
        egress: run::EgressArg,
        /// Arguments passed to the capability after its manifest's args.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// The published protocol test vectors.
    Vectors {
        #[command(subcommand)]
        action: VectorsAction,
    },
}

#[derive(Subcommand)]
enum VectorsAction {
    /// Check this build of outpost against every vector file.
    Check {
        /// The folder holding the vector files (default: the source tree's `vectors/`).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() == Some(std::ffi::OsStr::new(confine::SUBCOMMAND)) {
        return confine::helper_main(args);
    }
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("outpost: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run {
            dir,
            json,
            egress,
            args,
        } => run::run(&dir, json, egress, args),
        Command::Vectors {
            action: VectorsAction::Check { dir },
        } => {
            let dir = dir.unwrap_or_else(outpost_vectors::default_dir);
            let report = outpost_vectors::check::check_dir(&dir)
                .with_context(|| format!("checking the vectors in {}", dir.display()))?;
            for failure in &report.failures {
                eprintln!("FAIL {failure}");
            }
            let failed = report.failures.len();
            println!("{} passed, {failed} failed", report.cases - failed);
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
