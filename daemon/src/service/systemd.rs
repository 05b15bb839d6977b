//! The `systemd --user` unit: `outpost-daemon-<context id>.service` in
//! `$XDG_CONFIG_HOME/systemd/user` (default `~/.config/systemd/user`), and the `systemctl
//! --user`, `loginctl` and `journalctl --user` calls that drive it.
//!
//! The unit restarts the daemon after a crash (`Restart=always`) but not after exit 0
//! (`RestartPreventExitStatus=0`: drained, revoked, replaced), gives up after
//! [`START_LIMIT_BURST`] starts in [`START_LIMIT_INTERVAL_SECS`], sends SIGTERM to the daemon
//! alone (`KillMode=mixed`: its runs finish while it drains) and waits for the drain. This
//! module owns the unit's text. It never runs `loginctl enable-linger`: that needs root, and
//! it only says so.

use std::path::PathBuf;
use std::time::Duration;

use super::tool;
use super::{Answer, Plan, ServiceError};

/// The window of the start limit.
pub const START_LIMIT_INTERVAL_SECS: u64 = 600;
/// Starts allowed in that window before systemd gives up.
pub const START_LIMIT_BURST: u32 = 5;
/// The pause before a restart.
pub const RESTART_SECS: u64 = 10;

/// The unit's name for a context.
pub fn unit_name(context_id: &str) -> String {
    let safe: String = context_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("outpost-daemon-{safe}.service")
}

/// The user units' folder.
pub fn unit_dir() -> Result<PathBuf, ServiceError> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let config = absolute("XDG_CONFIG_HOME")
        .or_else(|| absolute("HOME").map(|h| h.join(".config")))
        .ok_or(ServiceError::NoHome)?;
    Ok(config.join("systemd/user"))
}

/// Where the unit for a context goes.
pub fn unit_path(context_id: &str) -> Result<PathBuf, ServiceError> {
    Ok(unit_dir()?.join(unit_name(context_id)))
}

/// One word of a unit line, double-quoted: `\` and `"` escaped, `%` doubled (specifiers),
/// and for `ExecStart=` also `$` doubled (variable expansion).
fn quote(word: &str, exec: bool) -> String {
    let mut out = String::with_capacity(word.len() + 2);
    out.push('"');
    for c in word.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if exec => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The unit's text.
pub fn unit(plan: &Plan) -> String {
    let exec: Vec<String> = std::iter::once(plan.binary.to_string_lossy().into_owned())
        .chain(plan.args.iter().cloned())
        .map(|w| quote(&w, true))
        .collect();
    let env: String = plan
        .env
        .iter()
        .map(|(k, v)| format!("Environment={}\n", quote(&format!("{k}={v}"), false)))
        .collect();
    let stop_secs = (crate::DRAIN_LIMIT + Duration::from_secs(30)).as_secs();
    format!(
        "# Written by `outpost daemon install` (outpost {version}); re-run it to repair this file,\n\
         # `outpost daemon uninstall` to remove it. It holds no secret: the machine key stays\n\
         # sealed in the daemon's config folder.\n\
         [Unit]\n\
         Description=outpost daemon for context {context}\n\
         StartLimitIntervalSec={START_LIMIT_INTERVAL_SECS}\n\
         StartLimitBurst={START_LIMIT_BURST}\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         {env}\
         Restart=always\n\
         RestartSec={RESTART_SECS}\n\
         RestartPreventExitStatus=0\n\
         KillMode=mixed\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec={stop_secs}\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        version = env!("CARGO_PKG_VERSION"),
        context = plan.context_id,
        exec = exec.join(" "),
    )
}

/// `systemctl --user ARGS`, or why no manager answered.
fn systemctl(args: &[&str]) -> Result<tool::Ran, String> {
    let mut all = vec!["--user"];
    all.extend_from_slice(args);
    tool::run("systemctl", &all)
}

/// Whether the user's manager answers; `Err` says why not.
pub fn manager_answers() -> Result<(), String> {
    if !tool::exists("systemctl") {
        return Err("systemctl is not installed".into());
    }
    let ran = systemctl(&["show-environment"])?;
    if ran.ok {
        Ok(())
    } else {
        Err(format!("systemctl --user: {}", ran.why()))
    }
}

/// Runs each `systemctl --user` command in turn while the manager answers.
fn each(commands: &[&[&str]], next: Vec<String>) -> Answer {
    if let Err(why) = manager_answers() {
        return Answer::NoManager { why, next };
    }
    for args in commands {
        match systemctl(args) {
            Ok(ran) if ran.ok => {}
            Ok(ran) => {
                return Answer::Failed(ServiceError::Manager {
                    command: format!("systemctl --user {}", args.join(" ")),
                    why: ran.why(),
                });
            }
            Err(why) => {
                return Answer::Failed(ServiceError::Manager {
                    command: format!("systemctl --user {}", args.join(" ")),
                    why,
                });
            }
        }
    }
    Answer::Done
}

/// The commands `install` runs, as the owner would type them.
pub fn start_commands(name: &str) -> Vec<String> {
    vec![
        "systemctl --user daemon-reload".into(),
        format!("systemctl --user enable --now {name}"),
    ]
}

/// Loads the (new) unit, enables and starts it; a running one whose unit `changed` is
/// restarted so the repair takes effect.
pub fn start(name: &str, changed: bool) -> Answer {
    let was_active = systemctl(&["is-active", "--quiet", name]).is_ok_and(|r| r.ok);
    let enable = ["enable", "--now", name];
    let restart = ["restart", name];
    let mut commands: Vec<&[&str]> = vec![&["daemon-reload"], &enable];
    if changed && was_active {
        commands.push(&restart);
    }
    each(&commands, start_commands(name))
}

/// Restarts the unit.
pub fn restart(name: &str) -> Answer {
    each(
        &[&["restart", name]],
        vec![format!("systemctl --user restart {name}")],
    )
}

/// Stops and disables the unit (`uninstall`).
pub fn stop_and_disable(name: &str) -> Answer {
    each(
        &[&["disable", "--now", name]],
        vec![
            format!("systemctl --user disable --now {name}"),
            "systemctl --user daemon-reload".into(),
        ],
    )
}

/// Disables the unit without stopping it (the daemon itself, stopped for good, exits).
pub fn disable(name: &str) -> Answer {
    each(
        &[&["disable", name]],
        vec![format!("systemctl --user disable {name}")],
    )
}

/// Reloads the units (best effort, after one was removed).
pub fn reload() {
    let _ = systemctl(&["daemon-reload"]);
}

/// The user's name, for `loginctl`.
pub fn user_name() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
        .unwrap_or_else(|| "$USER".into())
}

/// Whether systemd keeps `user`'s manager running without a login (linger): `loginctl`
/// when logind answers, else the file logind keeps for it.
pub fn linger(user: &str) -> bool {
    if let Ok(ran) = tool::run("loginctl", &["show-user", user, "-p", "Linger"])
        && ran.ok
    {
        return ran.stdout.trim() == "Linger=yes";
    }
    std::path::Path::new("/var/lib/systemd/linger")
        .join(user)
        .exists()
}

/// Prints the unit's journal (`journalctl --user -u NAME`), or `None` when there is no
/// journalctl. Its exit status otherwise.
pub fn journal(name: &str, lines: u32, follow: bool) -> Option<i32> {
    if !tool::exists("journalctl") {
        return None;
    }
    let lines = lines.to_string();
    let mut args = vec!["--user", "-u", name, "-n", &lines, "--no-pager"];
    if follow {
        args.push("-f");
    }
    let status = std::process::Command::new("journalctl")
        .args(&args)
        .status()
        .ok()?;
    Some(status.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_systemd() {
        assert_eq!(quote("/a b/c", true), "\"/a b/c\"");
        assert_eq!(quote("100%$x\"\\", true), "\"100%%$$x\\\"\\\\\"");
        assert_eq!(quote("P=$x%", false), "\"P=$x%%\"");
        assert_eq!(
            unit_name("ec_Ab-9"),
            "outpost-daemon-ec_Ab-9.service".to_owned()
        );
        assert_eq!(unit_name("ec/x.y"), "outpost-daemon-ec-x-y.service");
    }
}
