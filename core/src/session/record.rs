//! What the dispatcher reads from and puts back into a session across a server restart.
//!
//! A session's durable part is its grant, grant version, revocation and the leases of its
//! committed runs; the dispatcher writes them into its own records (contexts and executions).
//! Tickets, the connection and offers not yet committed die with the process. This file never
//! encodes anything and never decides what is durable: the dispatcher does.

use super::runs::{RunState, ServerRun};
use super::*;

impl Session {
    /// A session rebuilt from the dispatcher's records: `grant` at `grant_version`, revoked or
    /// not, no connection, no tickets, no runs yet (see [`Session::restore_committed`]).
    pub(crate) fn restore(
        config: SessionConfig,
        grant: Grant,
        grant_version: u64,
        revoked: bool,
        signer: Arc<dyn Signer + Send + Sync>,
        now: Now,
    ) -> Self {
        let mut session = Session::new(config, grant, signer, now);
        session.grant_version = grant_version;
        session.revoked = revoked;
        session
    }

    /// Puts back a run that was committed before the restart, with its lease rebased onto
    /// this process's clock. It ends with its result, `lost` at `lost_at`, or `lost` at once
    /// when the daemon says hello without it.
    pub(crate) fn restore_committed(
        &mut self,
        spec: RunSpec,
        committed_at: Instant,
        lost_at: Instant,
    ) {
        let run_id = spec.run_id.clone();
        self.runs.insert(
            run_id,
            ServerRun {
                spec,
                state: RunState::Committed {
                    committed_at,
                    lost_at,
                },
            },
        );
    }

    /// When a committed run was committed and when its lease ends; `None` for a run that is
    /// only offered or not here.
    pub(crate) fn lease(&self, run_id: &str) -> Option<(Instant, Instant)> {
        match self.runs.get(run_id).map(|r| &r.state) {
            Some(RunState::Committed {
                committed_at,
                lost_at,
            }) => Some((*committed_at, *lost_at)),
            _ => None,
        }
    }
}
