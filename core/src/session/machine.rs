//! The session's API, connection handling, dispatch and leases.

use crate::ids::RunId;
use sha2::{Digest as _, Sha256};

use super::runs::RunState;
use super::*;
use crate::ticket::{ConnectTicket, TicketError};
use crate::time::NextWake;
use crate::wire::{PROTOCOL_VERSION, Refusal, ServerFrame, Violation, close_code};

const RECENTLY_ENDED: usize = 4096;
const OUTSTANDING_TICKETS: usize = 16;

/// A ticket and the session id that comes with it.
#[derive(Debug, Clone)]
pub struct IssuedTicket {
    /// The bearer secret for `?ticket=`.
    pub ticket: ConnectTicket,
    /// The session id every frame on that connection will carry.
    pub session_id: String,
}

impl Session {
    /// A session for a machine with `grant` (version 1), signing frames with `signer`.
    pub fn new(
        config: SessionConfig,
        grant: Grant,
        signer: Arc<dyn Signer + Send + Sync>,
        now: Now,
    ) -> Self {
        let tickets = TicketStore::new(config.ticket_ttl_secs, OUTSTANDING_TICKETS);
        Self {
            now,
            outputs: VecDeque::new(),
            conn: None,
            runs: BTreeMap::new(),
            silence_limit: config.silence_limit,
            revoked: false,
            grant_version: 1,
            cold: Box::new(Cold {
                config,
                signer,
                grant,
                tickets,
                ended: RecentlyEnded::new(RECENTLY_ENDED),
            }),
        }
    }

    /// The context this session serves.
    pub fn context_id(&self) -> &str {
        &self.cold.config.context_id
    }

    /// The grant in force and its version.
    pub fn grant(&self) -> (&Grant, u64) {
        (&self.cold.grant, self.grant_version)
    }

    /// Whether the machine was revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked
    }

    /// Whether a daemon is connected and has said hello.
    pub fn is_ready(&self) -> bool {
        matches!(
            self.conn,
            Some(Connection {
                state: ConnState::Ready { .. },
                ..
            })
        )
    }

    /// Whether the daemon said it is draining (it takes no new run until it is back).
    pub fn is_draining(&self) -> bool {
        matches!(
            self.conn,
            Some(Connection {
                state: ConnState::Ready { draining: true, .. },
                ..
            })
        )
    }

    /// Whether the daemon said an operator's pause holds (it takes no new run until resumed).
    pub fn is_paused(&self) -> bool {
        matches!(
            self.conn,
            Some(Connection {
                state: ConnState::Ready { paused: true, .. },
                ..
            })
        )
    }

    /// Runs dispatched or committed and not yet ended.
    pub fn in_flight(&self) -> usize {
        self.runs.len()
    }

    /// Slots the connected daemon holds (0 when none is ready).
    pub fn max_concurrent(&self) -> u32 {
        match &self.conn {
            Some(Connection {
                state: ConnState::Ready { max_concurrent, .. },
                ..
            }) => *max_concurrent,
            _ => 0,
        }
    }

    /// Optional behaviours the connected daemon announced (empty when none is ready).
    pub fn features(&self) -> &[String] {
        match &self.conn {
            Some(Connection {
                state: ConnState::Ready { features, .. },
                ..
            }) => features,
            _ => &[],
        }
    }

    /// The environments the connected daemon announced it runs (none while not connected).
    pub fn environments(&self) -> Vec<Environment> {
        match &self.conn {
            Some(Connection {
                state: ConnState::Ready { environments, .. },
                ..
            }) => environments.clone(),
            _ => Vec::new(),
        }
    }

    /// Whether the connected daemon runs `environment` (false while not connected).
    pub fn supports(&self, environment: Environment) -> bool {
        match &self.conn {
            Some(Connection {
                state: ConnState::Ready { environments, .. },
                ..
            }) => environments.contains(&environment),
            _ => false,
        }
    }

    /// The live connection, if any.
    pub fn connection(&self) -> Option<ConnId> {
        self.conn.as_ref().map(|c| c.id)
    }

    /// Whether a run for `environment` would be dispatched now.
    pub fn has_free_slot(&self, environment: Environment) -> bool {
        match &self.conn {
            Some(Connection {
                state:
                    ConnState::Ready {
                        max_concurrent,
                        environments,
                        draining,
                        ..
                    },
                ..
            }) => {
                !draining
                    && environments.contains(&environment)
                    && (self.runs.len() as u64) < u64::from(*max_concurrent)
            }
            _ => false,
        }
    }

    /// Ids of committed runs (their leases are running).
    pub fn committed_runs(&self) -> Vec<RunId> {
        self.runs
            .iter()
            .filter(|(_, r)| matches!(r.state, RunState::Committed { .. }))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Issues a connect ticket from 48 random bytes supplied by the host.
    pub fn issue_ticket(&mut self, random: [u8; 48]) -> Result<IssuedTicket, TicketError> {
        if self.revoked {
            return Err(TicketError::Unknown);
        }
        let digest = Sha256::digest(random);
        let session_id = format!("sess_{}", hex::encode(&digest[..12]));
        let ticket = self
            .cold
            .tickets
            .issue(random, &session_id, self.now.wall)?;
        Ok(IssuedTicket { ticket, session_id })
    }

    /// Takes in connect ticket `ticket`, issued for this machine by another node of a cluster
    /// as `session_id` and valid until `expires_at` (the host checked it against the shared
    /// copy and spent that): the next `Connect` with it opens. A revoked machine takes none.
    pub fn admit_ticket(
        &mut self,
        ticket: &str,
        session_id: &str,
        expires_at: crate::time::UnixTime,
    ) -> Result<(), TicketError> {
        if self.revoked {
            return Err(TicketError::Unknown);
        }
        self.cold
            .tickets
            .admit(ticket, session_id, expires_at, self.now.wall)
    }

    /// Whether `ticket` is one of this session's outstanding connect tickets, usable at
    /// `now`, without spending it (the session spends it on `Connect`, where a revoked
    /// machine is refused with its close code, as before the look).
    pub fn holds_ticket(
        &self,
        ticket: &str,
        now: crate::time::UnixTime,
    ) -> Result<(), TicketError> {
        self.cold.tickets.peek(ticket, now).map(|_| ())
    }

    /// Feeds one input at time `now`.
    pub fn handle_input(&mut self, now: Now, input: Input) -> Result<(), SessionError> {
        if self.outputs.len() > MAX_QUEUED_OUTPUTS {
            return Err(SessionError::OutputBacklog);
        }
        if now.instant < self.now.instant {
            return Err(SessionError::TimeWentBackwards);
        }
        self.now = now;
        match input {
            Input::Timeout => self.on_timeout(),
            Input::Connect { conn, ticket } => self.on_connect(conn, &ticket),
            Input::Frame { conn, bytes } => self.on_frame(conn, &bytes),
            Input::Disconnected { conn } => {
                if self.conn.as_ref().is_some_and(|c| c.id == conn) {
                    self.drop_connection();
                }
            }
            Input::Submit(spec) => return self.submit(spec),
            Input::Cancel { run_id, reason } => self.cancel(&run_id, reason),
            Input::UpdateGrant(grant) => {
                // The slot cap applies to the live connection at once (PROTOCOL §4.4); runs
                // already in flight over it finish, new offers wait for a free slot.
                if let Some(Connection {
                    state:
                        ConnState::Ready {
                            announced,
                            max_concurrent,
                            ..
                        },
                    ..
                }) = self.conn.as_mut()
                {
                    *max_concurrent = (*announced).min(grant.limits.max_concurrent);
                }
                self.cold.grant = grant.clone();
                self.grant_version += 1;
                let version = self.grant_version;
                self.send(ServerFrame::GrantUpdate {
                    grant_version: version,
                    grant,
                });
            }
            Input::Revoke => self.revoke(),
            Input::Terminal { run_id, action } => self.on_terminal(run_id, action),
            Input::Wait(order) => self.on_wait_order(order),
            Input::Control(order) => self.on_control_order(order),
        }
        Ok(())
    }

    /// The next output; [`Output::Wait`] comes last.
    pub fn poll_output(&mut self) -> Output {
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        let (until, reason) = self.next_timer();
        Output::Wait { until, reason }
    }

    /// When the session must next get [`Input::Timeout`], and why; `None` when it has no
    /// timer running (it is idle until new input). Unlike [`Session::poll_output`] it pops
    /// nothing, so a dispatcher can keep many sessions' wake-ups in a table without losing
    /// outputs.
    pub fn poll_timeout(&self) -> Option<(Instant, &'static str)> {
        self.timers().timer()
    }

    fn next_timer(&self) -> (Instant, &'static str) {
        self.timers().get()
    }

    fn timers(&self) -> NextWake {
        let mut wake = NextWake::idle(self.now.instant);
        if let Some(c) = &self.conn {
            wake.consider(c.last_heard.saturating_add(self.silence_limit), "silence");
            if let ConnState::AwaitingHello { deadline } = c.state {
                wake.consider(deadline, "hello timeout");
            }
        }
        for run in self.runs.values() {
            match run.state {
                RunState::Committed { lost_at, .. } => wake.consider(lost_at, "lease"),
                RunState::Dispatched { deadline, .. } => wake.consider(deadline, "offer"),
            }
        }
        wake
    }

    /// The host was not running for `by` (a stopped process, a suspended machine): every
    /// deadline that measures the daemon's silence — leases, offers, `hello`, the
    /// connection's silence — moves on by `by`, so a daemon is never blamed for silence the
    /// server itself caused. The caller re-journals the leases that moved.
    pub(crate) fn shift_timers(&mut self, by: Duration) {
        for run in self.runs.values_mut() {
            match &mut run.state {
                RunState::Committed { lost_at, .. } => *lost_at = lost_at.saturating_add(by),
                RunState::Dispatched { deadline, .. } => *deadline = deadline.saturating_add(by),
            }
        }
        if let Some(c) = self.conn.as_mut() {
            c.last_heard = c.last_heard.saturating_add(by);
            if let ConnState::AwaitingHello { deadline } = &mut c.state {
                *deadline = deadline.saturating_add(by);
            }
        }
    }

    fn on_timeout(&mut self) {
        let now = self.now.instant;
        let lost: Vec<RunId> = self
            .runs
            .iter()
            .filter(
                |(_, r)| matches!(r.state, RunState::Committed { lost_at, .. } if lost_at <= now),
            )
            .map(|(id, _)| id.clone())
            .collect();
        for run_id in lost {
            // Tell a still-connected daemon to stop it: its lease is gone.
            self.send(ServerFrame::RunCancel {
                run_id: run_id.clone(),
                reason: "lease_lost".into(),
            });
            self.end(&run_id, RunOutcome::Lost);
        }
        let unanswered: Vec<RunId> = self
            .runs
            .iter()
            .filter(
                |(_, r)| matches!(r.state, RunState::Dispatched { deadline, .. } if deadline <= now),
            )
            .map(|(id, _)| id.clone())
            .collect();
        for run_id in unanswered {
            // Withdraw the offer: a late accept then finds nothing to commit.
            self.send(ServerFrame::RunCancel {
                run_id: run_id.clone(),
                reason: "offer_unanswered".into(),
            });
            self.end(&run_id, RunOutcome::Unanswered);
        }
        if let Some(c) = &self.conn {
            let id = c.id;
            if let ConnState::AwaitingHello { deadline } = c.state
                && deadline <= now
            {
                self.close(id, close_code::PROTOCOL_ERROR, "no hello in time");
                self.drop_connection();
                return;
            }
            if c.last_heard.saturating_add(self.silence_limit) <= now {
                self.outputs
                    .push_back(Output::Event(Event::Silent { conn: id }));
                self.close(id, close_code::GOING_AWAY, "silent for too long");
                self.drop_connection();
            }
        }
    }

    fn on_connect(&mut self, conn: ConnId, ticket: &str) {
        if self.revoked {
            self.refuse(conn, close_code::REVOKED, Refusal::Revoked.code());
            return;
        }
        let session_id = match self.cold.tickets.consume(ticket, self.now.wall) {
            Ok(sid) => sid,
            Err(e) => {
                self.refuse(conn, close_code::POLICY_VIOLATION, e.code());
                return;
            }
        };
        if let Some(old) = self.conn.as_ref().map(|c| c.id) {
            self.close(old, close_code::REPLACED, "replaced by a newer connection");
            self.drop_connection();
        }
        self.conn = Some(Connection {
            id: conn,
            frames: FrameSigner::new(session_id),
            state: ConnState::AwaitingHello {
                deadline: self
                    .now
                    .instant
                    .saturating_add(self.cold.config.hello_timeout),
            },
            last_heard: self.now.instant,
        });
        let welcome = ServerFrame::Welcome {
            context_id: self.cold.config.context_id.clone(),
            protocol: PROTOCOL_VERSION,
            grant_version: self.grant_version,
            grant: self.cold.grant.clone(),
            heartbeat_secs: self.cold.config.heartbeat_secs,
            features: vec![crate::wire::FEATURE_RUN_OUTPUT.to_owned()],
        };
        self.send(welcome);
    }

    fn refuse(&mut self, conn: ConnId, code: u16, why: &'static str) {
        self.outputs
            .push_back(Output::Event(Event::ConnectRefused { conn, code: why }));
        self.close(conn, code, why);
    }

    /// Forgets the connection: offers it had not committed end `Offline` (never started).
    pub(super) fn drop_connection(&mut self) {
        if self.conn.take().is_none() {
            return;
        }
        let unstarted: Vec<RunId> = self
            .runs
            .iter()
            .filter(|(_, r)| matches!(r.state, RunState::Dispatched { .. }))
            .map(|(id, _)| id.clone())
            .collect();
        for run_id in unstarted {
            self.end(&run_id, RunOutcome::Offline);
        }
        self.outputs.push_back(Output::Event(Event::Offline));
    }

    fn submit(&mut self, spec: RunSpec) -> Result<(), SessionError> {
        if self.runs.contains_key(&spec.run_id) || self.cold.ended.contains(&spec.run_id) {
            return Err(SessionError::DuplicateRun(spec.run_id));
        }
        let run_id = spec.run_id.clone();
        if self.revoked {
            self.end_unstarted(
                run_id,
                RunOutcome::Rejected {
                    code: Refusal::Revoked.code().into(),
                    message: "the machine was revoked".into(),
                },
            );
            return Ok(());
        }
        let (conn, environments) = match &self.conn {
            Some(Connection {
                id,
                state: ConnState::Ready { environments, .. },
                ..
            }) => (*id, environments.clone()),
            _ => {
                self.end_unstarted(run_id, RunOutcome::Offline);
                return Ok(());
            }
        };
        if !environments.contains(&spec.environment) {
            let message = format!("no {} executor on this machine", spec.environment.as_str());
            self.end_unstarted(
                run_id,
                RunOutcome::Rejected {
                    code: Refusal::EnvironmentUnavailable.code().into(),
                    message,
                },
            );
            return Ok(());
        }
        if !self.has_free_slot(spec.environment) {
            self.end_unstarted(run_id, RunOutcome::Busy);
            return Ok(());
        }
        let frame = ServerFrame::RunRequest {
            run_id: run_id.clone(),
            environment: spec.environment,
            capability: spec.capability.clone(),
            timeout_ms: spec.timeout_ms,
            shared_run: spec.shared_run,
            requester: spec.requester.clone(),
        };
        let deadline = self
            .now
            .instant
            .saturating_add(self.cold.config.offer_timeout);
        self.runs.insert(
            run_id,
            ServerRun {
                spec,
                state: RunState::Dispatched { conn, deadline },
            },
        );
        self.send(frame);
        Ok(())
    }

    /// A run that never entered the table ends at once.
    fn end_unstarted(&mut self, run_id: RunId, outcome: RunOutcome) {
        self.cold.ended.insert(run_id.clone());
        self.outputs
            .push_back(Output::Event(Event::RunEnded { run_id, outcome }));
    }

    /// Ends a run in the table, exactly once.
    pub(super) fn end(&mut self, run_id: &str, outcome: RunOutcome) {
        if self.runs.remove(run_id).is_none() {
            return;
        }
        self.cold.ended.insert(run_id.into());
        self.outputs.push_back(Output::Event(Event::RunEnded {
            run_id: run_id.into(),
            outcome,
        }));
    }

    fn cancel(&mut self, run_id: &str, reason: String) {
        if !self.runs.contains_key(run_id) {
            return;
        }
        self.send(ServerFrame::RunCancel {
            run_id: run_id.into(),
            reason: reason.clone(),
        });
        self.end(run_id, RunOutcome::Cancelled { reason });
    }

    fn revoke(&mut self) {
        if self.revoked {
            return;
        }
        self.revoked = true;
        self.send(ServerFrame::Revoked {
            reason: "the machine's key was revoked".into(),
        });
        let ids: Vec<RunId> = self.runs.keys().cloned().collect();
        for run_id in ids {
            self.end(
                &run_id,
                RunOutcome::Cancelled {
                    reason: "revoked".into(),
                },
            );
        }
        if let Some(id) = self.conn.as_ref().map(|c| c.id) {
            self.close(id, close_code::REVOKED, Refusal::Revoked.code());
            self.conn = None;
            self.outputs.push_back(Output::Event(Event::Offline));
        }
    }

    /// The session id of the live connection (a test signs frames for it).
    #[cfg(any(test, feature = "test-support"))]
    pub fn session_id_for_test(&self) -> Option<String> {
        self.conn.as_ref().map(|c| c.frames.session_id().to_owned())
    }

    /// Misbehaves as a faulty server would: signs and sends `run.request` and `run.commit` for
    /// `spec` on the live connection without recording anything. Returns whether a connection
    /// was there.
    #[cfg(any(test, feature = "test-support"))]
    pub fn resend_run_for_test(&mut self, spec: RunSpec) -> bool {
        if self.conn.is_none() {
            return false;
        }
        let run_id = spec.run_id.clone();
        self.send(ServerFrame::RunRequest {
            run_id: run_id.clone(),
            environment: spec.environment,
            capability: spec.capability,
            timeout_ms: spec.timeout_ms,
            shared_run: spec.shared_run,
            requester: spec.requester,
        });
        self.send(ServerFrame::RunCommit { run_id });
        true
    }

    /// Signs and sends a frame on the live connection, if there is one.
    pub(super) fn send(&mut self, frame: ServerFrame) {
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        match c.frames.sign(&frame, self.cold.signer.as_ref()) {
            Ok(bytes) => {
                let conn = c.id;
                self.outputs.push_back(Output::Transmit { conn, bytes });
            }
            Err(e) => {
                let conn = c.id;
                self.outputs
                    .push_back(Output::Event(Event::ProtocolViolation {
                        conn,
                        code: Violation::SignerFailed.code(),
                        detail: e.to_string(),
                    }));
                self.close(conn, close_code::INTERNAL_ERROR, "cannot sign frames");
                self.drop_connection();
            }
        }
    }

    pub(super) fn close(&mut self, conn: ConnId, code: u16, reason: &str) {
        self.outputs.push_back(Output::Close {
            conn,
            code,
            reason: reason.to_owned(),
        });
    }
}
