//! `outpost execute DIR …`: pack a capability, have the server run it where the routing says,
//! print its output and where it ran, and exit with its exit code.
//!
//! This module owns the command's exit codes and its two outputs (the capability's streams
//! with one `Ran on …` line, or `--json`). It never runs anything locally.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use outpost_core::server::ExecutionStatus;
use outpost_core::wire::CapabilitySource;
use serde_json::{Value, json};

use super::api::Api;

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
    /// The capability folder.
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
    let mut body = json!({ "capability": capability, "wait": true, "waitSecs": 300 });
    if let Some(context) = a.context {
        body["context"] = json!(context);
    }
    if a.fallback_chain {
        body["fallback"] = json!("chain");
    }
    if !a.requires.is_empty() {
        body["requires"] = json!(a.requires);
    }
    if a.queue {
        body["whenOffline"] = json!("queue");
        if let Some(minutes) = a.queue_minutes {
            body["queueMinutes"] = json!(minutes);
        }
    }
    let started = Instant::now();
    let mut execution = api.post("/v1/executions", &body)?;
    while !is_final(&execution) {
        let id = execution["executionId"]
            .as_str()
            .context("the server's answer has no executionId")?
            .to_owned();
        if !a.json {
            eprintln!(
                "outpost: {id} is {} after {}s…",
                execution["status"].as_str().unwrap_or("pending"),
                started.elapsed().as_secs()
            );
        }
        execution = api.get(&format!("/v1/executions/{id}?waitSecs=300"))?;
    }
    if a.json {
        // The fields scripts read are always there: null when the run has none.
        if let Some(object) = execution.as_object_mut() {
            for field in ["exitCode", "signal", "error"] {
                object.entry(field).or_insert(Value::Null);
            }
        }
        println!("{}", serde_json::to_string_pretty(&execution)?);
    } else {
        print_streams(&execution)?;
    }
    Ok(exit_code(&execution))
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
    api.put_bytes(&format!("/v1/bundles/{sha256}"), &bytes)?;
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

/// The execution's status; none when the answer has none or one this CLI does not know.
fn status(execution: &Value) -> Option<ExecutionStatus> {
    execution["status"]
        .as_str()
        .and_then(ExecutionStatus::parse)
}

/// Whether the execution has ended: an end status, or one this CLI does not know (a newer
/// server's, which it cannot wait on).
fn is_final(execution: &Value) -> bool {
    match execution["status"].as_str() {
        None => false,
        Some(_) => status(execution).is_none_or(ExecutionStatus::is_final),
    }
}

fn print_streams(execution: &Value) -> anyhow::Result<()> {
    let mut out = crate::stdout::lock();
    out.write_all(execution["stdout"].as_str().unwrap_or("").as_bytes())?;
    out.flush()?;
    drop(out);
    let mut err = std::io::stderr();
    err.write_all(execution["stderr"].as_str().unwrap_or("").as_bytes())?;
    if execution["truncated"].as_bool() == Some(true) {
        writeln!(err, "outpost: the output was cut at the capability's limit")?;
    }
    if let Some(e) = execution["error"].as_object() {
        writeln!(
            err,
            "outpost: {} ({})",
            e.get("message").and_then(Value::as_str).unwrap_or(""),
            e.get("code").and_then(Value::as_str).unwrap_or("")
        )?;
    }
    match status(execution) {
        Some(ExecutionStatus::TimedOut) => writeln!(err, "outpost: the run timed out")?,
        Some(ExecutionStatus::Cancelled) => writeln!(err, "outpost: the run was cancelled")?,
        Some(ExecutionStatus::Lost) => writeln!(
            err,
            "outpost: the machine stopped answering after the run started; it was not run again"
        )?,
        _ => {}
    }
    if let Some(line) = execution["ranOnText"].as_str() {
        writeln!(err, "{line}")?;
    }
    Ok(())
}

/// The capability's exit code; 124 timed out, 130 cancelled, 75 lost, 70 failed, the
/// signal number + 128 for a run a signal ended.
fn exit_code(execution: &Value) -> ExitCode {
    let code = match status(execution) {
        Some(ExecutionStatus::Exited) => execution["exitCode"]
            .as_i64()
            .map(|c| c.clamp(0, 255) as u8)
            .or_else(|| {
                execution["signal"]
                    .as_i64()
                    .map(|s| (128 + s).clamp(0, 255) as u8)
            })
            .unwrap_or(EXIT_FAILED),
        Some(ExecutionStatus::TimedOut) => EXIT_TIMED_OUT,
        Some(ExecutionStatus::Cancelled) => EXIT_CANCELLED,
        Some(ExecutionStatus::Lost) => EXIT_LOST,
        _ => EXIT_FAILED,
    };
    ExitCode::from(code)
}
