//! `outpost context policy` and `outpost context commands`: the machine owner's local policy — the folders runs on this
//! machine may ever see, each with the most it allows (`ro` or `rw`) — in the daemon's config
//! folder (`policy.json`, mode 0600; absent means none).
//!
//! A run's folders are the server's grant intersected with this policy, the narrower mode
//! winning; a running daemon applies an edit to its next run. This module owns the file's
//! edits: it refuses a folder that does not resolve, one the credential denylist covers, and
//! one holding outpost's own config. Only `commands on|off` talks to the server, as the
//! machine, to set the server's half of that switch.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use outpost_core::grant::{ConfinementPolicy, LocalFolder, LocalPolicy};
use outpost_core::wire::FolderMode;
use outpost_host::OwnerFolders;
use outpost_host::resolve;

/// What `outpost context policy` does.
#[derive(clap::Subcommand)]
pub enum PolicyAction {
    /// Show the folders runs on this machine may use (the default).
    Show,
    /// Allow runs to use FOLDER (if the server also grants it), at most with --mode.
    Allow {
        /// The folder (resolved with realpath; it must exist).
        folder: PathBuf,
        /// The most it allows: ro (read only) or rw.
        #[arg(long, default_value = "ro", value_parser = mode)]
        mode: FolderMode,
    },
    /// Stop allowing FOLDER (as resolved when it was allowed).
    Remove {
        /// A folder the policy lists (resolved with realpath when it still exists, else as
        /// written).
        folder: PathBuf,
    },
    /// Whether shell and terminal runs may ever run outside the sandbox: `required` (every
    /// run sandboxed; the default) or `operator-may-opt-out` (the operator's own runs whose
    /// manifest says `confine: false` run as you; shared runs, waits and cloud runs never do).
    Confinement {
        /// required | operator-may-opt-out
        #[arg(value_parser = confinement)]
        rule: ConfinementPolicy,
    },
    /// Which requests from afar the daemon carries out: `all` (the default), `none`, or a
    /// comma-separated list of pause, resume, restart, update, logs. Any other is refused
    /// `refused_by_owner`.
    Control {
        /// all | none | ACTION,…
        #[arg(value_parser = control_list)]
        actions: ControlList,
    },
    /// Whether the server may record what operators type into terminals on this machine
    /// (`off` by default: keystrokes may hold passwords). A server records them only where it
    /// is started with `--record-terminal-input` and the owner says `on` here.
    RecordInput {
        /// on or off.
        #[arg(value_parser = on_off, action = clap::ArgAction::Set)]
        state: bool,
    },
}

/// The actions `outpost context policy control` allows: none for `all` (no list in the
/// file), else the list.
#[derive(Debug, Clone)]
pub struct ControlList(Option<Vec<String>>);

fn control_list(text: &str) -> Result<ControlList, String> {
    use outpost_core::wire::ControlAction;
    match text.trim() {
        "all" => Ok(ControlList(None)),
        "none" => Ok(ControlList(Some(Vec::new()))),
        list => {
            let mut actions = Vec::new();
            for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                let action = ControlAction::parse(word).ok_or_else(|| {
                    format!("{word:?} is none of pause, resume, restart, update, logs (or say all, or none)")
                })?;
                if !actions.contains(&action.as_str().to_owned()) {
                    actions.push(action.as_str().to_owned());
                }
            }
            Ok(ControlList(Some(actions)))
        }
    }
}

/// Whether a policy lets the server record terminal input, in words.
fn record_input_words(policy: &LocalPolicy) -> &'static str {
    if policy.record_terminal_input {
        "the server may record what operators type (when it is started to)"
    } else {
        "never recorded (only what terminals show is)"
    }
}

/// The actions a policy allows from afar, in words.
fn control_words(policy: &LocalPolicy) -> String {
    match &policy.daemon_control {
        None => "all (pause, resume, restart, update, logs)".to_owned(),
        Some(list) if list.is_empty() => "none".to_owned(),
        Some(list) => list.join(", "),
    }
}

fn confinement(text: &str) -> Result<ConfinementPolicy, String> {
    ConfinementPolicy::parse(text)
        .ok_or_else(|| format!("{text:?} is neither required nor operator-may-opt-out"))
}

/// Reads `on` / `off`.
pub fn on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other:?} is neither on nor off")),
    }
}

/// `outpost context commands on|off`: the local switch in the policy file, then the server's
/// through the machine's signed request. Turning off locally is enough to stop commands (both
/// switches must be on); a server that cannot be reached is reported, exit 69.
pub fn commands(on: bool, folders: &OwnerFolders, json: bool) -> anyhow::Result<ExitCode> {
    let path = folders.local_policy_file();
    let mut policy = read(&path)?;
    policy.commands_enabled = on;
    write(&path, &policy)?;
    let word = if on { "on" } else { "off" };
    let server = outpost_daemon::machine_client(
        folders,
        std::env::var(outpost_daemon::PASSPHRASE_VAR)
            .ok()
            .as_deref(),
        std::env::var_os("OUTPOST_CA_FILE")
            .map(PathBuf::from)
            .as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{e} [{}]", e.code()))
    .and_then(|client| {
        client
            .set_commands(on)
            .map_err(|e| anyhow::anyhow!("{e} [{}]", e.code()))
    });
    match server {
        Ok(grant_version) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"local": on, "server": on, "grantVersion": grant_version})
                );
            } else {
                println!(
                    "host commands {word}: on this machine and on the server (grant version {grant_version})"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!(
                "outpost: host commands are {word} on this machine ({}), but the server was not told: {e}",
                path.display()
            );
            Ok(ExitCode::from(69))
        }
    }
}

fn mode(text: &str) -> Result<FolderMode, String> {
    match text {
        "ro" => Ok(FolderMode::Ro),
        "rw" => Ok(FolderMode::Rw),
        other => Err(format!("{other:?} is not a mode: use ro or rw")),
    }
}

/// Runs `outpost context policy` on the owner's `folders`.
pub fn policy(
    action: Option<PolicyAction>,
    folders: &OwnerFolders,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let path = folders.local_policy_file();
    let mut policy = read(&path)?;
    match action.unwrap_or(PolicyAction::Show) {
        PolicyAction::Show => {}
        PolicyAction::Allow { folder, mode } => {
            let (_, canonical) = resolve(&folder)
                .map_err(|e| anyhow::anyhow!("{e}: allow a folder that exists [{}]", e.code()))?;
            let denylist = folders
                .denylist()
                .map_err(|e| anyhow::anyhow!("the credential denylist: {e}"))?;
            if let Some(entry) = denylist.denying(&canonical) {
                anyhow::bail!(
                    "{canonical} is a credential folder (it lies in {entry}, which no run ever sees): allow another folder [folder_denied]"
                );
            }
            let inside = denylist.inside(&canonical);
            policy.folders.retain(|f| f.path != canonical);
            policy.folders.push(LocalFolder {
                path: canonical.clone(),
                mode,
            });
            policy.folders.sort_by(|a, b| a.path.cmp(&b.path));
            write(&path, &policy)?;
            if !json {
                println!("allowed {canonical} ({})", mode_name(mode));
                for entry in inside {
                    println!("  never mounted inside it: {entry} (a credential folder)");
                }
            }
        }
        PolicyAction::Remove { folder } => {
            let canonical = resolve(&folder)
                .map(|(_, c)| c.to_string())
                .unwrap_or_else(|_| folder.display().to_string());
            let before = policy.folders.len();
            policy.folders.retain(|f| f.path.as_str() != canonical);
            if policy.folders.len() == before {
                anyhow::bail!(
                    "{canonical} is not in the local policy {}: `outpost context policy` lists what is [folder_not_allowed]",
                    path.display()
                );
            }
            write(&path, &policy)?;
            if !json {
                println!("removed {canonical}");
            }
        }
        PolicyAction::Confinement { rule } => {
            policy.confinement = rule;
            write(&path, &policy)?;
            if !json {
                println!("confinement: {}", rule.as_str());
            }
        }
        PolicyAction::RecordInput { state } => {
            policy.record_terminal_input = state;
            write(&path, &policy)?;
            if !json {
                println!(
                    "terminal input on this machine: {}",
                    record_input_words(&policy)
                );
            }
        }
        PolicyAction::Control { actions } => {
            policy.daemon_control = actions.0;
            write(&path, &policy)?;
            if !json {
                println!(
                    "requests from afar the daemon carries out: {}",
                    control_words(&policy)
                );
            }
        }
    }
    let kernel = crate::sandbox_view::kernel();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "file": path,
                "folders": policy.folders,
                "commandsEnabled": policy.commands_enabled,
                "confinement": policy.confinement.as_str(),
                "daemonControl": policy.daemon_control,
                "recordTerminalInput": policy.record_terminal_input,
                "kernel": crate::sandbox_view::kernel_json(&kernel),
                "runs": crate::sandbox_view::runs_json(&policy, &kernel),
            })
        );
    } else {
        show(&path, &policy);
        println!(
            "requests from afar the daemon carries out: {}",
            control_words(&policy)
        );
        println!(
            "terminal input on this machine: {}",
            record_input_words(&policy)
        );
        for line in crate::sandbox_view::describe(&policy, &kernel) {
            println!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn mode_name(mode: FolderMode) -> &'static str {
    match mode {
        FolderMode::Ro => "ro",
        FolderMode::Rw => "rw",
    }
}

fn show(path: &Path, policy: &LocalPolicy) {
    if policy.folders.is_empty() {
        println!(
            "no folders allowed: runs on this machine see none ({})",
            path.display()
        );
        return;
    }
    println!(
        "folders runs may use, if the server grants them ({}):",
        path.display()
    );
    for folder in &policy.folders {
        println!("  {}  {}", mode_name(folder.mode), folder.path);
    }
}

/// The policy at `path`; none when the file is absent.
pub fn read(path: &Path) -> anyhow::Result<LocalPolicy> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "the local policy {} does not read: fix or remove it",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LocalPolicy::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes `policy` to `path` (0600) through a temporary file renamed over it, so a daemon
/// reading it sees the old policy or the new one, never half of one.
fn write(path: &Path, policy: &LocalPolicy) -> anyhow::Result<()> {
    let dir = path.parent().context("the policy file has a folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let temp = path.with_extension("json.tmp");
    let mut text = serde_json::to_vec_pretty(policy)?;
    text.push(b'\n');
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .with_context(|| format!("writing {}", temp.display()))?;
    file.write_all(&text)?;
    file.sync_all()?;
    std::fs::rename(&temp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}
