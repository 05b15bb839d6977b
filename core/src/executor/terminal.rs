//! The interactive side of a terminal run (`environment: pty`): keystrokes and size in,
//! terminal bytes out, each half usable from its own thread.
//!
//! A terminal's output is not captured into [`super::Outcome`]'s streams as it arrives: the
//! host reads it through [`TerminalOutput`] and relays it, and [`super::RunHandle::wait`]
//! still reports how the program ended. This module owns the two traits (the size type is the
//! manifest's, where a capability first names it); it opens no terminal itself.

use super::ExecError;

pub use crate::manifest::TerminalSize;

/// Where keystrokes and size changes go.
pub trait TerminalInput: Send {
    /// Writes bytes to the terminal as if typed; blocks until the terminal took them all.
    fn write_input(&mut self, bytes: &[u8]) -> Result<(), ExecError>;

    /// Changes the terminal's size; the program gets `SIGWINCH`.
    fn resize(&mut self, size: TerminalSize) -> Result<(), ExecError>;
}

/// Where the terminal's bytes come from.
pub trait TerminalOutput: Send {
    /// Blocks until bytes arrive and copies them into `buf`; `Ok(0)` once the terminal has
    /// closed (its program and everything holding it ended), and on every call after that.
    fn read_output(&mut self, buf: &mut [u8]) -> Result<usize, ExecError>;
}

/// The two halves of a terminal, taken once from its run.
pub struct Terminal {
    /// Keystrokes and size.
    pub input: Box<dyn TerminalInput>,
    /// Output.
    pub output: Box<dyn TerminalOutput>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Terminal { .. }")
    }
}
