//! [`Pair`]: one session and one daemon wired together in memory.
//!
//! Every `handle_input` error of either side comes back from the `Pair` method that caused
//! it (a harness that hid them would hide host-misuse bugs), and [`Pair::drive`] fails with
//! [`PairError::Unsettled`] when the two sides are still talking after [`DRIVE_BOUND`] steps.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::{FakeExecutor, now_at};
use crate::daemon::{self, Daemon, DaemonConfig, DaemonError};
use crate::keyset::{KeySet, PinnedRoots, test_root};
use crate::rng::SplitMix64;
use crate::session::{self, ConnId, Session, SessionConfig, SessionError};
use crate::time::UnixTime;
use crate::wire::{
    CommandsGrant, DEFAULT_MAX_FRAME_LEN, Egress, FrameDecoder, Grant, GrantLimits, encode_frame,
};

/// The most rounds [`Pair::drive`] runs before it gives up with [`PairError::Unsettled`]:
/// far more than any exchange needs, so reaching it means the two sides loop.
pub const DRIVE_BOUND: usize = 100_000;

/// What went wrong while driving a [`Pair`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    /// The session refused an input.
    #[error("the session refused an input: {0}")]
    Session(#[from] SessionError),
    /// The daemon refused an input.
    #[error("the daemon refused an input: {0}")]
    Daemon(#[from] DaemonError),
    /// The two sides were still exchanging after this many rounds.
    #[error("the pair had not settled after {0} rounds")]
    Unsettled(usize),
    /// A role handed over a frame the codec cannot send (over the size limit): a bug in the
    /// role, never dropped silently.
    #[error("a frame could not be framed for sending: {0}")]
    Unsendable(crate::wire::WireError),
}

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
    /// Closes the daemon asked for (code, reason), in order.
    pub daemon_closes: Vec<(u16, String)>,
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
            daemon_closes: Vec::new(),
            tamper: None,
            network_up: true,
            link: None,
            next_conn: 1,
            rng,
        }
    }

    /// A connected, ready pair.
    pub fn connected(config: PairConfig) -> Result<Self, PairError> {
        let mut pair = Self::new(config);
        pair.drive()?;
        Ok(pair)
    }

    /// Whether a connection is open between the two.
    pub fn is_linked(&self) -> bool {
        self.link.is_some()
    }

    /// Feeds an input to the session and drives both sides until quiet.
    pub fn session_input(&mut self, input: session::Input) -> Result<(), PairError> {
        self.session.handle_input(now_at(self.elapsed), input)?;
        self.drive()
    }

    /// Feeds an input to the daemon and drives both sides until quiet.
    pub fn daemon_input(&mut self, input: daemon::Input) -> Result<(), PairError> {
        self.daemon.handle_input(now_at(self.elapsed), input)?;
        self.drive()
    }

    /// Finishes a running run on the fake executor (nothing happens if it is not running).
    pub fn finish(&mut self, run_id: &str, exit_code: i32) -> Result<(), PairError> {
        if let Some(result) = self.executor.finish(run_id, exit_code) {
            let input = daemon::Input::RunFinished {
                run_id: run_id.into(),
                result,
            };
            self.daemon.handle_input(now_at(self.elapsed), input)?;
        }
        self.drive()
    }

    /// Cuts the connection: both sides see it close (no close code).
    pub fn disconnect(&mut self) -> Result<(), PairError> {
        if let Some(link) = self.link.take() {
            let now = now_at(self.elapsed);
            self.session
                .handle_input(now, session::Input::Disconnected { conn: link.conn })?;
            self.daemon
                .handle_input(now, daemon::Input::Disconnected { code: None })?;
        }
        self.drive()
    }

    /// The daemon process dies and restarts with its persisted pending results; the
    /// executor's runs die with it.
    pub fn restart_daemon(&mut self) -> Result<(), PairError> {
        let pending = self.daemon.pending_results();
        if let Some(link) = self.link.take() {
            self.session.handle_input(
                now_at(self.elapsed),
                session::Input::Disconnected { conn: link.conn },
            )?;
        }
        self.executor.crash();
        self.daemon = Daemon::with_pending_results(
            self.config.daemon.clone(),
            test_keys(),
            now_at(self.elapsed),
            pending,
        );
        self.drive()
    }

    /// Moves time forward by `d`, firing timers on both sides.
    pub fn advance(&mut self, d: Duration) -> Result<(), PairError> {
        self.elapsed += d;
        let now = now_at(self.elapsed);
        self.session.handle_input(now, session::Input::Timeout)?;
        self.daemon.handle_input(now, daemon::Input::Timeout)?;
        self.drive()
    }

    /// Runs both sides until neither has output and no bytes are in flight; fails with
    /// [`PairError::Unsettled`] if that takes more than [`DRIVE_BOUND`] rounds.
    pub fn drive(&mut self) -> Result<(), PairError> {
        for _ in 0..DRIVE_BOUND {
            let mut busy = self.pump_session()?;
            busy |= self.pump_daemon()?;
            busy |= self.deliver()?;
            if !busy {
                return Ok(());
            }
        }
        Err(PairError::Unsettled(DRIVE_BOUND))
    }

    fn pump_session(&mut self) -> Result<bool, PairError> {
        let mut any = false;
        loop {
            match self.session.poll_output() {
                session::Output::Wait { .. } => return Ok(any),
                session::Output::Transmit { conn, bytes } => {
                    if let Some(link) = self.link.as_mut().filter(|l| l.conn == conn) {
                        let mut framed = Vec::new();
                        encode_frame(&bytes, DEFAULT_MAX_FRAME_LEN, &mut framed)
                            .map_err(PairError::Unsendable)?;
                        link.to_daemon.bytes.extend(framed);
                    }
                }
                session::Output::Close { conn, code, .. } => {
                    self.session_closes.push(code);
                    if self.link.as_ref().is_some_and(|l| l.conn == conn) {
                        self.link = None;
                        let input = daemon::Input::Disconnected { code: Some(code) };
                        self.daemon.handle_input(now_at(self.elapsed), input)?;
                    }
                }
                session::Output::Event(e) => self.session_events.push(e),
            }
            any = true;
        }
    }

    fn pump_daemon(&mut self) -> Result<bool, PairError> {
        let mut any = false;
        loop {
            let out = self.daemon.poll_output();
            match out {
                daemon::Output::Wait { .. } => return Ok(any),
                daemon::Output::Transmit(bytes) => {
                    if let Some(link) = self.link.as_mut() {
                        let mut framed = Vec::new();
                        encode_frame(&bytes, DEFAULT_MAX_FRAME_LEN, &mut framed)
                            .map_err(PairError::Unsendable)?;
                        link.to_session.bytes.extend(framed);
                    }
                }
                daemon::Output::Close { code, reason } => {
                    self.daemon_closes.push((code, reason));
                    if let Some(link) = self.link.take() {
                        let input = session::Input::Disconnected { conn: link.conn };
                        self.session.handle_input(now_at(self.elapsed), input)?;
                    }
                }
                // The pair restarts a daemon from `pending_results`; the simulation restarts
                // them from these records.
                daemon::Output::Persist(_)
                | daemon::Output::SaveWait { .. }
                | daemon::Output::ForgetWait { .. } => {}
                daemon::Output::Event(e) => self.daemon_events.push(e),
                daemon::Output::Command(c) => {
                    self.daemon_commands.push(c.clone());
                    self.carry_out(c)?;
                }
            }
            any = true;
        }
    }

    fn carry_out(&mut self, command: daemon::Command) -> Result<(), PairError> {
        let now = now_at(self.elapsed);
        match command {
            daemon::Command::Connect => {
                if !self.network_up {
                    let input = daemon::Input::ConnectFailed {
                        stop_forever: false,
                        reason: "network down".into(),
                    };
                    self.daemon.handle_input(now, input)?;
                    return Ok(());
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
                    self.daemon.handle_input(now, input)?;
                    return Ok(());
                };
                let conn = self.next_conn;
                self.next_conn += 1;
                self.link = Some(Link {
                    conn,
                    to_daemon: Wire::new(),
                    to_session: Wire::new(),
                });
                let ticket = issued.ticket.expose_secret();
                self.session
                    .handle_input(now, session::Input::Connect { conn, ticket })?;
                if self.link.as_ref().is_some_and(|l| l.conn == conn) {
                    let input = daemon::Input::Connected {
                        session_id: issued.session_id,
                    };
                    self.daemon.handle_input(now, input)?;
                }
            }
            daemon::Command::Execute(execute) => self.executor.start(&execute),
            daemon::Command::Cancel { run_id, .. } => {
                if let Some(result) = self.executor.cancel(&run_id) {
                    self.daemon
                        .handle_input(now, daemon::Input::RunFinished { run_id, result })?;
                }
            }
            daemon::Command::FetchCapability { run_id, sha256, .. } => {
                let bundle = self.bundles.get(&sha256).cloned().unwrap_or_default();
                self.daemon
                    .handle_input(now, daemon::Input::CapabilityFetched { run_id, bundle })?;
            }
            // Recorded in `daemon_commands`; the pair has no grant, terminal or condition
            // engine to act on (a test feeds `WaitChecked` itself).
            daemon::Command::ApplyGrant { .. }
            | daemon::Command::CheckWait { .. }
            | daemon::Command::StopCheck { .. }
            | daemon::Command::Stop { .. }
            | daemon::Command::PtyInput { .. }
            | daemon::Command::PtyResize { .. }
            | daemon::Command::PtyClose { .. }
            | daemon::Command::PtyCredit { .. }
            | daemon::Command::Control { .. } => {}
        }
        Ok(())
    }

    /// Moves one chunk each way. Returns whether any byte moved.
    fn deliver(&mut self) -> Result<bool, PairError> {
        let now = now_at(self.elapsed);
        let max_chunk = self.config.max_chunk.max(1) as u64;
        let Some(link) = self.link.as_mut() else {
            return Ok(false);
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
            self.daemon.handle_input(now, daemon::Input::Frame(frame))?;
        }
        for bytes in to_session {
            self.session
                .handle_input(now, session::Input::Frame { conn, bytes })?;
        }
        Ok(moved)
    }
}
