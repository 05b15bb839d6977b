//! `outpost wait register|list|show|cancel`: condition waits over the wait routes (PROTOCOL
//! §11.7), one line per wait for `list`, a block for `show`, `--json` for a script.
//!
//! This module owns reading the command line's durations and times (`30s`, `2m`, `1h`,
//! `1500ms`; RFC 3339 or `+10m`) and packing `--then DIR` as `outpost execute` packs a
//! folder. Every decision is the server's.

use outpost_adapters::clock::wall_now_ms as now_ms;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use outpost_core::api::requests::{ExecuteRequest, WaitRequest};
use outpost_core::api::{Wait, Waits};
use serde::Serialize;
use serde_json::{Value, json};

use super::api::Api;

/// What `outpost wait register` was given.
pub struct RegisterArgs<'a> {
    /// `--context NAME`.
    pub context: &'a str,
    /// `--file condition.js`.
    pub file: &'a Path,
    /// `--interval 30s`.
    pub interval: Option<&'a str>,
    /// `--expires-at TIME`.
    pub expires_at: Option<&'a str>,
    /// `--reason TEXT`.
    pub reason: Option<&'a str>,
    /// `--then DIR`.
    pub then: Option<&'a Path>,
    /// `--json`.
    pub json: bool,
}

/// Reads `30s`, `2m`, `1h`, `1500ms` (or a bare number of milliseconds) as milliseconds.
pub fn parse_duration_ms(text: &str) -> anyhow::Result<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .with_context(|| format!("{text:?} is not a duration like 30s, 2m, 1h or 1500ms"))?;
    let scale = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => anyhow::bail!("{text:?}: the unit is ms, s, m or h"),
    };
    n.checked_mul(scale)
        .with_context(|| format!("{text:?} is too long"))
}

/// Reads an RFC 3339 time (`2026-01-02T03:04:05Z`, an offset, fractions) or `+DURATION` from
/// `now_ms`, as Unix milliseconds.
pub fn parse_time_ms(text: &str, now_ms: u64) -> anyhow::Result<u64> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('+') {
        return now_ms
            .checked_add(parse_duration_ms(rest)?)
            .context("the time is too far away");
    }
    rfc3339_ms(text).with_context(|| {
        format!("{text:?} is neither an RFC 3339 time (2026-01-02T03:04:05Z) nor +10m")
    })
}

fn rfc3339_ms(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = text.get(from..from + len)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut at = 19;
    let mut millis = 0i64;
    if b.get(at) == Some(&b'.') {
        let digits = text[at + 1..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if digits == 0 {
            return None;
        }
        let frac = &text[at + 1..at + 1 + digits.min(3)];
        millis = frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32);
        at += 1 + digits;
    }
    let offset_min = match b.get(at)? {
        b'Z' | b'z' if at + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == b.len() && b[at + 3] == b':' => {
            let minutes = num(at + 1, 2)? * 60 + num(at + 4, 2)?;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_min * 60;
    u64::try_from(secs * 1_000 + millis).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix milliseconds as `2026-01-02T03:04:05Z`.
pub fn format_ms(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

fn print<T: Serialize>(
    value: &T,
    json_out: bool,
    human: impl FnOnce(&T),
) -> anyhow::Result<ExitCode> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        human(value);
    }
    Ok(ExitCode::SUCCESS)
}

/// `outpost wait register`.
pub fn register(api: &Api, a: &RegisterArgs<'_>) -> anyhow::Result<ExitCode> {
    let condition = std::fs::read_to_string(a.file)
        .with_context(|| format!("reading the condition {}", a.file.display()))?;
    let interval_ms = a
        .interval
        .map(|i| parse_duration_ms(i).context("--interval"))
        .transpose()?;
    let expires_at_ms = a
        .expires_at
        .map(|at| parse_time_ms(at, now_ms()).context("--expires-at"))
        .transpose()?;
    let then = match a.then {
        None => None,
        Some(dir) => {
            let packing = || format!("packing the continuation in {}", dir.display());
            let capability = match outpost_host::pack_capability(dir) {
                Ok((capability, _)) => capability,
                Err(outpost_host::PackError::TooLarge { .. }) => anyhow::bail!(
                    "{}: too large for a continuation, which travels inline (outpost-wait.json is added to its files)",
                    dir.display()
                ),
                Err(e) => return Err(anyhow::anyhow!("{e} ({})", e.code())).with_context(packing),
            };
            Some(ExecuteRequest::new(capability))
        }
    };
    let body = WaitRequest {
        context: a.context.to_owned(),
        condition,
        interval_ms,
        expires_at_ms,
        reason: a.reason.map(str::to_owned),
        then,
    };
    let wait: Wait = api.post("/v1/waits", &body)?;
    print(&wait, a.json, |w| {
        let id = &w.wait_id;
        if w.deduplicated == Some(true) {
            println!("{id}: an identical wait is already active on {}", a.context);
        } else {
            println!("{id}: waiting on {}", a.context);
        }
    })
}

/// `outpost wait list`.
pub fn list(api: &Api, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: Waits = api.get("/v1/waits")?;
    print(&value, json_out, |v| {
        println!(
            "{:<28} {:<10} {:<16} {:>6} {:<21} {:<12} REASON",
            "WAIT", "STATE", "CONTEXT", "CHECKS", "NEXT / ENDED", "THEN"
        );
        for w in &v.waits {
            println!("{}", line(w));
        }
    })
}

fn state_text(w: &Wait) -> String {
    match (w.state.as_str(), &w.fail_reason) {
        ("failed", Some(reason)) => reason.clone(),
        (state, _) => state.to_owned(),
    }
}

fn line(w: &Wait) -> String {
    let when = w
        .ended_at_ms
        .or(w.next_check_at_ms)
        .map(format_ms)
        .unwrap_or_else(|| "-".into());
    format!(
        "{:<28} {:<10} {:<16} {:>6} {:<21} {:<12} {}",
        w.wait_id,
        state_text(w),
        w.context,
        w.checks,
        when,
        w.continuation.state,
        w.reason.as_deref().unwrap_or(""),
    )
}

/// `outpost wait show ID`.
pub fn show(api: &Api, id: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: Wait = api.get(&format!("/v1/waits/{id}"))?;
    print(&value, json_out, |w| print!("{}", block(w)))
}

/// `outpost wait cancel ID`.
pub fn cancel(api: &Api, id: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let value: Wait = api.post(&format!("/v1/waits/{id}/cancel"), &json!({}))?;
    print(&value, json_out, |w| match w.state.as_str() {
        "cancelling" => {
            println!("{id}: cancelling; its machine confirms when it next answers")
        }
        "failed" if w.fail_reason.as_deref() == Some("cancelled") => {
            println!("{id}: cancelled")
        }
        _ => println!("{id} had already ended: {}", state_text(w)),
    })
}

/// The readable block `show` prints.
fn block(w: &Wait) -> String {
    let mut out = String::new();
    let mut row = |name: &str, value: String| out.push_str(&format!("{name:<14} {value}\n"));
    let text = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    row("wait", w.wait_id.to_string());
    row("state", state_text(w));
    row("context", format!("{} ({})", w.context, w.context_id));
    row("requester", w.requester.clone());
    if let Some(reason) = &w.reason {
        row("reason", reason.clone());
    }
    row("interval", format!("{} ms", w.interval_ms));
    row(
        "expires",
        w.expires_at_ms
            .map(format_ms)
            .unwrap_or_else(|| "never".into()),
    );
    row("created", format_ms(w.created_at_ms));
    row(
        "checks",
        format!("{} ({} failed in a row)", w.checks, w.consecutive_errors),
    );
    if let Some(next) = w.next_check_at_ms {
        row("next check", format_ms(next));
    }
    if let Some(e) = &w.last_error {
        row(
            "last error",
            format!("{} ({}) at {}", e.message, e.code, format_ms(e.at_ms)),
        );
    }
    if let Some(ended) = w.ended_at_ms {
        row("ended", format_ms(ended));
    }
    if let Some(resume) = &w.resume_text {
        row("resume", resume.clone());
        row("payload", text(&w.payload));
    }
    let c = &w.continuation;
    let mut then = c.state.clone();
    if let Some(execution) = &c.execution_id {
        then.push_str(&format!(": execution {execution}"));
    }
    if let Some(error) = &c.error {
        then.push_str(&format!(" ({error})"));
    }
    row("continuation", then);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_their_units_and_refuse_the_rest() {
        assert_eq!(parse_duration_ms("30s").unwrap(), 30_000);
        assert_eq!(parse_duration_ms("2m").unwrap(), 120_000);
        assert_eq!(parse_duration_ms("1h").unwrap(), 3_600_000);
        assert_eq!(parse_duration_ms("1500ms").unwrap(), 1_500);
        assert_eq!(parse_duration_ms("250").unwrap(), 250);
        for bad in ["", "s", "1d", "-1s", "1.5s", "99999999999999999999h"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn times_read_as_rfc_3339_or_relative_and_print_back() {
        assert_eq!(parse_time_ms("1970-01-01T00:00:00Z", 0).unwrap(), 0);
        let at = parse_time_ms("2026-03-04T05:06:07.5Z", 0).unwrap();
        assert_eq!(at, 1_772_600_767_500);
        assert_eq!(format_ms(at), "2026-03-04T05:06:07Z");
        assert_eq!(
            parse_time_ms("2026-03-04T07:06:07+02:00", 0).unwrap(),
            1_772_600_767_000
        );
        assert_eq!(parse_time_ms("+10m", 1_000).unwrap(), 601_000);
        assert_eq!(format_ms(951_782_400_000), "2000-02-29T00:00:00Z");
        for bad in [
            "2026-13-01T00:00:00Z",
            "2026-01-01",
            "2026-01-01T00:00:00",
            "+x",
            "soon",
        ] {
            assert!(parse_time_ms(bad, 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn show_and_list_read_a_matched_wait() {
        let w: Wait = serde_json::from_value(
            json!({"waitId": "wait_a", "state": "matched", "context": "box",
            "contextId": "ec_1", "requester": "ana", "reason": "deploy", "intervalMs": 1000,
            "expiresAtMs": null, "createdAtMs": 0, "checks": 3, "consecutiveErrors": 0,
            "lastError": {"code": "fetch_failed", "message": "no route", "atMs": 1000},
            "nextCheckAtMs": null, "resumeText": "green", "payload": {"n": 1},
            "failReason": null, "endedAtMs": 2000,
            "continuation": {"id": "wait_a.then", "state": "started",
                             "executionId": "ex_wait_a.then", "error": null}}),
        )
        .expect("a Wait");
        let shown = block(&w);
        for part in [
            "state          matched",
            "checks         3 (0 failed in a row)",
            "last error     no route (fetch_failed) at 1970-01-01T00:00:01Z",
            "resume         green",
            "payload        {\"n\":1}",
            "continuation   started: execution ex_wait_a.then",
            "expires        never",
        ] {
            assert!(shown.contains(part), "{part:?} not in\n{shown}");
        }
        let listed = line(&w);
        assert!(
            listed.contains("1970-01-01T00:00:02Z") && listed.contains("started"),
            "{listed}"
        );
    }
}
