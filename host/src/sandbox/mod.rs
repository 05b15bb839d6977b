//! The sandbox every shell and terminal run lives in unless the machine's owner lets the
//! operator opt out (see `docs/CAPABILITIES.md`, "What a run can see").
//!
//! A sandboxed run starts through the helper ([`helper_main`], the `outpost` binary's hidden
//! `confine` subcommand, started through `/proc/self/exe` so a binary replaced on disk still
//! serves). Each layer does one thing:
//!
//! - **Landlock** (required): the system folders read-only, the capability folder read-only,
//!   the mounts with their modes, a private `HOME` and `TMPDIR` read-write — nothing else.
//!   It also keeps the run from tracing processes outside its domain and, where the kernel has
//!   ABI 6, from signalling them or reaching their abstract Unix sockets.
//! - **User, mount and PID namespaces**: the run is PID 2 under a PID 1 of ours, sees only
//!   its own processes in `/proc`, cannot name the daemon's pid; its root is a file system of
//!   its own holding only what it is given (so no socket of the machine's can be named), and
//!   credential paths and the system's secrets are hidden under empty mounts. `no_new_privs`
//!   is set.
//! - **A network namespace** for egress `none` (loopback only) and an allowlist (loopback and
//!   the egress gate, bridged in on [`PROXY_PORT`] and offered as `HTTP_PROXY`,
//!   `HTTPS_PROXY`, `ALL_PROXY`).
//!
//! A long-lived process keeps a warm helper ready per network kind ([`SandboxConfig::warm`],
//! [`spawn_piped`]): made before its run comes, finished for that run alone when it does.
//!
//! Where the kernel lacks what a run needs, [`prepare`] refuses it with
//! `confinement_unavailable` naming the missing piece and the fix; nothing runs with less.
//! This module owns the helper's arguments, the probe, and each run's private folders and
//! gate ([`SandboxGuard`]); it never decides *whether* a run is sandboxed (that is
//! [`outpost_core::grant::must_confine`]).

mod bridge;
mod helper;
mod kernel;
mod warm;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use outpost_core::executor::{ExecError, Launch};
use outpost_core::manifest::Lifecycle;
use outpost_core::wire::{Egress, FolderMode};

use crate::gate::{Gate, GateEvent, GatePolicy};

pub use helper::helper_main;
pub use warm::retire as retire_warm_helpers;

/// The hidden subcommand of the `outpost` binary that sandboxes a run.
pub const SUBCOMMAND: &str = "confine";

/// The last line a successful `confine --probe` prints.
pub const PROBE_OK: &str = "outpost-confine: Landlock enforced";

/// Exit status of a helper that ran nothing: bad arguments, or a rule not enforced.
pub const EXIT_NOT_CONFINED: u8 = 125;

/// How the helper's own failure lines on stderr begin, telling them from the program's.
pub const STDERR_PREFIX: &str = "outpost confine:";

/// Exit status of a helper that could not execute the program.
pub const EXIT_CANNOT_EXECUTE: u8 = 126;

/// System folders a sandboxed run may read.
pub const SYSTEM_READ_ONLY: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc", "/dev",
];

/// Secrets inside [`SYSTEM_READ_ONLY`] that a run never reads, hidden under an empty mount
/// in every namespaced sandbox (the password and group shadows, sudo's rules, TLS private
/// keys); SSH host private keys (`/etc/ssh/ssh_host_*_key`) are hidden too. A daemon running
/// as root runs its runs as root of their user namespace, which the file modes alone would
/// let read them.
pub const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
];

/// Device files a sandboxed run may write.
pub const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/tty"];

/// The port on a sandboxed run's own loopback where its egress gate answers.
pub const PROXY_PORT: u16 = 3128;

/// What this machine's kernel can enforce, as the helper's probe found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// Landlock's file rules (required for every sandboxed run).
    pub landlock: Result<(), String>,
    /// User, mount, PID and network namespaces (required for every sandboxed run).
    pub namespaces: Result<(), String>,
    /// Landlock's signal and abstract-socket scopes (ABI 6).
    pub scopes: bool,
}

impl Support {
    /// Everything available (what a test that injects a kernel starts from).
    pub fn full() -> Self {
        Support {
            landlock: Ok(()),
            namespaces: Ok(()),
            scopes: true,
        }
    }

    /// Probes once per helper binary (later calls return the first answer).
    pub fn probe(helper: &Path) -> Support {
        static PROBES: OnceLock<Mutex<BTreeMap<PathBuf, Support>>> = OnceLock::new();
        let probes = PROBES.get_or_init(Default::default);
        if let Some(known) = probes.lock().ok().and_then(|p| p.get(helper).cloned()) {
            return known;
        }
        let found = Self::run_probe(helper);
        if let Ok(mut p) = probes.lock() {
            p.insert(helper.to_path_buf(), found.clone());
        }
        found
    }

    fn run_probe(helper: &Path) -> Support {
        let out = match Command::new(helper).args([SUBCOMMAND, "--probe"]).output() {
            Ok(out) => out,
            Err(e) => {
                let why = format!("cannot run {}: {e}", helper.display());
                return Support {
                    landlock: Err(why.clone()),
                    namespaces: Err(why),
                    scopes: false,
                };
            }
        };
        Self::read_probe(
            out.status.success(),
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
            helper,
        )
    }

    /// Reads a probe's output (see the helper's `--probe`).
    fn read_probe(success: bool, stdout: &str, stderr: &str, helper: &Path) -> Support {
        let line = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
        };
        let namespaces = match line("namespaces:") {
            Some("available") => Ok(()),
            Some(other) => Err(other
                .strip_prefix("unavailable:")
                .unwrap_or(other)
                .trim()
                .to_owned()),
            None => Err("the probe did not say".to_owned()),
        };
        let landlock = if success && stdout.lines().any(|l| l.trim() == PROBE_OK) {
            Ok(())
        } else if success {
            Err(format!(
                "{} does not know the `{SUBCOMMAND}` subcommand; name the outpost binary as the confine helper",
                helper.display()
            ))
        } else {
            Err(stderr
                .trim()
                .trim_start_matches(STDERR_PREFIX)
                .trim()
                .to_owned())
        };
        Support {
            landlock,
            namespaces,
            scopes: line("scopes:") == Some("available"),
        }
    }
}

/// The helper by default: the running executable, the `outpost` binary — named through
/// `/proc/self/exe`, which a child started by this process resolves to the very file this
/// process runs, even after it was replaced or deleted on disk (a package upgrade, a
/// rebuild). Where `/proc` is absent, the path the executable was started from.
pub fn default_helper() -> Result<PathBuf, String> {
    let running = Path::new("/proc/self/exe");
    if running.exists() {
        return Ok(running.to_path_buf());
    }
    std::env::current_exe().map_err(|e| format!("the current executable cannot be found: {e}"))
}

/// How an executor sandboxes its runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxConfig {
    /// The binary whose hidden `confine` subcommand ([`SUBCOMMAND`]) starts a sandboxed run.
    /// Default: the current executable, the `outpost` binary. An embedder names its own
    /// binary here and dispatches the subcommand to [`helper_main`].
    pub helper: Option<PathBuf>,
    /// What the kernel can enforce; `None` probes the helper once. Tests inject a kernel that
    /// lacks a piece here.
    pub support: Option<Support>,
    /// Keep a warm helper ready for each network kind, so a run that comes skips most of
    /// the sandbox's set-up ([`spawn_piped`]); for a long-lived process (a daemon, a server),
    /// which calls [`retire_warm_helpers`] when it stops. Off for a one-run process.
    pub warm: bool,
}

/// The variables that offer a run its egress gate on [`PROXY_PORT`] of its own loopback:
/// `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (`socks5h://`) and their lowercase forms. No
/// `NO_PROXY`: the gate is the only way out; a run that serves itself on its own loopback
/// sets `NO_PROXY` for that itself.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let http = format!("http://127.0.0.1:{PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{PROXY_PORT}");
    [
        ("HTTP_PROXY", &http),
        ("HTTPS_PROXY", &http),
        ("ALL_PROXY", &socks),
        ("http_proxy", &http),
        ("https_proxy", &http),
        ("all_proxy", &socks),
    ]
    .into_iter()
    .map(|(key, value)| (key, value.clone()))
    .collect()
}

/// Refusals of the run's egress gate, as the run's audit wants them.
pub type EgressReport = Arc<dyn Fn(GateEvent) + Send + Sync>;

/// A run, sandboxed: what to start instead of the program, and what must live as long as it.
#[derive(Debug)]
pub struct Sandboxed {
    /// The binary to start instead of the program ([`SandboxConfig::helper`], by default the
    /// `outpost` binary), which runs its hidden `confine` subcommand.
    pub program: PathBuf,
    /// Its arguments, ending with `-- PROGRAM ARGS…`.
    pub args: Vec<OsString>,
    /// Variables to set over the run's environment: `HOME` and `TMPDIR` (private), and the
    /// proxy variables when the run's egress goes through the gate.
    pub env: Vec<(OsString, OsString)>,
    /// The run's private folders and its gate; keep it until the run has ended.
    pub guard: SandboxGuard,
}

/// A sandboxed run's private `HOME` and `TMPDIR` (removed on drop) and its egress gate
/// (stopped on drop).
#[derive(Debug)]
pub struct SandboxGuard {
    scratch: PathBuf,
    gate: Option<Gate>,
    /// The warm helper to make ready once this run is over (made then, not while the run
    /// starts, so its set-up never competes with the run for a core).
    then_warm: Option<(PathBuf, warm::Net)>,
    /// The FIFO the helper's PID 1 reports the run's end on, held open for reading and
    /// writing (see [`report_fifo`]); taken by whoever waits for the run.
    report: Option<std::fs::File>,
    /// A warm helper's run pipe, held open after the run was written: its PID 1, once the
    /// program ended, has killed whatever the run left in the sandbox and holds the sandbox
    /// (its namespaces, their teardown) until this closes.
    hold: Option<std::process::ChildStdin>,
}

impl SandboxGuard {
    /// Whether the helper's PID 1 ends the run's other processes itself when the program
    /// ends, and then holds the sandbox until this guard is dropped: the caller need not
    /// stop the run's process group when it hears the report, and the sandbox's teardown
    /// happens when the caller drops the guard, not while it handles the run's end.
    pub fn holds_until_dropped(&self) -> bool {
        self.hold.is_some()
    }

    /// The FIFO on which the helper's PID 1 writes how the run ended, as soon as it knows:
    /// two bytes, `0, CODE` for an exit, `1, SIGNAL` for a fatal signal. Reading it gives the
    /// run's end one process exit earlier than waiting for the helper. The handle also
    /// writes: write two other bytes to wake a reader that waits in vain (the helper ended
    /// without reporting; its own exit says how).
    pub fn take_report(&mut self) -> Option<std::fs::File> {
        self.report.take()
    }
}

/// Makes the FIFO `scratch/report` (0600) and opens it for reading and writing — so a
/// helper's open for writing never waits, and a reader never sees an end of file — with its
/// path; none when the folder refuses one (the run's end is then its helper's exit).
fn report_fifo(scratch: &Path) -> Option<(PathBuf, std::fs::File)> {
    let path = scratch.join("report");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).ok()?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .ok()?;
    Some((path, file))
}

impl Drop for SandboxGuard {
    fn drop(&mut self) {
        // A held sandbox's PID 1 ends now, and the kernel tears its namespaces down.
        drop(self.hold.take());
        if let Some(gate) = self.gate.take() {
            gate.stop();
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
        if let Some((helper, net)) = self.then_warm.take() {
            warm::prime(&helper, net);
        }
    }
}

/// Sandboxes `program args…` for `launch`: checks what the kernel can enforce against what
/// the run needs, makes its private folders and, for an allowlist, its gate (refusals go to
/// `report`), and says how to start it.
pub fn prepare(
    launch: &Launch,
    program: PathBuf,
    args: Vec<OsString>,
    config: &SandboxConfig,
    report: EgressReport,
) -> Result<Sandboxed, ExecError> {
    let bounds = Bounds::of(launch);
    let helper = checked_helper(&bounds, config)?;
    sandbox_cold(&bounds, program, args, helper, report)
}

/// What a sandboxed process may use: a run's (from its [`Launch`]), or a wait's `exec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// Names its private folder.
    pub run_id: outpost_core::ids::RunId,
    /// Its own folder (read-only), if it has one: a capability's.
    pub dir: Option<PathBuf>,
    /// The folders it may use (grant ∩ local policy, credential paths to hide).
    pub mounts: Vec<outpost_core::grant::Mount>,
    /// Who it may reach.
    pub egress: Egress,
    /// The context, for the gate's refusals.
    pub context: String,
    /// A service's port, published on the host's loopback.
    pub publish: Option<u16>,
}

impl Bounds {
    /// A run's bounds.
    pub fn of(launch: &Launch) -> Self {
        Bounds {
            run_id: launch.run_id.clone(),
            dir: Some(launch.dir.clone()),
            mounts: launch.mounts.clone(),
            egress: launch.egress.clone(),
            context: launch.context.clone(),
            publish: (launch.manifest.lifecycle == Lifecycle::Persistent)
                .then_some(launch.manifest.port)
                .flatten(),
        }
    }
}

/// A run whose helper starts when it comes: a new private folder for it, and the helper's
/// arguments there.
fn sandbox_cold(
    bounds: &Bounds,
    program: PathBuf,
    args: Vec<OsString>,
    helper: PathBuf,
    report: EgressReport,
) -> Result<Sandboxed, ExecError> {
    let scratch = scratch_folder(&bounds.run_id)?;
    make_private_folders(&scratch)?;
    sandbox_in(bounds, program, args, helper, scratch, report)
}

/// The helper to start a sandboxed run with, once the kernel is known to enforce what
/// `bounds` need; `confinement_unavailable` naming the missing piece otherwise.
fn checked_helper(bounds: &Bounds, config: &SandboxConfig) -> Result<PathBuf, ExecError> {
    let helper = match &config.helper {
        Some(helper) => helper.clone(),
        None => default_helper().map_err(|why| unavailable(format!("the helper: {why}")))?,
    };
    let support = match &config.support {
        Some(support) => support.clone(),
        None => Support::probe(&helper),
    };
    if let Err(why) = &support.landlock {
        return Err(ExecError::ConfinementUnavailable {
            missing: format!("Landlock: {why}"),
            remedy: LANDLOCK_REMEDY.into(),
        });
    }
    let hidden: Vec<&str> = bounds
        .mounts
        .iter()
        .flat_map(|m| m.excluded.iter().map(|p| p.as_str()))
        .collect();
    // Every sandbox needs its own file system: Landlock cannot keep a run from connecting to
    // a Unix socket it can name (the Docker engine's, a tmux server's).
    if let Err(why) = &support.namespaces {
        let rule = match &bounds.egress {
            Egress::None => "egress `none` (a network namespace with loopback only)".to_owned(),
            Egress::Allowlist { .. } => {
                "an egress allowlist (a network namespace whose only way out is the gate)"
                    .to_owned()
            }
            Egress::All if hidden.is_empty() => {
                "a file system of the run's own (only what it is given; no socket of the machine's to connect to)"
                    .to_owned()
            }
            Egress::All => format!(
                "hiding the credential paths {} inside a granted folder",
                hidden.join(", ")
            ),
        };
        return Err(ExecError::ConfinementUnavailable {
            missing: format!("namespaces for {rule}: {why}"),
            remedy: NAMESPACES_REMEDY.into(),
        });
    }
    Ok(helper)
}

/// Makes the run's private `home`, `tmp` and (empty) `root` in `scratch`, each 0700.
fn make_private_folders(scratch: &Path) -> Result<(), ExecError> {
    for dir in ["home", "tmp", "root"] {
        let dir = scratch.join(dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| ExecError::Spawn(format!("the run's {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// The helper's arguments for `bounds` in `scratch` (its private folders made), with the
/// run's gate started when its egress is an allowlist; the guard removes `scratch`.
fn sandbox_in(
    bounds: &Bounds,
    program: PathBuf,
    args: Vec<OsString>,
    helper: PathBuf,
    scratch: PathBuf,
    report: EgressReport,
) -> Result<Sandboxed, ExecError> {
    let mut guard = SandboxGuard {
        scratch: scratch.clone(),
        gate: None,
        then_warm: None,
        report: None,
        hold: None,
    };
    let (home, tmp, root) = (
        scratch.join("home"),
        scratch.join("tmp"),
        scratch.join("root"),
    );
    let mut out: Vec<OsString> = vec![SUBCOMMAND.into()];
    if let Some(dir) = &bounds.dir {
        let dir = dir.canonicalize().map_err(|e| ExecError::PathRefused {
            path: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        out.extend(["--ro".into(), dir.into_os_string()]);
    }
    // The `outpost` binary itself, so an operator's run can call `outpost command` (its
    // socket decides what that may do).
    if let Ok(exe) = std::env::current_exe().and_then(|exe| exe.canonicalize()) {
        out.extend(["--ro".into(), exe.into_os_string()]);
    }
    for mount in &bounds.mounts {
        let flag = match mount.mode {
            FolderMode::Ro => "--ro",
            FolderMode::Rw => "--rw",
        };
        out.extend([flag.into(), mount.path.as_str().into()]);
        for excluded in &mount.excluded {
            out.extend(["--hide".into(), excluded.as_str().into()]);
        }
    }
    for dir in [&home, &tmp] {
        out.extend(["--rw".into(), dir.clone().into_os_string()]);
    }
    out.extend(["--root".into(), root.into_os_string()]);
    let mut env: Vec<(OsString, OsString)> = vec![
        ("HOME".into(), home.into_os_string()),
        ("TMPDIR".into(), tmp.into_os_string()),
    ];
    let net: OsString = match &bounds.egress {
        Egress::All => "host".into(),
        Egress::None => "loopback".into(),
        Egress::Allowlist { .. } => {
            let socket = scratch.join("gate.sock");
            let listener = std::os::unix::net::UnixListener::bind(&socket)
                .map_err(|e| ExecError::Spawn(format!("the run's egress gate: {e}")))?;
            let policy = GatePolicy {
                egress: bounds.egress.clone(),
                context: bounds.context.clone(),
            };
            let gate = Gate::start_unix(listener, policy, report)
                .map_err(|e| ExecError::Spawn(format!("the run's egress gate: {e}")))?;
            guard.gate = Some(gate);
            env.extend(
                proxy_env()
                    .into_iter()
                    .map(|(key, value)| (key.into(), value.into())),
            );
            let mut net = OsString::from("gate=");
            net.push(&socket);
            net
        }
    };
    out.extend(["--net".into(), net]);
    // A service's port is reached from the host: published on its loopback and relayed into
    // the run's network namespace.
    if let Some(port) = bounds.publish {
        out.extend(["--publish".into(), port.to_string().into()]);
    }
    out.push("--".into());
    out.push(program.into_os_string());
    out.extend(args);
    Ok(Sandboxed {
        program: helper,
        args: out,
        env,
        guard,
    })
}

/// Starts `program args…` sandboxed within `bounds`: in `cwd`, with exactly `env` (over which
/// the run's private `HOME` and `TMPDIR`, and the proxy variables for an allowlist, are set),
/// stdin `/dev/null`, stdout and stderr piped, in a process group of its own whose id is the
/// child's pid. Keep the guard until the run has ended.
///
/// With [`SandboxConfig::warm`], a warm helper made for the run's network takes the run where
/// one is ready — the run's own folders, the switch to its root, the hidden paths and
/// Landlock are still done for it alone, after it came — and the next one is made ready in
/// the background once the run is over (a run that finds none ready starts its own). A run that publishes a port, or is given a folder that holds a system
/// folder, starts its helper itself, as every run does without `warm`.
pub fn spawn_piped(
    bounds: &Bounds,
    program: PathBuf,
    args: Vec<OsString>,
    cwd: &Path,
    env: Vec<(OsString, OsString)>,
    config: &SandboxConfig,
    report: EgressReport,
) -> Result<(std::process::Child, SandboxGuard), ExecError> {
    use std::io::Write as _;
    use std::os::unix::process::CommandExt as _;
    let helper = checked_helper(bounds, config)?;
    let net = warm_net(bounds).filter(|_| config.warm);
    if let Some(mut warm) = net.and_then(|net| warm::take(&helper, net)) {
        let boxed = match sandbox_in(
            bounds,
            program.clone(),
            args.clone(),
            helper.clone(),
            warm.scratch.clone(),
            report.clone(),
        ) {
            Ok(boxed) => boxed,
            Err(e) => {
                warm::discard(warm);
                return Err(e);
            }
        };
        let run = warm_run(&boxed.args, &overlay(env.clone(), &boxed.env), cwd);
        let mut stdin = warm.child.stdin.take();
        let sent = stdin.as_mut().map(|stdin| stdin.write_all(&run));
        if let Some(Ok(())) = sent {
            let mut guard = boxed.guard;
            guard.then_warm = net.map(|net| (helper, net));
            guard.report = warm.report.take();
            guard.hold = stdin;
            return Ok((warm.child, guard));
        }
        // The warm helper is gone (its set-up failed, or it was killed): start one as a
        // cold run does, which reports what fails.
        let _ = warm.child.kill();
        let _ = warm.child.wait();
    }
    let then_warm = net.map(|net| (helper.clone(), net));
    let mut boxed = sandbox_cold(bounds, program, args, helper, report)?;
    boxed.guard.then_warm = then_warm;
    if let Some((path, file)) = report_fifo(&boxed.guard.scratch) {
        // After the subcommand: `--report FIFO` is the helper's own, not the run's.
        let at = 1.min(boxed.args.len());
        boxed
            .args
            .splice(at..at, ["--report".into(), path.into_os_string()]);
        boxed.guard.report = Some(file);
    }
    let child = Command::new(&boxed.program)
        .args(&boxed.args)
        .current_dir(cwd)
        .env_clear()
        .envs(overlay(env, &boxed.env))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| ExecError::Spawn(format!("{}: {e}", boxed.program.display())))?;
    Ok((child, boxed.guard))
}

/// Whether a warm helper of `helper` is ready for a run whose egress is `egress` (a run
/// [`spawn_piped`] starts now would skip most of its set-up).
pub fn warm_helper_ready(helper: &Path, egress: &Egress) -> bool {
    warm::ready(helper, warm::Net::of(egress))
}

/// `env` with each of `over` set (replacing a variable of the same name).
pub fn overlay(
    mut env: Vec<(OsString, OsString)>,
    over: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    for (key, value) in over {
        env.retain(|(k, _)| k != key);
        env.push((key.clone(), value.clone()));
    }
    env
}

/// The network a warm helper for `bounds` is made with; none where a warm helper cannot
/// serve it: a published port (bound on the host before the namespace), or a folder that
/// holds one the warm root shows already (a system folder, `/dev`, `/proc`, the name
/// server's configuration).
fn warm_net(bounds: &Bounds) -> Option<warm::Net> {
    if bounds.publish.is_some() {
        return None;
    }
    let resolv = Path::new("/etc/resolv.conf").canonicalize().ok();
    let shown: Vec<PathBuf> = SYSTEM_READ_ONLY
        .iter()
        .map(PathBuf::from)
        .chain(resolv)
        .collect();
    let covers = |path: &Path| shown.iter().any(|s| s.starts_with(path) && s != path);
    let folders = bounds
        .dir
        .iter()
        .cloned()
        .chain(bounds.mounts.iter().map(|m| PathBuf::from(m.path.as_str())));
    if folders.into_iter().any(|f| covers(&f)) {
        return None;
    }
    Some(warm::Net::of(&bounds.egress))
}

/// What a warm helper reads as its run: the helper's arguments (without the subcommand),
/// `--env KEY=VALUE` for each of `env` and `--cwd`, before `--` and the program; each word
/// ended by a NUL byte (no argument, variable or path can hold one), the whole preceded by its
/// length in bytes (4 bytes, little-endian). The pipe stays open after it: the helper's PID 1
/// holds the run's sandbox until it closes (see the helper's module doc).
fn warm_run(args: &[OsString], env: &[(OsString, OsString)], cwd: &Path) -> Vec<u8> {
    let args = args.get(1..).unwrap_or_default();
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut words: Vec<OsString> = args[..split].to_vec();
    for (key, value) in env {
        let mut pair = key.clone();
        pair.push("=");
        pair.push(value);
        words.extend(["--env".into(), pair]);
    }
    words.extend(["--cwd".into(), cwd.as_os_str().to_owned()]);
    words.extend(args[split..].iter().cloned());
    let mut body = Vec::new();
    for word in words {
        body.extend_from_slice(word.as_encoded_bytes());
        body.push(0);
    }
    let mut out = u32::try_from(body.len())
        .unwrap_or(u32::MAX)
        .to_le_bytes()
        .to_vec();
    out.extend(body);
    out
}

/// How to get Landlock.
const LANDLOCK_REMEDY: &str = "run on a Linux kernel with Landlock (5.19 or later) enabled (`lsm=landlock` on the kernel command line), or let the operator's own runs opt out: outpost context policy confinement operator-may-opt-out";

/// How to get unprivileged namespaces.
const NAMESPACES_REMEDY: &str = "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), or grant the context egress all and no folder holding credential paths";

fn unavailable(missing: String) -> ExecError {
    ExecError::ConfinementUnavailable {
        missing,
        remedy: LANDLOCK_REMEDY.into(),
    }
}

/// Removes the private folders that runs of a process no longer alive left in the system's
/// temporary folder (a daemon killed mid-run cannot remove them itself); the number removed.
/// A folder whose process lives, or whose name does not say one, is left alone.
pub fn sweep_leftovers() -> usize {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("outpost-run-")) else {
            continue;
        };
        // …-{pid}-{n} (`scratch_folder`): the pid is the second field from the end.
        let owner = rest.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        let Some(owner) = owner else { continue };
        if owner == std::process::id() || Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// A new private folder for one run, 0700, in the system's temporary folder.
fn scratch_folder(run_id: &str) -> Result<PathBuf, ExecError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let safe: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    // A name left by an earlier process with the same pid (one killed before its cleanup)
    // is passed over: `create` never reuses a folder, so the next number is tried.
    let mut attempts = 0;
    loop {
        let path = std::env::temp_dir().join(format!(
            "outpost-run-{safe}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 64 => {
                attempts += 1;
            }
            Err(e) => {
                return Err(ExecError::Spawn(format!(
                    "the run's private folder {}: {e}",
                    path.display()
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests;
