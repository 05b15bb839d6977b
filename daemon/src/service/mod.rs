//! `outpost daemon install | status | logs | restart | uninstall`: the daemon as a service of
//! the owner's own service manager — a `systemd --user` unit on Linux, a LaunchAgent on
//! macOS — that starts at boot (or login), restarts after a crash and stays stopped once the
//! daemon stopped for good (exit 0, which neither manager restarts).
//!
//! - `install`: checks (not root, a binary that stays, a joined home, a key a service can
//!   open), writes the unit, and has the manager start it; `--print` only shows it.
//! - `systemd`, `launchd`: each manager's file and commands.
//! - `status`: `daemon.json` and the lock, read for `status`; `logs`.
//!
//! This module owns the generated files and the manager calls. Units hold paths, the context
//! id, `PATH` and `OUTPOST_DAEMON_SERVICE` only: never a token or a passphrase. Where no
//! manager answers it writes or removes the files, says so and exits [`EXIT_NO_MANAGER`]; it
//! never claims a service started.

/// `writeln!` to a command's output, whose writer handles a failed write (the CLI's ends the
/// process quietly when its reader is gone).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

mod install;
pub mod launchd;
mod status;
pub mod systemd;
mod tool;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::home::{SERVER_FILE, ServerFile};
use crate::{DaemonError, Launcher};
use outpost_host::{HOME_VAR, OwnerFolders};

pub use install::InstallArgs;
pub use launchd::LOG_FILE;

/// Exit status when the files were written or removed but no service manager answered:
/// nothing was started or stopped.
pub const EXIT_NO_MANAGER: u8 = 75;
/// Exit status of a refusal the owner must fix (root, a vanishing binary, not joined).
pub const EXIT_CONFIG: u8 = 78;
/// Exit status of `status` when no daemon runs (as the LSB's `status` actions do).
pub const EXIT_NOT_RUNNING: u8 = 3;

/// The hidden switch for tests only: `root` lets `install` run as root, `binary` lets it
/// use a binary in a temporary or build folder (comma-separated). A debug build reads it; a
/// release build ignores it, as it does the update tests' variables.
pub const TEST_ALLOW_VAR: &str = "OUTPOST_SERVICE_TEST_ALLOW";

/// The commands that manage this home's daemon as a user service (systemd `--user` unit or macOS
/// LaunchAgent).
#[derive(clap::Subcommand)]
pub enum ServiceAction {
    /// Install the daemon of this home as a service of your user's service manager (a
    /// systemd --user unit; a LaunchAgent on macOS), started at once and at every boot.
    /// Re-run it to repair the unit. The home must have joined a server
    /// (`outpost daemon --join …`) first.
    Install(InstallArgs),
    /// Whether the daemon of this home runs: pid, version, who started it, whether it is
    /// connected to its server (since when, the last error, the next retry), its slots in
    /// use, and whether it runs an older binary than this one. Exits 0 when it runs, 3 when
    /// not.
    Status {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The daemon's log: state/daemon.log for a daemon started in a terminal (it keeps that
    /// file, 8 MiB and one older file) or by launchd; the user journal for a systemd unit.
    Logs {
        /// How many lines from the end.
        #[arg(long, short = 'n', default_value_t = 100)]
        lines: u32,
        /// Keep printing what comes.
        #[arg(long, short)]
        follow: bool,
    },
    /// Restart the service (it picks up a new binary).
    Restart,
    /// Stop the service and remove its unit. The home, its key and its outbox stay.
    Uninstall,
}

/// A service manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Manager {
    /// systemd's per-user manager (`systemctl --user`).
    Systemd,
    /// macOS's launchd (a LaunchAgent in ~/Library/LaunchAgents).
    Launchd,
}

impl Manager {
    /// This OS's manager.
    pub fn native() -> Self {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }

    /// Its name, as `OUTPOST_DAEMON_SERVICE` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Launchd => "launchd",
        }
    }

    /// The service's name for context `context_id`: a unit, or a launchd label.
    pub fn service_name(self, context_id: &str) -> String {
        match self {
            Manager::Systemd => systemd::unit_name(context_id),
            Manager::Launchd => launchd::label(context_id),
        }
    }

    /// Where the service's file goes.
    pub fn service_path(self, context_id: &str) -> Result<PathBuf, ServiceError> {
        match self {
            Manager::Systemd => systemd::unit_path(context_id),
            Manager::Launchd => launchd::plist_path(context_id),
        }
    }
}

/// Why a service command cannot do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// `install` runs as root.
    #[error(
        "outpost daemon install refuses to run as root: the service would run every capability as root; run it as the user who owns this machine's daemon"
    )]
    Root,
    /// The binary would vanish (a temporary or build folder).
    #[error(
        "{} is in {why}: the service would lose it; install outpost where it stays (cargo install, a package, /usr/local/bin) and run that binary's `outpost daemon install`", .path.display()
    )]
    BinaryVanishes {
        /// The running binary's canonical path, which sits in a folder that does not last.
        path: PathBuf,
        /// Which folder.
        why: String,
    },
    /// The home has not joined a server.
    #[error(
        "this home has not joined a server ({} is missing): run `outpost daemon --join JOIN` with the same --home once first, then install", .0.display()
    )]
    NotJoined(PathBuf),
    /// The key is sealed with a passphrase, which a service cannot be given.
    #[error(
        "the machine key is sealed with a passphrase, and a service has no one to type it (units never hold one): pass --file-key, with OUTPOST_KEY_PASSPHRASE set this once, to seal the same key with a 0600 file key (config/key.file) instead; anyone who can read your files can then use the key"
    )]
    PassphraseSealed,
    /// A manager's file is installed only on its own OS.
    #[error(
        "{} services are installed only on {os}; `outpost daemon install --print --manager {}` shows the file here", .manager.as_str(), .manager.as_str()
    )]
    WrongOs {
        /// The manager asked for, whose OS this is not.
        manager: Manager,
        /// Its OS.
        os: &'static str,
    },
    /// `stopped.json` is there.
    #[error("{0}")]
    StoppedForGood(String),
    /// No unit is installed for this home.
    #[error("no service is installed for this home ({} is not there): run `outpost daemon install`", .0.display())]
    NotInstalled(PathBuf),
    /// A path cannot be written into a unit.
    #[error("{0:?} cannot go into a unit file: it holds a control character")]
    BadPath(String),
    /// The manager answered and refused.
    #[error("`{command}` failed: {why}")]
    Manager {
        /// The manager command that failed, as run (`systemctl --user …`, `launchctl …`).
        command: String,
        /// What it said.
        why: String,
    },
    /// HOME is not known.
    #[error("HOME is not set to an absolute path: the service's folder cannot be found")]
    NoHome,
    /// The daemon's folders cannot be known.
    #[error("the daemon's folders: {0} (pass --home DIR)")]
    Folders(String),
    /// A file cannot be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file that could not be read or written.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The daemon's own files refused.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
}

impl ServiceError {
    /// The stable `snake_case` code (`running_as_root`, `not_installed`, …), or the daemon error's.
    pub fn code(&self) -> &str {
        match self {
            ServiceError::Root => "running_as_root",
            ServiceError::BinaryVanishes { .. } => "binary_vanishes",
            ServiceError::NotJoined(_) => "not_joined",
            ServiceError::PassphraseSealed => "passphrase_sealed",
            ServiceError::WrongOs { .. } => "manager_unsupported",
            ServiceError::StoppedForGood(_) => "stopped_for_good",
            ServiceError::NotInstalled(_) => "not_installed",
            ServiceError::BadPath(_) => "path_unusable",
            ServiceError::Manager { .. } => "service_manager_failed",
            ServiceError::NoHome => "no_home",
            ServiceError::Folders(_) => "home_unusable",
            ServiceError::Io { .. } => "io",
            ServiceError::Daemon(e) => e.code(),
        }
    }

    /// The exit status it ends the command with.
    pub fn exit_status(&self) -> u8 {
        match self {
            ServiceError::Manager { .. } | ServiceError::Io { .. } => 1,
            _ => EXIT_CONFIG,
        }
    }

    fn io(path: &Path, source: std::io::Error) -> Self {
        ServiceError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Whether the test switch [`TEST_ALLOW_VAR`] allows `what`.
fn test_allows(what: &str) -> bool {
    cfg!(debug_assertions)
        && std::env::var(TEST_ALLOW_VAR).is_ok_and(|v| v.split(',').any(|w| w.trim() == what))
}

/// The daemon's home as a service sees it.
pub struct Target {
    /// The owner's folders.
    pub folders: OwnerFolders,
    /// `--home DIR` (or `OUTPOST_HOME`), canonical; `None`: the XDG folders.
    pub home_dir: Option<PathBuf>,
}

impl Target {
    /// The home `--home` names, else `OUTPOST_HOME`, else the XDG folders. Never creates it.
    pub fn resolve(home: Option<&Path>) -> Result<Self, ServiceError> {
        let home_dir = match home
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(HOME_VAR).map(PathBuf::from))
        {
            Some(dir) => Some(dir.canonicalize().map_err(|e| ServiceError::io(&dir, e))?),
            None => None,
        };
        let folders = OwnerFolders::from_vars(|name| match (&home_dir, name) {
            (Some(dir), HOME_VAR) => Some(dir.clone().into_os_string()),
            _ => std::env::var_os(name),
        })
        .map_err(|e| ServiceError::Folders(e.to_string()))?;
        Ok(Self { folders, home_dir })
    }

    /// The server this home joined.
    pub fn joined(&self) -> Result<ServerFile, ServiceError> {
        let path = self.folders.config.join(SERVER_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                ServiceError::Daemon(DaemonError::BadServerFile {
                    path,
                    reason: e.to_string(),
                })
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ServiceError::NotJoined(path))
            }
            Err(e) => Err(ServiceError::io(&path, e)),
        }
    }
}

/// What a generated unit runs: one daemon of one home.
pub struct Plan {
    /// The absolute path of the `outpost` binary the unit starts: the one `install` ran as.
    pub binary: PathBuf,
    /// Its arguments (`daemon --home DIR …`).
    pub args: Vec<String>,
    /// Its environment: `PATH`, `OUTPOST_DAEMON_SERVICE` and, for the XDG layout, the
    /// XDG folders the installer saw.
    pub env: Vec<(String, String)>,
    /// The context it serves.
    pub context_id: String,
    /// The state folder (launchd's log goes there).
    pub state: PathBuf,
}

impl Plan {
    /// The generated file's text for `manager`.
    pub fn render(&self, manager: Manager) -> Result<String, ServiceError> {
        for text in std::iter::once(self.binary.to_string_lossy().into_owned())
            .chain(self.args.iter().cloned())
            .chain(self.env.iter().map(|(_, v)| v.clone()))
            .chain(std::iter::once(self.state.to_string_lossy().into_owned()))
        {
            if text.chars().any(char::is_control) {
                return Err(ServiceError::BadPath(text));
            }
        }
        Ok(match manager {
            Manager::Systemd => systemd::unit(self),
            Manager::Launchd => launchd::plist(self),
        })
    }
}

fn write_file(path: &Path, text: &str) -> Result<bool, ServiceError> {
    let before = std::fs::read_to_string(path).ok();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| ServiceError::io(dir, e))?;
    }
    std::fs::write(path, text).map_err(|e| ServiceError::io(path, e))?;
    Ok(before.as_deref() != Some(text))
}

fn remove_file(path: &Path) -> Result<bool, ServiceError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(ServiceError::io(path, e)),
    }
}

/// Runs one service command on the home `home` (`--home`, else the default folders).
///
/// What it reports goes to `out` (the CLI passes its standard output); a write that fails is
/// `out`'s to handle, the command goes on.
pub fn run(action: ServiceAction, home: Option<&Path>, out: &mut dyn Write) -> ExitCode {
    let result = match action {
        ServiceAction::Install(args) => install::install(&args, home, out),
        ServiceAction::Status { json } => status::status(home, json, out),
        ServiceAction::Logs { lines, follow } => status::logs(home, lines, follow, out),
        ServiceAction::Restart => restart(home, out),
        ServiceAction::Uninstall => uninstall(home, out),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("outpost: {e} [{}]", e.code());
            ExitCode::from(e.exit_status())
        }
    }
}

fn no_manager(why: &str, next: &[String], out: &mut dyn Write) -> u8 {
    say!(
        out,
        "no service manager answered ({why}): nothing was started or stopped."
    );
    if !next.is_empty() {
        say!(out, "Once your user's service manager runs, run:");
        for line in next {
            say!(out, "  {line}");
        }
    }
    EXIT_NO_MANAGER
}

fn restart(home: Option<&Path>, out: &mut dyn Write) -> Result<u8, ServiceError> {
    let target = Target::resolve(home)?;
    let context_id = target.joined()?.context_id;
    let manager = Manager::native();
    let name = manager.service_name(&context_id);
    let path = manager.service_path(&context_id)?;
    if !path.exists() {
        return Err(ServiceError::NotInstalled(path));
    }
    let done = match manager {
        Manager::Systemd => systemd::restart(&name),
        Manager::Launchd => launchd::restart(&name),
    };
    match done {
        Answer::Done => {
            say!(out, "restarted {name}");
            Ok(0)
        }
        Answer::NoManager { why, next } => Ok(no_manager(&why, &next, out)),
        Answer::Failed(e) => Err(e),
    }
}

fn uninstall(home: Option<&Path>, out: &mut dyn Write) -> Result<u8, ServiceError> {
    let target = Target::resolve(home)?;
    let context_id = target.joined()?.context_id;
    let manager = Manager::native();
    let name = manager.service_name(&context_id);
    let path = manager.service_path(&context_id)?;
    if !path.exists() {
        say!(
            out,
            "nothing to do: no unit is installed at {}",
            path.display()
        );
        return Ok(0);
    }
    let stopped = match manager {
        Manager::Systemd => systemd::stop_and_disable(&name),
        Manager::Launchd => launchd::stop_and_disable(&name, &path),
    };
    if let Answer::Failed(e) = stopped {
        return Err(e);
    }
    remove_file(&path)?;
    say!(out, "removed {}", path.display());
    match stopped {
        Answer::Done => {
            if manager == Manager::Systemd {
                systemd::reload();
            }
            say!(out, "stopped and disabled {name}");
            Ok(0)
        }
        Answer::NoManager { why, next } => Ok(no_manager(&why, &next, out)),
        Answer::Failed(e) => Err(e),
    }
}

/// How a manager call went.
pub enum Answer {
    /// It did it.
    Done,
    /// No manager answered; `next` are the commands to run once one does.
    NoManager {
        /// Why it is taken as absent.
        why: String,
        /// What to run later.
        next: Vec<String>,
    },
    /// It answered and refused.
    Failed(ServiceError),
}

/// A daemon started by `launcher` stopped for good: its service is disabled so the manager
/// never starts it again (best effort; the outcome is logged). A terminal daemon has none.
pub fn disable_after_stop(launcher: Launcher, folders: &OwnerFolders) {
    let manager = match launcher {
        Launcher::Terminal => return,
        Launcher::Systemd => Manager::Systemd,
        Launcher::Launchd => Manager::Launchd,
    };
    let context_id = match std::fs::read(folders.config.join(SERVER_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<ServerFile>(&b).ok())
    {
        Some(server) => server.context_id,
        None => {
            tracing::warn!(
                "stopped for good, but server.json does not name the service to disable"
            );
            return;
        }
    };
    let name = manager.service_name(&context_id);
    let answer = match manager {
        Manager::Systemd => systemd::disable(&name),
        Manager::Launchd => launchd::disable(&name),
    };
    match answer {
        Answer::Done => {
            tracing::info!(service = %name, "disabled the service: it does not start again")
        }
        Answer::NoManager { why, .. } => tracing::warn!(
            service = %name,
            "could not disable the service (best effort: {why}); exit 0 keeps it from restarting, and stopped.json from serving"
        ),
        Answer::Failed(e) => tracing::warn!(
            service = %name,
            "could not disable the service (best effort: {e}); exit 0 keeps it from restarting, and stopped.json from serving"
        ),
    }
}
