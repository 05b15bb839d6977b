//! Runs outpost-core against every vector file: positive cases reproduced byte for byte,
//! negative cases refused with the named error code.

use std::path::Path;

use ed25519_dalek::VerifyingKey;
use outpost_core::httpsig::{
    DigestAlgorithm, HttpRequest, Profile, check_content_digest, content_digest, sign_request,
    verify_signature,
};
use outpost_core::json::{Value, parse_strict};
use outpost_core::keyset::{FrameKey, KeySet, PinnedRoots, RootKey};
use outpost_core::replay::{ReplayGuard, ReplayPolicy};
use outpost_core::sign::{FRAME_DOMAIN, FrameVerifier, Signer, signing_input};
use outpost_core::terminal::ViewerControl;
use outpost_core::time::UnixTime;
use outpost_core::wire::PtyOutputFrame;
use serde::de::DeserializeOwned;

use crate::keys::{signer_from_hex, verifying_key_from_hex};
use crate::model::*;

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Cases checked.
    pub cases: usize,
    /// `file: case: what went wrong`, one per failing case.
    pub failures: Vec<String>,
}

/// Why the vector files could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not a vector file of its kind.
    #[error("{path} is not a valid vector file: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        source: serde_json::Error,
    },
}

type CaseResult = Result<(), String>;

/// Checks every vector file in `dir`.
pub fn check_dir(dir: &Path) -> Result<Report, CheckError> {
    let mut report = Report::default();
    run::<SignedFrameCase>(dir, "signed-frames.json", signed_frame, &mut report)?;
    run::<KeySetCase>(dir, "key-sets.json", key_set, &mut report)?;
    run::<HttpSignatureCase>(dir, "http-signatures.json", http_signature, &mut report)?;
    run::<ContentDigestCase>(dir, "content-digest.json", digest, &mut report)?;
    run::<CanonicalJsonCase>(dir, "canonical-json.json", canonical, &mut report)?;
    run::<TerminalCase>(dir, "terminal.json", terminal, &mut report)?;
    run::<DaemonRunsCase>(dir, "daemon-runs.json", daemon_runs, &mut report)?;
    Ok(report)
}

fn run<C: DeserializeOwned>(
    dir: &Path,
    name: &str,
    check: fn(&C) -> CaseResult,
    report: &mut Report,
) -> Result<(), CheckError> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(|source| CheckError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let file: VectorFile<C> = serde_json::from_str(&text).map_err(|source| CheckError::Parse {
        path: path.display().to_string(),
        source,
    })?;
    for (i, case) in file.cases.iter().enumerate() {
        report.cases += 1;
        if let Err(e) = check(case) {
            report.failures.push(format!("{name}: case {i}: {e}"));
        }
    }
    Ok(())
}

/// Compares an outcome with a case's `valid` / `error`.
fn expect<T, E: std::fmt::Debug>(
    name: &str,
    valid: bool,
    error: &Option<String>,
    got: Result<T, E>,
    code: fn(&E) -> &'static str,
) -> Result<Option<T>, String> {
    match (got, valid) {
        (Ok(v), true) => Ok(Some(v)),
        (Err(e), false) if Some(code(&e)) == error.as_deref() => Ok(None),
        (Ok(_), false) => Err(format!("{name}: accepted, expected {error:?}")),
        (Err(e), _) => Err(format!(
            "{name}: refused with {} ({e:?}), expected {}",
            code(&e),
            if valid {
                "acceptance".to_owned()
            } else {
                format!("{error:?}")
            },
        )),
    }
}

fn unhex(field: &str, text: &str) -> Result<Vec<u8>, String> {
    hex::decode(text).map_err(|e| format!("{field} is not hex: {e}"))
}

fn signed_frame(c: &SignedFrameCase) -> CaseResult {
    let bytes = unhex("frame_hex", &c.frame_hex)?;
    if let Some(raw) = &c.frame
        && raw.get().as_bytes() != bytes.as_slice()
    {
        return Err(format!("{}: `frame` differs from `frame_hex`", c.name));
    }
    let keys = c
        .keys
        .iter()
        .map(|k| {
            Ok(FrameKey {
                kid: k.kid.clone(),
                public_key: verifying_key_from_hex(&k.public_key_hex)?,
                not_before: UnixTime(k.not_before),
                not_after: UnixTime(k.not_after),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let keys = KeySet::trusted(1, keys).map_err(|e| e.to_string())?;
    let mut verifier = FrameVerifier::new(keys, c.session_id.clone()).with_last_seq(c.previous_seq);
    let got = verifier.verify(&bytes, UnixTime(c.now));
    let Some(verified) = expect(&c.name, c.valid, &c.error, got, |e| e.code())? else {
        return Ok(());
    };

    // Reproduce the signed bytes and the signature.
    let mut value = parse_strict(&bytes).map_err(|e| e.to_string())?;
    let sig = value
        .remove("sig")
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let input = signing_input(FRAME_DOMAIN, &value);
    let expected_input = unhex(
        "signing_input_hex",
        c.signing_input_hex.as_deref().unwrap_or_default(),
    )?;
    if input != expected_input {
        return Err(format!("{}: signing input differs", c.name));
    }
    let signer = signer_from_hex(&verified.kid, &c.secret_key_hex)?;
    let resigned = signer.sign(&input).map_err(|e| e.to_string())?;
    if outpost_core::b64::encode(&resigned) != sig {
        return Err(format!(
            "{}: signing the input does not reproduce `sig`",
            c.name
        ));
    }
    Ok(())
}

/// The roots a case's daemon pins.
fn root_keys(roots: &[RootEntry]) -> Result<Vec<RootKey>, String> {
    roots
        .iter()
        .map(|r| {
            Ok(RootKey {
                id: r.id.clone(),
                public_key: verifying_key_from_hex(&r.public_key_hex)?,
            })
        })
        .collect()
}

fn key_set(c: &KeySetCase) -> CaseResult {
    let bytes = unhex("document_hex", &c.document_hex)?;
    if c.document.get().as_bytes() != bytes.as_slice() {
        return Err(format!(
            "{}: `document` differs from `document_hex`",
            c.name
        ));
    }
    let pinned = root_keys(&c.pinned_roots)?;
    let roots = PinnedRoots::new(pinned).with_test_root_if_local(&c.server_host, c.trust_test_root);
    #[derive(Debug)]
    enum Either {
        Set(outpost_core::keyset::KeySetError),
        Key(outpost_core::keyset::KeyError),
    }
    let outcome = KeySet::from_document(&bytes, &roots)
        .map_err(Either::Set)
        .and_then(|set| {
            for l in &c.lookups {
                set.key_for(&l.kid, UnixTime(l.now)).map_err(Either::Key)?;
            }
            Ok(set)
        });
    let code = |e: &Either| match e {
        Either::Set(e) => e.code(),
        Either::Key(e) => e.code(),
    };
    let Some(set) = expect(&c.name, c.valid, &c.error, outcome, code)? else {
        return Ok(());
    };
    let expected = c.expected_keys.as_deref().unwrap_or_default();
    let got: Vec<(String, String, u64, u64)> = set
        .keys()
        .iter()
        .map(|k| {
            (
                k.kid.clone(),
                hex::encode(k.public_key.as_bytes()),
                k.not_before.0,
                k.not_after.0,
            )
        })
        .collect();
    let want: Vec<(String, String, u64, u64)> = expected
        .iter()
        .map(|k| {
            (
                k.kid.clone(),
                k.public_key_hex.clone(),
                k.not_before,
                k.not_after,
            )
        })
        .collect();
    if got != want {
        return Err(format!("{}: keys differ: {got:?} vs {want:?}", c.name));
    }
    // Reproduce the document from its keys with the root's seed.
    let root = signer_from_hex(set.root(), &c.signing_root_secret_key_hex)?;
    let resigned =
        KeySet::sign_document(set.version(), set.keys(), &root).map_err(|e| e.to_string())?;
    if resigned != bytes {
        return Err(format!(
            "{}: re-signing does not reproduce the document",
            c.name
        ));
    }
    Ok(())
}

fn http_signature(c: &HttpSignatureCase) -> CaseResult {
    let req = HttpRequest {
        method: c.request.method.clone(),
        url: c.request.url.clone(),
        headers: c.request.headers.clone(),
        body: c.request.body.clone().into_bytes(),
    };
    let key = verifying_key_from_hex(&c.public_key_hex)?;
    let keyid = c.keyid.clone();
    let lookup = move |kid: &str| -> Option<VerifyingKey> { (kid == keyid).then_some(key) };
    let profile = match c.profile.as_str() {
        "rfc9421" => Profile::rfc9421(),
        "outpost" => Profile::outpost(),
        other => return Err(format!("{}: unknown profile {other:?}", c.name)),
    };
    let outcome = verify_signature(&req, &c.label, &lookup, &profile)
        .map_err(|e| e.code())
        .and_then(|v| {
            if c.profile == "outpost" {
                let mut guard = ReplayGuard::new(ReplayPolicy::default());
                for s in &c.seen_nonces {
                    guard
                        .check(
                            &s.keyid,
                            &s.nonce,
                            UnixTime(s.created),
                            None,
                            UnixTime(s.created),
                        )
                        .map_err(|e| e.code())?;
                }
                guard
                    .check_request(&v, UnixTime(c.now))
                    .map_err(|e| e.code())?;
            }
            Ok(v)
        });
    let Some(verified) = expect(&c.name, c.valid, &c.error, outcome, |e| e)? else {
        return Ok(());
    };
    if Some(&verified.signature_base) != c.signature_base.as_ref() {
        return Err(format!(
            "{}: signature base differs:\n{}",
            c.name, verified.signature_base
        ));
    }
    // Signing the same request again with the seed reproduces the Signature field.
    let mut unsigned = req.clone();
    unsigned.headers.retain(|(n, _)| {
        !n.eq_ignore_ascii_case("signature") && !n.eq_ignore_ascii_case("signature-input")
    });
    let signer = signer_from_hex(&c.keyid, &c.secret_key_hex)?;
    sign_request(&mut unsigned, &c.label, &verified.params, &signer).map_err(|e| e.to_string())?;
    if unsigned.header("signature") != req.header("signature") {
        return Err(format!(
            "{}: re-signing does not reproduce `Signature`",
            c.name
        ));
    }
    Ok(())
}

fn digest(c: &ContentDigestCase) -> CaseResult {
    let outcome = check_content_digest(&c.header, c.body.as_bytes());
    if expect(&c.name, c.valid, &c.error, outcome, |e| e.code())?.is_none() {
        return Ok(());
    }
    let algorithms: Vec<DigestAlgorithm> = c
        .header
        .split(", ")
        .filter_map(|m| match m.split_once('=').map(|(k, _)| k) {
            Some("sha-256") => Some(DigestAlgorithm::Sha256),
            Some("sha-512") => Some(DigestAlgorithm::Sha512),
            _ => None,
        })
        .collect();
    if content_digest(c.body.as_bytes(), &algorithms) != c.header {
        return Err(format!(
            "{}: computing the field does not reproduce `header`",
            c.name
        ));
    }
    Ok(())
}

fn canonical(c: &CanonicalJsonCase) -> CaseResult {
    let bytes = unhex("input_hex", &c.input_hex)?;
    if let Some(raw) = &c.input
        && raw.get().as_bytes() != bytes.as_slice()
    {
        return Err(format!("{}: `input` differs from `input_hex`", c.name));
    }
    let outcome = parse_strict(&bytes);
    let Some(value) = expect(&c.name, c.valid, &c.error, outcome, |e| e.code())? else {
        return Ok(());
    };
    let value: Value = value;
    if Some(hex::encode(value.to_canonical())) != c.canonical_hex {
        return Err(format!("{}: canonical form differs", c.name));
    }
    Ok(())
}

fn terminal(c: &TerminalCase) -> CaseResult {
    let bytes = unhex("input_hex", &c.input_hex)?;
    if let Some(raw) = &c.input
        && raw.get().as_bytes() != bytes.as_slice()
    {
        return Err(format!("{}: `input` differs from `input_hex`", c.name));
    }
    match c.form.as_str() {
        "pty_output" => {
            let outcome = PtyOutputFrame::decode(&bytes);
            let Some(frame) = expect(&c.name, c.valid, &c.error, outcome, |e| e.code())? else {
                return Ok(());
            };
            if Some(frame.pty_id) != c.pty_id.as_deref()
                || Some(hex::encode(frame.data)) != c.data_hex
            {
                return Err(format!("{}: read as {frame:?}", c.name));
            }
            if frame.encode() != Some(bytes.clone()) {
                return Err(format!("{}: written back differently", c.name));
            }
            Ok(())
        }
        "viewer_control" => {
            let outcome = std::str::from_utf8(&bytes)
                .map_err(|e| e.to_string())
                .and_then(ViewerControl::from_text);
            let invalid = |_: &String| "invalid_message";
            let Some(control) = expect(&c.name, c.valid, &c.error, outcome, invalid)? else {
                return Ok(());
            };
            let expected = match (c.cols, c.rows, c.close) {
                (Some(cols), Some(rows), None) => ViewerControl::Resize { cols, rows },
                (None, None, Some(true)) => ViewerControl::Close,
                _ => return Err(format!("{}: no expected control", c.name)),
            };
            if control != expected {
                return Err(format!("{}: read as {control:?}", c.name));
            }
            Ok(())
        }
        other => Err(format!("{}: unknown form {other:?}", c.name)),
    }
}

/// Drives outpost-core's daemon through a case's steps and compares each answer.
fn daemon_runs(c: &DaemonRunsCase) -> CaseResult {
    use outpost_core::daemon::{Command, Daemon, DaemonConfig, Input, Output};
    use outpost_core::time::{Instant, Now};
    use outpost_core::wire::{Environment, RunResult, RunStatus, Timing};

    let pinned = root_keys(&c.pinned_roots)?;
    let roots = PinnedRoots::new(pinned);
    let read_set = |hex_text: &str| -> Result<KeySet, String> {
        KeySet::from_document(&unhex("key_set_hex", hex_text)?, &roots)
            .map_err(|e| format!("{}: a key set does not read: {e}", c.name))
    };
    let now = Now {
        instant: Instant::from_origin(std::time::Duration::from_secs(1)),
        wall: UnixTime(c.now),
    };
    let config = DaemonConfig {
        environments: vec![Environment::Shell],
        ..DaemonConfig::default()
    };
    let mut daemon = Daemon::new(config, read_set(&c.key_set_hex)?, now);
    let drain = |daemon: &mut Daemon| -> Vec<Output> {
        let mut out = Vec::new();
        loop {
            match daemon.poll_output() {
                Output::Wait { .. } => return out,
                o => out.push(o),
            }
        }
    };
    drain(&mut daemon);
    let feed = |daemon: &mut Daemon, input: Input| -> Result<Vec<Output>, String> {
        daemon
            .handle_input(now, input)
            .map_err(|e| format!("{}: the daemon refused an input: {e}", c.name))?;
        Ok(drain(daemon))
    };
    feed(
        &mut daemon,
        Input::Connected {
            session_id: c.session_id.clone(),
        },
    )?;
    for (i, step) in c.steps.iter().enumerate() {
        let got = match step.input.as_str() {
            "key_set" => {
                let set = read_set(step.hex.as_deref().unwrap_or_default())?;
                let offered = set.clone();
                feed(&mut daemon, Input::KeysUpdated(set))?;
                if daemon.key_set() == &offered {
                    "taken".to_owned()
                } else {
                    "kept".to_owned()
                }
            }
            "frame" => {
                let bytes = unhex("hex", step.hex.as_deref().unwrap_or_default())?;
                if step
                    .frame
                    .as_ref()
                    .is_some_and(|f| f.get().as_bytes() != bytes)
                {
                    return Err(format!("{}: step {i}: `frame` differs from `hex`", c.name));
                }
                answer(&feed(&mut daemon, Input::Frame(bytes))?)
            }
            "run_finished" => {
                let result = RunResult {
                    status: RunStatus::Exited,
                    exit_code: Some(0),
                    signal: None,
                    stdout: "hi\n".into(),
                    stderr: String::new(),
                    truncated: false,
                    timing: Timing::default(),
                    error: None,
                    egress_denied: Vec::new(),
                };
                let run_id = step.run_id.clone().unwrap_or_default();
                answer(&feed(
                    &mut daemon,
                    Input::RunFinished {
                        run_id: run_id.into(),
                        result,
                    },
                )?)
            }
            other => return Err(format!("{}: step {i}: unknown input {other:?}", c.name)),
        };
        if got != step.expect {
            return Err(format!(
                "{}: step {i} ({}): answered {got}, expected {}",
                c.name, step.input, step.expect
            ));
        }
    }
    return Ok(());

    /// What the daemon did about one input, in the vectors' words.
    fn answer(outputs: &[Output]) -> String {
        for o in outputs {
            if let Output::Close { code, reason } = o {
                return format!("close:{code}:{reason}");
            }
        }
        if outputs
            .iter()
            .any(|o| matches!(o, Output::Command(Command::Execute(_))))
        {
            return "execute".to_owned();
        }
        for o in outputs {
            if let Output::Transmit(bytes) = o {
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) else {
                    continue;
                };
                let kind = v["type"].as_str().unwrap_or_default();
                return match v["code"].as_str() {
                    Some(code) if kind == "run.reject" => format!("{kind}:{code}"),
                    _ => kind.to_owned(),
                };
            }
        }
        "nothing".to_owned()
    }
}
