//! The LaunchAgent: `~/Library/LaunchAgents/outpost.daemon.<context id>.plist`, and the
//! `launchctl` calls that drive it in the user's `gui/UID` domain.
//!
//! The agent starts at login (`RunAtLoad`), is started again only after an unsuccessful
//! exit (`KeepAlive` = `{SuccessfulExit: false}`: exit 0 — drained, revoked, replaced — is
//! final), at most every [`THROTTLE_SECS`], and is given the drain's time to stop
//! (`ExitTimeOut`). launchd keeps no journal: the daemon's stderr goes to
//! `state/daemon.log`, which `outpost daemon logs` reads. The plist is generated on every OS
//! (so it is checked everywhere) and installed only on macOS. This module owns its text.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tool;
use super::{Answer, Plan, ServiceError};

/// The least time between two starts.
pub const THROTTLE_SECS: u64 = 10;
/// The log file's name in the state folder.
pub const LOG_FILE: &str = "daemon.log";

/// The agent's label for a context.
pub fn label(context_id: &str) -> String {
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
    format!("outpost.daemon.{safe}")
}

/// Where the agent's plist goes.
pub fn plist_path(context_id: &str) -> Result<PathBuf, ServiceError> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .ok_or(ServiceError::NoHome)?;
    Ok(home
        .join("Library/LaunchAgents")
        .join(format!("{}.plist", label(context_id))))
}

/// Text as XML character data.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn string(text: &str) -> String {
    format!("<string>{}</string>", escape(text))
}

/// The plist's text.
pub fn plist(plan: &Plan) -> String {
    let args: String = std::iter::once(plan.binary.to_string_lossy().into_owned())
        .chain(plan.args.iter().cloned())
        .map(|a| format!("    {}\n", string(&a)))
        .collect();
    let env: String = plan
        .env
        .iter()
        .map(|(k, v)| format!("    <key>{}</key>{}\n", escape(k), string(v)))
        .collect();
    let log = plan.state.join(LOG_FILE);
    let log = string(&log.to_string_lossy());
    let exit_secs = (crate::DRAIN_LIMIT + Duration::from_secs(30)).as_secs();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `outpost daemon install` (outpost {version}); re-run it to repair this
     file. It holds no secret: the machine key stays sealed in the daemon's config folder. -->
<plist version="1.0">
<dict>
  <key>Label</key>{label}
  <key>ProgramArguments</key>
  <array>
{args}  </array>
  <key>EnvironmentVariables</key>
  <dict>
{env}  </dict>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key><false/>
  </dict>
  <key>ThrottleInterval</key><integer>{THROTTLE_SECS}</integer>
  <key>ExitTimeOut</key><integer>{exit_secs}</integer>
  <key>ProcessType</key><string>Background</string>
  <key>StandardOutPath</key>{log}
  <key>StandardErrorPath</key>{log}
</dict>
</plist>
"#,
        version = env!("CARGO_PKG_VERSION"),
        label = string(&label(&plan.context_id)),
    )
}

fn domain() -> String {
    format!("gui/{}", nix::unistd::getuid())
}

/// Whether launchd answers for this user; `Err` says why not.
pub fn manager_answers() -> Result<(), String> {
    if !cfg!(target_os = "macos") || !tool::exists("launchctl") {
        return Err("launchctl is not here: launchd runs on macOS only".into());
    }
    let ran = tool::run("launchctl", &["print", &domain()])?;
    if ran.ok {
        Ok(())
    } else {
        Err(format!("launchctl print {}: {}", domain(), ran.why()))
    }
}

fn launchctl(args: &[&str]) -> Result<(), ServiceError> {
    let fail = |why: String| ServiceError::Manager {
        command: format!("launchctl {}", args.join(" ")),
        why,
    };
    match tool::run("launchctl", args) {
        Ok(ran) if ran.ok => Ok(()),
        Ok(ran) => Err(fail(ran.why())),
        Err(why) => Err(fail(why)),
    }
}

/// The commands `install` runs, as the owner would type them.
pub fn start_commands(label: &str, path: &Path) -> Vec<String> {
    let domain = domain();
    vec![
        format!("launchctl enable {domain}/{label}"),
        format!("launchctl bootstrap {domain} {}", path.display()),
    ]
}

/// Enables and (re)loads the agent from `path`: a loaded one is booted out first so a
/// repaired plist takes effect.
pub fn start(label: &str, path: &Path) -> Answer {
    if let Err(why) = manager_answers() {
        return Answer::NoManager {
            why,
            next: start_commands(label, path),
        };
    }
    let domain = domain();
    let service = format!("{domain}/{label}");
    let _ = launchctl(&["bootout", &service]);
    let path = path.to_string_lossy();
    match launchctl(&["enable", &service]).and_then(|()| launchctl(&["bootstrap", &domain, &path]))
    {
        Ok(()) => Answer::Done,
        Err(e) => Answer::Failed(e),
    }
}

/// Restarts the agent.
pub fn restart(label: &str) -> Answer {
    let service = format!("{}/{label}", domain());
    if let Err(why) = manager_answers() {
        return Answer::NoManager {
            why,
            next: vec![format!("launchctl kickstart -k {service}")],
        };
    }
    match launchctl(&["kickstart", "-k", &service]) {
        Ok(()) => Answer::Done,
        Err(e) => Answer::Failed(e),
    }
}

/// Unloads and disables the agent (`uninstall`).
pub fn stop_and_disable(label: &str, path: &Path) -> Answer {
    let service = format!("{}/{label}", domain());
    if let Err(why) = manager_answers() {
        return Answer::NoManager {
            why,
            next: vec![
                format!("launchctl bootout {service}"),
                format!("rm {}", path.display()),
            ],
        };
    }
    // Not loaded is fine: there is nothing to stop.
    let _ = launchctl(&["bootout", &service]);
    match launchctl(&["disable", &service]) {
        Ok(()) => Answer::Done,
        Err(e) => Answer::Failed(e),
    }
}

/// Disables the agent without unloading it (the daemon itself, stopped for good, exits).
pub fn disable(label: &str) -> Answer {
    let service = format!("{}/{label}", domain());
    if let Err(why) = manager_answers() {
        return Answer::NoManager {
            why,
            next: vec![format!("launchctl disable {service}")],
        };
    }
    match launchctl(&["disable", &service]) {
        Ok(()) => Answer::Done,
        Err(e) => Answer::Failed(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(label("ec_x/y"), "outpost.daemon.ec_x-y");
    }
}
