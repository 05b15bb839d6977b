//! `outpost daemon install`: the checks, the generated file, the manager's start, and the
//! report (text, or one JSON object with `--json`).
//!
//! Refused, each with its code: root (`running_as_root`), a binary in a temporary or cargo
//! build folder (`binary_vanishes`), a home that never joined (`not_joined`), a home stopped
//! for good (`stopped_for_good`), a passphrase-sealed key without `--file-key`
//! (`passphrase_sealed`). It never runs a command that needs root: it prints it.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::key::{self, PASSPHRASE_VAR, Wrapper};
use crate::lock::{Launcher, LockState, SERVICE_VAR, probe};
use crate::status::read_stopped;
use serde::Serialize;

use super::{
    Answer, EXIT_NO_MANAGER, Manager, Plan, ServiceError, Target, launchd, systemd, test_allows,
    write_file,
};

/// What `outpost daemon install` takes.
#[derive(clap::Args)]
pub struct InstallArgs {
    /// Show the generated file and where it goes; write nothing, start nothing.
    #[arg(long)]
    pub print: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The service manager (default: this OS's: systemd on Linux, launchd on macOS); another
    /// OS's only with --print.
    #[arg(long, value_enum)]
    pub manager: Option<Manager>,
    /// Seal the machine key with a 0600 file key (config/key.file) instead of its passphrase
    /// (give OUTPOST_KEY_PASSPHRASE this once): a service has no one to type a passphrase.
    #[arg(long)]
    pub file_key: bool,
    /// Runs held at once, for the service's daemon (1–8; default: the daemon's).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub max_concurrent: Option<u32>,
    /// The host the service's daemon runs on: tokio, smol or blocking.
    #[arg(long, value_parser = ["tokio", "smol", "blocking"])]
    pub host: Option<String>,
    /// An extra CA certificate (PEM) the service's daemon trusts for the server.
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Printed<'a> {
    manager: Manager,
    name: &'a str,
    path: &'a Path,
    context_id: &'a str,
    text: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    manager: Manager,
    name: &'a str,
    path: &'a Path,
    context_id: &'a str,
    binary: &'a Path,
    written: bool,
    changed: bool,
    manager_answered: bool,
    started: bool,
    why: Option<String>,
    next: Vec<String>,
    linger: Option<bool>,
    key_wrapper: Option<&'static str>,
}

fn check_user() -> Result<(), ServiceError> {
    if nix::unistd::geteuid().is_root() && !test_allows("root") {
        return Err(ServiceError::Root);
    }
    Ok(())
}

/// Where a binary would vanish from: a temporary folder, or a cargo build folder.
fn vanishing_folder(binary: &Path) -> Option<String> {
    let mut temps: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .map(PathBuf::from)
        .chain(std::env::var_os("TMPDIR").map(PathBuf::from))
        .chain(std::iter::once(std::env::temp_dir()))
        .collect();
    temps.retain(|t| t.is_absolute() && t.parent().is_some());
    for temp in temps {
        let real = temp.canonicalize().unwrap_or(temp.clone());
        if binary.starts_with(&real) || binary.starts_with(&temp) {
            return Some(format!("a temporary folder ({})", real.display()));
        }
    }
    for dir in binary.ancestors().skip(1) {
        let marked = dir.join("CACHEDIR.TAG").exists() || dir.join(".rustc_info.json").exists();
        let named = dir.file_name().is_some_and(|n| n == "target")
            && binary
                .strip_prefix(dir)
                .ok()
                .and_then(|rest| rest.components().next())
                .is_some_and(|c| {
                    let c = c.as_os_str();
                    c == "debug" || c == "release"
                });
        if marked || named {
            return Some(format!("a cargo build folder ({})", dir.display()));
        }
    }
    None
}

fn check_binary() -> Result<PathBuf, ServiceError> {
    let exe = std::env::current_exe().map_err(|e| ServiceError::Io {
        path: PathBuf::from("/proc/self/exe"),
        source: e,
    })?;
    let binary = exe.canonicalize().unwrap_or(exe);
    if !test_allows("binary")
        && let Some(why) = vanishing_folder(&binary)
    {
        return Err(ServiceError::BinaryVanishes { path: binary, why });
    }
    Ok(binary)
}

/// The installer's `PATH`, absolute entries only (the service's runs find the same tools).
fn service_path_var() -> String {
    let mut seen: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.is_absolute() && !seen.contains(&dir) {
                seen.push(dir);
            }
        }
    }
    match std::env::join_paths(&seen) {
        Ok(joined) if !seen.is_empty() => joined.to_string_lossy().into_owned(),
        _ => "/usr/local/bin:/usr/bin:/bin".into(),
    }
}

fn plan(
    args: &InstallArgs,
    manager: Manager,
    binary: PathBuf,
    target: &Target,
    context_id: &str,
) -> Result<Plan, ServiceError> {
    let mut words = vec!["daemon".to_owned()];
    let mut env = vec![
        ("PATH".to_owned(), service_path_var()),
        (SERVICE_VAR.to_owned(), manager.as_str().to_owned()),
    ];
    match &target.home_dir {
        Some(dir) => {
            words.push("--home".into());
            words.push(dir.to_string_lossy().into_owned());
        }
        None => {
            // Pin the XDG folders the installer saw: a service's environment may differ.
            let folders = &target.folders;
            for (var, dir) in [
                ("XDG_CONFIG_HOME", &folders.config),
                ("XDG_STATE_HOME", &folders.state),
                ("XDG_CACHE_HOME", &folders.cache),
            ] {
                if let Some(parent) = dir.parent() {
                    env.push((var.into(), parent.to_string_lossy().into_owned()));
                }
            }
        }
    }
    if let Some(n) = args.max_concurrent {
        words.push("--max-concurrent".into());
        words.push(n.to_string());
    }
    if let Some(host) = &args.host {
        words.push("--host".into());
        words.push(host.clone());
    }
    if let Some(ca) = &args.ca {
        let ca = ca.canonicalize().map_err(|e| ServiceError::Io {
            path: ca.clone(),
            source: e,
        })?;
        words.push("--ca".into());
        words.push(ca.to_string_lossy().into_owned());
    }
    Ok(Plan {
        binary,
        args: words,
        env,
        context_id: context_id.to_owned(),
        state: target.folders.state.clone(),
    })
}

/// Makes sure a service can open the machine key; `--file-key` moves a passphrase- or
/// keyring-sealed one to a file key. Returns the wrapper in force.
fn key_for_service(
    target: &Target,
    file_key: bool,
    out: &mut dyn Write,
) -> Result<Option<Wrapper>, ServiceError> {
    let config = &target.folders.config;
    let wrapper = key::wrapper(config)?;
    match wrapper {
        Some(Wrapper::Passphrase | Wrapper::Keyring) if file_key => {
            let passphrase = if wrapper == Some(Wrapper::Passphrase) {
                Some(std::env::var(PASSPHRASE_VAR).map_err(|_| {
                    ServiceError::Daemon(crate::DaemonError::PassphraseRequired(
                        config.join(key::SEALED_FILE),
                    ))
                })?)
            } else {
                None
            };
            key::rewrap_with_file_key(config, passphrase.as_deref())?;
            say!(
                out,
                "sealed the machine key with a file key ({}, mode 0600) instead: the service starts with no one to type a passphrase and no keyring to unlock; anyone who can read your files as you (or root) can use the key",
                config.join(key::FILE_KEY).display()
            );
            Ok(Some(Wrapper::File))
        }
        Some(Wrapper::Passphrase) => Err(ServiceError::PassphraseSealed),
        Some(Wrapper::Keyring) => {
            say!(
                out,
                "the machine key is sealed with a key in the OS keyring: a service that starts at boot, before you log in, may find the keyring locked; --file-key moves it to a 0600 file key"
            );
            Ok(wrapper)
        }
        other => Ok(other),
    }
}

/// `outpost daemon install`.
pub fn install(
    args: &InstallArgs,
    home: Option<&Path>,
    out: &mut dyn Write,
) -> Result<u8, ServiceError> {
    check_user()?;
    let binary = check_binary()?;
    let target = Target::resolve(home)?;
    let context_id = target.joined()?.context_id;
    if let Some(stopped) = read_stopped(&target.folders.state)? {
        return Err(ServiceError::StoppedForGood(format!(
            "this home's daemon was stopped for good ({}): {}",
            stopped.reason.as_str(),
            stopped.advice(&target.folders.state, &target.folders.config)
        )));
    }
    let manager = args.manager.unwrap_or_else(Manager::native);
    let name = manager.service_name(&context_id);
    let path = manager.service_path(&context_id)?;
    let plan = plan(args, manager, binary, &target, &context_id)?;
    let text = plan.render(manager)?;
    if args.print {
        if args.json {
            let printed = Printed {
                manager,
                name: &name,
                path: &path,
                context_id: &context_id,
                text: &text,
            };
            say!(
                out,
                "{}",
                serde_json::to_string(&printed).unwrap_or_default()
            );
        } else {
            say!(out, "# {}", path.display());
            let _ = write!(out, "{text}");
        }
        return Ok(0);
    }
    if manager != Manager::native() {
        return Err(ServiceError::WrongOs {
            manager,
            os: match manager {
                Manager::Systemd => "Linux",
                Manager::Launchd => "macOS",
            },
        });
    }
    let wrapper = key_for_service(&target, args.file_key, out)?;
    if let Ok(LockState::Held {
        holder: Some(holder),
    }) = probe(&target.folders.state)
        && holder.launcher == Launcher::Terminal
    {
        say!(
            out,
            "a daemon runs on this home in a terminal ({holder}): the service waits for it to stop"
        );
    }
    let changed = write_file(&path, &text)?;
    let answer = match manager {
        Manager::Systemd => systemd::start(&name, changed),
        Manager::Launchd => launchd::start(&name, &path),
    };
    let linger = (manager == Manager::Systemd).then(|| systemd::linger(&systemd::user_name()));
    let (answered, started, why, next) = match answer {
        Answer::Done => (true, true, None, Vec::new()),
        Answer::NoManager { why, next } => (false, false, Some(why), next),
        Answer::Failed(e) => return Err(e),
    };
    let report = Report {
        manager,
        name: &name,
        path: &path,
        context_id: &context_id,
        binary: &plan.binary,
        written: true,
        changed,
        manager_answered: answered,
        started,
        why,
        next,
        linger,
        key_wrapper: wrapper.map(|w| match w {
            Wrapper::Keyring => "keyring",
            Wrapper::Passphrase => "passphrase",
            Wrapper::File => "file",
        }),
    };
    if args.json {
        say!(
            out,
            "{}",
            serde_json::to_string(&report).unwrap_or_default()
        );
    } else {
        print_report(&report, out);
    }
    Ok(if started { 0 } else { EXIT_NO_MANAGER })
}

fn print_report(report: &Report<'_>, out: &mut dyn Write) {
    say!(
        out,
        "{} {}",
        if report.changed {
            "wrote"
        } else {
            "unchanged:"
        },
        report.path.display()
    );
    if report.started {
        say!(
            out,
            "started {}: it starts again at every boot and after a crash, and stays stopped once revoked",
            report.name
        );
    } else {
        super::no_manager(report.why.as_deref().unwrap_or("none"), &report.next, out);
    }
    if report.linger == Some(false) {
        let user = systemd::user_name();
        say!(
            out,
            "linger is off for {user}: the service runs only while you are logged in. To start it at boot and keep it after you log out, run:\n  sudo loginctl enable-linger {user}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binaries_in_temporary_and_build_folders_are_found() {
        assert!(vanishing_folder(Path::new("/tmp/x/outpost")).is_some());
        assert!(vanishing_folder(Path::new("/home/me/src/target/debug/outpost")).is_some());
        assert!(vanishing_folder(Path::new("/home/me/src/target/release/outpost")).is_some());
        assert!(vanishing_folder(Path::new("/usr/local/bin/outpost")).is_none());
        assert!(vanishing_folder(Path::new("/home/me/.cargo/bin/outpost")).is_none());
    }
}
