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

fn print(value: &Value, json_out: bool, human: impl FnOnce(&Value)) -> anyhow::Result<ExitCode> {
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
    let mut body = json!({ "context": a.context, "condition": condition });
    if let Some(interval) = a.interval {
        body["intervalMs"] = json!(parse_duration_ms(interval).context("--interval")?);
    }
    if let Some(at) = a.expires_at {
        body["expiresAtMs"] = json!(parse_time_ms(at, now_ms()).context("--expires-at")?);
    }
    if let Some(reason) = a.reason {
        body["reason"] = json!(reason);
    }
    if let Some(dir) = a.then {
        let packing = || format!("packing the continuation in {}", dir.display());
        let capability = match outpost_host::pack_capability(dir) {
            Ok((capability, _)) => capability,
            Err(outpost_host::PackError::TooLarge { .. }) => anyhow::bail!(
                "{}: too large for a continuation, which travels inline (outpost-wait.json is added to its files)",
                dir.display()
            ),
            Err(e) => return Err(anyhow::anyhow!("{e} ({})", e.code())).with_context(packing),
        };
        body["then"] = json!({ "capability": capability });
    }
    let wait = api.post("/v1/waits", &body)?;
    print(&wait, a.json, |w| {
        let id = w["waitId"].as_str().unwrap_or("?");
        if w["deduplicated"].as_bool() == Some(true) {
            println!("{id}: an identical wait is already active on {}", a.context);
        } else {
            println!("{id}: waiting on {}", a.context);
        }
    })
}

/// `outpost wait list`.
pub fn list(api: &Api, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.get("/v1/waits")?;
    print(&value, json_out, |v| {
        println!(
            "{:<28} {:<10} {:<16} {:>6} {:<21} {:<12} REASON",
            "WAIT", "STATE", "CONTEXT", "CHECKS", "NEXT / ENDED", "THEN"
        );
        for w in v["waits"].as_array().into_iter().flatten() {
            println!("{}", line(w));
        }
    })
}

fn time_of(value: &Value) -> Option<String> {
    value.as_u64().map(format_ms)
}

fn state_text(w: &Value) -> String {
    match (w["state"].as_str(), w["failReason"].as_str()) {
        (Some("failed"), Some(reason)) => reason.to_owned(),
        (state, _) => state.unwrap_or("?").to_owned(),
    }
}

fn line(w: &Value) -> String {
    let when = time_of(&w["endedAtMs"])
        .or_else(|| time_of(&w["nextCheckAtMs"]))
        .unwrap_or_else(|| "-".into());
    format!(
        "{:<28} {:<10} {:<16} {:>6} {:<21} {:<12} {}",
        w["waitId"].as_str().unwrap_or("?"),
        state_text(w),
        w["context"].as_str().unwrap_or("?"),
        w["checks"].as_u64().unwrap_or(0),
        when,
        w["continuation"]["state"].as_str().unwrap_or("none"),
        w["reason"].as_str().unwrap_or(""),
    )
}

/// `outpost wait show ID`.
pub fn show(api: &Api, id: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.get(&format!("/v1/waits/{id}"))?;
    print(&value, json_out, |w| print!("{}", block(w)))
}

/// `outpost wait cancel ID`.
pub fn cancel(api: &Api, id: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let value = api.post(&format!("/v1/waits/{id}/cancel"), &json!({}))?;
    print(&value, json_out, |w| match w["state"].as_str() {
        Some("cancelling") => {
            println!("{id}: cancelling; its machine confirms when it next answers")
        }
        Some("failed") if w["failReason"] == "cancelled" => println!("{id}: cancelled"),
        _ => println!("{id} had already ended: {}", state_text(w)),
    })
}

/// The readable block `show` prints.
fn block(w: &Value) -> String {
    let mut out = String::new();
    let mut row = |name: &str, value: String| out.push_str(&format!("{name:<14} {value}\n"));
    let text = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    row("wait", text(&w["waitId"]));
    row("state", state_text(w));
    row(
        "context",
        format!("{} ({})", text(&w["context"]), text(&w["contextId"])),
    );
    row("requester", text(&w["requester"]));
    if !w["reason"].is_null() {
        row("reason", text(&w["reason"]));
    }
    row(
        "interval",
        format!("{} ms", w["intervalMs"].as_u64().unwrap_or(0)),
    );
    row(
        "expires",
        time_of(&w["expiresAtMs"]).unwrap_or_else(|| "never".into()),
    );
    row("created", time_of(&w["createdAtMs"]).unwrap_or_default());
    row(
        "checks",
        format!(
            "{} ({} failed in a row)",
            w["checks"].as_u64().unwrap_or(0),
            w["consecutiveErrors"].as_u64().unwrap_or(0)
        ),
    );
    if let Some(next) = time_of(&w["nextCheckAtMs"]) {
        row("next check", next);
    }
    if let Some(e) = w["lastError"].as_object() {
        row(
            "last error",
            format!(
                "{} ({}){}",
                e.get("message").map(text).unwrap_or_default(),
                e.get("code").map(text).unwrap_or_default(),
                e.get("atMs")
                    .and_then(time_of)
                    .map(|t| format!(" at {t}"))
                    .unwrap_or_default()
            ),
        );
    }
    if let Some(ended) = time_of(&w["endedAtMs"]) {
        row("ended", ended);
    }
    if !w["resumeText"].is_null() {
        row("resume", text(&w["resumeText"]));
        row("payload", text(&w["payload"]));
    }
    let c = &w["continuation"];
    let mut then = text(&c["state"]);
    if !c["executionId"].is_null() {
        then.push_str(&format!(": execution {}", text(&c["executionId"])));
    }
    if !c["error"].is_null() {
        then.push_str(&format!(" ({})", text(&c["error"])));
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
        let w = json!({"waitId": "wait_a", "state": "matched", "context": "box",
            "contextId": "ec_1", "requester": "ana", "reason": "deploy", "intervalMs": 1000,
            "expiresAtMs": null, "createdAtMs": 0, "checks": 3, "consecutiveErrors": 0,
            "lastError": {"code": "fetch_failed", "message": "no route", "atMs": 1000},
            "nextCheckAtMs": null, "resumeText": "green", "payload": {"n": 1},
            "failReason": null, "endedAtMs": 2000,
            "continuation": {"id": "wait_a.then", "state": "started",
                             "executionId": "ex_wait_a.then", "error": null}});
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
