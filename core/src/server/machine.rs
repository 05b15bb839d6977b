//! The dispatcher's API and its walk from candidate to candidate. It decides where an
//! execution goes next; it never runs anything, and never offers a started run elsewhere.

use crate::ids::{ContextId, ExecutionId};
use std::time::Duration;

use super::*;
use crate::routing::{
    AttemptOutcome, Candidate, ContextView, Plan, RoutingError, WhenOffline, check_access,
    friendly_line, plan,
};
use crate::session::{self, IssuedTicket, RunSpec};
use crate::ticket::TicketError;
use crate::time::NextWake;
use crate::wire::Refusal;

impl Server {
    /// A dispatcher whose sessions sign frames with `signer` and use `session_template`
    /// (its `context_id` is replaced per machine).
    pub fn new(
        signer: Arc<dyn Signer + Send + Sync>,
        session_template: SessionConfig,
        now: Now,
    ) -> Self {
        Self {
            signer,
            session_template,
            machines: Registry::default(),
            conns: HashMap::default(),
            chains: BTreeMap::new(),
            executions: BTreeMap::new(),
            next_arrival: 0,
            runs: BTreeMap::new(),
            restored_commits: BTreeMap::new(),
            session_wakes: SessionWakes::default(),
            queue_wakes: WakeTable::default(),
            outputs: VecDeque::new(),
            journal: super::record::ServerJournal::new(now),
            now,
            grace_until: None,
            asked: None,
        }
    }

    /// The session of `context_id`.
    pub fn session(&self, context_id: &str) -> Option<&Session> {
        self.machines.get(context_id).map(|m| &m.session)
    }

    /// Every machine whose daemon is connected here and ready (its `hello` taken), with its
    /// access record, in id order: what a node lists as its sessions, without asking anything
    /// of its store.
    pub fn ready_sessions(&self) -> impl Iterator<Item = (&ContextRecord, &Session)> {
        self.machines
            .in_order()
            .filter(|m| !m.elsewhere && m.session.is_ready())
            .map(|m| (&m.record, &m.session))
    }

    /// Registers a machine not registered yet; a rank change re-keys the wake-up table.
    pub(super) fn add_machine(&mut self, id: String, machine: Machine) {
        let (slot, reranked) = self.machines.insert(id, machine);
        self.session_wakes.push(self.machines.rank(slot));
        if reranked {
            let machines = &self.machines;
            self.session_wakes.rerank(|slot| machines.rank(slot));
        }
    }

    /// The run `run_id` if it is committed (started) on a machine and not finished yet.
    pub fn live_run(&self, run_id: &str) -> Option<LiveRun> {
        let exec_id = self.runs.get(run_id)?;
        let execution = self.executions.get(exec_id)?;
        let Place::OnContext {
            context_id,
            run_id: placed,
            started: true,
        } = &execution.place
        else {
            return None;
        };
        if placed != run_id {
            return None;
        }
        let requester = execution.request.requester.user_id.clone();
        let operator_now = self
            .machines
            .get(context_id)
            .is_some_and(|m| m.record.operator == requester && m.record.operator_is_member);
        Some(LiveRun {
            exec_id: exec_id.clone(),
            context_id: context_id.clone(),
            requester,
            operator_now,
        })
    }

    /// Makes the session of `context_id` send `spec` again as a faulty server would (see
    /// [`Session::resend_run_for_test`]).
    #[cfg(any(test, feature = "test-support"))]
    pub fn resend_run_for_test(&mut self, context_id: &str, spec: RunSpec) -> bool {
        let Some(slot) = self.machines.slot(context_id) else {
            return false;
        };
        let sent = self.machines.at_mut(slot).session.resend_run_for_test(spec);
        self.pump_slot(slot);
        sent
    }

    /// Whether this dispatcher holds `exec_id` (received here or handed here, not ended, not
    /// handed off).
    pub fn holds(&self, exec_id: &str) -> bool {
        self.executions.contains_key(exec_id)
    }

    /// Executions not yet finished.
    pub fn executions_in_flight(&self) -> usize {
        self.executions.len()
    }

    /// Issues a connect ticket for `context_id` (the answer to a signed ticket request),
    /// valid from the time of the dispatcher's latest input.
    pub fn issue_ticket(
        &mut self,
        context_id: &str,
        random: [u8; 48],
    ) -> Result<IssuedTicket, TicketError> {
        if !self.machines.contains(context_id) {
            return Err(TicketError::Unknown);
        }
        // Only due sessions get timeouts: bring this one's clock up to now before it stamps
        // the ticket. What that timeout decides (a lease that ran out) is journaled ahead of
        // its outputs, as an input's is.
        let mark = self.outputs.len();
        self.feed_or_report(context_id, session::Input::Timeout);
        self.flush_journal(mark);
        let machine = self
            .machines
            .get_mut(context_id)
            .ok_or(TicketError::Unknown)?;
        machine.session.issue_ticket(random)
    }

    /// Takes in a connect ticket another node issued for `context_id` ([`Session::admit_ticket`]);
    /// a machine not known here, or owned elsewhere, takes none (`ticket_unknown`).
    pub fn admit_ticket(
        &mut self,
        context_id: &str,
        ticket: &str,
        session_id: &str,
        expires_at: crate::time::UnixTime,
    ) -> Result<(), TicketError> {
        match self.machines.get_mut(context_id) {
            Some(m) if !m.elsewhere => m.session.admit_ticket(ticket, session_id, expires_at),
            _ => Err(TicketError::Unknown),
        }
    }

    /// The context whose session issued the connect ticket `ticket`, without spending it:
    /// what the host checks at `now` (its wall clock) before it opens the WebSocket (the
    /// session spends the ticket on [`Input::Connect`]). `ticket_malformed`, `ticket_unknown`
    /// (never issued, used or wrong) or `ticket_expired`. It asks every session in turn: one
    /// hash lookup each, and the route that calls it is rate-limited per address.
    pub fn ticket_context(
        &self,
        ticket: &str,
        now: crate::time::UnixTime,
    ) -> Result<&str, TicketError> {
        let mut refusal = TicketError::Unknown;
        for slot in 0..self.machines.len() {
            let machine = self.machines.at(slot);
            match machine.session.holds_ticket(ticket, now) {
                Ok(()) => return Ok(machine.session.context_id()),
                Err(TicketError::Malformed) => return Err(TicketError::Malformed),
                Err(e @ TicketError::Expired(_)) => refusal = e,
                Err(_) => {}
            }
        }
        Err(refusal)
    }

    /// Feeds one input at time `now`. The records it produces ([`Output::Persist`]) are
    /// queued ahead of its other outputs.
    ///
    /// # Errors
    ///
    /// [`ServerError::OutputBacklog`] when more than
    /// [`MAX_QUEUED_OUTPUTS`](crate::MAX_QUEUED_OUTPUTS) outputs wait to be polled,
    /// [`ServerError::TimeWentBackwards`] when `now` is before the previous input's; the input
    /// is ignored. Errors for the host's own mistakes (unknown machine, duplicate execution)
    /// and from the session an input was for.
    pub fn handle_input(&mut self, now: Now, input: Input) -> Result<(), ServerError> {
        if self.outputs.len() > crate::MAX_QUEUED_OUTPUTS {
            return Err(ServerError::OutputBacklog);
        }
        if now.instant < self.now.instant {
            return Err(ServerError::TimeWentBackwards);
        }
        if let Some(context_id) = self.names_elsewhere(&input) {
            return Err(ServerError::OwnedElsewhere(context_id));
        }
        if let Input::SetChain { user_id, chain } = &input
            && self.chains.get(user_id) == Some(chain)
        {
            // Nothing changes, so nothing is written (a chain another node set and this one
            // learnt is not written back).
            return Ok(());
        }
        let mark = self.outputs.len();
        self.journal.touch_input(&input);
        let result = self.apply_input(now, input);
        self.flush_journal(mark);
        result
    }

    fn apply_input(&mut self, now: Now, input: Input) -> Result<(), ServerError> {
        self.notice_pause(now.instant);
        self.now = now;
        match input {
            Input::Timeout => {
                for slot in self.session_wakes.due(now.instant) {
                    if let Err(error) = self.feed_slot(slot, session::Input::Timeout) {
                        let context_id = self.machines.at(slot).session.context_id().to_owned();
                        self.report(&context_id, error);
                    }
                }
                self.expire_queues();
            }
            Input::Register { record, grant } => {
                let id = record.id.clone();
                if let Some(m) = self.machines.get_mut(&id) {
                    m.record = record;
                } else {
                    let mut config = self.session_template.clone();
                    config.context_id = id.as_str().into();
                    let session = Session::new(config, grant, self.signer.clone(), self.now);
                    self.add_machine(
                        id.into_string(),
                        Machine {
                            record,
                            session,
                            elsewhere: false,
                        },
                    );
                }
            }
            Input::Connect {
                context_id,
                conn,
                ticket,
            } => {
                let Some(slot) = self.machines.slot(&context_id) else {
                    return Err(ServerError::UnknownContext(context_id));
                };
                self.conns.insert(conn, slot);
                let fed = self.feed_slot(slot, session::Input::Connect { conn, ticket });
                if fed.is_err() {
                    self.conns.remove(&conn);
                }
                fed?;
            }
            Input::Frame { conn, bytes } => {
                if let Some(&slot) = self.conns.get(&conn) {
                    self.feed_slot(slot, session::Input::Frame { conn, bytes })?;
                }
            }
            Input::Disconnected { conn } => {
                if let Some(slot) = self.conns.remove(&conn) {
                    self.feed_slot(slot, session::Input::Disconnected { conn })?;
                }
            }
            Input::Execute(request) => {
                let exec_id = request.exec_id.clone();
                if self.executions.contains_key(&exec_id) {
                    return Err(ServerError::DuplicateExecution(exec_id));
                }
                self.next_arrival += 1;
                self.executions.insert(
                    exec_id.clone(),
                    Execution {
                        request: *request,
                        route: None,
                        place: Place::Unplaced,
                        hops: 0,
                        arrival: self.next_arrival,
                    },
                );
                self.place(&exec_id);
            }
            Input::CloudFinished { exec_id, result } => {
                if matches!(
                    self.executions.get(&exec_id).map(|e| &e.place),
                    Some(Place::OnCloud)
                ) {
                    self.finish(&exec_id, ExecutionOutcome::Completed(result));
                }
            }
            Input::Cancel { exec_id } => self.cancel(&exec_id, "requested"),
            Input::SetChain { user_id, chain } => {
                self.chains.insert(user_id, chain);
            }
            Input::UpdateAccess(record) => {
                let id = record.id.clone();
                if let Some(m) = self.machines.get_mut(&id) {
                    m.record = record;
                }
                self.recheck_access(&id);
            }
            Input::UpdateGrant { context_id, grant } => {
                if !self.machines.contains(&context_id) {
                    return Err(ServerError::UnknownContext(context_id));
                }
                self.feed_session(&context_id, session::Input::UpdateGrant(grant))?;
                self.recheck_access(&context_id);
            }
            Input::Revoke { context_id } => {
                if !self.machines.contains(&context_id) {
                    return Err(ServerError::UnknownContext(context_id));
                }
                self.feed_session(&context_id, session::Input::Revoke)?;
                self.replan_queued(&context_id);
            }
            Input::Terminal { exec_id, action } => {
                // Only an execution committed on a machine has a terminal; anything else
                // (not started yet, ended, on the cloud) has nobody to tell.
                if let Some(Execution {
                    place:
                        Place::OnContext {
                            context_id,
                            run_id,
                            started: true,
                        },
                    ..
                }) = self.executions.get(&exec_id)
                {
                    let (context_id, run_id) = (context_id.clone(), run_id.clone());
                    self.feed_session(&context_id, session::Input::Terminal { run_id, action })?;
                }
            }
            Input::Wait { context_id, order } => {
                if self.machines.contains(&context_id) {
                    self.feed_session(&context_id, session::Input::Wait(order))?;
                } else {
                    return Err(ServerError::UnknownContext(context_id));
                }
            }
            Input::Control { context_id, order } => {
                if self.machines.contains(&context_id) {
                    self.feed_session(&context_id, session::Input::Control(order))?;
                } else {
                    return Err(ServerError::UnknownContext(context_id));
                }
            }
            Input::Elsewhere(row) => self.release(&row),
            Input::Adopt(snapshot) => self.adopt(&snapshot)?,
            Input::HandedOver(rows) => self.take_handed_over(&rows),
            Input::TakeOver(rows) => self.take_over(&rows),
        }
        Ok(())
    }

    /// The next output; [`Output::Wait`] comes last.
    pub fn poll_output(&mut self) -> Output {
        if let Some(out) = self.outputs.pop_front() {
            return out;
        }
        let (until, reason) = self.poll_timeout();
        self.asked = Some(until);
        Output::Wait { until, reason }
    }

    /// When the dispatcher must next get [`Input::Timeout`], and why, in O(log n); pops
    /// nothing. While a deadline runs this is at most [`super::PAUSE_PROBE`] away (reason
    /// `pause probe`), so a pause of the host shows as a late input.
    pub fn poll_timeout(&self) -> (Instant, &'static str) {
        let mut wake = NextWake::idle(self.now.instant);
        if let Some((until, reason)) = self.next_deadline() {
            wake.consider(until, reason);
        }
        if self.session_wakes.first().is_some() || self.queue_wakes.first().is_some() {
            // Something runs against a deadline: wake often enough to notice a pause.
            wake.consider(
                self.now.instant.saturating_add(super::PAUSE_PROBE),
                "pause probe",
            );
        }
        wake.get()
    }

    /// The earliest deadline of any machine or queue (a lease, an offer, a connection's
    /// silence, a queue's end, the restart grace), and why; `None` when none runs.
    pub fn next_deadline(&self) -> Option<(Instant, &'static str)> {
        match (self.session_wakes.first(), self.queue_wakes.first()) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// What the routing functions see of every machine, for a run in `environment`.
    pub(super) fn views(&self, environment: Environment) -> Vec<ContextView> {
        self.machines
            .in_order()
            .map(|m| {
                let (grant, _) = m.session.grant();
                let online = m.session.is_ready();
                let unusable = if m.elsewhere {
                    Some(crate::routing::OWNED_ELSEWHERE.to_owned())
                } else if m.session.is_revoked() {
                    Some(Refusal::Revoked.code().to_owned())
                } else if !grant.allows(environment) {
                    Some(Refusal::EnvironmentNotGranted.code().to_owned())
                } else if online && !m.session.supports(environment) {
                    Some(Refusal::EnvironmentUnavailable.code().to_owned())
                } else {
                    None
                };
                let features = m.session.features().to_vec();
                ContextView {
                    id: m.record.id.to_string(),
                    name: m.record.name.clone(),
                    operator: m.record.operator.clone(),
                    online,
                    busy: online && !m.session.has_free_slot(environment),
                    draining: online && m.session.is_draining(),
                    paused: online && m.session.is_paused(),
                    unusable,
                    local_fs_available: features.iter().any(|f| f == "fs"),
                    features,
                    grant_has_fs: !grant.fs.is_empty(),
                    commands_enabled: grant.commands.enabled,
                    shared_with_all_members: m.record.shared_with_all_members,
                    opted_in: m.record.opted_in.clone(),
                    operator_is_member: m.record.operator_is_member,
                }
            })
            .collect()
    }

    /// Plans an execution from scratch (new, or back from a queue) and places it.
    pub(super) fn place(&mut self, exec_id: &str) {
        let Some(e) = self.executions.get(exec_id) else {
            return;
        };
        // Planned already, from inside a loop over a list taken before (a session's events
        // plan queues and parked runs as they come): its run is live, and planning it again
        // would run it twice.
        match &e.place {
            Place::OnContext { run_id, .. } if self.runs.contains_key(run_id) => return,
            Place::OnCloud => return,
            _ => {}
        }
        self.journal.touch_execution(exec_id);
        let chain = self
            .chains
            .get(&e.request.requester.user_id)
            .cloned()
            .unwrap_or_default();
        let views = self.views(e.request.environment);
        let planned = plan(&e.request.requester, &e.request.target, &chain, &views);
        if self.in_grace() && Self::meets_offline(&planned) {
            // Restarted moments ago: the machine may not have reconnected yet.
            return self.park(exec_id);
        }
        match planned {
            Ok(Plan::Dispatch(route)) => self.dispatch(exec_id, route),
            Ok(Plan::Queue(q)) => self.queue(exec_id, q.id, q.minutes),
            // A queued execution whose machine came back with every slot taken keeps its
            // place and its deadline: it is planned again when a slot frees.
            Err(RoutingError::Busy { .. })
                if matches!(
                    self.executions.get(exec_id).map(|e| &e.place),
                    Some(Place::Queued { .. })
                ) => {}
            Err(err) => self.routing_failed(exec_id, &err),
        }
    }

    /// Puts an execution in the queue of machine `context_id` for `minutes` from now; one that
    /// was waiting already keeps its first deadline.
    fn queue(&mut self, exec_id: &str, context_id: String, minutes: u32) {
        let until = self
            .now
            .instant
            .saturating_add(Duration::from_secs(u64::from(minutes) * 60));
        if let Some(e) = self.executions.get_mut(exec_id) {
            let until = match e.place {
                Place::Queued { until: first, .. } => first,
                _ => until,
            };
            e.place = Place::Queued {
                context_id: context_id.into(),
                until,
            };
            self.journal.touch_execution(exec_id);
            self.queue_wakes
                .set(&ExecutionId::new(exec_id), Some((until, "queue")));
        }
    }

    /// Ends an execution routing could not place, with the error's code and sentence; an
    /// environment a machine cannot run now is named, with the ones it can.
    pub(super) fn routing_failed(&mut self, exec_id: &str, err: &RoutingError) {
        let mut message = err.to_string();
        if let RoutingError::Unusable {
            name,
            reason,
            attempts,
        } = err
            && reason == Refusal::EnvironmentUnavailable.code()
            && let Some(e) = self.executions.get(exec_id)
            && let Some(m) = attempts.last().and_then(|a| self.machines.get(&a.id))
        {
            let environment = e.request.environment;
            let others: Vec<&str> = m
                .session
                .environments()
                .into_iter()
                .filter(|other| *other != environment)
                .map(Environment::as_str)
                .collect();
            let works = match others.as_slice() {
                [] => "it runs no other environment now".to_owned(),
                [one] => format!("its {one} capabilities still run"),
                [rest @ .., last] => {
                    format!("its {} and {last} capabilities still run", rest.join(", "))
                }
            };
            message = format!(
                "{name} cannot run {env} capabilities now: its daemon has no working {env} executor ({reason}); {works}; pass `fallback: \"chain\"` to fall through to your chain",
                env = environment.as_str()
            );
        }
        self.fail(exec_id, err.code(), message);
    }

    /// Offers the execution to the route's current candidate.
    pub(super) fn dispatch(&mut self, exec_id: &str, route: Route) {
        self.journal.touch_execution(exec_id);
        let elsewhere = self.is_owned_elsewhere(route.current().id());
        let Some(e) = self.executions.get_mut(exec_id) else {
            return;
        };
        self.queue_wakes.set(&ExecutionId::new(exec_id), None);
        match route.current().clone() {
            Candidate::Cloud => {
                e.route = Some(route);
                e.place = Place::OnCloud;
                let request = Box::new(e.request.clone());
                self.outputs
                    .push_back(Output::Command(Command::RunOnCloud(request)));
            }
            Candidate::Context { id, .. } if elsewhere => {
                e.route = Some(route);
                self.hand_off(exec_id, id.as_str().into());
            }
            Candidate::Context { id, run, .. } => {
                // Only a forged record could hold this many hops: never reuse a run id.
                let Some(hops) = e.hops.checked_add(1) else {
                    let message = "the execution has been offered too many times".to_owned();
                    self.fail(exec_id, "too_many_hops", message);
                    return;
                };
                e.hops = hops;
                let run_id = RunId::new(format!("{exec_id}.{}", e.hops));
                let spec = RunSpec {
                    run_id: run_id.clone(),
                    environment: e.request.environment,
                    capability: e.request.capability.clone(),
                    timeout_ms: e.request.timeout_ms,
                    shared_run: run == crate::routing::RunKind::Shared,
                    requester: e.request.requester.user_id.clone(),
                };
                e.route = Some(route);
                e.place = Place::OnContext {
                    context_id: id.as_str().into(),
                    run_id: run_id.clone(),
                    started: false,
                };
                self.runs.insert(run_id.clone(), exec_id.into());
                if let Err(error) = self.feed_session(&id, session::Input::Submit(spec)) {
                    // Not offered at all (a run id the session already saw): try the next one.
                    self.runs.remove(&run_id);
                    self.report(&id, error);
                    self.fall_through(exec_id, AttemptOutcome::Unusable, "run_refused");
                }
            }
        }
    }

    /// The current candidate passed on the run before it started: try the next one.
    pub(super) fn fall_through(&mut self, exec_id: &str, outcome: AttemptOutcome, reason: &str) {
        if outcome == AttemptOutcome::Offline && self.in_grace() {
            // The offer died with the connection a restart cut: wait for the machine first.
            return self.park(exec_id);
        }
        let Some(e) = self.executions.get_mut(exec_id) else {
            return;
        };
        // The machine the caller named went offline under its offer (the connection dropped,
        // or its node died and this one adopted the offer): a caller who asked to wait for
        // it when offline waits in its queue, as if it had been offline when asked.
        if outcome == AttemptOutcome::Offline
            && let WhenOffline::Queue { minutes } = e.request.target.when_offline
            && let Some(route) = &e.route
            && e.request.target.context.as_deref() == Some(route.current().id())
        {
            let context_id = route.current().id().to_owned();
            // Queued as a new execution is: planned afresh when it leaves the queue.
            e.route = None;
            return self.queue(exec_id, context_id, minutes);
        }
        let Some(route) = e.route.take() else {
            return;
        };
        let requester = e.request.requester.clone();
        let target = e.request.target.clone();
        let environment = e.request.environment;
        let views = self.views(environment);
        match route.next_after(outcome, reason, &requester, &target, &views) {
            Ok(route) => self.dispatch(exec_id, route),
            Err(err) => self.routing_failed(exec_id, &err),
        }
    }

    fn fail(&mut self, exec_id: &str, code: &str, message: String) {
        self.finish(
            exec_id,
            ExecutionOutcome::Failed {
                code: code.to_owned(),
                message,
            },
        );
    }

    /// Ends an execution, exactly once.
    pub(super) fn finish(&mut self, exec_id: &str, outcome: ExecutionOutcome) {
        let Some(e) = self.executions.remove(exec_id) else {
            return;
        };
        self.queue_wakes.set(&ExecutionId::new(exec_id), None);
        if let Place::OnContext { run_id, .. } = &e.place {
            self.runs.remove(run_id);
            self.restored_commits.remove(run_id);
        }
        let placed = !matches!(outcome, ExecutionOutcome::Failed { .. });
        let ran_on = e.route.as_ref().filter(|_| placed).map(Route::ran_on);
        let line = match (&ran_on, &outcome) {
            (Some(r), _) => friendly_line(r),
            (None, ExecutionOutcome::Failed { message, .. }) => message.clone(),
            (None, ExecutionOutcome::Cancelled { reason }) => format!("Cancelled ({reason})."),
            (None, _) => String::new(),
        };
        let held_on = match &e.place {
            Place::OnContext { context_id, .. } | Place::Queued { context_id, .. } => {
                Some(context_id)
            }
            Place::Unplaced | Place::OnCloud => None,
        };
        self.journal
            .execution_ended(exec_id, &outcome, ran_on.as_ref(), &line, held_on);
        self.outputs
            .push_back(Output::Event(Event::ExecutionFinished {
                exec_id: exec_id.into(),
                outcome,
                ran_on,
                line,
                requester: e.request.requester.user_id.clone(),
            }));
    }

    fn cancel(&mut self, exec_id: &str, reason: &str) {
        let Some(e) = self.executions.get(exec_id) else {
            return;
        };
        match &e.place {
            Place::OnContext {
                context_id, run_id, ..
            } => {
                let (context_id, run_id) = (context_id.clone(), run_id.clone());
                self.feed_or_report(
                    &context_id,
                    session::Input::Cancel {
                        run_id,
                        reason: reason.to_owned(),
                    },
                );
            }
            Place::Unplaced | Place::Queued { .. } => self.finish(
                exec_id,
                ExecutionOutcome::Cancelled {
                    reason: reason.to_owned(),
                },
            ),
            Place::OnCloud => {
                self.outputs
                    .push_back(Output::Command(Command::CancelCloud {
                        exec_id: exec_id.into(),
                    }));
                self.finish(
                    exec_id,
                    ExecutionOutcome::Cancelled {
                        reason: reason.to_owned(),
                    },
                );
            }
        }
    }

    /// Runs on `context_id` whose requester lost access end with `access_lost`.
    fn recheck_access(&mut self, context_id: &str) {
        let on_it: Vec<ExecutionId> = self
            .executions
            .iter()
            .filter(|(_, e)| matches!(&e.place, Place::OnContext { context_id: c, .. } if c == context_id))
            .map(|(id, _)| id.clone())
            .collect();
        for exec_id in on_it {
            let Some(e) = self.executions.get(&exec_id) else {
                continue;
            };
            let views = self.views(e.request.environment);
            let Some(view) = views.iter().find(|v| v.id == context_id) else {
                continue;
            };
            if check_access(&e.request.requester, view, &e.request.target).is_err() {
                self.cancel(&exec_id, "access_lost");
            }
        }
    }

    /// Plans again what waits in `context_id`'s queue, first come first: the first takes a
    /// free slot, and those after it keep their place (and deadline) when none is left.
    /// Each is planned only while it still waits there: placing one feeds the machine's
    /// session, whose events can plan this queue again from inside this loop (its `hello`
    /// ends a lost run, then makes it ready), and a run offered meanwhile must not be planned
    /// a second time (it would be queued again under its live offer, and offered again).
    pub(super) fn replan_queued(&mut self, context_id: &str) {
        let queued_here = |e: &Execution| matches!(&e.place, Place::Queued { context_id: c, .. } if c == context_id);
        let mut waiting: Vec<(u64, ExecutionId)> = self
            .executions
            .iter()
            .filter(|(_, e)| queued_here(e))
            .map(|(id, e)| (e.arrival, id.clone()))
            .collect();
        waiting.sort_unstable();
        for (_, exec_id) in waiting {
            if self.executions.get(&exec_id).is_some_and(queued_here) {
                self.place(&exec_id);
            }
        }
    }

    /// Where a queued execution stands: its machine, its place in that machine's queue (1:
    /// next) and how long it may still wait. `None` when it is not queued.
    pub fn queue_place(&self, exec_id: &str) -> Option<QueuePlace> {
        let e = self.executions.get(exec_id)?;
        let Place::Queued { context_id, until } = &e.place else {
            return None;
        };
        let ahead = self
            .executions
            .values()
            .filter(|other| {
                matches!(&other.place, Place::Queued { context_id: c, .. } if c == context_id)
                    && other.arrival < e.arrival
            })
            .count();
        let machine = self.machines.get(context_id);
        Some(QueuePlace {
            context_id: context_id.clone(),
            name: machine.map_or_else(|| context_id.to_string(), |m| m.record.name.clone()),
            position: ahead + 1,
            online: machine.is_some_and(|m| m.session.is_ready()),
            left: until.saturating_duration_since(self.now.instant),
        })
    }

    fn expire_queues(&mut self) {
        let now = self.now.instant;
        if self.grace_until.is_some_and(|until| until <= now) {
            // The grace is over: what it parked is routed as usual now.
            self.replan_parked();
        }
        let expired: Vec<(ExecutionId, ContextId)> = self
            .queue_wakes
            .due(now)
            .into_iter()
            .filter_map(|id| match &self.executions.get(&id)?.place {
                Place::Queued { context_id, until } if *until <= now => {
                    Some((id, context_id.clone()))
                }
                _ => None,
            })
            .collect();
        for (exec_id, context_id) in expired {
            let name = self
                .machines
                .get(&context_id)
                .map_or(context_id.to_string(), |m| m.record.name.clone());
            let online = self
                .machines
                .get(&context_id)
                .is_some_and(|m| m.session.is_ready());
            let why = if online {
                format!("{name} had no free slot in time; the run was not started")
            } else {
                format!("{name} did not come back online in time; the run was not started")
            };
            self.fail(&exec_id, "execution_context_queue_expired", why);
        }
    }
}
