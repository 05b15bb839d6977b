//! Every input the world hands a role goes through here: it is counted as a host step, the
//! checker learns whether it was a timeout (to catch a role that spins), and an error from
//! the role is a violation (the world is a correct host, so the role must never refuse it).

use super::World;
use crate::daemon;
use crate::server;
use crate::sim::checker::Role;
use crate::sim::now_in_process;

impl World {
    /// Hands node `n` one input at the current time: a stopped process keeps it for when it
    /// resumes, a dead one never reads it. An input naming a machine another node owns now
    /// goes on to that node, as the server's owner requests do.
    pub(super) fn feed_node(&mut self, n: usize, input: server::Input) {
        let node = &mut self.nodes[n];
        if node.down_until.is_some() {
            return;
        }
        if node.paused_until.is_some() {
            // A stopped process reads nothing; what arrives waits (a timer is no input).
            if !matches!(input, server::Input::Timeout) {
                node.paused_inputs.push(input);
            }
            return;
        }
        let now = self.elapsed;
        let timeout = matches!(input, server::Input::Timeout);
        self.checker.fed(Role::Server(n), timeout, now);
        let retry = matches!(
            input,
            server::Input::UpdateAccess(_)
                | server::Input::UpdateGrant { .. }
                | server::Input::Revoke { .. }
                | server::Input::Wait { .. }
        )
        .then(|| input.clone());
        let started = self.nodes[n].started;
        match self.nodes[n]
            .server
            .handle_input(now_in_process(now, started), input)
        {
            Ok(()) => {}
            Err(server::ServerError::OwnedElsewhere(context_id))
                if retry.is_some() && self.owner_node(context_id.as_str()) != Some(n) =>
            {
                if let Some(input) = retry {
                    self.feed_owner(input);
                }
            }
            Err(e) => self.checker.fail(format!("node {n} refused an input: {e}")),
        }
    }

    /// Hands an input that names a machine to the node that owns that machine now.
    pub(super) fn feed_owner(&mut self, input: server::Input) {
        let context_id = match &input {
            server::Input::UpdateAccess(record) => record.id.to_string(),
            server::Input::UpdateGrant { context_id, .. }
            | server::Input::Revoke { context_id }
            | server::Input::Wait { context_id, .. } => context_id.to_string(),
            _ => {
                return self
                    .checker
                    .fail("an owner's input names no machine".into());
            }
        };
        if let Some(n) = self.owner_node(&context_id) {
            self.feed_node(n, input);
        }
    }

    /// Hands machine `i`'s daemon one input at the current time, if it is running.
    pub(super) fn feed_daemon(&mut self, i: usize, input: daemon::Input) {
        let now = self.elapsed;
        let started = self.machines[i].started;
        let Some(d) = self.machines[i].daemon.as_mut() else {
            return;
        };
        let timeout = matches!(input, daemon::Input::Timeout);
        self.checker.fed(Role::Daemon(i), timeout, now);
        if let Err(e) = d.handle_input(now_in_process(now, started), input) {
            self.checker
                .fail(format!("the daemon of machine {i} refused an input: {e}"));
        }
    }

    /// Something other than an input changed node `n` (a ticket issued).
    pub(super) fn touched_node(&mut self, n: usize) {
        self.checker.fed(Role::Server(n), false, self.elapsed);
    }
}
