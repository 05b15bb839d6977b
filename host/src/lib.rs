//! # outpost-host
//!
//! What every executor and both binaries share on a real machine, above the sans-IO core and
//! below the executors:
//!
//! - **Paths** ([`resolve_entry`], [`check_cwd`], [`resolve_volume`]): `realpath` first, then
//!   core's grant and denylist decide. A path that is not valid UTF-8 is refused with
//!   [`HostPathError::NotUtf8`], never rewritten.
//! - **The running-service table** ([`RunningServiceTable`]): persistent capabilities of
//!   every environment, each started through core's `run_capability` (permission, trust
//!   ceiling), with no lock held across a launch or a stop.
//! - **The owner's folders** ([`OwnerFolders`]): the XDG folders (or `OUTPOST_HOME`) and the
//!   credential denylist built from them.
//! - **Launches** ([`launch_from_execute`]): the daemon's `Execute` command as an executor
//!   `Launch`, with mounts = grant ∩ local policy minus the denylist and the grant's egress;
//!   [`owner_mounts`] for the owner's own `outpost run`.
//! - **A run's environment** ([`run_environment`]): the harmless host variables, never an
//!   `OUTPOST_*` or secret one, plus the manifest's `env`.
//! - **Manifests** ([`parse_manifest`]): a parse remembered by its text, so a capability run
//!   again is not read again.
//! - **Packing** ([`pack_capability`]): a capability folder as the inline source a run carries.
//! - **State databases** ([`private_database`]): a SQLite file and its companions made and
//!   kept 0600 before SQLite opens them.
//! - **The egress gate** ([`Gate`]): the proxy a run's allowlist egress goes through.
//! - **The sandbox** ([`sandbox`]): Landlock and namespaces around every shell and terminal
//!   run, its helper process, and the probe of what the kernel can enforce.
//! - **A process run to its end** ([`process::ProcessRun`]): a process group, its captured
//!   output, its deadline → SIGTERM → grace → SIGKILL; the shell executor's runs and host
//!   commands both go through it.
//! - **A run to its end** ([`run_to_end`], [`Cancel`]): the one wait-and-cancel loop of the
//!   daemon's runner and the server's `cloud` executor; a cancel wakes the waiter.
//! - **Host commands** ([`HostCommands`]): what a live operator's run asks the machine to
//!   execute, outside any capability, behind the owner's and the server's switches, audited.
//!
//! Executors depend on `outpost-core` and this crate, never on each other.
// One `unsafe` block in the crate: the sandbox helper's fork(2) of a single-threaded process
// (`sandbox/helper.rs`, `fork_init`).
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod commands;
mod env;
mod finish;
mod gate;
mod launch;
mod manifests;
mod owner;
mod pack;
mod paths;
mod private;
pub mod process;
pub mod sandbox;
mod services;
mod stopping;

pub use commands::{
    AUDIT_COMMAND_CHARS, AuditEvent, CommandError, CommandRequest, CommandSandbox, CommandsConfig,
    HostCommands, JobId, JobStatus,
};
pub use env::{PASSTHROUGH_VARS, run_environment};
pub use finish::{
    Cancel, STREAM_SLICE, folded_waker, folded_weak_waker, run_to_end, run_to_end_streaming,
};
pub use gate::{Gate, GateEvent, GatePolicy, HANDSHAKE_TIMEOUT, MAX_CLIENTS};
pub use launch::{
    LaunchContext, LaunchError, Materialized, PreparedLaunch, SkippedFolder, grant_mounts,
    launch_from_execute, materialize, owner_mounts,
};
pub use manifests::parse_manifest;
pub use owner::{HOME_VAR, OwnerError, OwnerFolders};
pub use pack::{MAX_INLINE_BYTES, PackError, pack_bundle, pack_capability};
pub use paths::{
    HostPathError, as_canonical, check_cwd, resolve, resolve_entry, resolve_volume, volume_path,
};
pub use private::private_database;
pub use services::{
    DEFAULT_STOP_BOUND, RunningServiceTable, ServiceInfo, ServiceState, ShutdownError, StopError,
};
pub use stopping::{StopSchedule, StopStep};
