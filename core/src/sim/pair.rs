//! [`Pair`]: one session and one daemon wired together in memory.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::{FakeExecutor, now_at};
use crate::daemon::{self, Daemon, DaemonConfig};
use crate::keyset::{KeySet, PinnedRoots, test_root};
use crate::rng::SplitMix64;
use crate::session::{self, ConnId, Session, SessionConfig};
use crate::time::UnixTime;
use crate::wire::{
    CommandsGrant, DEFAULT_MAX_FRAME_LEN, Egress, FrameDecoder, Grant, GrantLimits, encode_frame,
};

/// How to build a [`Pair`].
#[derive(Debug, Clone)]
pub struct PairConfig {
    /// Seeds byte-stream splitting and tickets.
    pub seed: u64,
    /// The machine's grant.
    pub grant: Grant,
    /// The daemon's configuration.
    pub daemon: DaemonConfig,
    /// The session's configuration.
    pub session: SessionConfig,
    /// Bytes are delivered in chunks of 1 to this many.
    pub max_chunk: usize,
}

impl Default for PairConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            grant: Grant {
                fs: Vec::new(),
                egress: Egress::None,
                commands: CommandsGrant { enabled: false },
                limits: GrantLimits { max_concurrent: 8 },
                environments: None,
            },
            daemon: DaemonConfig::default(),
            session: SessionConfig::new("ec_pair"),
            max_chunk: 64,
        }
    }
}

/// The test key set: `frame-test-1`, valid for the whole simulated era.
pub fn test_keys() -> KeySet {
    let doc = test_root::key_set_document(1, UnixTime(0), UnixTime(1 << 40));
    KeySet::from_document(
        &doc,
        &PinnedRoots::default().with_test_root_if_local("localhost", true),
    )
    .unwrap_or_else(|_| unreachable_keys())
}

fn unreachable_keys() -> KeySet {
    // The committed test key set always verifies under the test root.
    KeySet::trusted(0, Vec::new()).unwrap_or_else(|_| unreachable!("an empty set is valid"))
}

struct Wire {
    bytes: VecDeque<u8>,
    decoder: FrameDecoder,
}

impl Wire {
    fn new() -> Self {
        Self {
            bytes: VecDeque::new(),
            decoder: FrameDecoder::default(),
        }
    }
}

struct Link {
    conn: ConnId,
    to_daemon: Wire,
    to_session: Wire,
}

/// A rewrite applied to frames on their way to the daemon.
pub type Tamper = Box<dyn FnMut(Vec<u8>) -> Vec<u8>>;

/// One session and one daemon, connected through in-memory byte streams.
pub struct Pair {
    config: PairConfig,
    /// Simulated time since the origin.
    pub elapsed: Duration,
    /// The server's side.
    pub session: Session,
    /// The machine's side.
    pub daemon: Daemon,
    /// What the daemon's host ran.
    pub executor: FakeExecutor,
    /// Bundles the daemon can fetch, by SHA-256 hex.
    pub bundles: BTreeMap<String, Vec<u8>>,
    /// Every session event, in order.
    pub session_events: Vec<session::Event>,
    /// Every daemon event, in order.
    pub daemon_events: Vec<daemon::Event>,
    /// Every daemon command, in order.
    pub daemon_commands: Vec<daemon::Command>,
    /// Close codes the session sent, in order.
    pub session_closes: Vec<u16>,
    /// Applied to each frame the daemon receives, if set.
    pub tamper: Option<Tamper>,
    /// Whether the daemon's `Connect` commands are honoured (false: the network is down).
    pub network_up: bool,
    link: Option<Link>,
    next_conn: ConnId,
    rng: SplitMix64,
}

impl Pair {
    /// A pair at time zero; call [`Pair::drive`] to let the daemon connect.
    pub fn new(config: PairConfig) -> Self {
        let now = now_at(Duration::ZERO);
        let signer = Arc::new(test_root::frame_signer());
        let session = Session::new(config.session.clone(), config.grant.clone(), signer, now);
        let daemon = Daemon::new(config.daemon.clone(), test_keys(), now);
        let rng = SplitMix64::new(config.seed);
        Self {
            config,
            elapsed: Duration::ZERO,
            session,
            daemon,
            executor: FakeExecutor::default(),
            bundles: BTreeMap::new(),
            session_events: Vec::new(),
            daemon_events: Vec::new(),
            daemon_commands: Vec::new(),
            session_closes: Vec::new(),
            tamper: None,
            network_up: true,
            link: None,
            next_conn: 1,
            rng,
        }
    }

    /// A connected, ready pair.
    pub fn connected(config: PairConfig) -> Self {
        let mut pair = Self::new(config);
        pair.drive();
        pair
    }

    /// Whether a connection is open between the two.
    pub fn is_linked(&self) -> bool {
        self.link.is_some()
    }

    /// Feeds an input to the session and drives both sides until quiet.
    pub fn session_input(&mut self, input: session::Input) -> Result<(), session::SessionError> {
        self.session.handle_input(now_at(self.elapsed), input)?;
        self.drive();
        Ok(())
    }

    /// Feeds an input to the daemon and drives both sides until quiet.
    pub fn daemon_input(&mut self, input: daemon::Input) -> Result<(), daemon::DaemonError> {
        self.daemon.handle_input(now_at(self.elapsed), input)?;
        self.drive();
        Ok(())
    }

    /// Finishes a running run on the fake executor.
    pub fn finish(&mut self, run_id: &str, exit_code: i32) {
        if let Some(report) = self.executor.finish(run_id, exit_code) {
            let input = daemon::Input::RunFinished {
                run_id: run_id.to_owned(),
                report,
            };
            let _ = self.daemon.handle_input(now_at(self.elapsed), input);
        }
        self.drive();
    }

    /// Cuts the connection: both sides see it close (no close code).
    pub fn disconnect(&mut self) {
        if let Some(link) = self.link.take() {
            let now = now_at(self.elapsed);
            let _ = self
                .session
                .handle_input(now, session::Input::Disconnected { conn: link.conn });
            let _ = self
                .daemon
                .handle_input(now, daemon::Input::Disconnected { code: None });
        }
        self.drive();
    }

    /// The daemon process dies and restarts with its persisted pending results; the
    /// executor's runs die with it.
    pub fn restart_daemon(&mut self) {
        let pending = self.daemon.pending_results();
        if let Some(link) = self.link.take() {
            let _ = self.session.handle_input(
                now_at(self.elapsed),
                session::Input::Disconnected { conn: link.conn },
            );
        }
        self.executor.crash();
        self.daemon = Daemon::with_pending_results(
            self.config.daemon.clone(),
            test_keys(),
            now_at(self.elapsed),
            pending,
        );
        self.drive();
    }

    /// Moves time forward by `d`, firing timers on both sides.
    pub fn advance(&mut self, d: Duration) {
        self.elapsed += d;
        let now = now_at(self.elapsed);
        let _ = self.session.handle_input(now, session::Input::Timeout);
        let _ = self.daemon.handle_input(now, daemon::Input::Timeout);
        self.drive();
    }

    /// Runs both sides until neither has output and no bytes are in flight.
    pub fn drive(&mut self) {
        for _ in 0..100_000 {
            let mut busy = self.pump_session();
            busy |= self.pump_daemon();
            busy |= self.deliver();
            if !busy {
                return;
            }
        }
    }

    fn pump_session(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.session.poll_output() {
                session::Output::Wait { .. } => return any,
                session::Output::Transmit { conn, bytes } => {
                    if let Some(link) = self.link.as_mut().filter(|l| l.conn == conn) {
                        let mut framed = Vec::new();
                        if encode_frame(&bytes, DEFAULT_MAX_FRAME_LEN, &mut framed).is_ok() {
                            link.to_daemon.bytes.extend(framed);
                        }
                    }
                }
                session::Output::Close { conn, code, .. } => {
                    self.session_closes.push(code);
                    if self.link.as_ref().is_some_and(|l| l.conn == conn) {
                        self.link = None;
                        let input = daemon::Input::Disconnected { code: Some(code) };
                        let _ = self.daemon.handle_input(now_at(self.elapsed), input);
                    }
                }
                session::Output::Event(e) => self.session_events.push(e),
            }
            any = true;
        }
    }

    fn pump_daemon(&mut self) -> bool {
        let mut any = false;
        let now = now_at(self.elapsed);
        loop {
            let out = self.daemon.poll_output();
            match out {
                daemon::Output::Wait { .. } => return any,
                daemon::Output::Transmit(bytes) => {
                    if let Some(link) = self.link.as_mut() {
                        let mut framed = Vec::new();
                        if encode_frame(&bytes, DEFAULT_MAX_FRAME_LEN, &mut framed).is_ok() {
                            link.to_session.bytes.extend(framed);
                        }
                    }
                }
                // The pair restarts a daemon from `pending_results`; the simulation restarts
                // them from these records.
                daemon::Output::Persist(_) => {}
                daemon::Output::Event(e) => self.daemon_events.push(e),
                daemon::Output::Command(c) => {
                    self.daemon_commands.push(c.clone());
                    self.carry_out(c);
                }
            }
            any = true;
            let _ = now;
        }
    }

    fn carry_out(&mut self, command: daemon::Command) {
        let now = now_at(self.elapsed);
        match command {
            daemon::Command::Connect => {
                if !self.network_up {
                    let input = daemon::Input::ConnectFailed {
                        stop_forever: false,
                        reason: "network down".into(),
                    };
                    let _ = self.daemon.handle_input(now, input);
                    return;
                }
                let mut random = [0u8; 48];
                for chunk in random.chunks_mut(8) {
                    chunk.copy_from_slice(&self.rng.next_u64().to_le_bytes());
                }
                let Ok(issued) = self.session.issue_ticket(random) else {
                    let input = daemon::Input::ConnectFailed {
                        stop_forever: self.session.is_revoked(),
                        reason: "ticket refused".into(),
                    };
                    let _ = self.daemon.handle_input(now, input);
                    return;
                };
                let conn = self.next_conn;
                self.next_conn += 1;
                self.link = Some(Link {
                    conn,
                    to_daemon: Wire::new(),
                    to_session: Wire::new(),
                });
                let ticket = issued.ticket.expose_secret();
                let _ = self
                    .session
                    .handle_input(now, session::Input::Connect { conn, ticket });
                if self.link.as_ref().is_some_and(|l| l.conn == conn) {
                    let input = daemon::Input::Connected {
                        session_id: issued.session_id,
                    };
                    let _ = self.daemon.handle_input(now, input);
                }
            }
            daemon::Command::Close { .. } => {
                if let Some(link) = self.link.take() {
                    let input = session::Input::Disconnected { conn: link.conn };
                    let _ = self.session.handle_input(now, input);
                }
            }
            daemon::Command::Execute(execute) => self.executor.start(&execute),
            daemon::Command::Cancel { run_id, .. } => {
                if let Some(report) = self.executor.cancel(&run_id) {
                    let _ = self
                        .daemon
                        .handle_input(now, daemon::Input::RunFinished { run_id, report });
                }
            }
            daemon::Command::FetchCapability { run_id, sha256, .. } => {
                let bundle = self.bundles.get(&sha256).cloned().unwrap_or_default();
                let _ = self
                    .daemon
                    .handle_input(now, daemon::Input::CapabilityFetched { run_id, bundle });
            }
            daemon::Command::ApplyGrant { .. } | daemon::Command::Stop { .. } => {}
        }
    }

    /// Moves one chunk each way. Returns whether any byte moved.
    fn deliver(&mut self) -> bool {
        let now = now_at(self.elapsed);
        let max_chunk = self.config.max_chunk.max(1) as u64;
        let Some(link) = self.link.as_mut() else {
            return false;
        };
        let conn = link.conn;
        let mut to_daemon = Vec::new();
        let mut to_session = Vec::new();
        let mut moved = false;
        for (wire, out) in [
            (&mut link.to_daemon, &mut to_daemon),
            (&mut link.to_session, &mut to_session),
        ] {
            let n = (1 + self.rng.below(max_chunk)) as usize;
            let chunk: Vec<u8> = wire.bytes.drain(..n.min(wire.bytes.len())).collect();
            moved |= !chunk.is_empty();
            let mut input = chunk.as_slice();
            while !input.is_empty() {
                match wire.decoder.decode(&mut input) {
                    Ok(Some(frame)) => out.push(frame),
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
        }
        for frame in to_daemon {
            let frame = match self.tamper.as_mut() {
                Some(t) => t(frame),
                None => frame,
            };
            let _ = self.daemon.handle_input(now, daemon::Input::Frame(frame));
        }
        for bytes in to_session {
            let _ = self
                .session
                .handle_input(now, session::Input::Frame { conn, bytes });
        }
        moved
    }
}
