//! What the server answers (PROTOCOL §11): each body as it travels. A member that may be
//! absent is skipped (`Option` with `skip_serializing_if`); one that is always there but may
//! be empty is `null` (a plain `Option`); the schemas say which. Readers take these types as
//! they are: nothing here computes or decides.

use crate::ids::{ContextId, ExecutionId, TerminalId, WaitId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[cfg(feature = "schema")]
use super::DIGEST_PATTERN;
use crate::routing::RanOn;
use crate::server::ExecutionStatus;
use crate::terminal::Role;
use crate::wire::{CheckError, ErrorBody, Grant, OutputStream, Timing};

/// Every error answer: `{"error":{"code","message"}}` with a 4xx or 5xx status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorAnswer {
    /// What went wrong.
    pub error: ErrorBody,
}

/// How an execution failed, was cancelled or lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExecutionError {
    /// The error code (`cancelled`, `lost`, an executor or access code, …).
    pub code: String,
    /// What a person should read.
    pub message: String,
    /// Why it was cancelled (`requested`, `access_lost`, `revoked`, …): on `cancelled` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An Execution (§11.4). Members are absent until known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// `ex_…`.
    pub execution_id: ExecutionId,
    /// Where it is in its life; `pending` and `running` are the only ones that change.
    pub status: ExecutionStatus,
    /// Its capability's manifest `name` (absent for a terminal, and for executions stored
    /// by an older server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// Its capability's manifest `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_version: Option<u32>,
    /// The user who asked for it (their id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
    /// The context the request named, as given (absent: routing chose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_context: Option<String>,
    /// The capability's exit code, once it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// What it printed, capped (see `truncated`); for a run cancelled or lost, what its
    /// live output held when it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// What it printed to stderr, capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Whether either stream was cut at its cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// Why it failed, was cancelled or lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ExecutionError>,
    /// Where it waits, while it waits in a machine's queue (`whenOffline` / `whenBusy`
    /// `queue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueView>,
    /// Where it ran (a routing record), once placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_on: Option<RanOn>,
    /// One line for a person: "Ran on build-box (your machine)."
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ran_on_text: Option<String>,
    /// The machine's timings of the run, once it ended there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
}

/// Where a queued execution waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    /// The machine it waits for, by name.
    pub context: String,
    /// Its place in that machine's queue: 1 is next.
    pub position: u32,
    /// `busy` (the machine is online with every slot taken) or `offline`.
    pub reason: String,
    /// Seconds it may still wait before it fails `execution_context_queue_expired`.
    pub left_secs: u64,
}

impl QueueView {
    /// One sentence for a person: "waiting for build-box: every slot is taken (next in its
    /// queue, 4 min left)".
    pub fn sentence(&self) -> String {
        let why = if self.reason == "busy" {
            "every slot is taken"
        } else {
            "it is offline"
        };
        let place = match self.position {
            1 => "next in its queue".to_owned(),
            n => format!("{n} in its queue"),
        };
        let left = match self.left_secs {
            0..60 => format!("{} s left", self.left_secs),
            secs => format!("{} min left", secs.div_ceil(60)),
        };
        format!("waiting for {}: {why} ({place}, {left})", self.context)
    }
}

/// An `output` event of `GET /v1/executions/{id}/output`: the next part of one stream of the
/// run's output. Its SSE `id` is `<stdout bytes>.<stderr bytes>` the follower then has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct OutputEvent {
    /// Which stream.
    pub stream: OutputStream,
    /// Bytes of that stream's UTF-8 text before `text` (the text `stdout`/`stderr` of the
    /// execution carries once it ended).
    pub offset: u64,
    /// The next part of the stream.
    pub text: String,
}

/// A `status` event of `GET /v1/executions/{id}/output`: where an execution that has not
/// started stands, and why, in a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct OutputStatus {
    /// `pending` or `running`.
    pub status: ExecutionStatus,
    /// What a person should read ("waiting for build-box to come online…").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `GET /v1/runs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Runs {
    /// Newest first.
    pub runs: Vec<Execution>,
    /// The next page: pass it as `before` (absent on the last page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<ExecutionId>,
}

/// A Context (§11.4), as one caller may see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Context {
    /// `ec_…`.
    pub id: ContextId,
    /// The machine's name, unique on the server.
    pub name: String,
    /// The user who joined it.
    pub operator: String,
    /// Whether its daemon is connected now.
    pub online: bool,
    /// Since when (Unix seconds) its daemon's current connection has been ready; absent while
    /// it is offline. A reconnect starts it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online_since: Option<u64>,
    /// Runs it holds now.
    pub slots_used: usize,
    /// Runs it holds at most (what its daemon offers while online, what it registered with
    /// otherwise).
    pub slots_total: u32,
    /// What the server allows runs on it.
    pub grant: Grant,
    /// Bumped on every change of the grant.
    pub grant_version: u64,
    /// Whether its key was revoked (it can never connect again).
    pub revoked: bool,
    /// Its daemon's version, as registered.
    pub daemon_version: String,
    /// The environments it registered with (`shell`, `wasm`, …).
    pub environments: Vec<String>,
    /// Unix seconds.
    pub registered_at: u64,
    /// Whether every member may opt in to run on it.
    pub shared_with_all_members: bool,
    /// Its operator and admins see every opt-in, anyone else only their own.
    pub opted_in: Vec<String>,
    /// Whether its operator is still a member.
    pub operator_is_member: bool,
    /// What the machine's sandbox enforces, as its daemon announced it; `null` while it is
    /// offline or when its daemon does not say.
    pub sandbox: Option<SandboxView>,
    /// Its daemon takes no new runs now: it is stopping, restarting, updating, or paused
    /// (`false` while offline).
    #[serde(default)]
    pub draining: bool,
    /// An operator paused its daemon from afar; it takes runs again once resumed (`false`
    /// while offline).
    #[serde(default)]
    pub paused: bool,
    /// Its connected daemon answers requests from afar (`POST …/daemon`): it announced the
    /// `control` feature (`false` while offline).
    #[serde(default)]
    pub control: bool,
    /// Whether its terminal sessions' recordings keep what operators type: the server records
    /// input and the machine's owner allows it (`false` while offline).
    #[serde(default)]
    pub records_terminal_input: bool,
}

/// `GET /v1/nodes` (admin): the nodes serving this system, each with the machines connected to
/// it. One `outpost serve` is one node; docs/CLUSTER.md plans many over one database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Nodes {
    /// The live nodes, the one answering first.
    pub nodes: Vec<Node>,
}

/// One node: an `outpost serve` process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// `nd_…`, kept in the node's state folder: the same across its restarts.
    pub node_id: String,
    /// The URL daemons and clients reach it at.
    pub url: String,
    /// The URL the other nodes reach it itself at (`--node-url`), to relay terminals and live
    /// output to it; absent for a node of an earlier version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_url: Option<String>,
    /// When the process started (Unix seconds).
    pub started_at: u64,
    /// Whether it is the node that answered.
    pub this: bool,
    /// The machines whose daemon is connected to it now, by name.
    pub sessions: Vec<NodeSession>,
}

/// A daemon connected to a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeSession {
    /// `ec_…`.
    pub context_id: ContextId,
    /// The machine's name.
    pub name: String,
    /// Runs it holds now.
    pub slots_used: usize,
    /// Runs it holds at most.
    pub slots_total: u32,
    /// It takes no new runs now (stopping, restarting, updating or paused).
    pub draining: bool,
    /// An operator's pause holds (absent from a node of an earlier version: false).
    #[serde(default)]
    pub paused: bool,
    /// What its daemon announced (`hello` / `capabilities.update`; absent from a node of an
    /// earlier version: none).
    #[serde(default)]
    pub features: Vec<String>,
    /// When (Unix seconds) its connection became ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online_since: Option<u64>,
}

/// `POST /v1/execution-contexts/{context}/daemon`: the daemon's answer (its owner's policy
/// may refuse any action).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DaemonControlled {
    /// The context asked, `ec_…`.
    pub context_id: ContextId,
    /// The request's id (`ctl_…`), as the audit row and the daemon's log name it.
    pub control_id: String,
    /// The action asked.
    pub action: crate::wire::ControlAction,
    /// `done`, `refused` (the owner's policy or the daemon's situation) or `failed`.
    pub outcome: crate::wire::ControlOutcome,
    /// Why it was refused or failed, as a stable code (absent when done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What the daemon did, or why not, for people.
    pub message: String,
    /// For `logs`: the daemon's most recent log lines, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
}

/// A machine's sandbox, from its daemon's `sandbox:*` and `confinement:*` features.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SandboxView {
    /// The owner's rule: `required` or `operator-may-opt-out`.
    pub confinement: String,
    /// Landlock's file rules are enforced (every sandboxed run needs them).
    pub landlock: bool,
    /// User, mount, PID and network namespaces are available (egress `none`, allowlists).
    pub namespaces: bool,
    /// Landlock's signal and abstract-socket scoping is enforced.
    pub scopes: bool,
    /// The folders the operator's runs there see now (a shared run sees none): where the
    /// grant and the owner's local policy meet, from the daemon's `mount:MODE:PATH` features
    /// (empty: none). `None` when the daemon says `fs` but names no folder (a daemon older
    /// than these features, or one that has not applied its grant yet), and for a caller
    /// who is neither the context's operator nor an admin.
    #[serde(default)]
    pub mounts: Option<Vec<MountView>>,
}

/// A folder a machine's runs see, as its daemon announced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MountView {
    /// The folder's canonical path on the machine.
    pub path: String,
    /// `ro` or `rw`: the narrower of the grant's and the owner's.
    pub mode: crate::wire::FolderMode,
}

impl MountView {
    /// The feature a daemon announces it with: `mount:ro:/srv/data`.
    pub fn feature(&self) -> String {
        let mode = match self.mode {
            crate::wire::FolderMode::Ro => "ro",
            crate::wire::FolderMode::Rw => "rw",
        };
        format!("{}{mode}:{}", crate::wire::FEATURE_MOUNT_PREFIX, self.path)
    }

    /// The mount a `mount:MODE:PATH` feature names; `None` for any other feature or a mode
    /// this build does not know.
    pub fn of_feature(feature: &str) -> Option<MountView> {
        let rest = feature.strip_prefix(crate::wire::FEATURE_MOUNT_PREFIX)?;
        let (mode, path) = rest.split_once(':')?;
        let mode = match mode {
            "ro" => crate::wire::FolderMode::Ro,
            "rw" => crate::wire::FolderMode::Rw,
            _ => return None,
        };
        Some(MountView {
            path: path.to_owned(),
            mode,
        })
    }
}

impl SandboxView {
    /// The view of a daemon's announced `features`, when they say anything of the sandbox.
    pub fn of(features: &[String]) -> Option<Self> {
        let confinement = features
            .iter()
            .find_map(|f| f.strip_prefix("confinement:"))?
            .to_owned();
        let has = |name: &str| features.iter().any(|f| f == name);
        Some(SandboxView {
            confinement,
            landlock: has("sandbox:landlock"),
            namespaces: has("sandbox:namespaces"),
            scopes: has("sandbox:scopes"),
            mounts: {
                let named: Vec<MountView> = features
                    .iter()
                    .filter_map(|f| MountView::of_feature(f))
                    .collect();
                (!named.is_empty() || !has("fs")).then_some(named)
            },
        })
    }
}

/// `GET /v1/execution-contexts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Contexts {
    /// The contexts the caller may see.
    pub contexts: Vec<Context>,
}

/// One entry of a chain: its id (or `cloud`) and the name a person knows it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChainEntryView {
    /// `ec_…`, or `cloud`.
    pub id: String,
    /// `null` when the context is gone.
    pub name: Option<String>,
}

/// `GET` and `PUT /v1/chain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "ChainShown"))]
pub struct ChainShown {
    /// The entries' ids, in order (`cloud` for the server).
    pub chain: Vec<String>,
    /// The same entries with their names.
    pub entries: Vec<ChainEntryView>,
}

/// `POST /v1/execution-contexts` (201 new, 200 already registered).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Registered {
    /// The context id (`ec_…`).
    pub context_id: ContextId,
    /// The machine's name.
    pub name: String,
    /// The operator (the join token's owner).
    pub operator: String,
    /// The machine key id (`mk_…`, from the public key).
    pub key_id: String,
    /// What the server allows runs on it now.
    pub grant: Grant,
    /// The grant's version.
    pub grant_version: u64,
}

/// `POST /v1/execution-contexts/connect-ticket`: a bearer secret (`Debug` redacts it).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConnectTicket {
    /// `otk_…`, single-use.
    pub ticket: String,
    /// The session id every server frame of that connection carries.
    pub session_id: String,
    /// Unix seconds.
    pub expires_at: u64,
}

impl std::fmt::Debug for ConnectTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectTicket")
            .field("ticket", &"otk_[redacted]")
            .field("session_id", &self.session_id)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// `PUT /v1/bundles/{sha256}` (201 stored, 200 already stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Bundle {
    /// The bundle's name: its SHA-256.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = DIGEST_PATTERN)))]
    pub sha256: String,
    /// Bytes.
    pub size: u64,
}

/// `POST /v1/execution-contexts/commands`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CommandsSwitched {
    /// The switch as it now stands.
    pub enabled: bool,
    /// The grant's version after the switch.
    pub grant_version: u64,
}

/// `POST /v1/execution-contexts/commands/authorize`: the server's yes to a host command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CommandAuthorized {
    /// `cmd_…`: the id the server audited its start under.
    pub command_id: String,
    /// The run's requester: a background job's owner.
    pub requester: String,
}

/// `POST /v1/execution-contexts/commands/jobs/authorize`: the server's yes to a `poll` or
/// `kill`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobAuthorized {
    /// The run's requester now: only their jobs may be touched.
    pub requester: String,
}

/// `POST /v1/users`: the token is shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct User {
    /// The user's name.
    pub user: String,
    /// Its bearer token (`otu_…`); the server keeps only its hash.
    pub token: String,
    /// What it may do.
    pub scopes: Vec<String>,
}

/// A join token, as `GET /v1/join-tokens` lists it (its secret never: only `POST` shows the
/// join string, once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JoinToken {
    /// `jt_…` (`jt_first`: the one the server made at its first start).
    pub id: String,
    /// Who made it.
    pub created_by: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds it stops being good at (absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// Registrations it may still make (absent: any number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses_left: Option<u32>,
    /// Registrations made with it.
    pub used: u32,
    /// The name prefix a machine registering with it must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    /// Revoked: it registers nothing more.
    pub revoked: bool,
    /// The join string: in the answer to `POST` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<String>,
}

/// `GET /v1/join-tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JoinTokens {
    /// Newest first.
    pub join_tokens: Vec<JoinToken>,
}

/// One audit event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// Unix seconds.
    pub at: u64,
    /// `context_registered`, `grant_changed`, `host_command`, …
    pub kind: String,
    /// Who did it (a user, or a context's machine).
    pub actor: String,
    /// `null` for an event about no context (a user added, …).
    pub context_id: Option<String>,
    /// The context's name now; absent for an event about no context, or once the context
    /// is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_name: Option<String>,
    /// What happened, for a person.
    pub detail: String,
    /// For a terminal's rows (`terminal.session.started`, `terminal.session.ended`,
    /// `terminal.closed`): where its session's recording is read,
    /// `/v1/terminals/{terminalId}/recording`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<String>,
}

/// `GET /v1/me`: whose token the request carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Me {
    /// The user the token belongs to.
    pub user: String,
    /// Whether the token carries `admin` (sees every user's contexts, runs and audit).
    pub admin: bool,
    /// The token's scopes.
    pub scopes: Vec<String>,
}

/// `GET /v1/audit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Audit {
    /// Newest first.
    pub events: Vec<AuditEvent>,
}

/// `POST /v1/execution-contexts/{context}/terminals`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TerminalOpened {
    /// The terminal's id (its run's id).
    pub terminal_id: TerminalId,
    /// The context's name.
    pub context: String,
    /// `ec_…`.
    pub context_id: ContextId,
    /// The single-use viewer ticket for `GET /v1/terminals/{terminal}/ws`.
    pub ticket: String,
    /// What the ticket's holder may do.
    pub role: Role,
    /// How long the ticket stays usable.
    pub expires_in_ms: u64,
    /// Columns it opens with.
    pub cols: u16,
    /// Rows it opens with.
    pub rows: u16,
    /// Whether the session's recording keeps what is typed (the server is started with
    /// `--record-terminal-input` and the machine's owner allows it); its output is always
    /// recorded.
    #[serde(default)]
    pub records_input: bool,
}

/// `POST /v1/terminals/{terminal}/tickets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TerminalTicket {
    /// The single-use viewer ticket.
    pub ticket: String,
    /// What the ticket's holder may do.
    pub role: Role,
    /// How long the ticket stays usable.
    pub expires_in_ms: u64,
}

/// Where a terminal is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum TerminalState {
    /// Opened; its machine has not sent output yet.
    Starting,
    /// Its machine has sent output.
    Open,
    /// It ended (its relay keeps the end for late viewers a while).
    Closed,
}

/// One open terminal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TerminalRow {
    /// The terminal's id.
    pub terminal_id: TerminalId,
    /// The context's name.
    pub context: String,
    /// `ec_…`.
    pub context_id: ContextId,
    /// Where it is in its life.
    pub state: TerminalState,
    /// Viewers attached now.
    pub viewers: usize,
    /// Columns now.
    pub cols: u16,
    /// Rows now.
    pub rows: u16,
    /// Unix seconds.
    pub opened_at: u64,
    /// The user who opened it.
    pub opened_by: String,
    /// Whether its recording keeps what operators type (the server's
    /// `--record-terminal-input`); output and sizes are always recorded.
    #[serde(default)]
    pub records_input: bool,
}

/// One recorded terminal session (`GET /v1/recordings`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Recording {
    /// The terminal's id; its recording is `GET /v1/terminals/{terminalId}/recording`.
    pub terminal_id: TerminalId,
    /// The context's name when the session began.
    pub context: String,
    /// `ec_…`.
    pub context_id: ContextId,
    /// The user who opened the terminal.
    pub opened_by: String,
    /// When the session began, Unix seconds.
    pub started_at: u64,
    /// When it ended; `null` while it is open, or when the server stopped before its end.
    pub ended_at: Option<u64>,
    /// Bytes of asciicast stored.
    pub size: u64,
    /// Whether operators' keystrokes are in it.
    pub records_input: bool,
    /// Whether it reached the server's bound; its last event is then a marker saying so.
    pub truncated: bool,
}

/// `GET /v1/recordings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Recordings {
    /// The recordings the caller may watch, newest first.
    pub recordings: Vec<Recording>,
}

/// `GET /v1/terminals`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Terminals {
    /// The terminals the caller may see, on every node of a cluster, oldest first.
    pub terminals: Vec<TerminalRow>,
    /// The nodes of a cluster that did not answer for their terminals (`nd_…`): theirs are
    /// missing from the list. Absent when every node answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreached_nodes: Vec<String>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Health {
    /// Always `true`: the server answers.
    pub ok: bool,
}

/// What a wait's match started, or why it started nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Continuation {
    /// `WAIT.then`; `null` for a wait without `then`.
    pub id: Option<String>,
    /// Where the continuation is.
    #[cfg_attr(
        feature = "schema",
        schemars(extend("enum" = ["none", "pending", "started", "access_lost", "cancelled", "expired", "refused"]))
    )]
    pub state: String,
    /// The execution it started (`ex_` + the continuation id).
    pub execution_id: Option<String>,
    /// Why nothing started (`not_opted_in`, …).
    pub error: Option<String>,
}

/// A Wait (§11.7): every member is always there, `null` when it has no value yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Wait {
    /// `wt_…`.
    pub wait_id: WaitId,
    /// The context's name when the wait was registered.
    pub context: String,
    /// `ec_…`.
    pub context_id: ContextId,
    /// Who registered it.
    pub requester: String,
    /// Where it is in its life.
    #[cfg_attr(
        feature = "schema",
        schemars(extend("enum" = ["active", "cancelling", "matched", "failed"]))
    )]
    pub state: String,
    /// Why the requester waits, for people.
    pub reason: Option<String>,
    /// Milliseconds between checks.
    pub interval_ms: u64,
    /// Unix ms.
    pub expires_at_ms: Option<u64>,
    /// Unix ms.
    pub created_at_ms: u64,
    /// Checks the machine reported.
    pub checks: u64,
    /// Failed checks in a row.
    pub consecutive_errors: u32,
    /// The last failed check's error, as the daemon reported it.
    pub last_error: Option<CheckError>,
    /// Unix ms.
    pub next_check_at_ms: Option<u64>,
    /// The line the match resumes with, for people.
    pub resume_text: Option<String>,
    /// What the condition returned with its match (any JSON).
    #[serde(default)]
    pub payload: Value,
    /// What the condition observed (any JSON).
    #[serde(default)]
    pub evidence: Value,
    /// Why it failed.
    #[cfg_attr(
        feature = "schema",
        schemars(extend("enum" = ["check_errors", "expired", "cancelled", "context_revoked", null]))
    )]
    pub fail_reason: Option<String>,
    /// Unix ms.
    pub ended_at_ms: Option<u64>,
    /// What its match started.
    pub continuation: Continuation,
    /// On a registration: whether an identical active wait was answered (200) instead of a
    /// new one (201). Absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deduplicated: Option<bool>,
}

/// `GET /v1/waits`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Waits {
    /// Newest first.
    pub waits: Vec<Wait>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::FolderMode;

    #[test]
    fn a_mount_feature_reads_back_as_the_mount_it_names_and_nothing_else_reads_as_one() {
        let mount = MountView {
            path: "/srv/a:b".into(),
            mode: FolderMode::Rw,
        };
        assert_eq!(mount.feature(), "mount:rw:/srv/a:b");
        assert_eq!(MountView::of_feature(&mount.feature()), Some(mount));
        for other in [
            "mount:xx:/srv",
            "mount:/srv",
            "fs",
            "sandbox:landlock",
            "mounts:ro:/a",
        ] {
            assert_eq!(MountView::of_feature(other), None, "{other}");
        }
        let features: Vec<String> = ["confinement:required", "sandbox:landlock", "mount:ro:/data"]
            .map(str::to_owned)
            .into();
        let view = SandboxView::of(&features).expect("a sandbox view");
        assert_eq!(
            view.mounts,
            Some(vec![MountView {
                path: "/data".into(),
                mode: FolderMode::Ro
            }])
        );
        // `fs` without a folder named: not known (an older daemon); neither: none.
        let older: Vec<String> = ["confinement:required", "fs"].map(str::to_owned).into();
        assert_eq!(SandboxView::of(&older).unwrap().mounts, None);
        let none: Vec<String> = ["confinement:required"].map(str::to_owned).into();
        assert_eq!(SandboxView::of(&none).unwrap().mounts, Some(Vec::new()));
    }
}
