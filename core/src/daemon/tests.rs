//! The daemon machine on its own: a test plays the server by signing frames with the test
//! key, and reads every output.

use std::time::Duration;

use super::*;
use crate::keyset::test_root;
use crate::sign::{Ed25519Signer, FrameSigner};
use crate::sim::{now_at, test_keys};
use crate::wire::{
    CommandsGrant, Egress, GrantLimits, InlineFile, RunStatus, ServerFrame, Timing, close_code,
};

const SESSION: &str = "sess_unit";

struct Server {
    daemon: Daemon,
    frames: FrameSigner,
    key: Ed25519Signer,
    elapsed: Duration,
}

fn grant(max_concurrent: u32) -> Grant {
    Grant {
        fs: Vec::new(),
        egress: Egress::None,
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits { max_concurrent },
        environments: None,
    }
}

fn inline() -> CapabilitySource {
    CapabilitySource::Inline {
        manifest: "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n".into(),
        files: vec![InlineFile {
            path: "run.sh".into(),
            content_b64: crate::b64::encode(b"true\n"),
        }],
    }
}

fn exited(code: i32, setup_ms: u64) -> RunResult {
    RunResult {
        status: RunStatus::Exited,
        exit_code: Some(code),
        signal: None,
        stdout: "out".into(),
        stderr: String::new(),
        truncated: false,
        timing: Timing {
            setup_ms,
            execute_ms: 7,
            ..Timing::default()
        },
        error: None,
        egress_denied: Vec::new(),
    }
}

impl Server {
    /// A daemon holding `slots` runs, connected and past `welcome`.
    fn ready(slots: u32) -> Self {
        Self::ready_with(slots, vec![crate::wire::FEATURE_RUN_OUTPUT.into()])
    }

    /// Ready with a server whose `welcome` lists no features.
    fn ready_without_live_output() -> Self {
        Self::ready_with(2, Vec::new())
    }

    fn ready_with(slots: u32, features: Vec<String>) -> Self {
        let config = DaemonConfig {
            max_concurrent: slots,
            ..DaemonConfig::default()
        };
        let daemon = Daemon::new(config, test_keys(), now_at(Duration::ZERO));
        let mut s = Self {
            daemon,
            frames: FrameSigner::new(SESSION),
            key: test_root::frame_signer(),
            elapsed: Duration::ZERO,
        };
        assert_eq!(s.drain(), vec![Output::Command(Command::Connect)]);
        s.input(Input::Connected {
            session_id: SESSION.into(),
        });
        s.send(ServerFrame::Welcome {
            context_id: "ec_unit".into(),
            protocol: crate::wire::PROTOCOL_VERSION,
            grant_version: 1,
            grant: grant(8),
            heartbeat_secs: 15,
            features,
        });
        assert!(s.daemon.is_ready());
        s
    }

    fn input(&mut self, input: Input) -> Vec<Output> {
        self.daemon
            .handle_input(now_at(self.elapsed), input)
            .expect("the test never misuses the API");
        self.drain()
    }

    fn send(&mut self, frame: ServerFrame) -> Vec<Output> {
        let bytes = self.frames.sign(&frame, &self.key).unwrap();
        self.input(Input::Frame(bytes))
    }

    fn drain(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        loop {
            match self.daemon.poll_output() {
                Output::Wait { .. } => return out,
                o => out.push(o),
            }
        }
    }

    fn request(&mut self, run_id: &str) -> Vec<Output> {
        self.send(ServerFrame::RunRequest {
            run_id: run_id.into(),
            environment: Environment::Shell,
            capability: inline(),
            timeout_ms: 10_000,
            shared_run: false,
            requester: "ada".into(),
        })
    }

    fn advance(&mut self, d: Duration) -> Vec<Output> {
        self.elapsed += d;
        self.input(Input::Timeout)
    }
}

/// The `type` of each transmitted frame, in order.
fn sent(outputs: &[Output]) -> Vec<String> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Transmit(bytes) => {
                let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
                Some(v["type"].as_str().unwrap().to_owned())
            }
            _ => None,
        })
        .collect()
}

fn stops(outputs: &[Output]) -> Vec<bool> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Command(Command::Stop { forever }) => Some(*forever),
            _ => None,
        })
        .collect()
}

#[test]
fn accepted_runs_hold_slots_until_their_result_and_the_rest_are_busy() {
    let mut s = Server::ready(2);
    assert_eq!(sent(&s.request("a")), ["run.accept"]);
    assert_eq!(sent(&s.request("b")), ["run.accept"]);
    assert_eq!(
        s.daemon.slots_used(),
        2,
        "accepted, uncommitted runs hold slots"
    );
    let out = s.request("c");
    assert_eq!(sent(&out), ["run.reject"]);
    assert!(out.contains(&Output::Event(Event::RunRejected {
        run_id: "c".into(),
        refusal: Refusal::Busy,
    })));
    let out = s.send(ServerFrame::RunCommit { run_id: "a".into() });
    assert!(
        matches!(&out[..], [
            Output::Persist(r),
            Output::Command(Command::Execute(e)),
        ] if e.run_id == "a" && matches!(&r.change, DaemonChange::RunStarted { run_id } if run_id == "a")),
        "the start is journaled before the run is executed: {out:?}"
    );
    assert_eq!(s.daemon.executing(), ["a"]);
    let out = s.input(Input::RunFinished {
        run_id: "a".into(),
        result: exited(0, 3),
    });
    assert_eq!(sent(&out), ["run.result"]);
    assert_eq!(s.daemon.slots_used(), 1, "the result freed a's slot");
    assert_eq!(sent(&s.request("c")), ["run.accept"]);
}

#[test]
fn a_result_keeps_the_executor_s_times_adds_the_daemon_s_and_waits_for_its_ack() {
    let mut s = Server::ready(2);
    s.request("r1");
    s.advance(Duration::from_millis(40));
    s.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    s.advance(Duration::from_millis(100));
    let out = s.input(Input::RunFinished {
        run_id: "r1".into(),
        result: exited(3, 11),
    });
    let [Output::Persist(record), Output::Transmit(bytes)] = &out[..] else {
        panic!("expected the result journaled, then one run.result, got {out:?}");
    };
    assert!(
        matches!(&record.change, DaemonChange::ResultPending { run_id, .. } if run_id == "r1"),
        "the outbox gets the result before it is sent: {record:?}"
    );
    let Ok(crate::wire::DaemonFrame::RunResult { run_id, result }) =
        crate::wire::DaemonFrame::from_json(bytes)
    else {
        panic!("not a run.result");
    };
    assert_eq!(run_id, "r1");
    assert_eq!((result.exit_code, result.stdout.as_str()), (Some(3), "out"));
    assert_eq!(
        result.timing,
        Timing {
            queue_ms: 40,
            setup_ms: 11,
            execute_ms: 7,
            daemon_ms: 100,
            server_ms: None,
            transit_ms: None,
        }
    );
    assert_eq!(
        s.daemon.pending_results().len(),
        1,
        "held until acknowledged"
    );
    let out = s.send(ServerFrame::RunAck {
        run_id: "r1".into(),
    });
    assert!(
        matches!(&out[..], [
            Output::Persist(r),
            Output::Event(Event::ResultDelivered { run_id }),
        ] if run_id == "r1" && matches!(&r.change, DaemonChange::ResultRemoved { run_id } if run_id == "r1")),
        "the ack takes the result out of the outbox: {out:?}"
    );
    assert!(s.daemon.pending_results().is_empty());
}

#[test]
fn replaced_and_revoked_closes_stop_the_daemon_for_good() {
    for code in [close_code::REPLACED, close_code::REVOKED] {
        let mut s = Server::ready(2);
        s.request("r1");
        s.send(ServerFrame::RunCommit {
            run_id: "r1".into(),
        });
        let out = s.input(Input::Disconnected { code: Some(code) });
        assert!(out.contains(&Output::Command(Command::Cancel {
            run_id: "r1".into(),
            reason: "revoked".into(),
        })));
        assert_eq!(stops(&out), [true], "close {code}");
        assert!(s.daemon.is_stopped());
        let later = s.advance(Duration::from_secs(24 * 3600));
        assert!(
            later.is_empty(),
            "a stopped daemon never reconnects: {later:?}"
        );
    }
}

#[test]
fn other_closes_reconnect_with_backoff() {
    for code in [
        None,
        Some(close_code::GOING_AWAY),
        Some(close_code::INTERNAL_ERROR),
    ] {
        let mut s = Server::ready(2);
        let out = s.input(Input::Disconnected { code });
        assert!(stops(&out).is_empty());
        let [Output::Event(Event::Disconnected { retry_at })] = out[..] else {
            panic!("expected a scheduled reconnect, got {out:?}");
        };
        s.elapsed = retry_at.since_origin();
        assert_eq!(s.input(Input::Timeout), [Output::Command(Command::Connect)]);
    }
}

#[test]
fn time_going_backwards_is_an_error_and_changes_nothing() {
    let mut s = Server::ready(2);
    s.advance(Duration::from_secs(5));
    let before = now_at(Duration::from_secs(4));
    assert_eq!(
        s.daemon.handle_input(before, Input::Drain),
        Err(DaemonError::TimeWentBackwards)
    );
    assert!(s.drain().is_empty(), "the refused input did nothing");
    assert!(!s.daemon.is_stopped());
}

#[test]
fn a_host_that_does_not_drain_is_refused_until_it_does() {
    let mut s = Server::ready(2);
    let now = now_at(s.elapsed);
    let mut accepted = 0;
    let refused = loop {
        // Each one queues a `capabilities.update`.
        match s
            .daemon
            .handle_input(now, Input::EnvironmentsChanged(vec![Environment::Shell]))
        {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted <= MAX_QUEUED_OUTPUTS + 1, "the queue is unbounded");
    };
    assert_eq!(refused, DaemonError::OutputBacklog);
    assert_eq!(accepted, MAX_QUEUED_OUTPUTS + 1);
    assert_eq!(s.drain().len(), MAX_QUEUED_OUTPUTS + 1);
    assert!(
        s.daemon
            .handle_input(now, Input::EnvironmentsChanged(vec![]))
            .is_ok()
    );
}

#[test]
fn a_finished_host_command_is_sent_while_ready_and_dropped_otherwise() {
    let finished = || Input::CommandFinished {
        command_id: "cmd_1".into(),
        run_id: "run_1".into(),
        exit_code: None,
        signal: Some(9),
        duration_ms: 12,
        reason: "killed".into(),
    };
    let mut s = Server::ready(2);
    let out = s.input(finished());
    assert_eq!(sent(&out), vec!["command.finished"]);
    let Output::Transmit(bytes) = &out[0] else {
        panic!("{out:?}")
    };
    let frame = crate::wire::DaemonFrame::from_json(bytes).unwrap();
    assert_eq!(
        frame,
        crate::wire::DaemonFrame::CommandFinished {
            command_id: "cmd_1".into(),
            run_id: "run_1".into(),
            exit_code: None,
            signal: Some(9),
            duration_ms: 12,
            reason: "killed".into(),
        }
    );
    s.input(Input::Disconnected { code: Some(1006) });
    assert!(sent(&s.input(finished())).is_empty());
}

#[test]
fn changed_features_are_announced_at_once() {
    let mut s = Server::ready(2);
    let now = now_at(s.elapsed);
    s.daemon
        .handle_input(now, Input::FeaturesChanged(vec!["fs".into()]))
        .unwrap();
    let sent: Vec<String> = s
        .drain()
        .into_iter()
        .filter_map(|o| match o {
            Output::Transmit(bytes) => Some(String::from_utf8(bytes).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].contains("\"capabilities.update\""), "{sent:?}");
    assert!(sent[0].contains("\"features\":[\"fs\"]"), "{sent:?}");
}

#[test]
fn terminal_frames_become_commands_with_decoded_bytes() {
    let mut s = Server::ready(2);
    let out = s.send(ServerFrame::PtyInput {
        pty_id: "t1".into(),
        data: crate::b64::encode(b"ls\r\x03"),
    });
    assert_eq!(
        out,
        [Output::Command(Command::PtyInput {
            pty_id: "t1".into(),
            data: b"ls\r\x03".to_vec(),
        })]
    );
    let out = s.send(ServerFrame::PtyResize {
        pty_id: "t1".into(),
        cols: 120,
        rows: 40,
    });
    assert_eq!(
        out,
        [Output::Command(Command::PtyResize {
            pty_id: "t1".into(),
            cols: 120,
            rows: 40,
        })]
    );
    let out = s.send(ServerFrame::PtyClose {
        pty_id: "t1".into(),
    });
    assert_eq!(
        out,
        [Output::Command(Command::PtyClose {
            pty_id: "t1".into()
        })]
    );
}

#[test]
fn credit_becomes_a_command_and_only_an_executing_run_s_terminal_output_is_sent() {
    let mut s = Server::ready(2);
    let out = s.send(ServerFrame::PtyCredit {
        pty_id: "r1".into(),
        bytes: 4096,
    });
    assert_eq!(
        out,
        [Output::Command(Command::PtyCredit {
            pty_id: "r1".into(),
            bytes: 4096,
        })]
    );
    let output = |s: &mut Server| {
        s.input(Input::TerminalOutput {
            run_id: "r1".into(),
            data: b"\x1b[1mhi\xff".to_vec(),
        })
    };
    assert_eq!(output(&mut s), [], "no run r1: nothing is sent");
    s.request("r1");
    assert_eq!(
        output(&mut s),
        [],
        "accepted but not committed: nothing runs yet"
    );
    s.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    let out = output(&mut s);
    let [Output::Transmit(bytes)] = &out[..] else {
        panic!("expected one pty.output, got {out:?}");
    };
    assert_eq!(
        crate::wire::PtyOutputFrame::decode(bytes).unwrap(),
        crate::wire::PtyOutputFrame {
            pty_id: "r1",
            data: b"\x1b[1mhi\xff",
        },
        "a binary pty.output: the bytes as they are"
    );
    // More than one frame holds goes out in frames of at most 64 KiB, in order.
    let big: Vec<u8> = (0..150_000u32).map(|i| (i % 251) as u8).collect();
    let out = s.input(Input::TerminalOutput {
        run_id: "r1".into(),
        data: big.clone(),
    });
    let sizes: Vec<usize> = out
        .iter()
        .map(|o| match o {
            Output::Transmit(bytes) => crate::wire::PtyOutputFrame::decode(bytes)
                .unwrap()
                .data
                .len(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sizes, [65_536, 65_536, 18_928]);
    let joined: Vec<u8> = out
        .iter()
        .flat_map(|o| match o {
            Output::Transmit(bytes) => crate::wire::PtyOutputFrame::decode(bytes)
                .unwrap()
                .data
                .to_vec(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(joined, big);
    let out = s.input(Input::TerminalExit {
        run_id: "r1".into(),
        exit_code: Some(0),
    });
    assert_eq!(sent(&out), ["pty.exit"]);
}

#[test]
fn terminal_input_that_is_not_base64url_is_a_violation() {
    let mut s = Server::ready(2);
    let out = s.send(ServerFrame::PtyInput {
        pty_id: "t1".into(),
        data: "not base64!".into(),
    });
    assert!(matches!(
        &out[0],
        Output::Event(Event::ProtocolViolation {
            code: "invalid_frame",
            ..
        })
    ));
    assert_eq!(
        out[1],
        Output::Close {
            code: close_code::PROTOCOL_ERROR,
            reason: "invalid_frame".into(),
        }
    );
    assert!(!out.iter().any(|o| matches!(o, Output::Command(_))));
    assert!(!s.daemon.is_ready());
}

#[test]
fn anything_before_welcome_is_an_unexpected_frame() {
    let mut s = Server::ready(2);
    s.input(Input::Disconnected { code: None });
    s.frames = FrameSigner::new(SESSION);
    s.input(Input::Connected {
        session_id: SESSION.into(),
    });
    let out = s.send(ServerFrame::RunAck { run_id: "x".into() });
    assert!(matches!(
        &out[0],
        Output::Event(Event::ProtocolViolation { code, .. })
            if *code == crate::wire::Violation::UnexpectedFrame.code()
    ));
    assert!(out.contains(&Output::Close {
        code: close_code::PROTOCOL_ERROR,
        reason: "unexpected_frame".into(),
    }));
}

#[test]
fn a_bundle_that_cannot_be_fetched_ends_the_run_failed_with_the_host_s_code_and_runs_nothing() {
    let mut s = Server::ready(2);
    s.send(ServerFrame::RunRequest {
        run_id: "r1".into(),
        environment: Environment::Shell,
        capability: CapabilitySource::Digest {
            sha256: "ab".repeat(32),
            size: 10,
        },
        timeout_ms: 10_000,
        shared_run: false,
        requester: String::new(),
    });
    let out = s.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Command(Command::FetchCapability { run_id, .. }) if run_id == "r1")),
        "a digest is fetched after the commit: {out:?}"
    );
    s.advance(Duration::from_millis(25));
    let out = s.input(Input::CapabilityFetchFailed {
        run_id: "r1".into(),
        error: crate::wire::ErrorBody {
            code: "bundle_unavailable".into(),
            message: "unreachable".into(),
        },
    });
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Command(Command::Execute(_)))),
        "nothing runs: {out:?}"
    );
    let result = out
        .iter()
        .find_map(|o| match o {
            Output::Transmit(bytes) => match crate::wire::DaemonFrame::from_json(bytes) {
                Ok(crate::wire::DaemonFrame::RunResult { result, .. }) => Some(result),
                _ => None,
            },
            _ => None,
        })
        .expect("a run.result");
    assert_eq!(result.status, crate::wire::RunStatus::Failed);
    assert_eq!(
        result.error.map(|e| e.code),
        Some("bundle_unavailable".to_owned())
    );
    assert_eq!(result.timing.setup_ms, 25);
    assert_eq!(s.daemon.slots_used(), 0, "the slot is free again");
}

#[test]
fn a_drain_waits_for_background_host_commands_and_reports_them_before_it_stops() {
    let mut s = Server::ready(2);
    s.input(Input::HostJobs(1));
    let out = s.input(Input::Drain);
    assert!(stops(&out).is_empty(), "a job still runs: {out:?}");
    // The job ends: its `command.finished` leaves on the open link, then the drain stops.
    let out = s.input(Input::CommandFinished {
        command_id: "cmd_1".into(),
        run_id: "r1".into(),
        exit_code: Some(0),
        signal: None,
        duration_ms: 5,
        reason: "exited".into(),
    });
    assert_eq!(sent(&out), ["command.finished"]);
    assert!(stops(&out).is_empty());
    let out = s.input(Input::HostJobs(0));
    assert_eq!(stops(&out), [false], "{out:?}");
}

#[test]
fn a_result_whose_output_escapes_past_the_message_limit_is_cut_to_fit() {
    let mut s = Server::ready(2);
    s.request("r1");
    s.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    // 1 MiB of NUL bytes (as a terminal's output can be) is six times that as JSON.
    let mut result = exited(0, 1);
    result.stdout = format!("the start{}", "\0".repeat(1 << 20));
    let out = s.input(Input::RunFinished {
        run_id: "r1".into(),
        result,
    });
    let Some(Output::Transmit(bytes)) = out.iter().find(|o| matches!(o, Output::Transmit(_)))
    else {
        panic!("no run.result in {out:?}");
    };
    assert!(
        bytes.len() <= crate::wire::DEFAULT_MAX_FRAME_LEN,
        "{} bytes",
        bytes.len()
    );
    let Ok(crate::wire::DaemonFrame::RunResult { result, .. }) =
        crate::wire::DaemonFrame::from_json(bytes)
    else {
        panic!("not a run.result");
    };
    assert!(result.truncated);
    assert!(
        result.stdout.starts_with("the start"),
        "the beginning is kept, as the output caps keep it"
    );
    assert!(result.stdout.len() > 64 * 1024, "cut no more than needed");
}

mod keys;
mod seen;
mod silence;
mod waits;

#[test]
fn a_committed_run_s_output_goes_out_as_run_output_only_where_the_server_takes_it() {
    use crate::executor::OutputPiece;
    use crate::wire::OutputStream;
    let piece = |offset: u64, text: &str| OutputPiece {
        stream: OutputStream::Stdout,
        offset,
        text: text.into(),
    };
    let mut s = Server::ready(2);
    let output = |s: &mut Server, pieces: Vec<OutputPiece>| {
        s.input(Input::RunOutput {
            run_id: "r1".into(),
            pieces,
        })
    };
    assert_eq!(output(&mut s, vec![piece(0, "early")]), [], "no run r1");
    s.request("r1");
    s.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    let out = output(&mut s, vec![piece(0, "hé"), piece(3, "llo\n")]);
    use crate::wire::DaemonFrame;
    let frames: Vec<DaemonFrame> = out
        .iter()
        .map(|o| match o {
            Output::Transmit(bytes) => DaemonFrame::from_json(bytes).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        frames,
        [
            DaemonFrame::RunOutput {
                run_id: "r1".into(),
                stream: OutputStream::Stdout,
                offset: 0,
                text: "hé".into(),
            },
            DaemonFrame::RunOutput {
                run_id: "r1".into(),
                stream: OutputStream::Stdout,
                offset: 3,
                text: "llo\n".into(),
            },
        ]
    );
    // A server whose welcome did not list the feature never gets the frame.
    let mut plain = Server::ready_without_live_output();
    plain.request("r1");
    plain.send(ServerFrame::RunCommit {
        run_id: "r1".into(),
    });
    assert_eq!(output(&mut plain, vec![piece(0, "x")]), []);
}
