//! `outpost context …` (sharing and opt-ins too), `outpost chain …`, `outpost runs list`,
//! `outpost user add|remove`, `outpost audit`: the management commands over the user routes
//! (PROTOCOL §11.4), each with a table for a person and `--json` for a script.
//!
//! This module owns only presentation; every decision is the server's.

use std::process::ExitCode;

use serde_json::{Value, json};

use super::api::Api;

fn print(value: &Value, json_out: bool, table: impl FnOnce(&Value)) -> anyhow::Result<ExitCode> {
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
fn sharing(c: &Value) -> &'static str {
    if c["operatorIsMember"].as_bool() == Some(false) {
        "left"
    } else if c["sharedWithAllMembers"].as_bool() != Some(true) {
        "own"
    } else if c["optedIn"].as_array().is_some_and(|a| !a.is_empty()) {
        "all,in"
    } else {
        "all"
    }
}

fn context_line(c: &Value) -> String {
    format!(
        "{:<20} {:<22} {:<8} {:>5} {:<10} {:<7} {}",
        c["name"].as_str().unwrap_or("?"),
        c["id"].as_str().unwrap_or("?"),
        if c["revoked"].as_bool() == Some(true) {
            "revoked"
        } else if c["online"].as_bool() == Some(true) {
            "online"
        } else {
            "offline"
        },
        format!(
            "{}/{}",
            c["slotsUsed"].as_u64().unwrap_or(0),
            c["slotsTotal"].as_u64().unwrap_or(0)
        ),
        c["operator"].as_str().unwrap_or("?"),
        sharing(c),
        c["daemonVersion"].as_str().unwrap_or("-"),
    )
}

const CONTEXT_HEADER: &str =
    "NAME                 ID                     STATE    SLOTS OPERATOR   SHARED  VERSION";

/// `outpost context list`.
pub fn context_list(api: &Api, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.get("/v1/execution-contexts")?;
    print(&value, json_out, |v| {
        println!("{CONTEXT_HEADER}");
        for c in v["contexts"].as_array().into_iter().flatten() {
            println!("{}", context_line(c));
        }
    })
}

/// `outpost context show NAME`.
pub fn context_show(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.get(&format!("/v1/execution-contexts/{name}"))?;
    print(&value, json_out, |c| {
        println!("{CONTEXT_HEADER}");
        println!("{}", context_line(c));
        println!("grant (version {}): {}", c["grantVersion"], c["grant"]);
        println!("{}", sharing_text(c));
        println!("{}", sandbox_text(&c["sandbox"]));
    })
}

/// One sentence on the machine's sandbox, as its daemon announced it.
fn sandbox_text(s: &Value) -> String {
    if s.is_null() {
        return "sandbox: unknown (the machine is offline, or its daemon does not say)".into();
    }
    let rule = match s["confinement"].as_str() {
        Some("operator-may-opt-out") => {
            "every run sandboxed, but the operator's own `confine: false` runs"
        }
        _ => "every shell and terminal run sandboxed",
    };
    let yes = |key: &str| {
        if s[key].as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
    };
    format!(
        "sandbox: {rule} (Landlock {}, namespaces {}, signal scoping {})",
        yes("landlock"),
        yes("namespaces"),
        yes("scopes")
    )
}

/// One sentence on who may run on a context.
fn sharing_text(c: &Value) -> String {
    if c["operatorIsMember"].as_bool() == Some(false) {
        return "its operator left the organization: it takes nobody's runs".into();
    }
    if c["sharedWithAllMembers"].as_bool() != Some(true) {
        return "not shared: only its operator runs here".into();
    }
    let opted: Vec<&str> = c["optedIn"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if opted.is_empty() {
        "shared with every member; nobody you can see opted in".into()
    } else {
        format!(
            "shared with every member; opted in: {} (shared runs get no folders and no commands)",
            opted.join(", ")
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

/// The Egress JSON for `--egress`.
fn egress_json(text: &str) -> Value {
    match text {
        "none" => json!({"mode": "none"}),
        "all" => json!({"mode": "all"}),
        hosts => json!({"mode": "allowlist", "hosts": hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect::<Vec<_>>()}),
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
    let current = api.get(&format!("/v1/execution-contexts/{name}"))?;
    let mut grant = current["grant"].clone();
    if let Some(fs) = &change.fs {
        grant["fs"] = fs
            .iter()
            .map(|(path, mode)| json!({"path": path, "mode": mode}))
            .collect();
    }
    if let Some(egress) = &change.egress {
        grant["egress"] = egress_json(egress);
    }
    if change.commands_off {
        grant["commands"] = json!({"enabled": false});
    }
    if let Some(n) = change.max_concurrent {
        grant["limits"] = json!({"maxConcurrent": n});
    }
    let value = api.patch(&format!("/v1/execution-contexts/{name}/grant"), &grant)?;
    print(&value, json_out, |c| {
        println!(
            "{} grant version {}: {}",
            c["name"].as_str().unwrap_or(name),
            c["grantVersion"],
            grant_text(&c["grant"])
        );
    })
}

/// A grant in words: folders, egress, commands, slots.
fn grant_text(grant: &Value) -> String {
    let folders: Vec<String> = grant["fs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{} ({})",
                f["path"].as_str().unwrap_or("?"),
                f["mode"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let egress = match grant["egress"]["mode"].as_str() {
        Some("allowlist") => format!(
            "only {}",
            grant["egress"]["hosts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(mode) => mode.to_owned(),
        None => "?".to_owned(),
    };
    format!(
        "folders {}; network {egress}; host commands {}; at most {} runs at once",
        if folders.is_empty() {
            "none".to_owned()
        } else {
            folders.join(", ")
        },
        if grant["commands"]["enabled"].as_bool() == Some(true) {
            "on"
        } else {
            "off"
        },
        grant["limits"]["maxConcurrent"]
    )
}

/// `outpost context share NAME --all-members on|off`.
pub fn context_share(api: &Api, name: &str, on: bool, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.post(
        &format!("/v1/execution-contexts/{name}/share"),
        &json!({ "allMembers": on }),
    )?;
    print(&value, json_out, |c| {
        let name = c["name"].as_str().unwrap_or(name);
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
    let value = if opt_in {
        api.post(&path, &json!({}))?
    } else {
        api.delete(&path)?
    };
    print(&value, json_out, |c| {
        let name = c["name"].as_str().unwrap_or(name);
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
    let value = api.post(&format!("/v1/execution-contexts/{name}/revoke"), &json!({}))?;
    print(&value, json_out, |c| {
        println!(
            "revoked {}: its runs were cancelled and its daemon stops for good",
            c["name"].as_str().unwrap_or(name)
        );
    })
}

/// `outpost context delete NAME`.
pub fn context_delete(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    api.delete(&format!("/v1/execution-contexts/{name}"))?;
    let value = json!({ "deleted": name });
    print(&value, json_out, |_| {
        println!("deleted {name}; its run records keep its name");
    })
}

/// `outpost chain set A,B,cloud`.
pub fn chain_set(api: &Api, chain: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let entries: Vec<&str> = chain
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let value = api.put("/v1/chain", &json!({ "chain": entries }))?;
    print(&value, json_out, |v| println!("chain: {}", chain_text(v)))
}

/// `outpost chain show`.
pub fn chain_show(api: &Api, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.get("/v1/chain")?;
    print(&value, json_out, |v| println!("chain: {}", chain_text(v)))
}

/// The chain by the names a person typed (`entries[].name`), an entry's id where the server
/// gave no name.
fn chain_text(v: &Value) -> String {
    let ids = v["chain"].as_array().into_iter().flatten();
    let entries: Vec<&str> = ids
        .enumerate()
        .filter_map(|(i, id)| v["entries"][i]["name"].as_str().or(id.as_str()))
        .collect();
    if entries.is_empty() {
        "(none: executes need --context)".into()
    } else {
        entries.join(" → ")
    }
}

/// `outpost runs list [--context NAME]`.
pub fn runs_list(api: &Api, context: Option<&str>, json_out: bool) -> anyhow::Result<ExitCode> {
    let path = match context {
        Some(name) => format!("/v1/runs?context={name}"),
        None => "/v1/runs".to_owned(),
    };
    let value = api.get(&path)?;
    print(&value, json_out, |v| {
        println!(
            "{:<24} {:<10} {:>5} {:>8}  RAN ON",
            "EXECUTION", "STATUS", "EXIT", "MS"
        );
        for r in v["runs"].as_array().into_iter().flatten() {
            let ms = r["timing"]["serverMs"]
                .as_u64()
                .map(|m| m.to_string())
                .unwrap_or_else(|| "-".into());
            println!(
                "{:<24} {:<10} {:>5} {:>8}  {}",
                r["executionId"].as_str().unwrap_or("?"),
                r["status"].as_str().unwrap_or("?"),
                r["exitCode"]
                    .as_i64()
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
                ms,
                r["ranOnText"].as_str().unwrap_or("")
            );
        }
    })
}

/// `outpost user add NAME`.
pub fn user_add(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.post("/v1/users", &json!({ "name": name }))?;
    print(&value, json_out, |v| {
        println!("{}", v["token"].as_str().unwrap_or(""));
        eprintln!("outpost: the token of {name} is shown once; give it to them as OUTPOST_TOKEN");
    })
}

/// `outpost user remove NAME`.
pub fn user_remove(api: &Api, name: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    api.delete(&format!("/v1/users/{name}"))?;
    let value = json!({ "removed": name });
    print(&value, json_out, |_| {
        println!(
            "removed {name}: their tokens no longer work, their opt-ins are gone, and machines they operate take nobody's runs"
        );
    })
}

/// `outpost audit`: the server's audit events, newest first.
pub fn audit(api: &Api, limit: u32, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.get(&format!("/v1/audit?limit={limit}"))?;
    print(&value, json_out, |v| {
        println!(
            "{:<12} {:<22} {:<12} {:<22} DETAIL",
            "AT", "KIND", "ACTOR", "CONTEXT"
        );
        for e in v["events"].as_array().into_iter().flatten() {
            let detail = match &e["detail"] {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            println!(
                "{:<12} {:<22} {:<12} {:<22} {}",
                e["at"].to_string().trim_matches('"'),
                e["kind"].as_str().unwrap_or("?"),
                e["actor"].as_str().unwrap_or("-"),
                e["contextId"].as_str().unwrap_or("-"),
                detail
            );
        }
    })
}
