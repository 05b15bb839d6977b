//! The session machine on its own: a test plays the daemon by writing its frames, and reads
//! every output.

use crate::ids::RunId;
use std::time::Duration;

use super::*;
use crate::keyset::test_root;
use crate::sim::now_at;
use crate::wire::{
    CommandsGrant, DaemonFrame, Egress, GrantLimits, PROTOCOL_VERSION, Refusal, RunStatus,
    close_code,
};

struct Daemon {
    session: Session,
    elapsed: Duration,
    conn: ConnId,
    tickets: u8,
}

fn spec(run_id: &str) -> RunSpec {
    RunSpec {
        run_id: run_id.into(),
        environment: Environment::Shell,
        capability: CapabilitySource::Inline {
            manifest: String::new(),
            files: Vec::new(),
        },
        timeout_ms: 10_000,
        shared_run: false,
        requester: "ada".into(),
    }
}

fn hello(max_concurrent: u32, held: &[&str], pending: &[&str]) -> DaemonFrame {
    DaemonFrame::Hello {
        protocol: PROTOCOL_VERSION,
        features: Vec::new(),
        max_concurrent,
        held_runs: held.iter().map(|s| RunId::new(*s)).collect(),
        pending_results: pending.iter().map(|s| RunId::new(*s)).collect(),
        environments: vec![Environment::Shell],
        paused: false,
    }
}

fn result(run_id: &str, daemon_ms: u64) -> DaemonFrame {
    DaemonFrame::RunResult {
        run_id: run_id.into(),
        result: RunResult {
            status: RunStatus::Exited,
            exit_code: Some(0),
            signal: None,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            timing: crate::wire::Timing {
                daemon_ms,
                ..Default::default()
            },
            error: None,
            egress_denied: Vec::new(),
        },
    }
}

impl Daemon {
    /// A session whose daemon connected and said hello with `slots`.
    fn ready(slots: u32) -> Self {
        let grant = Grant {
            fs: Vec::new(),
            egress: Egress::None,
            commands: CommandsGrant { enabled: false },
            limits: GrantLimits { max_concurrent: 8 },
            environments: None,
        };
        let session = Session::new(
            SessionConfig::new("ec_unit"),
            grant,
            Arc::new(test_root::frame_signer()),
            now_at(Duration::ZERO),
        );
        let mut d = Self {
            session,
            elapsed: Duration::ZERO,
            conn: 0,
            tickets: 0,
        };
        d.connect(hello(slots, &[], &[]));
        d
    }

    /// Opens a new connection with a fresh ticket and says `hello`.
    fn connect(&mut self, hello: DaemonFrame) -> Vec<Output> {
        self.tickets += 1;
        self.conn += 1;
        let issued = self.session.issue_ticket([self.tickets; 48]).unwrap();
        let welcome = self.input(Input::Connect {
            conn: self.conn,
            ticket: issued.ticket.expose_secret(),
        });
        assert_eq!(sent(&welcome), ["welcome"]);
        let out = self.frame(hello);
        assert!(self.session.is_ready());
        out
    }

    fn input(&mut self, input: Input) -> Vec<Output> {
        self.session
            .handle_input(now_at(self.elapsed), input)
            .expect("the test never misuses the API");
        let mut out = Vec::new();
        loop {
            match self.session.poll_output() {
                Output::Wait { .. } => return out,
                o => out.push(o),
            }
        }
    }

    fn frame(&mut self, frame: DaemonFrame) -> Vec<Output> {
        self.input(Input::Frame {
            conn: self.conn,
            bytes: frame.to_json(),
        })
    }

    fn submit(&mut self, run_id: &str) -> Vec<Output> {
        self.input(Input::Submit(spec(run_id)))
    }

    fn accept(&mut self, run_id: &str) -> Vec<Output> {
        self.frame(DaemonFrame::RunAccept {
            run_id: run_id.into(),
        })
    }

    fn advance_to(&mut self, at: Duration) -> Vec<Output> {
        self.elapsed = at;
        self.input(Input::Timeout)
    }
}

/// The `type` of each transmitted frame, in order.
fn sent(outputs: &[Output]) -> Vec<String> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Transmit { bytes, .. } => {
                let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
                Some(v["type"].as_str().unwrap().to_owned())
            }
            _ => None,
        })
        .collect()
}

fn ended(outputs: &[Output]) -> Vec<(String, RunOutcome)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Event(Event::RunEnded { run_id, outcome }) => {
                Some((run_id.to_string(), outcome.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn runs_are_dispatched_only_while_a_slot_is_free_counting_unaccepted_ones() {
    let mut d = Daemon::ready(2);
    assert_eq!(sent(&d.submit("a")), ["run.request"]);
    assert_eq!(sent(&d.submit("b")), ["run.request"]);
    // Neither is accepted yet, but both hold a slot: the third is busy without an offer.
    let out = d.submit("c");
    assert!(sent(&out).is_empty());
    assert_eq!(ended(&out), [("c".to_string(), RunOutcome::Busy)]);
    assert_eq!(sent(&d.accept("a")), ["run.commit"]);
    assert_eq!(
        ended(&d.submit("c2")),
        [("c2".to_string(), RunOutcome::Busy)]
    );
    let out = d.frame(DaemonFrame::RunReject {
        run_id: "b".into(),
        code: Refusal::Busy.code().into(),
        message: String::new(),
    });
    assert_eq!(ended(&out), [("b".to_string(), RunOutcome::Busy)]);
    assert_eq!(
        sent(&d.submit("d")),
        ["run.request"],
        "b's slot is free again"
    );
    assert_eq!(d.session.in_flight(), 2);
}

#[test]
fn a_reconnect_keeps_held_and_pending_runs_and_loses_the_others() {
    let mut d = Daemon::ready(4);
    for id in ["held", "pending", "gone"] {
        d.submit(id);
        d.accept(id);
    }
    d.submit("offered");
    let out = d.input(Input::Disconnected { conn: d.conn });
    assert_eq!(
        ended(&out),
        [("offered".to_string(), RunOutcome::Offline)],
        "an uncommitted offer never started"
    );
    let out = d.connect(hello(4, &["held", "stale"], &["pending"]));
    assert_eq!(ended(&out), [("gone".to_string(), RunOutcome::Lost)]);
    assert_eq!(
        sent(&out),
        ["run.cancel"],
        "the daemon must stop what the server ended"
    );
    assert_eq!(d.session.committed_runs(), ["held", "pending"]);
    let out = d.frame(result("pending", 5));
    assert!(matches!(
        &ended(&out)[..],
        [(id, RunOutcome::Completed(_))] if id == "pending"
    ));
}

#[test]
fn a_lease_is_lost_30_s_after_the_deadline() {
    let mut d = Daemon::ready(2);
    d.submit("r1");
    d.accept("r1");
    // Keep the connection alive without a result.
    let beat = DaemonFrame::Status {
        slots_used: 1,
        slots_total: 2,
        draining: false,
        paused: false,
    };
    d.elapsed = Duration::from_secs(30);
    d.frame(beat);
    let just_before = d.advance_to(Duration::from_millis(39_999));
    assert!(ended(&just_before).is_empty());
    let out = d.advance_to(Duration::from_secs(40));
    assert_eq!(ended(&out), [("r1".to_string(), RunOutcome::Lost)]);
    assert_eq!(sent(&out), ["run.cancel"]);
    assert!(d.session.committed_runs().is_empty());
}

#[test]
fn a_result_is_recorded_once_and_acknowledged_every_time() {
    let mut d = Daemon::ready(2);
    d.submit("r1");
    d.accept("r1");
    d.elapsed = Duration::from_millis(300);
    let first = d.frame(result("r1", 200));
    assert_eq!(sent(&first), ["run.ack"]);
    let [(_, RunOutcome::Completed(r))] = &ended(&first)[..] else {
        panic!("expected one completed run, got {first:?}");
    };
    assert_eq!(r.timing.server_ms, Some(300));
    assert_eq!(r.timing.transit_ms, Some(100));
    let again = d.frame(result("r1", 200));
    assert_eq!(sent(&again), ["run.ack"], "the daemon may forget it");
    assert!(ended(&again).is_empty(), "never recorded twice");
}

#[test]
fn silence_and_bad_tickets_close_with_their_codes() {
    let mut d = Daemon::ready(2);
    let out = d.advance_to(Duration::from_secs(45));
    assert!(out.contains(&Output::Close {
        conn: d.conn,
        code: close_code::GOING_AWAY,
        reason: "silent for too long".into(),
    }));
    assert!(!d.session.is_ready());
    let out = d.input(Input::Connect {
        conn: 77,
        ticket: "not-a-ticket".into(),
    });
    assert!(matches!(
        &out[..],
        [
            Output::Event(Event::ConnectRefused { conn: 77, .. }),
            Output::Close {
                conn: 77,
                code: close_code::POLICY_VIOLATION,
                ..
            }
        ]
    ));
}

#[test]
fn a_frame_before_hello_is_an_unexpected_frame() {
    let mut d = Daemon::ready(2);
    d.input(Input::Disconnected { conn: d.conn });
    let issued = d.session.issue_ticket([200; 48]).unwrap();
    d.conn = 9;
    d.input(Input::Connect {
        conn: 9,
        ticket: issued.ticket.expose_secret(),
    });
    let out = d.accept("r1");
    assert!(matches!(
        &out[0],
        Output::Event(Event::ProtocolViolation {
            conn: 9,
            code: "unexpected_frame",
            ..
        })
    ));
    assert!(out.contains(&Output::Close {
        conn: 9,
        code: close_code::PROTOCOL_ERROR,
        reason: "unexpected_frame".into(),
    }));
}

#[test]
fn host_misuse_is_an_error() {
    let mut d = Daemon::ready(2);
    d.submit("r1");
    assert_eq!(
        d.session
            .handle_input(now_at(d.elapsed), Input::Submit(spec("r1"))),
        Err(SessionError::DuplicateRun("r1".into()))
    );
    d.advance_to(Duration::from_secs(5));
    assert_eq!(
        d.session
            .handle_input(now_at(Duration::from_secs(4)), Input::Timeout),
        Err(SessionError::TimeWentBackwards)
    );
    let now = now_at(d.elapsed);
    let mut accepted = 0;
    let refused = loop {
        // Each grant update queues a `grant.update`.
        match d
            .session
            .handle_input(now, Input::UpdateGrant(Grant::nothing()))
        {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted <= MAX_QUEUED_OUTPUTS + 1, "the queue is unbounded");
    };
    assert_eq!(refused, SessionError::OutputBacklog);
    assert_eq!(accepted, MAX_QUEUED_OUTPUTS + 1);
}

#[test]
fn only_a_committed_run_speaks_for_its_terminal_and_the_relay_s_actions_are_signed_frames() {
    let mut d = Daemon::ready(2);
    let output = |d: &mut Daemon, id: &str| {
        d.frame(DaemonFrame::PtyOutput {
            pty_id: id.into(),
            data: crate::b64::encode(b"\x1b[6n42\r\n"),
        })
    };
    let refused = output(&mut d, "r1");
    assert_eq!(
        refused,
        [Output::Event(Event::TerminalRefused {
            pty_id: "r1".into(),
            reason: "not_held_here"
        })]
    );
    let relay = |d: &mut Daemon, action: TerminalAction| {
        d.input(Input::Terminal {
            run_id: "r1".into(),
            action,
        })
    };
    assert!(
        sent(&relay(&mut d, TerminalAction::Credit(10))).is_empty(),
        "no committed run: nothing is sent"
    );
    d.submit("r1");
    d.accept("r1");
    assert_eq!(
        output(&mut d, "r1"),
        [Output::Event(Event::TerminalOutput {
            run_id: "r1".into(),
            data: b"\x1b[6n42\r\n".to_vec(),
        })],
        "the bytes reach the relay untouched"
    );
    let binary = crate::wire::PtyOutputFrame {
        pty_id: "r1",
        data: b"\x00\xff raw",
    };
    assert_eq!(
        d.input(Input::Frame {
            conn: d.conn,
            bytes: binary.encode().unwrap(),
        }),
        [Output::Event(Event::TerminalOutput {
            run_id: "r1".into(),
            data: b"\x00\xff raw".to_vec(),
        })],
        "the binary form too"
    );
    assert_eq!(
        sent(&relay(&mut d, TerminalAction::Input(b"ls\r".to_vec()))),
        ["pty.input"]
    );
    assert_eq!(
        sent(&relay(
            &mut d,
            TerminalAction::Resize {
                cols: 100,
                rows: 30
            }
        )),
        ["pty.resize"]
    );
    assert_eq!(
        sent(&relay(&mut d, TerminalAction::Credit(4096))),
        ["pty.credit"]
    );
    assert_eq!(sent(&relay(&mut d, TerminalAction::Close)), ["pty.close"]);
    let exit = d.frame(DaemonFrame::PtyExit {
        pty_id: "r1".into(),
        exit_code: Some(0),
    });
    assert_eq!(
        exit,
        [Output::Event(Event::TerminalExit {
            run_id: "r1".into(),
            exit_code: Some(0),
        })]
    );
    d.frame(result("r1", 5));
    assert_eq!(
        output(&mut d, "r1"),
        [Output::Event(Event::TerminalRefused {
            pty_id: "r1".into(),
            reason: "ended"
        })],
        "an ended terminal's late output goes nowhere"
    );
    let binary = crate::wire::PtyOutputFrame {
        pty_id: "r1",
        data: b"late",
    };
    assert_eq!(
        d.input(Input::Frame {
            conn: d.conn,
            bytes: binary.encode().unwrap(),
        }),
        [Output::Event(Event::TerminalRefused {
            pty_id: "r1".into(),
            reason: "ended"
        })],
        "the binary form is held to the same rule"
    );
    let bad = d.frame(DaemonFrame::PtyOutput {
        pty_id: "r2".into(),
        data: "!!".into(),
    });
    assert!(
        matches!(&bad[0], Output::Event(Event::TerminalRefused { .. })),
        "an unknown terminal is refused before its bytes are read: {bad:?}"
    );
}

#[test]
fn wait_orders_are_signed_frames_on_a_ready_connection_and_endings_become_events() {
    let mut d = Daemon::ready(2);
    let spec = crate::wait::WaitSpec {
        wait_id: "w1".into(),
        requester: "ada".into(),
        source: "async () => false".into(),
        interval_ms: 1_000,
        expires_at_ms: None,
        operator: false,
    };
    let register = d.input(Input::Wait(WaitOrder::Register(spec.clone())));
    assert_eq!(sent(&register), ["wait.register"]);
    assert_eq!(
        sent(&d.input(Input::Wait(WaitOrder::Ack {
            wait_id: "w1".into()
        }))),
        ["wait.ack"]
    );
    let ended = d.frame(DaemonFrame::WaitFailed {
        wait_id: "w1".into(),
        checks: 2,
        reason: "expired".into(),
        at_ms: 9,
        last_error: None,
    });
    assert!(
        matches!(&ended[..], [Output::Event(Event::WaitEnded(report))]
            if report.wait_id == "w1" && report.checks == 2
            && report.ending == crate::wait::Ending::Failed {
                reason: crate::wait::FailReason::Expired, at_ms: 9 }),
        "{ended:?}"
    );
    let bad = d.frame(DaemonFrame::WaitFailed {
        wait_id: "w1".into(),
        checks: 2,
        reason: "bored".into(),
        at_ms: 9,
        last_error: None,
    });
    assert!(
        bad.iter().any(
            |o| matches!(o, Output::Close { code, .. } if *code == close_code::PROTOCOL_ERROR)
        ),
        "an unknown reason is a protocol violation: {bad:?}"
    );
    assert!(!d.session.is_ready());
    assert!(
        d.input(Input::Wait(WaitOrder::Register(spec))).is_empty(),
        "no ready connection: the order is dropped (the host sends it again on Ready)"
    );
}

#[test]
fn a_binary_frame_before_hello_or_cut_short_is_a_violation() {
    let mut d = Daemon::ready(2);
    let cut = d.input(Input::Frame {
        conn: d.conn,
        bytes: b"\x01\x09r1".to_vec(),
    });
    assert!(
        cut.iter().any(|o| matches!(o, Output::Event(Event::ProtocolViolation { code, .. }) if *code == "invalid_frame")),
        "{cut:?}"
    );
    let mut d = Daemon::ready(2);
    d.input(Input::Disconnected { conn: d.conn });
    d.tickets += 1;
    d.conn += 1;
    let issued = d.session.issue_ticket([d.tickets; 48]).unwrap();
    d.input(Input::Connect {
        conn: d.conn,
        ticket: issued.ticket.expose_secret(),
    });
    let early = crate::wire::PtyOutputFrame {
        pty_id: "r1",
        data: b"x",
    };
    let out = d.input(Input::Frame {
        conn: d.conn,
        bytes: early.encode().unwrap(),
    });
    assert!(
        out.iter().any(|o| matches!(o, Output::Event(Event::ProtocolViolation { code, .. }) if *code == "unexpected_frame")),
        "{out:?}"
    );
}

#[test]
fn a_grant_s_slot_cap_applies_to_the_live_connection_at_once() {
    // The daemon announced 2 and never announces again.
    let mut d = Daemon::ready(2);
    assert_eq!(d.session.max_concurrent(), 2);
    let mut capped = d.session.grant().0.clone();
    capped.limits.max_concurrent = 1;
    d.input(Input::UpdateGrant(capped.clone()));
    assert_eq!(d.session.max_concurrent(), 1, "capped at once");
    assert_eq!(sent(&d.submit("a")), ["run.request"]);
    let out = d.submit("b");
    assert!(sent(&out).is_empty(), "no second offer: {out:?}");
    assert_eq!(ended(&out), [("b".to_string(), RunOutcome::Busy)]);
    // Raised again, the daemon's own 2 is the limit once more.
    capped.limits.max_concurrent = 8;
    d.input(Input::UpdateGrant(capped));
    assert_eq!(d.session.max_concurrent(), 2);
    assert_eq!(sent(&d.submit("c")), ["run.request"]);
}

#[test]
fn an_offer_nobody_answers_is_withdrawn_after_the_offer_timeout() {
    let mut d = Daemon::ready(2);
    d.submit("a");
    let out = d.advance_to(OFFER_TIMEOUT - Duration::from_millis(1));
    assert!(ended(&out).is_empty(), "still waiting: {out:?}");
    let out = d.advance_to(OFFER_TIMEOUT);
    assert_eq!(sent(&out), ["run.cancel"], "the offer is withdrawn");
    assert_eq!(ended(&out), [("a".to_string(), RunOutcome::Unanswered)]);
    assert_eq!(d.session.in_flight(), 0, "its slot is free");
    // A late accept finds nothing to commit.
    assert!(sent(&d.accept("a")).is_empty());
}

#[test]
fn a_result_for_a_run_never_held_is_acknowledged_counted_and_not_recorded() {
    let mut d = Daemon::ready(2);
    let out = d.frame(result("stranger", 5));
    assert_eq!(sent(&out), ["run.ack"]);
    assert!(ended(&out).is_empty());
    assert!(out.contains(&Output::Event(Event::UnknownResult {
        run_id: "stranger".into()
    })));
    // A repeat of a result recorded before is acknowledged without that event.
    d.submit("a");
    d.accept("a");
    d.frame(result("a", 5));
    let again = d.frame(result("a", 5));
    assert_eq!(sent(&again), ["run.ack"]);
    assert!(
        !again
            .iter()
            .any(|o| matches!(o, Output::Event(Event::UnknownResult { .. })))
    );
}

#[test]
fn a_committed_run_s_output_is_passed_on_and_bad_output_is_a_violation() {
    use crate::wire::OutputStream;
    let mut d = Daemon::ready(2);
    let output = |d: &mut Daemon, text: String| {
        d.frame(DaemonFrame::RunOutput {
            run_id: "r1".into(),
            stream: OutputStream::Stderr,
            offset: 7,
            text,
        })
    };
    assert!(
        output(&mut d, "early".into()).is_empty(),
        "a run not held here: dropped, the result is the record"
    );
    d.submit("r1");
    d.accept("r1");
    assert_eq!(
        output(&mut d, "warn: x\n".into()),
        [Output::Event(Event::RunOutput {
            run_id: "r1".into(),
            stream: OutputStream::Stderr,
            offset: 7,
            text: "warn: x\n".into(),
        })]
    );
    let too_big = output(&mut d, "x".repeat(crate::wire::MAX_RUN_OUTPUT_TEXT + 1));
    assert!(
        too_big.iter().any(|o| matches!(
            o,
            Output::Event(Event::ProtocolViolation {
                code: "invalid_frame",
                ..
            })
        )),
        "{too_big:?}"
    );
}
