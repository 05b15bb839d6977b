//! Interactive terminals on the server side: the relay between a terminal's runner (the
//! daemon holding the `pty` run) and its viewers, and the ring of recent output replayed to a
//! viewer that joins late or reconnects.
//!
//! - [`Ring`] keeps the last 64 KiB of output and cuts a replay that never starts inside an
//!   escape sequence or a UTF-8 character, with terminal *queries* removed (the list is in
//!   [`ring`]'s docs and the [`query`] table) so a new viewer's emulator does not answer them
//!   again as input.
//! - [`cast`] writes a session as an asciicast v2 recording as it happens ([`cast::Recorder`])
//!   and reads one back for playback ([`cast::Cast`]).
//! - [`Relay`] fans output out to viewers, takes input and resizes from operators only, gives
//!   the runner credit as the fastest viewer drains, drops a viewer that falls too far behind,
//!   audits every viewer session and closes the terminal when it has been idle too long.
//!
//! Like every role in `core` it is sans-IO: [`Relay::handle_input`] with the host's `now`,
//! [`Relay::poll_output`] drained until [`Output::Wait`]. It owns no socket, reads no clock,
//! and must never interpret live bytes: only the replay is cut and filtered.

pub mod cast;
mod io;
mod messages;
pub mod query;
mod relay;
pub mod ring;
mod scan;

#[cfg(test)]
mod tests;

pub use io::{Input, Output, RelayConfig, RelayError};
pub use messages::{
    Audit, Left, Reason, Role, RunnerMessage, ViewerControl, ViewerId, ViewerMessage, ViewerText,
    viewer_close,
};
pub use relay::{PENDING_KEYS_LIMIT, Relay};
pub use ring::{HOLD_LIMIT, RING_CAPACITY, Ring};
