//! `outpost execute DIR …`: pack a capability, have the server run it where the routing says,
//! print its output and where it ran, and exit with its exit code.
//!
//! The execution's id is printed on stderr as soon as the server has it (`outpost: execution
//! ex_…`), and the command then follows the execution's output as the run writes it
//! ([`super::follow`]), asking again from where it stood when the server cannot be reached
//! (it restarts, the network drops), so a restart mid-run still ends with the run's real
//! output and outcome. The first Ctrl-C cancels the execution; a second leaves it running
//! and says how to follow it again.
//!
//! This module owns the command's exit codes and its two outputs (the capability's streams
//! with one `Ran on …` line, or `--json`). It never runs anything locally.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use outpost_core::api::requests::{ExecuteRequest, OfflineMode};
use outpost_core::api::{Bundle, Execution, OutputEvent};
use outpost_core::ids::ExecutionId;
use outpost_core::routing::{Fallback, Requirement};
use outpost_core::server::ExecutionStatus;
use outpost_core::wire::{CapabilitySource, OutputStream};
use serde_json::Value;

use super::api::Api;
use super::follow::{self, Followed, Seen, Step};

/// Exit status of a run stopped at its deadline (as `timeout(1)` reports it).
pub const EXIT_TIMED_OUT: u8 = 124;
/// Exit status of a cancelled run.
pub const EXIT_CANCELLED: u8 = 130;
/// Exit status of a run whose machine stopped answering after it started (`lost`).
pub const EXIT_LOST: u8 = 75;
/// Exit status of a run that could not be run or placed (`failed`).
pub const EXIT_FAILED: u8 = 70;

/// Where and how to run.
pub struct ExecuteArgs<'a> {
    /// The capability folder: sent inline, or uploaded as a bundle by digest when it is too large.
    pub dir: &'a Path,
    /// `--server`.
    pub server: Option<&'a str>,
    /// `--context NAME`.
    pub context: Option<&'a str>,
    /// `--fallback chain`.
    pub fallback_chain: bool,
    /// `--requires fs|lan`.
    pub requires: &'a [String],
    /// `--when-offline queue`.
    pub queue: bool,
    /// `--when-busy queue`.
    pub queue_when_busy: bool,
    /// `--queue-minutes N`.
    pub queue_minutes: Option<u32>,
    /// `--json`.
    pub json: bool,
    /// `-- ARGS`.
    pub args: &'a [String],
}

/// Runs `outpost execute`.
pub fn execute(a: &ExecuteArgs<'_>) -> anyhow::Result<ExitCode> {
    let api = Api::from_env(a.server)?;
    let packing = || format!("packing the capability in {}", a.dir.display());
    // A persistent service runs until it is stopped: say how, once it has an id.
    let persistent = std::fs::read_to_string(a.dir.join(outpost_core::manifest::MANIFEST_FILE))
        .ok()
        .and_then(|text| outpost_core::manifest::Manifest::parse(&text).ok())
        .is_some_and(|m| m.lifecycle == outpost_core::manifest::Lifecycle::Persistent);
    let capability = match outpost_host::pack_capability(a.dir) {
        Ok((mut capability, _)) => {
            if !a.args.is_empty() {
                with_args(&mut capability, a.args)?;
            }
            capability
        }
        Err(outpost_host::PackError::TooLarge { .. }) => {
            anyhow::ensure!(
                a.args.is_empty(),
                "arguments after `--` travel in the manifest, which a bundle carries sealed: put them in the manifest's `args`"
            );
            upload_bundle(&api, a.dir, a.json).with_context(packing)?
        }
        Err(e) => return Err(anyhow::anyhow!("{e} ({})", e.code())).with_context(packing),
    };
    // Answered at once (202): the execution's id is known before anything runs.
    let mut body = ExecuteRequest::new(capability);
    body.context = a.context.map(str::to_owned);
    if a.fallback_chain {
        body.fallback = Some(Fallback::Chain);
    }
    if !a.requires.is_empty() {
        let requires = a.requires.iter().map(|r| {
            Requirement::parse(r).with_context(|| format!("--requires {r}: give fs or lan"))
        });
        body.requires = Some(requires.collect::<anyhow::Result<_>>()?);
    }
    if a.queue {
        body.when_offline = Some(OfflineMode::Queue);
    }
    if a.queue_when_busy {
        body.when_busy = Some(OfflineMode::Queue);
    }
    body.queue_minutes = a.queue_minutes;
    let execution: Execution = api.post("/v1/executions", &body)?;
    let id = execution.execution_id.clone();
    eprintln!("outpost: execution {id}");
    if persistent && !execution.status.is_final() {
        eprintln!(
            "outpost: {id} is a persistent service: it runs until stopped (Ctrl-C here, or `outpost runs cancel {id}` from anywhere)"
        );
    }
    let streamed = !execution.status.is_final();
    let execution = if !streamed {
        execution
    } else {
        match watch(&api, &id, a.json)? {
            Some(execution) => execution,
            None => {
                eprintln!(
                    "outpost: left {id} running; follow it with `outpost runs logs {id} -f`, stop it with `outpost runs cancel {id}`"
                );
                return Ok(ExitCode::from(EXIT_CANCELLED));
            }
        }
    };
    if a.json {
        // The fields scripts read are always there: null when the run has none.
        let mut shown = serde_json::to_value(&execution)?;
        if let Some(object) = shown.as_object_mut() {
            for field in ["exitCode", "signal", "error"] {
                object.entry(field).or_insert(Value::Null);
            }
        }
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        if !streamed {
            for (stream, text) in [
                (OutputStream::Stdout, &execution.stdout),
                (OutputStream::Stderr, &execution.stderr),
            ] {
                let text = text.clone().unwrap_or_default();
                write_part(&OutputEvent {
                    stream,
                    offset: 0,
                    text,
                })?;
            }
        }
        print_ending(&execution)?;
    }
    Ok(exit_code(&execution))
}

/// Follows `id` to its end, printing its output as it comes (not with `--json`, which prints
/// the whole execution at the end). The first Ctrl-C cancels the execution; a second leaves
/// it running and returns `None`.
fn watch(api: &Api, id: &ExecutionId, json: bool) -> anyhow::Result<Option<Execution>> {
    let mut cancelling = false;
    let mut status_shown = None;
    let mut on = |seen: Seen<'_>| -> anyhow::Result<Step> {
        match seen {
            Seen::Output(part) if !json => write_part(part)?,
            Seen::Output(_) => {}
            Seen::Status(status) => {
                if let Some(message) = &status.message
                    && status_shown.as_ref() != Some(message)
                {
                    eprintln!("outpost: {message}");
                    status_shown = Some(message.clone());
                }
            }
            Seen::Retrying {
                error,
                pause,
                attempt,
            } => eprintln!("{}", follow::retry_line(error, pause, attempt)),
            Seen::Interrupt if cancelling => return Ok(Step::Stop),
            Seen::Interrupt => {
                cancelling = true;
                eprintln!("outpost: cancelling {id}… press Ctrl-C again to leave it running");
                let cancelled: Result<Execution, _> = api.post(
                    &format!("/v1/executions/{id}/cancel"),
                    &serde_json::json!({}),
                );
                if let Err(e) = cancelled {
                    eprintln!("outpost: cannot cancel {id}: {e}");
                }
            }
        }
        Ok(Step::Go)
    };
    let followed = follow::follow(api, id, true, true, &mut on).with_context(|| {
        format!("following {id} (it may still run: `outpost runs show {id}` shows it)")
    })?;
    match followed {
        Followed::Ended(_) | Followed::Caught => {
            // The end as stored, streams included (the events carried them to the screen).
            let path = format!("/v1/executions/{id}");
            Ok(Some(
                api.get(&path).with_context(|| format!("reading {id}"))?,
            ))
        }
        Followed::Stopped => Ok(None),
    }
}

/// One part of the run's output, on the stream it was written to.
pub(crate) fn write_part(part: &OutputEvent) -> std::io::Result<()> {
    match part.stream {
        OutputStream::Stdout => {
            let mut out = crate::stdout::lock();
            out.write_all(part.text.as_bytes())?;
            out.flush()
        }
        OutputStream::Stderr => {
            let mut err = std::io::stderr();
            err.write_all(part.text.as_bytes())?;
            err.flush()
        }
    }
}

/// Uploads the folder as a bundle by digest (PROTOCOL §11.4) and names it.
fn upload_bundle(api: &Api, dir: &Path, json: bool) -> anyhow::Result<CapabilitySource> {
    let (bytes, sha256, _) =
        outpost_host::pack_bundle(dir).map_err(|e| anyhow::anyhow!("{e} ({})", e.code()))?;
    if !json {
        eprintln!(
            "outpost: uploading the capability as a bundle ({} KiB, sha256 {})…",
            bytes.len() / 1024,
            &sha256[..12]
        );
    }
    let _: Bundle = api.put_bytes(&format!("/v1/bundles/{sha256}"), &bytes)?;
    Ok(CapabilitySource::Digest {
        sha256,
        size: bytes.len() as u64,
    })
}

/// Appends `-- ARGS` to the manifest's `args` (a run carries its manifest whole, so the
/// arguments travel, and are signed, with it). The manifest is rewritten as JSON — which is
/// YAML — and parsed again before it is sent.
fn with_args(capability: &mut CapabilitySource, args: &[String]) -> anyhow::Result<()> {
    let CapabilitySource::Inline { manifest, .. } = capability else {
        anyhow::bail!("arguments need an inline capability");
    };
    let mut doc: Value = serde_saphyr::from_str(manifest)
        .map_err(|e| anyhow::anyhow!("the manifest does not read: {e}"))?;
    let object = doc
        .as_object_mut()
        .context("the manifest is not a mapping")?;
    let mut all: Vec<Value> = match object.get("args") {
        Some(Value::Array(existing)) => existing.clone(),
        Some(Value::Null) | None => Vec::new(),
        Some(_) => anyhow::bail!("the manifest's args is not a list"),
    };
    all.extend(args.iter().cloned().map(Value::String));
    object.insert("args".into(), Value::Array(all));
    let text = serde_json::to_string_pretty(&doc)?;
    outpost_core::manifest::Manifest::parse(&text)
        .map_err(|e| anyhow::anyhow!("the manifest with the arguments added: {e}"))?;
    *manifest = text;
    Ok(())
}

/// What a person reads after the run's own output: a cut, an error, how it ended, where.
fn print_ending(execution: &Execution) -> anyhow::Result<()> {
    let mut err = std::io::stderr();
    if execution.truncated == Some(true) {
        writeln!(err, "outpost: the output was cut at the capability's limit")?;
    }
    let reason = execution.error.as_ref().and_then(|e| e.reason.as_deref());
    match (execution.status, &execution.error) {
        (ExecutionStatus::TimedOut, _) => writeln!(err, "outpost: the run timed out")?,
        (ExecutionStatus::Cancelled, _) => match reason {
            Some(why) => writeln!(err, "outpost: the run was cancelled ({why})")?,
            None => writeln!(err, "outpost: the run was cancelled")?,
        },
        (ExecutionStatus::Lost, _) => writeln!(
            err,
            "outpost: the machine stopped answering after the run started; it was not run again"
        )?,
        (_, Some(e)) => writeln!(
            err,
            "outpost: {} ({})",
            super::api::in_cli_words(&e.message),
            e.code
        )?,
        (_, None) => {}
    }
    // Where it ran, only if it got there: a run refused before any machine took it did not
    // run anywhere.
    let ran = execution.timing.is_some() || execution.status != ExecutionStatus::Failed;
    if let Some(line) = execution.ran_on_text.as_ref().filter(|_| ran) {
        writeln!(err, "{line}")?;
    }
    Ok(())
}

/// The capability's exit code; 124 timed out, 130 cancelled, 75 lost, 70 failed, the
/// signal number + 128 for a run a signal ended.
fn exit_code(execution: &Execution) -> ExitCode {
    let code = match execution.status {
        ExecutionStatus::Exited => execution
            .exit_code
            .map(|c| c.clamp(0, 255) as u8)
            .or_else(|| execution.signal.map(|s| (128 + s).clamp(0, 255) as u8))
            .unwrap_or(EXIT_FAILED),
        ExecutionStatus::TimedOut => EXIT_TIMED_OUT,
        ExecutionStatus::Cancelled => EXIT_CANCELLED,
        ExecutionStatus::Lost => EXIT_LOST,
        _ => EXIT_FAILED,
    };
    ExitCode::from(code)
}
