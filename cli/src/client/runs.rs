//! `outpost runs list|show|logs|cancel`: finding a run later, reading what it printed (as it
//! prints it, with `-f`), and stopping it — each with a table or text for a person and
//! `--json` for a script. Times are shown in the machine's local time zone.
//!
//! This module owns only presentation; every decision is the server's.

use std::process::ExitCode;

use anyhow::Context as _;
use outpost_core::api::{Execution, Runs};
use outpost_core::server::ExecutionStatus;

use super::api::Api;
use super::execute::write_part;
use super::follow::{self, Followed, Seen, Step};

/// What `outpost runs list` asks for.
#[derive(Debug, Default)]
pub struct ListArgs<'a> {
    /// `--context NAME|ID`.
    pub context: Option<&'a str>,
    /// `--status STATUS`.
    pub status: Option<&'a str>,
    /// `--mine`: only the caller's own (an admin sees everyone's otherwise).
    pub mine: bool,
    /// `--since 2h|3d|RFC 3339`.
    pub since: Option<&'a str>,
    /// `--limit N` (default 50): rows shown, fetched in pages of at most 500.
    pub limit: Option<u32>,
    /// `--json`.
    pub json: bool,
}

/// The most rows one page of `GET /v1/runs` holds.
const PAGE: u32 = 500;

/// `outpost runs list`.
pub fn list(api: &Api, a: &ListArgs<'_>) -> anyhow::Result<ExitCode> {
    let mut query = Vec::new();
    if let Some(context) = a.context {
        query.push(format!("context={}", encode(context)));
    }
    if let Some(status) = a.status {
        let known = ExecutionStatus::parse(status).with_context(|| {
            let all: Vec<&str> = ExecutionStatus::ALL.iter().map(|s| s.as_str()).collect();
            format!("--status {status}: give one of {}", all.join(", "))
        })?;
        query.push(format!("status={}", known.as_str()));
    }
    if a.mine {
        query.push("mine=true".into());
    }
    if let Some(since) = a.since {
        query.push(format!("since={}", since_secs(since)?));
    }
    let wanted = a.limit.unwrap_or(50);
    anyhow::ensure!(wanted >= 1, "--limit is at least 1");
    let mut runs: Vec<Execution> = Vec::new();
    let mut before: Option<String> = None;
    while runs.len() < wanted as usize {
        let page = (wanted - runs.len() as u32).min(PAGE);
        let mut q = query.clone();
        q.push(format!("limit={page}"));
        if let Some(id) = &before {
            q.push(format!("before={id}"));
        }
        let answer: Runs = api.get(&format!("/v1/runs?{}", q.join("&")))?;
        let got = answer.runs.len();
        runs.extend(answer.runs);
        match answer.next {
            Some(next) if got > 0 => before = Some(next.to_string()),
            _ => break,
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&Runs { runs, next: None })?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<26} {:<16} {:<12} {:<14} {:<10} {:<19} {:>9}",
        "EXECUTION", "CAPABILITY", "REQUESTER", "RAN ON", "STATUS", "STARTED", "DURATION"
    );
    for r in &runs {
        println!(
            "{:<26} {:<16} {:<12} {:<14} {:<10} {:<19} {:>9}",
            r.execution_id.as_str(),
            r.capability.as_deref().unwrap_or("-"),
            r.requester.as_deref().unwrap_or("-"),
            ran_on(r),
            r.status.as_str(),
            local_time(r.created_at),
            duration(r),
        );
    }
    if runs.len() == wanted as usize {
        eprintln!("outpost: the newest {wanted}; --limit N shows more");
    }
    Ok(ExitCode::SUCCESS)
}

/// `outpost runs show ID`.
pub fn show(api: &Api, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let e: Execution = api.get(&format!("/v1/executions/{}", encode(id)))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&e)?);
        return Ok(ExitCode::SUCCESS);
    }
    let field = |name: &str, value: String| println!("{:<12} {value}", format!("{name}:"));
    field("execution", e.execution_id.to_string());
    if let Some(name) = &e.capability {
        let version = e.capability_version.map(|v| format!(" (version {v})"));
        field(
            "capability",
            format!("{name}{}", version.unwrap_or_default()),
        );
    }
    field("status", e.status.as_str().to_owned());
    if let Some(requester) = &e.requester {
        field("requester", requester.clone());
    }
    if let Some(asked) = &e.requested_context {
        field("asked for", asked.clone());
    }
    if let Some(line) = &e.ran_on_text {
        field("ran on", line.clone());
    }
    if let Some(queue) = &e.queue {
        field("queued", queue.sentence());
    }
    field("started", local_time(e.created_at));
    if let Some(end) = e.finished_at {
        field("ended", format!("{} ({})", local_time(end), duration(&e)));
    }
    if let Some(code) = e.exit_code {
        field("exit code", code.to_string());
    }
    if let Some(signal) = e.signal {
        field("signal", signal.to_string());
    }
    if let Some(error) = &e.error {
        field("error", format!("{} ({})", error.message, error.code));
    }
    if let Some(t) = &e.timing {
        field(
            "timing",
            format!(
                "queued {} ms, setup {} ms, ran {} ms, on the machine {} ms",
                t.queue_ms, t.setup_ms, t.execute_ms, t.daemon_ms
            ),
        );
    }
    for (name, text) in [("stdout", &e.stdout), ("stderr", &e.stderr)] {
        if let Some(text) = text.as_deref().filter(|t| !t.is_empty()) {
            println!("--- {name} ---");
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
        }
    }
    if e.truncated == Some(true) {
        println!("(the output was cut at its limit)");
    }
    if !e.status.is_final() {
        eprintln!(
            "outpost: it is still {}: `outpost runs logs {} -f` follows it",
            e.status.as_str(),
            e.execution_id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `outpost runs logs ID [-f]`: what the run printed, on the streams it printed it to; with
/// `-f`, as it prints it, until it ends. `--json` writes one JSON object per line: each part
/// (`{"stream","offset","text"}`), then `{"end": Execution}` once it ended.
pub fn logs(api: &Api, id: &str, follow_it: bool, json: bool) -> anyhow::Result<ExitCode> {
    let mut on = |seen: Seen<'_>| -> anyhow::Result<Step> {
        match seen {
            Seen::Output(part) if json => println!("{}", serde_json::to_string(part)?),
            Seen::Output(part) => write_part(part)?,
            Seen::Status(status) => {
                if let Some(message) = &status.message {
                    eprintln!("outpost: {message}");
                }
            }
            Seen::Retrying {
                error,
                pause,
                attempt,
            } => eprintln!("{}", follow::retry_line(error, pause, attempt)),
            Seen::Interrupt => return Ok(Step::Stop),
        }
        Ok(Step::Go)
    };
    let followed = follow::follow(api, id, follow_it, false, &mut on)?;
    match followed {
        Followed::Ended(execution) if json => {
            println!("{}", serde_json::json!({ "end": execution }));
        }
        Followed::Ended(execution) if follow_it => {
            let exit = execution.exit_code.map(|c| format!(", exit code {c}"));
            eprintln!(
                "outpost: {id} ended {}{}",
                execution.status.as_str(),
                exit.unwrap_or_default()
            );
        }
        Followed::Caught if !json => {
            eprintln!("outpost: {id} is still running: -f follows it to its end");
        }
        Followed::Ended(_) | Followed::Caught | Followed::Stopped => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// `outpost runs cancel ID`.
pub fn cancel(api: &Api, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let before: Execution = api.get(&format!("/v1/executions/{}", encode(id)))?;
    let after: Execution = api.post(
        &format!("/v1/executions/{}/cancel", encode(id)),
        &serde_json::json!({}),
    )?;
    if json {
        println!("{}", serde_json::to_string_pretty(&after)?);
    } else if before.status.is_final() {
        println!(
            "{id} had already ended ({}): nothing to cancel",
            before.status.as_str()
        );
    } else {
        println!("cancelled {id} (it was {})", before.status.as_str());
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a run ran, in a few characters.
fn ran_on(r: &Execution) -> String {
    match &r.ran_on {
        Some(on) => on.name.clone(),
        None => r
            .requested_context
            .as_deref()
            .map_or("-".to_owned(), |c| format!("({c})")),
    }
}

/// From its creation to its end (or now, if it has not ended), as `1h02m`, `3m05s`, `12s`.
fn duration(r: &Execution) -> String {
    let Some(end) = r.finished_at else {
        return "-".into();
    };
    let secs = end.saturating_sub(r.created_at);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// Unix seconds in the machine's time zone: `2026-12-04 22:31:07`.
pub(crate) fn local_time(unix: u64) -> String {
    in_local_zone(unix, "%Y-%m-%d %H:%M:%S")
}

/// Unix seconds as RFC 3339 in the machine's time zone: `2026-12-04T22:31:07+01:00`.
pub(crate) fn rfc3339_local(unix: u64) -> String {
    in_local_zone(unix, "%Y-%m-%dT%H:%M:%S%:z")
}

/// Unix seconds in the machine's time zone as `format` (strftime) writes it.
fn in_local_zone(unix: u64, format: &str) -> String {
    let Ok(at) = jiff::Timestamp::from_second(unix as i64) else {
        return unix.to_string();
    };
    at.to_zoned(jiff::tz::TimeZone::system())
        .strftime(format)
        .to_string()
}

/// `--since`: `90s`, `30m`, `2h`, `7d` ago, or an RFC 3339 time.
fn since_secs(text: &str) -> anyhow::Result<u64> {
    let now = jiff::Timestamp::now().as_second();
    let unit = |c: char| match c {
        's' => Some(1),
        'm' => Some(60),
        'h' => Some(3600),
        'd' => Some(86_400),
        _ => None,
    };
    if let Some(last) = text.chars().last()
        && let Some(per) = unit(last)
        && let Ok(n) = text[..text.len() - 1].parse::<i64>()
    {
        return Ok(now.saturating_sub(n.saturating_mul(per)).max(0) as u64);
    }
    let at: jiff::Timestamp = text.parse().with_context(|| {
        format!(
            "--since {text}: give a time ago (90s, 30m, 2h, 7d) or RFC 3339 (2026-01-02T03:04:05Z)"
        )
    })?;
    Ok(at.as_second().max(0) as u64)
}

/// A path or query segment, percent-encoded where it must be.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_a_time_ago_or_an_rfc3339_time() {
        let now = jiff::Timestamp::now().as_second() as u64;
        let two_hours = since_secs("2h").unwrap();
        assert!((now - 7200..=now - 7199).contains(&two_hours));
        assert_eq!(since_secs("2026-01-02T03:04:05Z").unwrap(), 1_767_323_045);
        let err = since_secs("yesterday").unwrap_err().to_string();
        assert!(err.contains("90s, 30m, 2h, 7d"), "{err}");
    }

    #[test]
    fn durations_read_at_a_glance() {
        let mut e: Execution = serde_json::from_value(serde_json::json!({
            "executionId": "ex_1", "status": "exited", "createdAt": 100, "finishedAt": 112
        }))
        .unwrap();
        assert_eq!(duration(&e), "12s");
        e.finished_at = Some(100 + 3725);
        assert_eq!(duration(&e), "1h02m");
        e.finished_at = None;
        assert_eq!(duration(&e), "-");
        assert_eq!(encode("box one/ü"), "box%20one%2F%C3%BC");
    }
}
