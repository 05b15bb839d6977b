//! The `outpost` command.
//!
//! Today it checks outpost against its published test vectors. The daemon, the reference
//! server and `outpost run` arrive with their issues; until then they are not offered.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// outpost: run code on machines you do not own, safely.
#[derive(Parser)]
#[command(name = "outpost", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
