//! `outpost context …` (sharing and opt-ins too), `outpost chain …`,
//! `outpost user add|remove`, `outpost audit`: the management commands over the user routes
//! (PROTOCOL §11.4), each with a table for a person and `--json` for a script.
//!
//! This module owns only presentation; every decision is the server's.

use std::process::ExitCode;

use outpost_core::api::requests::{ChainRequest, ShareRequest, UserRequest};
use outpost_core::api::{Audit, ChainShown, Context, Contexts, SandboxView, User};
use outpost_core::wire::{CommandsGrant, Egress, FolderGrant, FolderMode, Grant, GrantLimits};
use serde::Serialize;
use serde_json::{Value, json};

use super::api::Api;

fn print<T: Serialize>(
    value: &T,
    json_out: bool,
    table: impl FnOnce(&T),
) -> anyhow::Result<ExitCode> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        table(value);
    }
    Ok(ExitCode::SUCCESS)
}

/// Who may use a context: `own` (nobody else), `all` (every member may opt in), `all,in`
/// (and someone opted in: the caller, for a member; anyone, for its operator), `left` (its
/// operator left the organization: nobody).
fn sharing(c: &Context) -> &'static str {
    if !c.operator_is_member {
        "left"
    } else if !c.shared_with_all_members {
        "own"
    } else if !c.opted_in.is_empty() {
        "all,in"
    } else {
        "all"
    }
}

fn context_line(c: &Context) -> String {
    format!(
        "{:<20} {:<22} {:<8} {:>5} {:<10} {:<7} {}",
        c.name,
        c.id,
        if c.revoked {
            "revoked"
        } else if c.online {
            "online"
        } else {
            "offline"
        },
        format!("{}/{}", c.slots_used, c.slots_total),
        c.operator,
        sharing(c),
        if c.daemon_version.is_empty() {
            "-"
        } else {
            &c.daemon_version
        },
    )
}

const CONTEXT_HEADER: &str =
    "NAME                 ID                     STATE    SLOTS OPERATOR   SHARED  VERSION";

/// `outpost context list`.
pub fn context_list(api: &Api, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: Contexts = api.get("/v1/execution-contexts")?;
    print(&value, json_out, |v| {
        println!("{CONTEXT_HEADER}");
        for c in &v.contexts {
            println!("{}", context_line(c));
        }
    })
}

/// `outpost context show NAME`.
pub fn context_show(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: Context = api.get(&format!("/v1/execution-contexts/{name}"))?;
    print(&value, json_out, |c| {
        println!("{CONTEXT_HEADER}");
        println!("{}", context_line(c));
        println!(
            "grant (version {}): {}",
            c.grant_version,
            serde_json::to_string(&c.grant).unwrap_or_default()
        );
        println!("{}", sharing_text(c));
        println!("{}", sandbox_text(c.sandbox.as_ref()));
    })
}

/// One sentence on the machine's sandbox, as its daemon announced it.
fn sandbox_text(s: Option<&SandboxView>) -> String {
    let Some(s) = s else {
        return "sandbox: unknown (the machine is offline, or its daemon does not say)".into();
    };
    let rule = match s.confinement.as_str() {
        "operator-may-opt-out" => {
            "every run sandboxed, but the operator's own `confine: false` runs"
        }
        _ => "every shell and terminal run sandboxed",
    };
    let yes = |on: bool| if on { "yes" } else { "no" };
    format!(
        "sandbox: {rule} (Landlock {}, namespaces {}, signal scoping {})",
        yes(s.landlock),
        yes(s.namespaces),
        yes(s.scopes)
    )
}

/// One sentence on who may run on a context.
fn sharing_text(c: &Context) -> String {
    if !c.operator_is_member {
        return "its operator left the organization: it takes nobody's runs".into();
    }
    if !c.shared_with_all_members {
        return "not shared: only its operator runs here".into();
    }
    if c.opted_in.is_empty() {
        "shared with every member; nobody you can see opted in".into()
    } else {
        format!(
            "shared with every member; opted in: {} (shared runs get no folders and no commands)",
            c.opted_in.join(", ")
        )
    }
}

/// What `outpost context grant` changes; what it leaves `None` stays as it is.
#[derive(Debug, Default)]
pub struct GrantChange {
    /// The folders, replacing the grant's (`--fs`, or none with `--no-fs`).
    pub fs: Option<Vec<(String, String)>>,
    /// `none`, `all`, or `HOST[:PORT],…` for an allowlist.
    pub egress: Option<String>,
    /// Turn host commands off (only the machine itself turns them on).
    pub commands_off: bool,
    /// The most runs at once.
    pub max_concurrent: Option<u32>,
}

/// Reads `--fs PATH:ro|rw` (the mode after the last `:`).
pub fn folder_grant(text: &str) -> Result<(String, String), String> {
    match text.rsplit_once(':') {
        Some((path, mode @ ("ro" | "rw"))) if !path.is_empty() => {
            Ok((path.to_owned(), mode.to_owned()))
        }
        _ => Err(format!(
            "{text:?} is not PATH:ro or PATH:rw (a folder on the machine and its mode)"
        )),
    }
}

/// The egress `--egress` says: `none`, `all`, or an allowlist of `HOST[:PORT],…`.
fn egress(text: &str) -> Egress {
    match text {
        "none" => Egress::None,
        "all" => Egress::All,
        hosts => Egress::Allowlist {
            hosts: hosts
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(str::to_owned)
                .collect(),
        },
    }
}

/// `outpost context grant NAME …`: the context's grant with `change` applied, sent whole
/// (`PATCH …/grant`), printed with its new version.
pub fn context_grant(
    api: &Api,
    name: &str,
    change: &GrantChange,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let current: Context = api.get(&format!("/v1/execution-contexts/{name}"))?;
    let mut grant = current.grant;
    if let Some(fs) = &change.fs {
        grant.fs = fs
            .iter()
            .map(|(path, mode)| FolderGrant {
                path: path.clone(),
                mode: if mode == "rw" {
                    FolderMode::Rw
                } else {
                    FolderMode::Ro
                },
            })
            .collect();
    }
    if let Some(text) = &change.egress {
        grant.egress = egress(text);
    }
    if change.commands_off {
        grant.commands = CommandsGrant { enabled: false };
    }
    if let Some(n) = change.max_concurrent {
        grant.limits = GrantLimits { max_concurrent: n };
    }
    let value: Context = api.patch(&format!("/v1/execution-contexts/{name}/grant"), &grant)?;
    print(&value, json_out, |c| {
        println!(
            "{} grant version {}: {}",
            c.name,
            c.grant_version,
            grant_text(&c.grant)
        );
    })
}

/// A grant in words: folders, egress, commands, slots.
fn grant_text(grant: &Grant) -> String {
    let folders: Vec<String> = grant
        .fs
        .iter()
        .map(|f| {
            let mode = match f.mode {
                FolderMode::Ro => "ro",
                FolderMode::Rw => "rw",
            };
            format!("{} ({mode})", f.path)
        })
        .collect();
    let egress = match &grant.egress {
        Egress::Allowlist { hosts } => format!("only {}", hosts.join(", ")),
        Egress::None => "none".to_owned(),
        Egress::All => "all".to_owned(),
    };
    format!(
        "folders {}; network {egress}; host commands {}; at most {} runs at once",
        if folders.is_empty() {
            "none".to_owned()
        } else {
            folders.join(", ")
        },
        if grant.commands.enabled { "on" } else { "off" },
        grant.limits.max_concurrent
    )
}

/// `outpost context share NAME --all-members on|off`.
pub fn context_share(api: &Api, name: &str, on: bool, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: Context = api.post(
        &format!("/v1/execution-contexts/{name}/share"),
        &ShareRequest { all_members: on },
    )?;
    print(&value, json_out, |c| {
        let name = &c.name;
        if on {
            println!(
                "{name} is shared with every member; each opts in with `outpost context opt-in {name}` (shared runs get no folders and no commands)"
            );
        } else {
            println!(
                "{name} is no longer shared; every opt-in was dropped and shared runs on it were ended"
            );
        }
    })
}

/// `outpost context opt-in NAME` (`in`) and `outpost context opt-out NAME`.
pub fn context_opt_in(
    api: &Api,
    name: &str,
    opt_in: bool,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let path = format!("/v1/execution-contexts/{name}/opt-in");
    let value: Context = if opt_in {
        api.post(&path, &json!({}))?
    } else {
        api.delete(&path)?
    };
    print(&value, json_out, |c| {
        let name = &c.name;
        if opt_in {
            println!(
                "opted in to {name}: your runs may go there (without folders or host commands); while one is active the machine can use your credentials and read the responses"
            );
        } else {
            println!("opted out of {name}: your runs no longer go there");
        }
    })
}

/// `outpost context revoke NAME`.
pub fn context_revoke(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: Context = api.post(&format!("/v1/execution-contexts/{name}/revoke"), &json!({}))?;
    print(&value, json_out, |c| {
        println!(
            "revoked {}: its runs were cancelled and its daemon stops for good",
            c.name
        );
    })
}

/// Reads a daemon action (`pause`, `resume`, `restart`, `update`, `logs`).
pub fn control_action(text: &str) -> Result<outpost_core::wire::ControlAction, String> {
    outpost_core::wire::ControlAction::parse(text)
        .ok_or_else(|| format!("{text:?} is none of pause, resume, restart, update, logs"))
}

/// `outpost context daemon NAME ACTION`: exit 0 when the daemon did it, 1 when it refused or
/// failed (its owner's policy, no service manager, updates off, …); an offline daemon or
/// one that does not answer is the API's error (exit 69).
pub fn context_daemon(
    api: &Api,
    name: &str,
    action: outpost_core::wire::ControlAction,
    lines: Option<u32>,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let body = outpost_core::api::DaemonControl { action, lines };
    let value: outpost_core::api::DaemonControlled =
        api.post(&format!("/v1/execution-contexts/{name}/daemon"), &body)?;
    print(&value, json_out, |v| {
        for line in &v.lines {
            println!("{line}");
        }
        match &v.code {
            None => eprintln!("{name}: {}", v.message),
            Some(code) => eprintln!(
                "{name}: {} {}: {} [{code}]",
                v.action,
                v.outcome.as_str(),
                v.message
            ),
        }
    })?;
    Ok(
        if value.outcome == outpost_core::wire::ControlOutcome::Done {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// `outpost context delete NAME`.
pub fn context_delete(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let _: Value = api.delete(&format!("/v1/execution-contexts/{name}"))?;
    let value = json!({ "deleted": name });
    print(&value, json_out, |_| {
        println!("deleted {name}; its run records keep its name");
    })
}

/// `outpost chain set A,B,cloud`.
pub fn chain_set(api: &Api, chain: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let chain = chain
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let value: ChainShown = api.put("/v1/chain", &ChainRequest { chain })?;
    print(&value, json_out, |v| println!("chain: {}", chain_text(v)))
}

/// `outpost chain show`.
pub fn chain_show(api: &Api, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: ChainShown = api.get("/v1/chain")?;
    print(&value, json_out, |v| println!("chain: {}", chain_text(v)))
}

/// The chain by the names a person typed (`entries[].name`), an entry's id where the server
/// gave no name.
fn chain_text(v: &ChainShown) -> String {
    let entries: Vec<&str> = v
        .chain
        .iter()
        .enumerate()
        .map(|(i, id)| {
            v.entries
                .get(i)
                .and_then(|e| e.name.as_deref())
                .unwrap_or(id)
        })
        .collect();
    if entries.is_empty() {
        "(none: executes need --context)".into()
    } else {
        entries.join(" → ")
    }
}

/// `outpost user add NAME`.
pub fn user_add(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let request = UserRequest {
        name: name.to_owned(),
        scopes: None,
    };
    let value: User = api.post("/v1/users", &request)?;
    print(&value, json_out, |v| {
        println!("{}", v.token);
        eprintln!("outpost: the token of {name} is shown once; give it to them as OUTPOST_TOKEN");
    })
}

/// `outpost user remove NAME`.
pub fn user_remove(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let _: Value = api.delete(&format!("/v1/users/{name}"))?;
    let value = json!({ "removed": name });
    print(&value, json_out, |_| {
        println!(
            "removed {name}: their tokens no longer work, their opt-ins are gone, and machines they operate take nobody's runs"
        );
    })
}

/// `outpost audit`: the server's audit events, newest first.
pub fn audit(api: &Api, limit: u32, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: Audit = api.get(&format!("/v1/audit?limit={limit}"))?;
    print(&value, json_out, |v| {
        println!(
            "{:<25} {:<20} {:<16} {:<24} DETAIL",
            "AT", "KIND", "ACTOR", "CONTEXT"
        );
        for e in &v.events {
            let context = match (&e.context_name, &e.context_id) {
                (Some(name), _) => name.clone(),
                (None, Some(id)) => id.clone(),
                (None, None) => "-".to_owned(),
            };
            println!(
                "{:<25} {:<20} {:<16} {:<24} {}",
                super::runs::rfc3339_local(e.at),
                e.kind,
                e.actor,
                context,
                e.detail
            );
        }
    })
}
