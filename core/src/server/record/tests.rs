//! A server and a daemon in memory whose hosts write every record to a "disk" of bytes:
//! records come before the frames that depend on them, the journal folds into the snapshot,
//! and restores from the bytes alone keep every promise.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::daemon::{self, Daemon, DaemonConfig, DaemonRecord, DaemonSnapshot};
use crate::keyset::test_root;
use crate::routing::{ExecuteTarget, Requester, WhenOffline};
use crate::server::{
    self, ContextRecord, ExecuteRequest, ExecutionOutcome, OWNED_ELSEWHERE_CLOSE, Output, Server,
};
use crate::session::SessionConfig;
use crate::sim::{FakeExecutor, now_at, test_keys};
use crate::time::Now;
use crate::wire::{CapabilitySource, CommandsGrant, Egress, Environment, Grant, GrantLimits};

const CTX: &str = "ec_1";

/// What a host saw, in order: records written and frames sent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Record(String),
    Frame(String),
}

fn kind_of_frame(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let at = text.find("\"type\":\"").map_or(0, |i| i + 8);
    text[at..].split('"').next().unwrap_or_default().to_owned()
}

struct Harness {
    elapsed: Duration,
    server: Server,
    daemon: Daemon,
    conn: Option<u64>,
    next_conn: u64,
    server_disk: Vec<Vec<u8>>,
    daemon_disk: Vec<Vec<u8>>,
    server_seen: Vec<Seen>,
    daemon_seen: Vec<Seen>,
    to_daemon: Vec<Vec<u8>>,
    to_server: Vec<Vec<u8>>,
    finished: Vec<(String, ExecutionOutcome)>,
    executor: FakeExecutor,
    executed: Vec<String>,
}

fn record() -> ContextRecord {
    ContextRecord {
        id: CTX.into(),
        name: "box".into(),
        operator: "ada".into(),
        operator_is_member: true,
        shared_with_all_members: false,
        opted_in: vec![],
    }
}

fn request(exec_id: &str, target: ExecuteTarget) -> ExecuteRequest {
    ExecuteRequest {
        exec_id: exec_id.into(),
        requester: Requester {
            user_id: "ada".into(),
        },
        target,
        environment: Environment::Shell,
        capability: CapabilitySource::Inline {
            manifest: "name: t\nenvironment: shell\nentry: run.sh\n".into(),
            files: vec![],
        },
        timeout_ms: 60_000,
    }
}

fn shell_grant() -> Grant {
    Grant {
        fs: vec![],
        egress: Egress::None,
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits { max_concurrent: 8 },
        environments: None,
    }
}

fn signer() -> Arc<dyn crate::sign::Signer + Send + Sync> {
    Arc::new(test_root::frame_signer())
}

impl Harness {
    fn new() -> Self {
        let now = now_at(Duration::ZERO);
        let mut server = Server::new(signer(), SessionConfig::new("template"), now);
        server
            .handle_input(
                now,
                server::Input::Register {
                    record: record(),
                    grant: shell_grant(),
                },
            )
            .unwrap();
        let mut h = Self {
            elapsed: Duration::ZERO,
            server,
            daemon: Daemon::new(DaemonConfig::default(), test_keys(), now),
            conn: None,
            next_conn: 1,
            server_disk: vec![],
            daemon_disk: vec![],
            server_seen: vec![],
            daemon_seen: vec![],
            to_daemon: vec![],
            to_server: vec![],
            finished: vec![],
            executor: FakeExecutor::default(),
            executed: vec![],
        };
        h.drive();
        h
    }

    fn now(&self) -> Now {
        now_at(self.elapsed)
    }

    fn drive(&mut self) {
        for _ in 0..1000 {
            let mut busy = false;
            loop {
                match self.server.poll_output() {
                    Output::Wait { .. } => break,
                    Output::Persist(r) => {
                        self.server_seen
                            .push(Seen::Record(format!("{:?}", r.change)));
                        self.server_disk.push(r.encode());
                    }
                    Output::Transmit { conn, bytes } => {
                        self.server_seen.push(Seen::Frame(kind_of_frame(&bytes)));
                        if Some(conn) == self.conn {
                            self.to_daemon.push(bytes);
                        }
                    }
                    Output::Close { .. } => self.conn = None,
                    Output::Command(_) => {}
                    Output::Event(server::Event::ExecutionFinished {
                        exec_id, outcome, ..
                    }) => self.finished.push((exec_id.into_string(), outcome)),
                    Output::Event(_) => {}
                }
                busy = true;
            }
            loop {
                match self.daemon.poll_output() {
                    daemon::Output::Wait { .. } => break,
                    daemon::Output::Persist(r) => {
                        self.daemon_seen
                            .push(Seen::Record(format!("{:?}", r.change)));
                        self.daemon_disk.push(r.encode());
                    }
                    daemon::Output::Transmit(bytes) => {
                        self.daemon_seen.push(Seen::Frame(kind_of_frame(&bytes)));
                        if self.conn.is_some() {
                            self.to_server.push(bytes);
                        }
                    }
                    daemon::Output::Close { .. } => self.conn = None,
                    daemon::Output::Command(daemon::Command::Connect) => self.connect(),
                    daemon::Output::Command(daemon::Command::Execute(e)) => {
                        self.executed.push(e.run_id.to_string());
                        self.executor.start(&e);
                    }
                    daemon::Output::Command(_)
                    | daemon::Output::Event(_)
                    | daemon::Output::SaveWait { .. }
                    | daemon::Output::ForgetWait { .. } => {}
                }
                busy = true;
            }
            let now = self.now();
            for bytes in std::mem::take(&mut self.to_daemon) {
                self.daemon
                    .handle_input(now, daemon::Input::Frame(bytes))
                    .unwrap();
                busy = true;
            }
            if let Some(conn) = self.conn {
                for bytes in std::mem::take(&mut self.to_server) {
                    let input = server::Input::Frame { conn, bytes };
                    self.server.handle_input(now, input).unwrap();
                    busy = true;
                }
            }
            if !busy {
                return;
            }
        }
        panic!("the harness never settled");
    }

    fn connect(&mut self) {
        let now = self.now();
        let issued = self.server.issue_ticket(CTX, [7; 48]).unwrap();
        let conn = self.next_conn;
        self.next_conn += 1;
        self.conn = Some(conn);
        let ticket = issued.ticket.expose_secret();
        let input = server::Input::Connect {
            context_id: CTX.into(),
            conn,
            ticket,
        };
        self.server.handle_input(now, input).unwrap();
        let input = daemon::Input::Connected {
            session_id: issued.session_id,
        };
        self.daemon.handle_input(now, input).unwrap();
    }

    fn execute(&mut self, request: ExecuteRequest) {
        let now = self.now();
        let input = server::Input::Execute(Box::new(request));
        self.server.handle_input(now, input).unwrap();
        self.drive();
    }

    fn finish_run(&mut self, run_id: &str) {
        let result = self.executor.finish(run_id, 0).expect("running");
        let input = daemon::Input::RunFinished {
            run_id: run_id.into(),
            result,
        };
        self.daemon.handle_input(self.now(), input).unwrap();
        self.drive();
    }

    fn advance(&mut self, d: Duration) {
        self.elapsed += d;
        let now = self.now();
        self.server
            .handle_input(now, server::Input::Timeout)
            .unwrap();
        self.daemon
            .handle_input(now, daemon::Input::Timeout)
            .unwrap();
        self.drive();
    }

    fn server_state(&self) -> ServerSnapshot {
        let mut state = ServerSnapshot::default();
        for bytes in &self.server_disk {
            state.apply(&ServerRecord::decode(bytes).unwrap());
        }
        state
    }

    fn daemon_state(&self) -> DaemonSnapshot {
        let mut state = DaemonSnapshot::default();
        for bytes in &self.daemon_disk {
            state.apply(&DaemonRecord::decode(bytes).unwrap());
        }
        state
    }

    /// The server process dies 20 s before a new one restores from the disk's bytes.
    fn restart_server(&mut self) {
        let state = ServerSnapshot::decode(&self.server_state().encode()).unwrap();
        self.elapsed += Duration::from_secs(20);
        self.conn = None;
        self.to_daemon.clear();
        self.to_server.clear();
        let now = self.now();
        self.server = Server::restore(signer(), SessionConfig::new("template"), &state, now);
        self.daemon
            .handle_input(now, daemon::Input::Disconnected { code: None })
            .unwrap();
        // The daemon's backoff elapses.
        self.advance(Duration::from_secs(60));
    }
}

fn position(seen: &[Seen], pred: impl Fn(&Seen) -> bool) -> usize {
    seen.iter().position(pred).expect("seen")
}

#[test]
fn every_record_precedes_the_frame_that_depends_on_it() {
    let mut h = Harness::new();
    h.execute(request("x1", ExecuteTarget::named(CTX)));
    assert_eq!(h.executed, vec!["x1.1".to_owned()]);
    let committed = position(
        &h.server_seen,
        |s| matches!(s, Seen::Record(r) if r.contains("Committed")),
    );
    let commit = position(&h.server_seen, |s| *s == Seen::Frame("run.commit".into()));
    assert!(committed < commit, "{:#?}", h.server_seen);
    let started = position(
        &h.daemon_seen,
        |s| matches!(s, Seen::Record(r) if r.contains("RunStarted")),
    );
    assert!(
        h.daemon_seen[started..]
            .iter()
            .all(|s| !matches!(s, Seen::Frame(f) if f == "run.result"))
    );

    h.finish_run("x1.1");
    let pending = position(
        &h.daemon_seen,
        |s| matches!(s, Seen::Record(r) if r.contains("ResultPending")),
    );
    let result = position(&h.daemon_seen, |s| *s == Seen::Frame("run.result".into()));
    assert!(pending < result, "{:#?}", h.daemon_seen);
    let ended = position(
        &h.server_seen,
        |s| matches!(s, Seen::Record(r) if r.contains("ExecutionEnded")),
    );
    let ack = position(&h.server_seen, |s| *s == Seen::Frame("run.ack".into()));
    assert!(ended < ack, "{:#?}", h.server_seen);
    assert!(
        h.daemon_seen
            .iter()
            .any(|s| matches!(s, Seen::Record(r) if r.contains("ResultRemoved")))
    );
    assert_eq!(h.finished.len(), 1);
}

#[test]
fn the_journal_folds_into_the_snapshot_at_every_quiet_moment() {
    let mut h = Harness::new();
    let check = |h: &Harness| {
        let mut live = h.server.snapshot();
        let state = h.server_state();
        live.written_ms = state.written_ms;
        assert_eq!(live, state);
        let mut live = h.daemon.snapshot();
        let mut state = h.daemon_state();
        live.written_ms = 0;
        state.written_ms = 0;
        assert_eq!(live, state);
    };
    check(&h);
    h.execute(request("x1", ExecuteTarget::named(CTX)));
    check(&h);
    assert_eq!(h.server_state().executions.len(), 1);
    assert_eq!(h.daemon_state().started, vec!["x1.1".to_owned()]);
    h.finish_run("x1.1");
    check(&h);
    assert!(h.server_state().executions.is_empty());
    assert!(h.daemon_state().outbox.is_empty());
    let set_chain = server::Input::SetChain {
        user_id: "ada".into(),
        chain: crate::routing::Chain::default(),
    };
    h.server.handle_input(h.now(), set_chain).unwrap();
    h.drive();
    check(&h);
}

#[test]
fn a_run_committed_before_a_server_crash_delivers_its_result_once_after_restore() {
    let mut h = Harness::new();
    h.execute(request("x1", ExecuteTarget::named(CTX)));
    assert_eq!(h.executed, vec!["x1.1".to_owned()]);
    h.restart_server();
    assert!(
        h.server.session(CTX).unwrap().is_ready(),
        "the daemon reconnected"
    );
    assert!(
        h.finished.is_empty(),
        "the run is held, not lost: {:?}",
        h.finished
    );
    h.finish_run("x1.1");
    assert_eq!(h.finished.len(), 1);
    assert!(matches!(h.finished[0].1, ExecutionOutcome::Completed(_)));
    assert_eq!(h.executed, vec!["x1.1".to_owned()], "never run twice");
}

#[test]
fn a_restored_lease_ends_lost_on_the_new_clock_not_the_old_one() {
    let mut h = Harness::new();
    h.execute(request("x1", ExecuteTarget::named(CTX)));
    let state = h.server_state();
    let PlaceRow::Committed { lost_at_ms, .. } = state.executions[0].place else {
        panic!("committed: {:?}", state.executions[0].place);
    };
    let lease = lost_at_ms - state.written_ms;
    assert_eq!(lease, 90_000, "a 60 s timeout and 30 s of grace");
    // Restore 20 s of wall time later onto an origin 5000 s later: 70 s of lease are left.
    let origin = Duration::from_secs(5_000);
    let now = Now {
        instant: crate::time::Instant::from_origin(origin),
        wall: crate::time::UnixTime(crate::sim::WALL_ORIGIN + 20),
    };
    let mut server = Server::restore(signer(), SessionConfig::new("template"), &state, now);
    while !matches!(server.poll_output(), Output::Wait { .. }) {}
    let (until, reason) = server.next_deadline().expect("a deadline");
    assert_eq!(reason, "lease");
    assert_eq!(until.since_origin(), origin + Duration::from_secs(70));
}

#[test]
fn queued_executions_keep_their_deadline_and_cloud_executions_end_lost_after_restore() {
    let mut h = Harness::new();
    let now = h.now();
    // Take the daemon offline so the named run waits.
    h.conn = None;
    h.daemon = Daemon::new(DaemonConfig::default(), test_keys(), now);
    let mut queued = ExecuteTarget::named(CTX);
    queued.when_offline = WhenOffline::Queue { minutes: 5 };
    let conn = 1;
    h.server
        .handle_input(now, server::Input::Disconnected { conn })
        .unwrap();
    h.server
        .handle_input(now, server::Input::Execute(Box::new(request("q1", queued))))
        .unwrap();
    h.server
        .handle_input(
            now,
            server::Input::Execute(Box::new(request("c1", ExecuteTarget::named("cloud")))),
        )
        .unwrap();
    // Drain the server only: the daemon stays away.
    loop {
        match h.server.poll_output() {
            Output::Wait { .. } => break,
            Output::Persist(r) => h.server_disk.push(r.encode()),
            _ => {}
        }
    }
    let state = h.server_state();
    let places: Vec<&PlaceRow> = state.executions.iter().map(|e| &e.place).collect();
    assert!(matches!(places[0], PlaceRow::Cloud));
    assert!(matches!(places[1], PlaceRow::Queued { .. }));
    let origin = Duration::from_secs(9_000);
    let restart = Now {
        instant: crate::time::Instant::from_origin(origin),
        wall: crate::time::UnixTime(crate::sim::WALL_ORIGIN + 60),
    };
    let mut server = Server::restore(signer(), SessionConfig::new("template"), &state, restart);
    let mut lost = vec![];
    loop {
        match server.poll_output() {
            Output::Wait { .. } => break,
            Output::Event(server::Event::ExecutionFinished {
                exec_id, outcome, ..
            }) => lost.push((exec_id, outcome)),
            _ => {}
        }
    }
    let (until, _) = server.next_deadline().expect("the queue's deadline");
    assert_eq!(
        lost,
        vec![(crate::ids::ExecutionId::new("c1"), ExecutionOutcome::Lost)]
    );
    assert_eq!(
        until.since_origin(),
        origin + Duration::from_secs(240),
        "5 min less 1 min"
    );
    // The dispatcher runs on: it is woken whenever it asks until the queue's deadline.
    let mut expired = false;
    loop {
        let (at, _) = server.poll_timeout();
        let at = at.min(until);
        let wall = crate::sim::WALL_ORIGIN + 60 + (at.since_origin() - origin).as_secs();
        let later = Now {
            instant: at,
            wall: crate::time::UnixTime(wall),
        };
        server.handle_input(later, server::Input::Timeout).unwrap();
        if at == until {
            break;
        }
        while !matches!(server.poll_output(), Output::Wait { .. }) {}
    }
    let mut end_fence = None;
    loop {
        match server.poll_output() {
            Output::Wait { .. } => break,
            Output::Persist(
                record @ ServerRecord {
                    change: ServerChange::ExecutionEnded(_),
                    ..
                },
            ) => {
                end_fence = match record.fence() {
                    server::Fence::Context(id) => Some(id.to_owned()),
                    other => Some(format!("{other:?}")),
                }
            }
            Output::Event(server::Event::ExecutionFinished {
                outcome: ExecutionOutcome::Failed { code, .. },
                ..
            }) => expired = code == "execution_context_queue_expired",
            _ => {}
        }
    }
    assert!(expired);
    // It never ran, yet only the machine's owner may write its end: a node that lost the
    // machine must not end what the new owner adopted.
    assert_eq!(end_fence.as_deref(), Some(CTX), "fenced by its machine");
}

#[test]
fn a_snapshot_round_trips_and_every_cut_or_flipped_byte_is_a_typed_error() {
    let mut h = Harness::new();
    h.execute(request("x1", ExecuteTarget::named(CTX)));
    let snapshot = h.server.snapshot();
    let bytes = snapshot.encode();
    assert_eq!(ServerSnapshot::decode(&bytes).unwrap(), snapshot);
    for end in 0..bytes.len() {
        assert!(ServerSnapshot::decode(&bytes[..end]).is_err());
    }
    for at in 0..bytes.len() {
        let mut tampered = bytes.clone();
        tampered[at] ^= 0x20;
        // A flip may still read (a letter's case in a free-text field); it never panics.
        let _ = ServerSnapshot::decode(&tampered);
    }
    for bytes in &h.server_disk {
        assert!(
            ServerSnapshot::decode(bytes).is_err(),
            "a record is not a snapshot"
        );
        let record = ServerRecord::decode(bytes).unwrap();
        assert_eq!(&record.encode(), bytes);
    }
    let newer = String::from_utf8(bytes)
        .unwrap()
        .replacen("\"v\":1", "\"v\":2", 1);
    assert_eq!(
        ServerSnapshot::decode(newer.as_bytes()),
        Err(RecordError::UnsupportedVersion(2))
    );
}

/// The machine's daemon moves from node A (the harness's server) to node B, which adopts it
/// from the records A wrote while A lets it go: what A then says, and the run A committed.
fn move_to_another_node(h: &mut Harness) -> (Vec<Output>, Server) {
    let records = h.server_state();
    h.elapsed += Duration::from_secs(1);
    let now = h.now();
    let mut b = Server::new(signer(), SessionConfig::new("template"), now);
    b.handle_input(now, server::Input::Adopt(Box::new(records.clone())))
        .unwrap();
    let row = records.contexts[0].clone();
    h.server
        .handle_input(now, server::Input::Elsewhere(Box::new(row)))
        .unwrap();
    let mut said = vec![];
    loop {
        match h.server.poll_output() {
            Output::Wait { .. } => break,
            output => said.push(output),
        }
    }
    let a = std::mem::replace(&mut h.server, b);
    assert_eq!(a.executions_in_flight(), 0, "A holds nothing placed on it");
    assert!(a.is_owned_elsewhere(CTX));
    assert!(a.snapshot().contexts.is_empty(), "A journals no row of it");
    h.conn = None;
    h.to_daemon.clear();
    h.to_server.clear();
    h.daemon
        .handle_input(now, daemon::Input::Disconnected { code: None })
        .unwrap();
    h.advance(Duration::from_secs(60));
    (said, a)
}

#[test]
fn a_run_committed_on_one_node_ends_once_on_the_node_that_adopts_its_machine() {
    let mut h = Harness::new();
    h.execute(request("x1", ExecuteTarget::named(CTX)));
    assert_eq!(h.executed, vec!["x1.1".to_owned()]);
    let (said, _) = move_to_another_node(&mut h);
    assert!(
        said.iter().all(|o| !matches!(o, Output::Persist(_))),
        "the node that let the machine go writes nothing for it: {said:?}"
    );
    assert!(
        said.iter().any(|o| matches!(
            o,
            Output::Close { reason, code: 1001, .. } if reason == OWNED_ELSEWHERE_CLOSE
        )),
        "its connection there is closed: {said:?}"
    );
    assert!(
        h.server.session(CTX).unwrap().is_ready(),
        "the daemon is back, on B"
    );
    assert!(
        h.finished.is_empty(),
        "the run is held on B: {:?}",
        h.finished
    );
    h.finish_run("x1.1");
    assert_eq!(h.finished.len(), 1);
    assert!(matches!(h.finished[0].1, ExecutionOutcome::Completed(_)));
    assert_eq!(h.executed, vec!["x1.1".to_owned()], "never run twice");
}

#[test]
fn a_queued_execution_moves_with_its_machine_and_keeps_its_deadline() {
    let mut h = Harness::new();
    let now = h.now();
    h.server
        .handle_input(now, server::Input::Disconnected { conn: 1 })
        .unwrap();
    h.conn = None;
    h.daemon = Daemon::new(DaemonConfig::default(), test_keys(), now);
    let mut queued = ExecuteTarget::named(CTX);
    queued.when_offline = WhenOffline::Queue { minutes: 5 };
    h.server
        .handle_input(now, server::Input::Execute(Box::new(request("q1", queued))))
        .unwrap();
    loop {
        match h.server.poll_output() {
            Output::Wait { .. } => break,
            Output::Persist(r) => h.server_disk.push(r.encode()),
            _ => {}
        }
    }
    let records = h.server_state();
    let mut b = Server::new(signer(), SessionConfig::new("template"), now);
    b.handle_input(now, server::Input::Adopt(Box::new(records)))
        .unwrap();
    while !matches!(b.poll_output(), Output::Wait { .. }) {}
    let place = b
        .queue_place(&crate::ids::ExecutionId::new("q1"))
        .expect("queued on B");
    assert_eq!(place.position, 1);
    assert_eq!(
        place.left,
        Duration::from_secs(300),
        "the deadline A gave it"
    );
}

/// Drains `server` (node A) alone, its records onto the harness's shared disk; returns its
/// other outputs.
fn drain_node(h: &mut Harness, server: &mut Server) -> Vec<Output> {
    let mut said = vec![];
    loop {
        match server.poll_output() {
            Output::Wait { .. } => return said,
            Output::Persist(r) => {
                said.push(Output::Persist(r.clone()));
                h.server_disk.push(r.encode());
            }
            output => said.push(output),
        }
    }
}

#[test]
fn a_run_for_a_machine_owned_elsewhere_is_handed_to_its_owner_and_runs_once_there() {
    let mut h = Harness::new();
    let (_, mut a) = move_to_another_node(&mut h);
    // Submitted on A, which no longer owns the machine: handed over, named and by chain.
    let now = h.now();
    let mut queued = ExecuteTarget::named(CTX);
    queued.when_offline = WhenOffline::Queue { minutes: 5 };
    a.handle_input(now, server::Input::Execute(Box::new(request("x2", queued))))
        .unwrap();
    let chain =
        crate::routing::Chain::new(vec![crate::routing::ChainEntry::Context(CTX.into())]).unwrap();
    a.handle_input(
        now,
        server::Input::SetChain {
            user_id: "ada".into(),
            chain,
        },
    )
    .unwrap();
    a.handle_input(
        now,
        server::Input::Execute(Box::new(request("x3", ExecuteTarget::chain()))),
    )
    .unwrap();
    let said = drain_node(&mut h, &mut a);
    let handed: Vec<(usize, &str)> = said
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o {
            Output::Command(server::Command::HandOff {
                exec_id,
                context_id,
            }) => {
                assert_eq!(context_id.as_str(), CTX);
                Some((i, exec_id.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        handed.iter().map(|(_, id)| *id).collect::<Vec<_>>(),
        ["x2", "x3"]
    );
    for (at, exec_id) in &handed {
        let written = said[..*at].iter().any(|o| {
            matches!(
                o,
                Output::Persist(ServerRecord { change: ServerChange::Execution(row), .. })
                    if row.exec_id.as_str() == *exec_id
                        && matches!(row.place, PlaceRow::HandedOff { .. })
            )
        });
        assert!(
            written,
            "{exec_id}'s row comes before its hand-off: {said:?}"
        );
    }
    assert_eq!(a.executions_in_flight(), 0, "A holds nothing it handed off");
    // B takes the rows in, as its host reads them from the database.
    let rows: Vec<ExecutionRow> = h
        .server_state()
        .executions
        .into_iter()
        .filter(|row| matches!(row.place, PlaceRow::HandedOff { .. }))
        .collect();
    assert_eq!(rows.len(), 2);
    let now = h.now();
    h.server
        .handle_input(now, server::Input::HandedOver(rows.clone()))
        .unwrap();
    h.drive();
    assert_eq!(h.executed, ["x2.1", "x3.1"], "each ran on the daemon, once");
    // Handed over twice (a hint read again): nothing more runs.
    h.server
        .handle_input(now, server::Input::HandedOver(rows))
        .unwrap();
    h.drive();
    h.finish_run("x2.1");
    h.finish_run("x3.1");
    let ended: Vec<&str> = h.finished.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ended, ["x2", "x3"]);
    assert_eq!(h.executed.len(), 2, "never run twice");
}

#[test]
fn a_machine_owned_elsewhere_refuses_what_names_it() {
    let mut h = Harness::new();
    let row = h.server_state().contexts[0].clone();
    let now = h.now();
    h.server
        .handle_input(now, server::Input::Elsewhere(Box::new(row)))
        .unwrap();
    while !matches!(h.server.poll_output(), Output::Wait { .. }) {}
    let refused = h.server.handle_input(
        now,
        server::Input::UpdateGrant {
            context_id: CTX.into(),
            grant: shell_grant(),
        },
    );
    assert_eq!(
        refused,
        Err(server::ServerError::OwnedElsewhere(CTX.into()))
    );
    let refused = h.server.handle_input(
        now,
        server::Input::Connect {
            context_id: CTX.into(),
            conn: 9,
            ticket: "otk_x".into(),
        },
    );
    assert_eq!(
        refused,
        Err(server::ServerError::OwnedElsewhere(CTX.into()))
    );
    assert!(
        !matches!(h.server.poll_output(), Output::Persist(_)),
        "a refused input writes nothing"
    );
    let adopt_nothing = h
        .server
        .handle_input(now, server::Input::Adopt(Box::default()));
    assert_eq!(adopt_nothing, Err(server::ServerError::AdoptWithoutContext));
}
