//! `outpost terminal recordings|export|play`: the recordings the server kept of terminal
//! sessions — listed, written out as the asciicast v2 file `asciinema play` plays, or played
//! here with the session's own timing.
//!
//! This module owns only presentation and playback; who may read a recording is the server's
//! decision (whoever may read the terminal's run).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outpost_core::api::Recordings;
use outpost_core::terminal::cast::{Cast, EventKind};

use super::api::Api;

/// The most bytes of a recording read (the server keeps at most 8 MiB by default; an
/// operator may allow more).
const RECORDING_READ_LIMIT: u64 = 256 * 1024 * 1024;

/// How `outpost terminal play` plays.
#[derive(Debug, Clone, Copy)]
pub struct PlayArgs {
    /// Faster (above 1) or slower.
    pub speed: f64,
    /// Pauses longer than this many seconds are cut to it.
    pub idle_limit: Option<f64>,
}

/// The recording of terminal `id`, as the server stores it.
fn fetch(api: &Api, id: &str) -> anyhow::Result<String> {
    api.get_text(
        &format!("/v1/terminals/{id}/recording"),
        RECORDING_READ_LIMIT,
    )
    .with_context(|| format!("reading the recording of terminal {id}"))
}

/// `outpost terminal export ID`: the asciicast v2 file on stdout.
pub fn export(api: &Api, id: &str) -> anyhow::Result<ExitCode> {
    let text = fetch(api, id)?;
    let mut out = crate::stdout::lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `outpost terminal play ID`: the session's output written with its timing.
pub fn play(api: &Api, id: &str, args: PlayArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.speed.is_finite() && (0.01..=1000.0).contains(&args.speed),
        "--speed is a number from 0.01 to 1000 (2 plays twice as fast)"
    );
    anyhow::ensure!(
        args.idle_limit
            .is_none_or(|s| s.is_finite() && (0.0..=86_400.0).contains(&s)),
        "--idle-limit is a number of seconds from 0 to 86400"
    );
    let text = fetch(api, id)?;
    let cast = Cast::parse(&text)
        .map_err(|e| anyhow::anyhow!("the recording does not read: {e} [{}]", e.code()))?;
    eprintln!(
        "outpost: playing terminal {id} ({}x{}; ctrl-c stops)",
        cast.header.width, cast.header.height
    );
    let idle = args.idle_limit.map(Duration::from_secs_f64);
    let started = Instant::now();
    let mut shown = Duration::ZERO;
    let mut previous = Duration::ZERO;
    let mut out = crate::stdout::lock();
    for event in &cast.events {
        let mut gap = event.at.saturating_sub(previous);
        previous = event.at;
        if let Some(idle) = idle {
            gap = gap.min(idle);
        }
        shown += gap.div_f64(args.speed);
        if event.kind != EventKind::Output {
            continue;
        }
        if let Some(wait) = (started + shown).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        out.write_all(event.data.as_bytes())?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `outpost terminal recordings`: the recordings the caller may watch, newest first.
pub fn list(api: &Api, context: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let path = match context {
        Some(context) => format!("/v1/recordings?context={context}"),
        None => "/v1/recordings".to_owned(),
    };
    let list: Recordings = api.get(&path)?;
    let mut out = crate::stdout::lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.recordings.is_empty() {
        writeln!(out, "no recordings")?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{:<26} {:<16} {:<12} {:>10} {:>9}  NOTE",
        "TERMINAL", "CONTEXT", "OPENED BY", "SIZE", "SECONDS"
    )?;
    for r in &list.recordings {
        let seconds = r
            .ended_at
            .map(|end| end.saturating_sub(r.started_at).to_string())
            .unwrap_or_else(|| "-".into());
        let mut notes = Vec::new();
        if r.ended_at.is_none() {
            notes.push("open or cut short");
        }
        if r.truncated {
            notes.push("truncated");
        }
        if r.records_input {
            notes.push("input kept");
        }
        writeln!(
            out,
            "{:<26} {:<16} {:<12} {:>10} {:>9}  {}",
            r.terminal_id.as_str(),
            r.context,
            r.opened_by,
            r.size,
            seconds,
            notes.join(", ")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
