//! What a command writes to its standard output, and what happens when nobody reads it any
//! more: `outpost context list --json | head -1` must not panic or print an error once `head`
//! has gone.
//!
//! The rule, for every command: a write to stdout that fails with `EPIPE` (its reader closed
//! the pipe) ends the process at once, quietly — nothing on stderr — with exit status
//! [`BROKEN_PIPE`] (141), the status a shell reports for a program killed by `SIGPIPE` (`cat`,
//! `ls`), so scripts (with `set -o pipefail` too) see what they see for any other command.
//! The process keeps `SIGPIPE` ignored (Rust's default): its sockets and the pipes to the
//! programs it runs must fail with an error, not kill it.
//!
//! Every `println!` and `print!` of this crate comes here (the crate root defines them before
//! any module); code that writes bytes takes [`lock`]. A command that must clean up first
//! (`outpost run` stops its capability, `outpost demo` removes its folders, `outpost attach`
//! gives the terminal its mode back) checks [`is_broken_pipe`] itself instead and returns
//! [`BROKEN_PIPE`].
//! This module never writes to stderr and never buffers beyond what std does.

use std::fmt;
use std::io::{self, Write};

/// The exit status of a command whose output nobody reads any more: 128 + `SIGPIPE` (13).
pub const BROKEN_PIPE: u8 = 141;

/// Whether `error` says the reader of a pipe is gone.
pub fn is_broken_pipe(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::BrokenPipe
}

/// Ends the process quietly if `result` failed because the reader is gone; else hands it back.
fn quiet<T>(result: io::Result<T>) -> io::Result<T> {
    match result {
        Err(e) if is_broken_pipe(&e) => std::process::exit(i32::from(BROKEN_PIPE)),
        other => other,
    }
}

/// `print!`: writes `args`; any failure other than a gone reader panics, as std's does.
pub fn print(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = quiet(out.write_fmt(args)) {
        panic!("failed printing to stdout: {e}");
    }
}

/// `println!`: writes `args` and a newline.
pub fn println(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = quiet(out.write_fmt(args).and_then(|()| out.write_all(b"\n"))) {
        panic!("failed printing to stdout: {e}");
    }
}

/// Standard output, locked, for writing bytes: a write or flush whose reader is gone ends the
/// process as [`println`] does; any other failure is returned.
pub fn lock() -> Stdout {
    Stdout(io::stdout().lock())
}

/// Locked standard output whose `EPIPE` ends the process quietly (see [`lock`]).
pub struct Stdout(io::StdoutLock<'static>);

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        quiet(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        quiet(self.0.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        quiet(self.0.flush())
    }
}
