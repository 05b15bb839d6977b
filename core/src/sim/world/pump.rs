//! Draining the server and acting on what it says: frames onto the network, events into the
//! checker and the transcript. It never decides anything the roles decide.

use super::*;

impl World {
    pub(super) fn pump_all(&mut self) {
        for _ in 0..10_000 {
            let mut busy = self.pump_server();
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
            let session = self.server.session(&m.context_id);
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

    pub(super) fn pump_server(&mut self) -> bool {
        if self.server_paused() {
            return false;
        }
        let mut any = false;
        loop {
            let out = self.server.poll_output();
            let idle = matches!(out, server::Output::Wait { .. });
            if let Some(crash) = self.server_crash.as_mut()
                && crash.due(idle, self.elapsed)
            {
                // Whatever was not carried out yet dies with the process.
                self.restart_server(idle);
                return true;
            }
            match out {
                server::Output::Wait { .. } => return any,
                server::Output::Persist(record) => self.write_server_record(&record),
                server::Output::Transmit { conn, bytes } => self.send(conn, false, bytes),
                server::Output::Close { conn, code, .. } => {
                    if let Some(i) = self.conns.remove(&conn) {
                        let m = &mut self.machines[i];
                        if m.conn == Some(conn) {
                            m.conn = None;
                            self.feed_daemon(i, daemon::Input::Disconnected { code: Some(code) });
                        }
                        self.note(format!("server closed conn {conn} with {code}"));
                    }
                }
                server::Output::Command(server::Command::RunOnCloud(request)) => {
                    let at = self.elapsed + Duration::from_millis(100 + self.rng.below(4000));
                    self.cloud.insert(request.exec_id.clone(), at);
                }
                server::Output::Command(server::Command::CancelCloud { exec_id }) => {
                    self.cloud.remove(&exec_id);
                }
                server::Output::Command(server::Command::HandOff { exec_id, .. }) => {
                    // One node owns every machine here: nothing is ever owned elsewhere.
                    panic!("the one server handed off {exec_id}");
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
