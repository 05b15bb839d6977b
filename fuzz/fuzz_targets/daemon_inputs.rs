//! Arbitrary input sequences to the daemon: raw bytes, validly signed frames with arbitrary
//! fields (terminal input and `wait.*` included), time jumps, disconnects, finishes and check
//! outcomes, operators' requests from afar and pauses. Nothing may panic; the daemon never
//! executes a run that a verified `run.commit` did not start, never takes a run while paused,
//! never holds more slots than it has, never runs two checks of one wait at once, and stops
//! for good after `revoked`.
#![no_main]

use std::collections::BTreeMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use outpost_core::daemon::{Command, Daemon, DaemonConfig, Input, Output};
use outpost_core::keyset::test_root;
use outpost_core::sign::FrameSigner;
use outpost_core::sim::{now_at, test_keys};
use outpost_core::wait::CheckOutcome;
use outpost_core::wire::{
    CapabilitySource, CommandsGrant, Egress, Environment, Grant, GrantLimits, RunResult, RunStatus,
    ServerFrame, Timing,
};

#[derive(Arbitrary, Debug)]
enum Step {
    Raw(Vec<u8>),
    Welcome {
        version: u8,
        slots: u8,
        heartbeat: u8,
    },
    Request {
        run: u8,
        wasm: bool,
        timeout_ms: u32,
    },
    Commit {
        run: u8,
    },
    Cancel {
        run: u8,
    },
    Ack {
        run: u8,
    },
    Revoked,
    PtyInput {
        data: String,
    },
    SkipSeq,
    Finish {
        run: u8,
        exit: i8,
    },
    Advance {
        millis: u32,
    },
    Connect,
    Disconnect {
        code: Option<u16>,
    },
    Drain,
    WaitRegister {
        wait: u8,
        interval_s: u8,
        operator: bool,
    },
    WaitCancel {
        wait: u8,
    },
    WaitAck {
        wait: u8,
    },
    WaitChecked {
        wait: u8,
        matched: bool,
    },
    Control {
        action: u8,
        lines: u8,
    },
    Pause,
    Resume,
    Answered {
        control: u8,
    },
}

const ACTIONS: [&str; 6] = ["pause", "resume", "restart", "update", "logs", "shutdown"];

fn grant(slots: u8) -> Grant {
    Grant {
        fs: Vec::new(),
        egress: Egress::None,
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits {
            max_concurrent: u32::from(slots % 10),
        },
        environments: None,
    }
}

fuzz_target!(|steps: Vec<Step>| {
    let mut elapsed = Duration::ZERO;
    let config = DaemonConfig {
        max_concurrent: 3,
        ..DaemonConfig::default()
    };
    let mut d = Daemon::new(config, test_keys(), now_at(elapsed));
    let key = test_root::frame_signer();
    let mut signer = FrameSigner::new("sess_fuzz");
    let mut committed: Vec<String> = Vec::new();
    let mut stopped_forever = false;
    let mut checks: BTreeMap<String, u64> = BTreeMap::new();
    let mut paused = false;
    for step in steps.into_iter().take(200) {
        let sign = |f: ServerFrame, s: &mut FrameSigner| s.sign(&f, &key).unwrap_or_default();
        let input = match step {
            Step::Raw(bytes) => Input::Frame(bytes),
            Step::Welcome {
                version,
                slots,
                heartbeat,
            } => Input::Frame(sign(
                ServerFrame::Welcome {
                    context_id: "ec".into(),
                    protocol: u32::from(version % 3),
                    grant_version: u64::from(version),
                    grant: grant(slots),
                    heartbeat_secs: u32::from(heartbeat),
                    features: Vec::new(),
                },
                &mut signer,
            )),
            Step::Request {
                run,
                wasm,
                timeout_ms,
            } => Input::Frame(sign(
                ServerFrame::RunRequest {
                    run_id: format!("r{}", run % 8).into(),
                    environment: if wasm {
                        Environment::Wasm
                    } else {
                        Environment::Shell
                    },
                    capability: CapabilitySource::Inline {
                        manifest: String::new(),
                        files: Vec::new(),
                    },
                    timeout_ms: u64::from(timeout_ms),
                    shared_run: false,
                    requester: "ada".into(),
                },
                &mut signer,
            )),
            Step::Commit { run } => {
                let run_id = format!("r{}", run % 8);
                committed.push(run_id.clone());
                Input::Frame(sign(
                    ServerFrame::RunCommit {
                        run_id: run_id.into(),
                    },
                    &mut signer,
                ))
            }
            Step::Cancel { run } => Input::Frame(sign(
                ServerFrame::RunCancel {
                    run_id: format!("r{}", run % 8).into(),
                    reason: "x".into(),
                },
                &mut signer,
            )),
            Step::Ack { run } => Input::Frame(sign(
                ServerFrame::RunAck {
                    run_id: format!("r{}", run % 8).into(),
                },
                &mut signer,
            )),
            Step::Revoked => Input::Frame(sign(
                ServerFrame::Revoked { reason: "x".into() },
                &mut signer,
            )),
            Step::PtyInput { data } => Input::Frame(sign(
                ServerFrame::PtyInput {
                    pty_id: "t".into(),
                    data,
                },
                &mut signer,
            )),
            Step::SkipSeq => {
                let _ = signer.sign(&ServerFrame::RunAck { run_id: "x".into() }, &key);
                continue;
            }
            Step::Finish { run, exit } => Input::RunFinished {
                run_id: format!("r{}", run % 8).into(),
                result: RunResult {
                    status: RunStatus::Exited,
                    exit_code: Some(i32::from(exit)),
                    signal: None,
                    stdout: String::new(),
                    stderr: String::new(),
                    truncated: false,
                    timing: Timing::default(),
                    error: None,
                    egress_denied: Vec::new(),
                },
            },
            Step::Advance { millis } => {
                elapsed += Duration::from_millis(u64::from(millis));
                Input::Timeout
            }
            Step::Connect => {
                signer = FrameSigner::new("sess_fuzz");
                Input::Connected {
                    session_id: "sess_fuzz".into(),
                }
            }
            Step::Disconnect { code } => Input::Disconnected { code },
            Step::Drain => Input::Drain,
            Step::WaitRegister {
                wait,
                interval_s,
                operator,
            } => Input::Frame(sign(
                ServerFrame::WaitRegister {
                    wait_id: format!("w{}", wait % 4).into(),
                    requester: "ada".into(),
                    source: "async () => false".into(),
                    interval_ms: u64::from(interval_s) * 1000,
                    expires_at_ms: None,
                    operator,
                },
                &mut signer,
            )),
            Step::WaitCancel { wait } => Input::Frame(sign(
                ServerFrame::WaitCancel {
                    wait_id: format!("w{}", wait % 4).into(),
                },
                &mut signer,
            )),
            Step::WaitAck { wait } => Input::Frame(sign(
                ServerFrame::WaitAck {
                    wait_id: format!("w{}", wait % 4).into(),
                },
                &mut signer,
            )),
            Step::Control { action, lines } => Input::Frame(sign(
                ServerFrame::ControlRequest {
                    control_id: format!("ctl_{action}"),
                    action: ACTIONS[usize::from(action) % ACTIONS.len()].into(),
                    lines: u32::from(lines),
                },
                &mut signer,
            )),
            Step::Pause => {
                paused = true;
                Input::Pause
            }
            Step::Resume => {
                paused = false;
                Input::Resume
            }
            Step::Answered { control } => {
                Input::ControlAnswered(outpost_core::wire::DaemonFrame::ControlResult {
                    control_id: format!("ctl_{control}"),
                    action: "logs".into(),
                    outcome: outpost_core::wire::ControlOutcome::Done,
                    code: String::new(),
                    message: "done".into(),
                    lines: vec!["a line".into()],
                })
            }
            Step::WaitChecked { wait, matched } => {
                let wait_id = format!("w{}", wait % 4);
                let Some(check) = checks.remove(&wait_id) else {
                    continue;
                };
                let outcome = if matched {
                    CheckOutcome::Matched {
                        resume_text: "up".into(),
                        payload: None,
                        evidence: "[]".into(),
                    }
                } else {
                    CheckOutcome::NotYet
                };
                Input::WaitChecked {
                    wait_id: wait_id.into(),
                    check,
                    outcome,
                }
            }
        };
        if d.handle_input(now_at(elapsed), input).is_err() {
            return;
        }
        loop {
            match d.poll_output() {
                Output::Wait { .. } => break,
                Output::Command(Command::Execute(e)) => {
                    assert!(!stopped_forever, "executed after stopping for good");
                    assert!(
                        committed.iter().any(|r| *r == e.run_id.as_str()),
                        "executed {} without a commit",
                        e.run_id
                    );
                }
                Output::Command(Command::Stop { forever }) => stopped_forever |= forever,
                Output::Transmit(bytes) if paused => {
                    let text = String::from_utf8_lossy(&bytes);
                    assert!(
                        !text.contains("\"type\":\"run.accept\""),
                        "took a run while paused: {text}"
                    );
                }
                Output::Command(Command::CheckWait { wait_id, check, .. }) => {
                    assert!(
                        checks.insert(wait_id.to_string(), check).is_none(),
                        "two checks of {wait_id} at once"
                    );
                }
                _ => {}
            }
        }
        assert!(d.slots_used() <= 8);
        assert!(d.executing().len() <= 3);
    }
});
