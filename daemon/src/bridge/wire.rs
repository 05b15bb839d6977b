//! The bridge's two JSON lines as types: what a run asks ([`BridgeRequest`]) and what the
//! daemon answers ([`BridgeAnswer`]). The daemon's bridge reads and writes them, and
//! `outpost command` (the client) builds and reads the same ones; `docs/PROTOCOL.md` spells the
//! lines for a client in another language.
//!
//! This module owns the shapes only; it never decides what a request may do.

use std::collections::BTreeMap;
use std::path::PathBuf;

use outpost_core::executor::{Ending, Outcome};
use outpost_core::wire::ErrorBody;
use serde::{Deserialize, Serialize};

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BridgeOp {
    /// Run a command and wait for it (at most the run's own time budget).
    Run,
    /// Start a background job that outlives the run.
    Start,
    /// A job's output so far, or how it ended.
    Poll,
    /// Kill a job's whole process group.
    Kill,
}

impl BridgeOp {
    /// The op as the request line spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Start => "start",
            Self::Poll => "poll",
            Self::Kill => "kill",
        }
    }
}

/// One request line. `run` and `start` need `argv` (and may give `cwd`, `env`, and for
/// `run` `timeoutMs`); `poll` and `kill` need `jobId`. A field the bridge does not know is
/// refused `invalid_request`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BridgeRequest {
    /// What is asked.
    pub op: BridgeOp,
    /// The program and its arguments, run with no shell.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// Where the command runs; absent: the daemon's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Variables to set (only their names reach the audit log).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// A foreground command's own limit, capped by the run's time left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The job `start` answered with, for `poll` and `kill`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
}

impl BridgeRequest {
    /// A `run` or `start` of `argv` with nothing else set.
    pub fn command(op: BridgeOp, argv: Vec<String>) -> Self {
        Self {
            op,
            argv,
            cwd: None,
            env: BTreeMap::new(),
            timeout_ms: None,
            job_id: None,
        }
    }

    /// A `poll` or `kill` of job `job_id`.
    pub fn job(op: BridgeOp, job_id: u64) -> Self {
        Self {
            job_id: Some(job_id),
            ..Self::command(op, Vec::new())
        }
    }
}

/// How a command or job ended, as the answer's `status` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BridgeEnding {
    /// It exited on its own (`exitCode`) or by a signal (`signal`).
    Exited,
    /// It outlived its limit and was stopped.
    TimedOut,
    /// It was killed (`kill`, a switch turned off, a revoke, a shutdown).
    Killed,
}

impl BridgeEnding {
    /// The status as the answer spells it (`exited`, `timed_out`, `killed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exited => "exited",
            Self::TimedOut => "timed_out",
            Self::Killed => "killed",
        }
    }
}

impl From<Ending> for BridgeEnding {
    fn from(ending: Ending) -> Self {
        match ending {
            Ending::Exited => Self::Exited,
            Ending::TimedOut => Self::TimedOut,
            Ending::Cancelled => Self::Killed,
        }
    }
}

/// How a command ended, in an answer: always with its `exitCode` and `signal` (null when
/// it has none) and whether its output was cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeEnded {
    /// How it ended.
    pub status: BridgeEnding,
    /// Its exit code when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Output was cut at the cap.
    pub truncated: bool,
}

/// One answer line: `ok` with what was asked for, or `ok: false` with the refusal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeAnswer {
    /// Whether the request was carried out.
    pub ok: bool,
    /// Why not (`commands_off`, the hops' codes, `command_not_found`, `invalid_request`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// The server's id of a command `run` or `start` asked for (its audit rows name it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    /// The job a `start` began, or the one `poll` and `kill` looked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
    /// Whether the job still runs (absent from `start` and refusals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// Its standard output as UTF-8 text (invalid bytes replaced): all of it when it ended,
    /// so far while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// Its standard error, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// How it ended, once it has.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub ended: Option<BridgeEnded>,
}

impl BridgeAnswer {
    /// A refusal with `code` and `message`.
    pub fn refused(code: &str, message: impl Into<String>) -> Self {
        Self {
            error: Some(ErrorBody {
                code: code.to_owned(),
                message: message.into(),
            }),
            ..Self::default()
        }
    }

    /// A command that ended with `outcome`.
    pub fn finished(outcome: &Outcome) -> Self {
        Self {
            ok: true,
            running: Some(false),
            stdout: Some(text(&outcome.stdout)),
            stderr: Some(text(&outcome.stderr)),
            ended: Some(BridgeEnded {
                status: outcome.ending.into(),
                exit_code: outcome.exit_code,
                signal: outcome.signal,
                truncated: outcome.truncated,
            }),
            ..Self::default()
        }
    }

    /// A job still running, with its output so far.
    pub fn running(job_id: u64, stdout: &[u8], stderr: &[u8]) -> Self {
        Self {
            ok: true,
            job_id: Some(job_id),
            running: Some(true),
            stdout: Some(text(stdout)),
            stderr: Some(text(stderr)),
            ..Self::default()
        }
    }

    /// The exit code `outpost command run` ends with for this answer: the command's own,
    /// 124 when it timed out, 128+N when signal N ended it, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match &self.ended {
            Some(e) if e.status == BridgeEnding::TimedOut => 124,
            Some(BridgeEnded {
                exit_code: Some(code),
                ..
            }) => *code,
            Some(BridgeEnded {
                signal: Some(signal),
                ..
            }) => 128 + signal,
            _ => 1,
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_read_as_the_protocol_spells_them() {
        let request: BridgeRequest = serde_json::from_str(
            r#"{"op":"run","argv":["ls","-l"],"env":{"A":"1"},"timeoutMs":500}"#,
        )
        .unwrap();
        assert_eq!(request.op, BridgeOp::Run);
        assert_eq!(request.timeout_ms, Some(500));
        let poll = BridgeRequest::job(BridgeOp::Poll, 3);
        assert_eq!(
            serde_json::to_string(&poll).unwrap(),
            r#"{"op":"poll","jobId":3}"#
        );
        let unknown = serde_json::from_str::<BridgeRequest>(r#"{"op":"poll","jobId":1,"x":1}"#);
        assert!(unknown.is_err(), "an unknown field is refused");
        let op = serde_json::from_str::<BridgeRequest>(r#"{"op":"rm"}"#);
        assert!(op.unwrap_err().to_string().contains("unknown variant"));
        for ending in [
            BridgeEnding::Exited,
            BridgeEnding::TimedOut,
            BridgeEnding::Killed,
        ] {
            assert_eq!(serde_json::to_value(ending).unwrap(), ending.as_str());
        }
    }

    #[test]
    fn a_finished_answer_always_carries_its_exit_code_and_signal() {
        let outcome = Outcome {
            ending: Ending::Cancelled,
            exit_code: None,
            signal: Some(9),
            stdout: b"out".to_vec(),
            stderr: Vec::new(),
            truncated: false,
            setup: std::time::Duration::ZERO,
            execute: std::time::Duration::ZERO,
            egress_denied: Vec::new(),
        };
        let mut answer = BridgeAnswer::finished(&outcome);
        answer.job_id = Some(4);
        let value: serde_json::Value = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"ok": true, "jobId": 4, "running": false, "status": "killed",
                "exitCode": null, "signal": 9, "stdout": "out", "stderr": "", "truncated": false})
        );
        let back: BridgeAnswer = serde_json::from_value(value).unwrap();
        assert_eq!(back, answer);
        assert_eq!(back.exit_code(), 137);
    }

    #[test]
    fn answers_without_an_end_read_back_without_one() {
        for answer in [
            BridgeAnswer::running(2, b"so far", b""),
            BridgeAnswer::refused("commands_off", "the owner turned host commands off"),
            BridgeAnswer {
                ok: true,
                command_id: Some("cmd_1".into()),
                job_id: Some(1),
                ..BridgeAnswer::default()
            },
        ] {
            let line = serde_json::to_string(&answer).unwrap();
            assert!(!line.contains("exitCode"), "{line}");
            let back: BridgeAnswer = serde_json::from_str(&line).unwrap();
            assert_eq!(back, answer, "{line}");
        }
        let timed_out = BridgeAnswer {
            ended: Some(BridgeEnded {
                status: BridgeEnding::TimedOut,
                exit_code: None,
                signal: Some(15),
                truncated: false,
            }),
            ..BridgeAnswer::default()
        };
        assert_eq!(timed_out.exit_code(), 124);
    }
}
