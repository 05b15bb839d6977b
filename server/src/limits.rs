//! The bounds the server keeps on what any caller can make it hold: time to send a request,
//! bodies in progress per source address, bundle uploads at once, stored bundle bytes per
//! user and how long an unused bundle stays, executions not yet ended (PROTOCOL §11.6), and
//! what it keeps of terminal sessions (how much of each, how long, and whether input), and
//! whether host commands may be turned on at all.
//!
//! This module only states the numbers; the listener, the routes and the dispatcher enforce
//! them.

use std::time::Duration;

const MIB: u64 = 1 << 20;

/// What the server holds for its callers at most. [`Limits::default`] gives the documented
/// values; a test or an operator may set others.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// The longest a request's head (request line and headers) may take to arrive; then the
    /// connection is closed. It also bounds how long an idle kept-alive connection stays.
    pub head_timeout: Duration,
    /// The longest a request body may take to arrive, counted from its head, plus
    /// [`Limits::body_rate`] for what its `Content-Length` declares: past it the request is
    /// answered 408 `request_timeout` and its connection closed.
    pub body_timeout: Duration,
    /// The slowest rate, in bytes a second, a declared body is given time for beyond
    /// [`Limits::body_timeout`] (a 64 MiB bundle at 1 MiB/s: 10 s + 64 s).
    pub body_rate: u64,
    /// Requests from one source address whose body is still arriving, at once; one more is
    /// answered 429 `rate_limited` at once, before any of its body is read.
    pub bodies_per_address: usize,
    /// Bundle uploads at once, server-wide; one more is answered 503 `uploads_busy` with
    /// `Retry-After`.
    pub concurrent_uploads: usize,
    /// Bytes of bundles one user may keep stored (counted against who first stored each);
    /// past it an upload is answered 413 `quota_exceeded`.
    pub bundle_quota: u64,
    /// A bundle unused this long (not uploaded again, named by an execute or fetched) and
    /// named by no execution that has not ended is deleted.
    pub bundle_retention: Duration,
    /// How often unused bundles are looked for.
    pub bundle_sweep: Duration,
    /// Executions of one user that have not ended; one more is answered 429 `queue_full`.
    pub pending_per_user: usize,
    /// Executions naming one machine context that have not ended (the cloud aside, whose
    /// executions never wait); one more is answered 429 `queue_full`.
    pub pending_per_context: usize,
    /// Bytes of inline capabilities (manifest, paths and base64 text) that one user's
    /// executions not yet ended hold in the server's memory; one more that would pass it is
    /// answered 429 `queue_full`. A capability sent by digest counts nothing here.
    pub pending_bytes_per_user: u64,
    /// The most bytes one terminal session's recording keeps; the rest is cut and the
    /// recording's last event says so.
    pub recording_bytes: usize,
    /// How long a recording is kept after its session ended.
    pub recording_retention: Duration,
    /// Whether recordings keep what operators type (keystrokes may hold passwords: off unless
    /// the server is started with `--record-terminal-input`).
    pub record_terminal_input: bool,
    /// Whether machines' host commands may be turned on at all: off (`outpost serve
    /// --no-host-commands`), turning them on is refused `commands_disabled_on_server` and
    /// every authorize hop answers `commands_off`, whatever a grant says.
    pub host_commands: bool,
}

impl Limits {
    /// How long a client is told to wait after `queue_full`, in seconds.
    pub const QUEUE_FULL_RETRY_SECS: u64 = 30;
    /// How long a client is told to wait after `uploads_busy`, in seconds.
    pub const UPLOADS_BUSY_RETRY_SECS: u64 = 5;
    /// How long a request for a daemon from afar waits for its answer (an `update` checks,
    /// downloads and proves a release before it answers).
    pub const CONTROL_ANSWER: Duration = Duration::from_secs(30);

    /// The time a body declared `declared` bytes long may take to arrive.
    pub(crate) fn body_deadline(&self, declared: u64) -> Duration {
        let rate = self.body_rate.max(1);
        self.body_timeout
            .saturating_add(Duration::from_secs(declared.div_ceil(rate)))
    }
}

impl Default for Limits {
    /// 30 s for a head; 10 s for a body plus a second per MiB declared; 32 bodies in progress
    /// per address; 4 uploads at once; 1 GiB of bundles per user, kept 24 h after their last
    /// use and looked for hourly; 1,000 executions not ended per user and 500 per context,
    /// and 32 MiB of inline capabilities per user; terminal recordings of at most 8 MiB each,
    /// output and sizes only, kept 30 days; host commands allowed (each machine's owner and
    /// grant still decide).
    fn default() -> Self {
        Self {
            head_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(10),
            body_rate: MIB,
            bodies_per_address: 32,
            concurrent_uploads: 4,
            bundle_quota: 1024 * MIB,
            bundle_retention: Duration::from_secs(24 * 3600),
            bundle_sweep: Duration::from_secs(3600),
            pending_per_user: 1000,
            pending_per_context: 500,
            pending_bytes_per_user: 32 * MIB,
            recording_bytes: outpost_core::terminal::cast::RECORDING_LIMIT,
            recording_retention: Duration::from_secs(30 * 24 * 3600),
            record_terminal_input: false,
            host_commands: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_gets_its_time_plus_its_declared_length_at_the_rate_and_never_overflows() {
        let limits = Limits::default();
        assert_eq!(limits.body_deadline(0), Duration::from_secs(10));
        assert_eq!(limits.body_deadline(1), Duration::from_secs(11));
        assert_eq!(limits.body_deadline(64 * MIB), Duration::from_secs(74));
        let slowest = Limits {
            body_rate: 0,
            ..Limits::default()
        };
        assert_eq!(slowest.body_deadline(u64::MAX), Duration::MAX);
    }
}
