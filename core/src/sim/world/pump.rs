//! Draining the nodes and acting on what they say: each drain's records into the store as one
//! fenced batch before anything else is carried out, frames onto the network, events into the
//! checker and the transcript. It never decides anything the roles decide.

use super::*;

impl World {
    pub(super) fn pump_all(&mut self) {
        for _ in 0..10_000 {
            let mut busy = false;
            for n in 0..self.nodes.len() {
                busy |= self.pump_node(n);
            }
            for i in 0..self.machines.len() {
                busy |= self.pump_daemon(i);
            }
            self.track_readiness();
            if !busy {
                return;
            }
        }
        self.checker.fail("outputs never settled".into());
    }

    pub(super) fn track_readiness(&mut self) {
        let now = self.elapsed;
        for i in 0..self.machines.len() {
            let m = &self.machines[i];
            let daemon_ready = m.daemon.as_ref().is_some_and(Daemon::is_ready);
            // The session of the node the machine's connection reached, while that node
            // runs and owns the machine: a stopped node, or one another node took the
            // machine from, hears nothing its daemon sends.
            let node = m
                .conn
                .and_then(|c| self.conns.get(&c))
                .map(|(_, n)| *n)
                .filter(|n| self.node_running(*n))
                .filter(|n| {
                    let fence = self.nodes[*n].fences.get(&m.context_id).copied();
                    fence.is_some() && self.store.owner(&m.context_id) == fence.map(|e| (*n, e))
                });
            let session = node.and_then(|n| self.nodes[n].server.session(&m.context_id));
            let linked = m.conn.is_some() && session.is_some_and(|s| s.connection() == m.conn);
            let ready = daemon_ready && linked && session.is_some_and(|s| s.is_ready());
            if let Some(s) = session.filter(|s| s.is_ready())
                && s.in_flight() > s.max_concurrent() as usize
            {
                let msg = format!(
                    "{} runs in flight on {} with {} slots",
                    s.in_flight(),
                    m.context_id,
                    s.max_concurrent()
                );
                self.checker.fail(msg);
            }
            if ready != m.ready {
                self.machines[i].ready = ready;
                self.checker.ready(i, ready, now);
            }
        }
    }

    /// Drains node `n`: the records of each drain are committed as one batch before the
    /// first other output is carried out (the server's host does the same).
    pub(super) fn pump_node(&mut self, n: usize) -> bool {
        if !self.node_running(n) {
            return false;
        }
        let mut any = false;
        let mut batch = Vec::new();
        loop {
            let out = self.nodes[n].server.poll_output();
            let idle = matches!(out, server::Output::Wait { .. });
            if let Some((crash, _)) = self.nodes[n].crash.as_mut()
                && crash.due(idle, self.elapsed)
            {
                // Whatever was not carried out yet dies with the process, the batch too.
                self.crash_node(n, idle && batch.is_empty());
                return true;
            }
            if let server::Output::Persist(record) = out {
                batch.push(record);
                any = true;
                continue;
            }
            if !self.commit_batch(n, std::mem::take(&mut batch)) {
                return true;
            }
            match out {
                server::Output::Wait { .. } => return any,
                server::Output::Persist(_) => {}
                server::Output::Transmit { conn, bytes } => self.send(conn, false, bytes),
                server::Output::Close { conn, code, .. } => {
                    if let Some((i, _)) = self.conns.remove(&conn) {
                        let m = &mut self.machines[i];
                        if m.conn == Some(conn) {
                            m.conn = None;
                            self.feed_daemon(i, daemon::Input::Disconnected { code: Some(code) });
                        }
                        self.note(format!("node {n} closed conn {conn} with {code}"));
                    }
                }
                server::Output::Command(server::Command::RunOnCloud(request)) => {
                    let at = self.elapsed + Duration::from_millis(100 + self.rng.below(4000));
                    self.cloud.insert(request.exec_id.clone(), (at, n));
                }
                server::Output::Command(server::Command::CancelCloud { exec_id }) => {
                    self.cloud.remove(&exec_id);
                }
                server::Output::Command(server::Command::HandOff {
                    exec_id,
                    context_id,
                }) => {
                    // Its hand-off row is written: the owner hears by a notice, or reads its
                    // inbox at its next heartbeat.
                    self.note(format!("node {n} hands {exec_id} to {context_id}'s owner"));
                    self.cluster.handoffs += 1;
                    match self.owner_node(context_id.as_str()) {
                        Some(owner) if self.nodes.len() > 1 => self.notify(owner, Notice::Inbox),
                        _ => self
                            .checker
                            .fail(format!("{exec_id} handed off by a lone node")),
                    }
                }
                server::Output::Event(event) => self.on_server_event(event),
            }
            any = true;
        }
    }

    pub(super) fn on_server_event(&mut self, event: server::Event) {
        match event {
            server::Event::ExecutionFinished {
                exec_id,
                outcome,
                line,
                ..
            } => {
                // The checker counts the finish when its record is written (see
                // `write_server_record`): that is when a client can learn it.
                let kind = match &outcome {
                    ExecutionOutcome::Completed(_) => "completed".to_owned(),
                    ExecutionOutcome::Lost => "lost".to_owned(),
                    ExecutionOutcome::Cancelled { reason } => format!("cancelled {reason}"),
                    ExecutionOutcome::Failed { code, .. } => format!("failed {code}"),
                };
                self.note(format!("finished {exec_id}: {kind}: {line}"));
            }
            server::Event::RunStarted {
                exec_id: _,
                run_id,
                context_id,
            } => {
                // The checker learns of the commit from its record (`write_server_record`).
                self.note(format!("committed {run_id} on {context_id}"));
            }
            server::Event::SessionError { context_id, error } => {
                self.checker.fail(format!(
                    "the session of {context_id} refused an input: {error}"
                ));
            }
            server::Event::Session { context_id, event } => self.on_wait_event(&context_id, &event),
            server::Event::Paused { paused_for } => {
                self.note(format!("the server noticed its pause of {paused_for:?}"));
            }
            // Runs end for the checker when their execution's end is written.
            server::Event::TerminalOutput { .. }
            | server::Event::TerminalExit { .. }
            | server::Event::RunOutput { .. } => {}
        }
    }

    /// A run is never started on a context its requester cannot use.
    pub(super) fn check_access_at_commit(&mut self, exec_id: &str, i: usize) {
        let Some(request) = self.workload.requests.get(exec_id) else {
            return;
        };
        let (record, grant) = (&self.workload.records[i], &self.workload.grants[i]);
        // The daemon's features never change in the simulation: they are the ground truth.
        let features = self.workload.machines[i].2.features.clone();
        let view = view_of(record, grant, features);
        if let Err(denied) = check_access(&request.requester, &view, &request.target) {
            let msg = format!(
                "{exec_id} committed on {} although access is {}",
                record.id,
                denied.code()
            );
            self.checker.fail(msg);
        }
    }
}
