//! `outpost-confine`: restricts itself with Landlock, then executes a program.
//!
//! ```text
//! outpost-confine --probe
//! outpost-confine [--ro DIR]… [--rw DIR]… -- PROGRAM [ARGS…]
//! ```
//!
//! Exits 125 without running anything if Landlock cannot be fully enforced, 126 if the
//! program cannot be executed.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use outpost_exec_shell::confine::restrict_self;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (mut ro, mut rw): (Vec<PathBuf>, Vec<PathBuf>) = (Vec::new(), Vec::new());
    let mut probe = false;
    let mut program = None;
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--probe") => probe = true,
            Some("--ro") => ro.extend(args.next().map(PathBuf::from)),
            Some("--rw") => rw.extend(args.next().map(PathBuf::from)),
            Some("--") => {
                program = args.next();
                break;
            }
            _ => {
                eprintln!("outpost-confine: unexpected argument {arg:?}");
                return ExitCode::from(125);
            }
        }
    }
    if let Err(why) = restrict_self(&ro, &rw) {
        eprintln!("outpost-confine: {why}");
        return ExitCode::from(125);
    }
    if probe {
        return ExitCode::SUCCESS;
    }
    let Some(program) = program else {
        eprintln!("outpost-confine: no program after `--`");
        return ExitCode::from(125);
    };
    let err = Command::new(&program).args(args).exec();
    eprintln!(
        "outpost-confine: cannot execute {}: {err}",
        PathBuf::from(program).display()
    );
    ExitCode::from(126)
}
