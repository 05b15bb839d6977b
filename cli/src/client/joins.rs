//! `outpost join create|list|revoke` (admin): join tokens over `/v1/join-tokens`
//! (PROTOCOL §11.4). A new token's join string is printed once, on stdout alone, so it can go
//! straight into a file (`outpost join create > join.txt`) and on to `outpost daemon
//! --join-file`.
//!
//! This module owns only presentation; every decision is the server's.

use std::process::ExitCode;

use anyhow::Context as _;
use outpost_core::api::{JoinToken, JoinTokenRequest, JoinTokens};

use super::api::Api;
use super::runs::local_time;

/// `outpost join create`.
pub fn create(
    api: &Api,
    ttl: Option<&str>,
    uses: Option<u32>,
    name_prefix: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let request = JoinTokenRequest {
        ttl_secs: ttl.map(duration_secs).transpose()?,
        uses,
        name_prefix,
    };
    let made: JoinToken = api.post("/v1/join-tokens", &request)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&made)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}", made.join.as_deref().unwrap_or_default());
    eprintln!(
        "outpost: join token {} ({}); the join string above is shown once: give it to the machine's owner for `outpost daemon --join-file FILE`",
        made.id,
        bounds(&made)
    );
    Ok(ExitCode::SUCCESS)
}

/// `outpost join list`.
pub fn list(api: &Api, json: bool) -> anyhow::Result<ExitCode> {
    let tokens: JoinTokens = api.get("/v1/join-tokens")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&tokens)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<26} {:<10} {:<19} {:>5}  BOUNDS",
        "ID", "BY", "CREATED", "USED"
    );
    for t in &tokens.join_tokens {
        println!(
            "{:<26} {:<10} {:<19} {:>5}  {}",
            t.id,
            t.created_by,
            local_time(t.created_at),
            t.used,
            bounds(t)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `outpost join revoke ID`.
pub fn revoke(api: &Api, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let revoked: JoinToken = api.delete(&format!("/v1/join-tokens/{id}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&revoked)?);
    } else {
        println!(
            "revoked {id}: it registers no more machines (the {} it registered stay)",
            revoked.used
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A token's bounds in a few words.
fn bounds(t: &JoinToken) -> String {
    if t.revoked {
        return "revoked".into();
    }
    let mut parts = Vec::new();
    match t.expires_at {
        Some(at) => parts.push(format!("until {}", local_time(at))),
        None => parts.push("no expiry".into()),
    }
    if let Some(left) = t.uses_left {
        parts.push(format!("{left} use(s) left"));
    }
    if let Some(prefix) = &t.name_prefix {
        parts.push(format!("names {prefix}…"));
    }
    parts.join(", ")
}

/// `90s`, `30m`, `1h`, `7d`, in seconds.
fn duration_secs(text: &str) -> anyhow::Result<u64> {
    let bad = || format!("--ttl {text}: give a duration such as 90s, 30m, 1h or 7d");
    let unit = text.chars().last().with_context(bad)?;
    let per = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => anyhow::bail!(bad()),
    };
    let n: u64 = text[..text.len() - 1].parse().ok().with_context(bad)?;
    anyhow::ensure!(n > 0, bad());
    Ok(n * per)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration_secs("90s").unwrap(), 90);
        assert_eq!(duration_secs("1h").unwrap(), 3600);
        assert_eq!(duration_secs("7d").unwrap(), 604_800);
        for bad in ["", "h", "0m", "1w", "ten"] {
            assert!(duration_secs(bad).is_err(), "{bad}");
        }
    }
}
