//! The harness: one dispatcher, and the test playing every machine's daemon by frames.

use std::time::Duration;

use serde_json::Value;

use super::super::*;
use crate::keyset::test_root;
use crate::routing::ChainEntry;
use crate::sim::now_at;
use crate::wire::{CommandsGrant, DaemonFrame, Egress, GrantLimits, InlineFile, RunStatus, Timing};

/// One dispatcher, the machines' connections, and everything it said so far.
pub(super) struct Harness {
    pub server: Server,
    pub elapsed: Duration,
    next_conn: ConnId,
    /// Each machine's live connection.
    pub conns: BTreeMap<String, ConnId>,
    /// Everything drained, in order.
    pub seen: Vec<Output>,
}

pub(super) fn grant() -> Grant {
    Grant {
        fs: Vec::new(),
        egress: Egress::None,
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits { max_concurrent: 4 },
        environments: None,
    }
}

pub(super) fn record(id: &str, operator: &str, opted_in: &[&str]) -> ContextRecord {
    ContextRecord {
        id: id.into(),
        name: format!("box {id}"),
        operator: operator.to_owned(),
        operator_is_member: true,
        // Opt-ins count only while the machine is shared (as the server keeps them).
        shared_with_all_members: !opted_in.is_empty(),
        opted_in: opted_in.iter().map(|u| (*u).to_owned()).collect(),
    }
}

pub(super) fn request(exec_id: &str, user: &str, target: ExecuteTarget) -> ExecuteRequest {
    ExecuteRequest {
        exec_id: exec_id.into(),
        requester: Requester {
            user_id: user.to_owned(),
        },
        target,
        environment: Environment::Shell,
        capability: CapabilitySource::Inline {
            manifest: "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n".into(),
            files: vec![InlineFile {
                path: "run.sh".into(),
                content_b64: crate::b64::encode(b"true\n"),
            }],
        },
        timeout_ms: 10_000,
    }
}

impl Harness {
    pub(super) fn new() -> Self {
        let elapsed = Duration::from_secs(1);
        let server = Server::new(
            Arc::new(test_root::frame_signer()),
            SessionConfig::new("template"),
            now_at(elapsed),
        );
        Self {
            server,
            elapsed,
            next_conn: 1,
            conns: BTreeMap::new(),
            seen: Vec::new(),
        }
    }

    /// Feeds an input, failing the test on any error, and drains.
    pub(super) fn input(&mut self, input: Input) {
        let now = now_at(self.elapsed);
        self.server
            .handle_input(now, input)
            .expect("input accepted");
        self.drain();
    }

    pub(super) fn drain(&mut self) {
        for _ in 0..10_000 {
            let out = self.server.poll_output();
            if let Output::Wait { .. } = out {
                return;
            }
            if let Output::Close { conn, .. } = &out {
                self.conns.retain(|_, c| c != conn);
            }
            self.seen.push(out);
        }
        panic!("outputs never ended in Wait");
    }

    pub(super) fn register(&mut self, record: ContextRecord) {
        self.input(Input::Register {
            record,
            grant: grant(),
        });
    }

    pub(super) fn chain(&mut self, user: &str, entries: Vec<ChainEntry>) {
        let chain = Chain::new(entries).expect("a valid chain");
        self.input(Input::SetChain {
            user_id: user.to_owned(),
            chain,
        });
    }

    /// Connects machine `id` and says hello with `slots` slots.
    pub(super) fn connect(&mut self, id: &str, slots: u32) -> ConnId {
        let conn = self.next_conn;
        self.next_conn += 1;
        let issued = self
            .server
            .issue_ticket(id, [conn as u8; 48])
            .expect("ticket");
        self.input(Input::Connect {
            context_id: id.into(),
            conn,
            ticket: issued.ticket.expose_secret(),
        });
        self.conns.insert(id.to_owned(), conn);
        self.daemon_says(
            id,
            DaemonFrame::Hello {
                protocol: 1,
                features: Vec::new(),
                max_concurrent: slots,
                held_runs: Vec::new(),
                pending_results: Vec::new(),
                environments: vec![Environment::Shell],
                paused: false,
            },
        );
        assert!(self.server.session(id).is_some_and(|s| s.is_ready()));
        conn
    }

    pub(super) fn daemon_says(&mut self, id: &str, frame: DaemonFrame) {
        let conn = self.conns[id];
        self.input(Input::Frame {
            conn,
            bytes: frame.to_json(),
        });
    }

    pub(super) fn disconnect(&mut self, id: &str) {
        let conn = self.conns.remove(id).expect("connected");
        self.input(Input::Disconnected { conn });
    }

    /// Lets `by` pass with the dispatcher running: it is woken whenever it asked to be.
    pub(super) fn advance(&mut self, by: Duration) {
        let end = self.elapsed + by;
        loop {
            let (until, _) = self.server.poll_timeout();
            let at = until.since_origin();
            if at >= end {
                break;
            }
            self.elapsed = at.max(self.elapsed);
            self.input(Input::Timeout);
        }
        self.elapsed = end;
        self.input(Input::Timeout);
    }

    /// Lets `by` pass with the dispatcher's process stopped: nothing wakes it meanwhile.
    pub(super) fn pause(&mut self, by: Duration) {
        self.elapsed += by;
    }

    /// `(type, runId)` of every frame sent on `conn`, in order.
    pub(super) fn sent(&self, conn: ConnId) -> Vec<(String, String)> {
        self.seen
            .iter()
            .filter_map(|o| match o {
                Output::Transmit { conn: c, bytes } if *c == conn => {
                    let v: Value = serde_json::from_slice(bytes).expect("json");
                    let field = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                    Some((field("type"), field("runId")))
                }
                _ => None,
            })
            .collect()
    }

    pub(super) fn requests(&self, conn: ConnId) -> Vec<String> {
        self.sent(conn)
            .into_iter()
            .filter(|(t, _)| t == "run.request")
            .map(|(_, run)| run)
            .collect()
    }

    pub(super) fn finished(&self, exec_id: &str) -> Vec<&ExecutionOutcome> {
        self.seen
            .iter()
            .filter_map(|o| match o {
                Output::Event(Event::ExecutionFinished {
                    exec_id: e,
                    outcome,
                    ..
                }) if e == exec_id => Some(outcome),
                _ => None,
            })
            .collect()
    }

    pub(super) fn started_on(&self, exec_id: &str) -> Vec<String> {
        self.seen
            .iter()
            .filter_map(|o| match o {
                Output::Event(Event::RunStarted {
                    exec_id: e,
                    context_id,
                    ..
                }) if e == exec_id => Some(context_id.to_string()),
                _ => None,
            })
            .collect()
    }

    pub(super) fn result(&mut self, id: &str, run_id: &str) {
        self.daemon_says(
            id,
            DaemonFrame::RunResult {
                run_id: run_id.into(),
                result: RunResult {
                    status: RunStatus::Exited,
                    exit_code: Some(0),
                    signal: None,
                    stdout: "hi".into(),
                    stderr: String::new(),
                    truncated: false,
                    timing: Timing::default(),
                    error: None,
                    egress_denied: Vec::new(),
                },
            },
        );
    }
}
