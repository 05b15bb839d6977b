//! `outpost-vectors generate | check`: writes or checks the published test vectors.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// outpost's test vectors.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Rewrite every vector file from the fixed seeds.
    Generate {
        /// Where to write (default: the vectors folder).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Check outpost-core against every vector file.
    Check {
        /// Where to read (default: the vectors folder).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Generate { dir } => {
            let dir = dir.unwrap_or_else(outpost_vectors::default_dir);
            for file in outpost_vectors::generate::all() {
                let path = dir.join(file.name);
                if let Err(e) = std::fs::write(&path, file.text) {
                    eprintln!("cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Command::Check { dir } => {
            let dir = dir.unwrap_or_else(outpost_vectors::default_dir);
            match outpost_vectors::check::check_dir(&dir) {
                Ok(report) => {
                    for f in &report.failures {
                        eprintln!("FAIL {f}");
                    }
                    let passed = report.cases - report.failures.len();
                    println!("{passed} passed, {} failed", report.failures.len());
                    if report.failures.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
