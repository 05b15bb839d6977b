//! What clients send (PROTOCOL §11): each body as it travels. A member that may be left out
//! is an `Option` the sender skips when it has nothing to say; the server reads the default
//! (`DEFAULT_SLOTS`, `DEFAULT_WAIT_SECS`, …) in its decoder. Never checks more than shape.

use crate::ids::RunId;
use serde::{Deserialize, Serialize};

#[cfg(feature = "schema")]
use super::{
    KEY_PATTERN, MAX_CHAIN, MAX_CONDITION_BYTES, MAX_INTERVAL_MS, MAX_REASON_CHARS, MAX_SLOTS,
    MAX_WAIT_SECS, MIN_INTERVAL_MS, NAME_PATTERN, NAME_PREFIX_PATTERN, SCOPES,
};
#[cfg(feature = "schema")]
use crate::routing::MAX_QUEUE_MINUTES;
use crate::routing::{Fallback, Requirement};
use crate::wire::{CapabilitySource, Environment};

/// `POST /v1/execution-contexts`: a machine registering its key with a join's bearer token.
/// Idempotent: the same key registered again answers the same context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegisterRequest {
    /// The context's name (`invalid_name`).
    #[cfg_attr(feature = "schema", schemars(regex(pattern = NAME_PATTERN)))]
    pub name: String,
    /// The machine's Ed25519 public key, base64url (a small-order key is refused too).
    #[cfg_attr(feature = "schema", schemars(regex(pattern = KEY_PATTERN)))]
    pub public_key: String,
    /// The slots the machine offers (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = MAX_SLOTS)))]
    pub max_concurrent: Option<u32>,
    /// The environments the machine offers now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environments: Option<Vec<Environment>>,
    /// The daemon's version, shown to people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_version: Option<String>,
}

/// What a run does when its context is offline, as a body says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum OfflineMode {
    /// Fail (the default).
    Fail,
    /// Wait `queueMinutes` for it to come back.
    Queue,
}

/// `POST /v1/executions`: a capability to run, and where.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", schemars(extend(
    "if" = {"anyOf": [
        {"properties": {"whenOffline": {"const": "queue"}}, "required": ["whenOffline"]},
        {"properties": {"whenBusy": {"const": "queue"}}, "required": ["whenBusy"]}
    ]},
    "then" = {"properties": {"queueMinutes": {"minimum": 1, "maximum": MAX_QUEUE_MINUTES}}}
)))]
pub struct ExecuteRequest {
    /// The capability: inline (a manifest that validates, files with safe paths) or a stored
    /// bundle's digest.
    pub capability: CapabilitySource,
    /// A context name or id, or `cloud`; without it the caller's chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Whether a named context may fall through to the chain (default `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// What the run needs of where it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires: Option<Vec<Requirement>>,
    /// What to do when the context is offline (default `fail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_offline: Option<OfflineMode>,
    /// What to do when the context is online with every slot taken (default `fail`):
    /// `queue` waits for a free slot, first come first served, `queueMinutes` at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_busy: Option<OfflineMode>,
    /// How long a `queue` waits, in minutes (default 60; `queue_minutes_out_of_range`); read
    /// only with `whenOffline: queue` or `whenBusy: queue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_minutes: Option<u32>,
    /// Whether the run wants host commands (only the operator's own runs may have them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wants_commands: Option<bool>,
    /// Whether the answer waits for the end (else it answers 202 at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
    /// How long it waits at most, in seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(max = MAX_WAIT_SECS)))]
    pub wait_secs: Option<u64>,
}

impl ExecuteRequest {
    /// A request to run `capability` where the caller's chain says, answered at once, with
    /// every other member left to its default.
    pub fn new(capability: CapabilitySource) -> Self {
        Self {
            capability,
            context: None,
            fallback: None,
            requires: None,
            when_offline: None,
            when_busy: None,
            queue_minutes: None,
            wants_commands: None,
            wait: None,
            wait_secs: None,
        }
    }
}

/// `POST /v1/waits`: a condition to re-check on a machine, and what to run when it matches.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WaitRequest {
    /// The context that checks it: a name or an id (not `cloud`).
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub context: String,
    /// The condition's JavaScript source, 1 to 65,536 bytes of UTF-8, not only spaces
    /// (`invalid_condition`).
    #[cfg_attr(
        feature = "schema",
        schemars(length(min = 1, max = MAX_CONDITION_BYTES), regex(pattern = r"\S"))
    )]
    pub condition: String,
    /// Milliseconds between checks (default 30,000; `interval_out_of_range`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(range(min = MIN_INTERVAL_MS, max = MAX_INTERVAL_MS))
    )]
    pub interval_ms: Option<u64>,
    /// When the wait gives up, Unix ms, in the future (`expires_in_the_past`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// Why the requester waits, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_REASON_CHARS)))]
    pub reason: Option<String>,
    /// What to run once it matches: an execute body whose capability is inline
    /// (`then_not_inline`); the server reads it exactly as `POST /v1/executions` reads one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<ExecuteRequest>,
}

/// `PUT /v1/chain`: the caller's chain, as given (names or ids, not yet resolved).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "Chain"))]
pub struct ChainRequest {
    /// The entries, in order: context names or ids, and `cloud` (last when present).
    #[cfg_attr(feature = "schema", schemars(length(max = MAX_CHAIN)))]
    pub chain: Vec<String>,
}

/// `POST /v1/users`: a new user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UserRequest {
    /// The user's name (`invalid_name`).
    #[cfg_attr(feature = "schema", schemars(regex(pattern = NAME_PATTERN)))]
    pub name: String,
    /// Its scopes (`unknown_scope`); every scope but `admin` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(extend("items" = {"enum": SCOPES})))]
    pub scopes: Option<Vec<String>>,
}

/// `POST /v1/execution-contexts/{context}/share`: whether every member may use the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShareRequest {
    /// On: every member may opt in to run on it; off: nobody but its operator (and every
    /// opt-in is dropped).
    pub all_members: bool,
}

/// `POST /v1/execution-contexts/{context}/daemon`: ask the context's daemon something from
/// afar (PROTOCOL §4.7, §11.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DaemonControl {
    /// `pause`, `resume`, `restart`, `update` or `logs`.
    pub action: crate::wire::ControlAction,
    /// For `logs`: how many of the most recent lines (default 100, at most 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = crate::wire::MAX_CONTROL_LINES)))]
    pub lines: Option<u32>,
}

/// `POST /v1/execution-contexts/commands` (signed by the machine): its own host-commands
/// switch; only this route turns host commands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CommandsSwitch {
    /// On or off.
    pub enabled: bool,
}

/// `POST /v1/execution-contexts/commands/authorize` (signed): the hop before one host
/// command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandAuthorize {
    /// The run asking: it must be committed on the signing machine, or the answer is
    /// `run_not_live`.
    pub run_id: RunId,
    /// The command line, argv joined by spaces (the server cuts it to 1,000 characters).
    pub command: String,
    /// Its working directory, when the run named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The names (never the values) of the variables it adds.
    #[serde(default)]
    pub env_keys: Vec<String>,
    /// Whether it is a background job (`start`) rather than a waited-for `run`.
    pub background: bool,
}

/// What a run asks to do with one of its requester's background jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum JobOp {
    /// Read its state and output so far.
    Poll,
    /// Kill its process group.
    Kill,
}

/// `POST /v1/execution-contexts/commands/jobs/authorize` (signed): the hop before a `poll`
/// or `kill` of a background job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobAuthorize {
    /// The run asking: it must be committed on the signing machine, or the answer is
    /// `run_not_live`.
    pub run_id: RunId,
    /// `poll` or `kill`.
    pub op: JobOp,
    /// The job's number on the machine (as `start` answered it).
    pub job_id: u64,
}

/// `POST /v1/execution-contexts/{context}/terminals`: the size a terminal opens with (an
/// empty body opens 80 × 24).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerminalOpen {
    /// Columns, 1–1000 (default 80).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 1000)))]
    pub cols: Option<u16>,
    /// Rows, 1–1000 (default 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 1000)))]
    pub rows: Option<u16>,
}

/// `POST /v1/join-tokens` (admin): a join string for machines to register with, bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinTokenRequest {
    /// How long it is good for, in seconds (absent: until revoked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub ttl_secs: Option<u64>,
    /// How many machines may register with it (absent: any number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub uses: Option<u32>,
    /// A machine registering with it must have a name that starts with this: the start of a
    /// name, at most 63 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(regex(pattern = NAME_PREFIX_PATTERN)))]
    pub name_prefix: Option<String>,
}
