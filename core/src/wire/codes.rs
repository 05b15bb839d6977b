//! The protocol's numbers and codes: WebSocket close codes, the concurrency limits, and the
//! stable codes for protocol violations and refused runs.
//!
//! Every role speaks these; none of them defines its own. The strings returned by `code()`
//! are part of the protocol (they appear in `docs/PROTOCOL.md` and `vectors/`) and never
//! change meaning.

/// WebSocket close codes, as `docs/PROTOCOL.md` §3 lists them.
pub mod close_code {
    /// Normal close (drain finished).
    pub const NORMAL: u16 = 1000;
    /// The server heard nothing for too long (3 heartbeats).
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error: a bad frame, a bad signature, an unknown type, a missing `hello`.
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// The connect ticket was refused (malformed, unknown, used, expired).
    pub const POLICY_VIOLATION: u16 = 1008;
    /// A frame over the size limit.
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// The server cannot sign frames.
    pub const INTERNAL_ERROR: u16 = 1011;
    /// Replaced by another connection for the same context: the daemon stops for good.
    pub const REPLACED: u16 = 1012;
    /// The machine key was revoked: the daemon stops for good.
    pub const REVOKED: u16 = 4001;

    /// Whether a daemon that sees this close code must stop for good (never reconnect).
    pub fn stops_for_good(code: u16) -> bool {
        matches!(code, REPLACED | REVOKED)
    }
}

/// The most runs a daemon ever holds at once, whatever its configuration or grant say; a
/// session caps what a `hello` announces to it too.
pub const MAX_CONCURRENT_LIMIT: u32 = 8;

/// Runs a daemon holds at once when its configuration does not say.
pub const DEFAULT_MAX_CONCURRENT: u32 = 2;

/// The most bytes a capability may carry inline in a `run.request`; larger ones go by digest.
pub const INLINE_CAPABILITY_LIMIT: usize = 512 * 1024;

/// Why a role refused its peer's frame and closed the connection (with
/// [`close_code::PROTOCOL_ERROR`]), for the violations the state machines find themselves.
/// Frames that do not decode or verify carry the code of their
/// [`WireError`](super::WireError) or [`FrameError`](crate::sign::FrameError) instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Violation {
    /// A frame that does not belong in the connection's state: anything before `welcome` or
    /// `hello`, or a second one of them.
    UnexpectedFrame,
    /// The peer speaks another protocol version.
    UnsupportedProtocol,
    /// The session's signer failed, so it cannot send frames on the connection.
    SignerFailed,
}

impl Violation {
    /// The stable code, as the close reason and the `ProtocolViolation` events carry it.
    pub fn code(self) -> &'static str {
        match self {
            Violation::UnexpectedFrame => "unexpected_frame",
            Violation::UnsupportedProtocol => "unsupported_protocol",
            Violation::SignerFailed => "signer_failed",
        }
    }
}

/// Why a run was refused before it started: a `run.reject` code, or the code a session ends
/// an unstarted run with. A refused run never ran, so the server may try it elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Every slot is taken.
    Busy,
    /// The daemon is shutting down and takes no new runs.
    Draining,
    /// The machine has no executor for the run's environment.
    EnvironmentUnavailable,
    /// The grant's `environments` leaves the run's environment out.
    EnvironmentNotGranted,
    /// The capability is malformed, escapes its folder or is over
    /// [`INLINE_CAPABILITY_LIMIT`].
    InvalidCapability,
    /// The machine was revoked.
    Revoked,
    /// A terminal for someone other than the machine's operator: a shared run never opens a
    /// PTY.
    PtyOperatorOnly,
    /// The daemon holds, or has held, a run with this id: a run id runs at most once on a
    /// machine, whatever the server sends again.
    RunSeen,
}

impl Refusal {
    /// Every refusal, in declaration order.
    pub const ALL: [Refusal; 8] = [
        Refusal::Busy,
        Refusal::Draining,
        Refusal::EnvironmentUnavailable,
        Refusal::EnvironmentNotGranted,
        Refusal::InvalidCapability,
        Refusal::Revoked,
        Refusal::PtyOperatorOnly,
        Refusal::RunSeen,
    ];

    /// The stable code, as `run.reject` carries it.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Busy => "busy",
            Refusal::Draining => "draining",
            Refusal::EnvironmentUnavailable => "environment_unavailable",
            Refusal::EnvironmentNotGranted => "environment_not_granted",
            Refusal::InvalidCapability => "invalid_capability",
            Refusal::Revoked => "revoked",
            Refusal::PtyOperatorOnly => "pty_operator_only",
            Refusal::RunSeen => "run_seen",
        }
    }

    /// The refusal a `run.reject` code names, if it is one of ours (a peer may send others).
    pub fn from_code(code: &str) -> Option<Refusal> {
        Refusal::ALL.into_iter().find(|r| r.code() == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_codes_round_trip_and_are_distinct() {
        for r in Refusal::ALL {
            assert_eq!(Refusal::from_code(r.code()), Some(r));
        }
        let codes: std::collections::BTreeSet<_> = Refusal::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), Refusal::ALL.len());
        assert_eq!(Refusal::from_code("digest_mismatch"), None);
    }

    #[test]
    fn only_replaced_and_revoked_stop_a_daemon_for_good() {
        assert!(close_code::stops_for_good(close_code::REPLACED));
        assert!(close_code::stops_for_good(close_code::REVOKED));
        for code in [1000, 1001, 1002, 1008, 1009, 1011] {
            assert!(!close_code::stops_for_good(code), "{code}");
        }
    }
}
