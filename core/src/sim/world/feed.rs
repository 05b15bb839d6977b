//! Every input the world hands a role goes through here: it is counted as a host step, the
//! checker learns whether it was a timeout (to catch a role that spins), and an error from
//! the role is a violation (the world is a correct host, so the role must never refuse it).

use super::World;
use crate::daemon;
use crate::server;
use crate::sim::checker::Role;
use crate::sim::now_in_process;

impl World {
    /// Hands the server one input at the current time.
    pub(super) fn feed_server(&mut self, input: server::Input) {
        if self.server_paused() {
            // A stopped process reads nothing; what arrives waits (a timer is no input).
            if !matches!(input, server::Input::Timeout) {
                self.paused_inputs.push(input);
            }
            return;
        }
        let now = self.elapsed;
        let timeout = matches!(input, server::Input::Timeout);
        self.checker.fed(Role::Server, timeout, now);
        if let Err(e) = self
            .server
            .handle_input(now_in_process(now, self.server_started), input)
        {
            self.checker
                .fail(format!("the server refused an input: {e}"));
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

    /// Something other than an input changed the server (a restart, a ticket issued).
    pub(super) fn touched_server(&mut self) {
        self.checker.fed(Role::Server, false, self.elapsed);
    }
}
