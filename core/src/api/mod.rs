//! The HTTP API's bodies (PROTOCOL §11) as one set of types: the server decodes requests into
//! them and answers with them, the daemon's signed client and the CLI build and read the very
//! same types, and the server's OpenAPI document is generated from them (the `schema`
//! feature). A member added here is added for every side at once.
//!
//! This module owns the shapes and the limits a body's members are checked against, written
//! beside the members they bound. It never decides whether a body is acceptable beyond its
//! shape: the server's strict decoder checks names, ranges and manifests, and what needs the
//! store (which context a name means) is the route's. It never does I/O.
//!
//! | file | holds |
//! |---|---|
//! | [`requests`] | what clients send: registration, execute, wait, chain, users, sharing, host commands, terminals |
//! | [`answers`] | what the server answers: executions, contexts, chains, tickets, users, audit, terminals, waits, errors |

pub mod answers;
pub mod requests;

pub use answers::{
    Audit, AuditEvent, Bundle, ChainEntryView, ChainShown, CommandAuthorized, CommandsSwitched,
    ConnectTicket, Context, Contexts, Continuation, DaemonControlled, ErrorAnswer, Execution,
    ExecutionError, Health, JobAuthorized, JoinToken, JoinTokens, Me, MountView, Node, NodeSession,
    Nodes, OutputEvent, OutputStatus, QueueView, Recording, Recordings, Registered, Runs,
    SandboxView, TerminalOpened, TerminalRow, TerminalState, TerminalTicket, Terminals, User, Wait,
    Waits,
};
pub use requests::{
    ChainRequest, CommandAuthorize, CommandsSwitch, DaemonControl, ExecuteRequest, JobAuthorize,
    JobOp, JoinTokenRequest, OfflineMode, RegisterRequest, ShareRequest, TerminalOpen, UserRequest,
    WaitRequest,
};

/// The most slots a daemon may offer over HTTP (the protocol's limit).
pub const MAX_SLOTS: u32 = crate::wire::MAX_CONCURRENT_LIMIT;
/// The slots a daemon offers when its registration names none.
pub const DEFAULT_SLOTS: u32 = crate::wire::DEFAULT_MAX_CONCURRENT;
/// The longest an execution request may wait for its end, in seconds.
pub const MAX_WAIT_SECS: u64 = 300;
/// How long an execution request waits when it names no `waitSecs`.
pub const DEFAULT_WAIT_SECS: u64 = 60;
/// The most entries a chain holds.
pub const MAX_CHAIN: usize = crate::routing::Chain::MAX_CONTEXTS;

/// A context's or user's name: 1–64 characters of `[a-z0-9-]`, starting with a letter or
/// digit (see [`valid_name`]).
pub const NAME_PATTERN: &str = "^[a-z0-9][a-z0-9-]{0,63}$";
/// What a join token's `namePrefix` must match: the start of a name, leaving room for one
/// more character.
pub const NAME_PREFIX_PATTERN: &str = "^[a-z0-9][a-z0-9-]{0,62}$";
/// A bundle's name: its SHA-256 as 64 lowercase hex digits.
pub const DIGEST_PATTERN: &str = "^[0-9a-f]{64}$";
/// An Ed25519 public key: 32 bytes of base64url without padding (43 characters, the last one
/// carrying two bits).
pub const KEY_PATTERN: &str = "^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$";

/// Every scope a token may hold (§11.2).
pub const SCOPES: [&str; 6] = [
    "execution_context:create",
    "execution_context:read",
    "execution_context:execute",
    "execution_context:delete",
    "execution_context:command",
    "admin",
];

/// The largest condition source a wait may carry, in bytes.
pub const MAX_CONDITION_BYTES: usize = 64 * 1024;
/// The shortest interval a wait may ask for, in ms (the daemon's minimum).
pub const MIN_INTERVAL_MS: u64 = 1_000;
/// The longest interval a wait may ask for, in ms (one day).
pub const MAX_INTERVAL_MS: u64 = 86_400_000;
/// The interval of a wait that names none, in ms.
pub const DEFAULT_INTERVAL_MS: u64 = 30_000;
/// The longest `reason` of a wait, in characters.
pub const MAX_REASON_CHARS: usize = 1_000;

/// Whether `name` is 1–64 characters of `[a-z0-9-]`, starting with a letter or digit (the
/// names of contexts and users; [`NAME_PATTERN`] says the same to a schema reader).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !name.starts_with('-')
}
