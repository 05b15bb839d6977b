//! Connect tickets shared by the nodes of a cluster (docs/CLUSTER.md §4): each ticket a
//! node's session issues is also kept in the database (its id and its secret's SHA-256,
//! never the secret), so a daemon's WebSocket may reach any node; whichever node it reaches
//! spends the shared copy with one statement before the session opens, so a ticket opens
//! once across the nodes. The node a daemon's WebSocket reaches takes the machine if it does
//! not own it (the node that issued the ticket need not), then takes the ticket into the
//! machine's session when that session did not issue it.
//!
//! It owns that sharing and spending. It never checks a ticket's secret against anything
//! but the shared digest, and never opens a session itself (the core's `Connect` does).

use outpost_core::server::Input;
use outpost_core::session::ConnId;
use outpost_core::session::IssuedTicket;
use outpost_core::ticket::{TicketError, connect_ticket_digest};
use outpost_core::time::UnixTime;

use super::{Declined, Dispatcher, ToConn, core_server};
use crate::store::{SharedTicket, StoreError, off_the_runtime};

impl Dispatcher {
    /// Keeps `issued`, just issued for `context_id`, where every node finds it.
    pub(super) fn share_ticket(
        &mut self,
        context_id: &str,
        issued: &IssuedTicket,
    ) -> Result<(), StoreError> {
        let text = issued.ticket.expose_secret();
        let Ok((id, secret_sha256)) = connect_ticket_digest(&text) else {
            return Ok(());
        };
        let shared = SharedTicket {
            id,
            context_id: context_id.to_owned(),
            secret_sha256,
            session_id: issued.session_id.clone(),
            expires_at: issued.ticket.expires_at.0,
        };
        let now = self.shared.clock.now().wall.0;
        let store = &self.shared.store;
        off_the_runtime(|| store.put_connect_ticket(&shared, now))
    }

    /// The machine a ticket another node issued opens, checked against the shared copy
    /// without spending it.
    pub(super) fn shared_ticket_context(
        &self,
        ticket: &str,
        now: UnixTime,
    ) -> Result<String, TicketError> {
        let (id, secret_sha256) = connect_ticket_digest(ticket)?;
        let store = &self.shared.store;
        let shared = off_the_runtime(|| store.connect_ticket(&id))
            .ok()
            .flatten()
            .filter(|t| t.secret_sha256 == secret_sha256)
            .ok_or(TicketError::Unknown)?;
        if now.0 >= shared.expires_at {
            return Err(TicketError::Expired(UnixTime(shared.expires_at)));
        }
        Ok(shared.context_id)
    }

    /// A WebSocket presented `ticket` for `context_id` on connection `conn`: the shared copy
    /// is spent (once across the nodes); a ticket another node issued brings the machine
    /// here and into its session; then the session opens (or refuses, with its close code).
    pub(super) fn connect(&mut self, context_id: String, conn: ConnId, ticket: String) {
        if let Err(why) = self.spend_shared_ticket(&context_id, &ticket) {
            self.send(
                conn,
                ToConn::Close(outpost_core::wire::close_code::POLICY_VIOLATION, why),
            );
            self.conns.remove(&conn);
            return;
        }
        let connected = self.apply(Input::Connect {
            context_id: context_id.into(),
            conn,
            ticket,
        });
        if let Err(Declined::Elsewhere(_)) = connected {
            // Let go between its ticket and its socket: the daemon connects again.
            self.send(
                conn,
                ToConn::Close(
                    outpost_core::wire::close_code::GOING_AWAY,
                    core_server::OWNED_ELSEWHERE_CLOSE.to_owned(),
                ),
            );
            self.conns.remove(&conn);
        }
    }

    /// Spends the shared copy of `ticket` and, when this node's session did not issue it,
    /// takes the machine and the ticket in. `Err` with the close reason when the ticket opens
    /// nothing here (spent on another node, or never issued); a malformed ticket is left to
    /// the session, which says so.
    fn spend_shared_ticket(&mut self, context_id: &str, ticket: &str) -> Result<(), String> {
        let Ok((id, secret_sha256)) = connect_ticket_digest(ticket) else {
            return Ok(());
        };
        let store = &self.shared.store;
        let spent = match off_the_runtime(|| store.spend_connect_ticket(&id)) {
            Ok(spent) => spent,
            Err(e) => {
                tracing::warn!(error = %e, "a connect ticket could not be spent");
                return Err("database_unavailable".to_owned());
            }
        };
        let Some(shared) =
            spent.filter(|t| t.secret_sha256 == secret_sha256 && t.context_id == context_id)
        else {
            return Err(TicketError::Unknown.code().to_owned());
        };
        if !self.owns(context_id) {
            // The machine comes here with its daemon (its session is made afresh from the
            // records, so the ticket is taken in below whoever issued it).
            if let Err(e) = self.take(context_id) {
                tracing::warn!(error = %e, context = context_id, "a machine could not be taken");
                return Err("database_unavailable".to_owned());
            }
        }
        let now = self.shared.clock.now().wall;
        let issued_here = self
            .server
            .session(context_id)
            .is_some_and(|s| s.holds_ticket(ticket, now).is_ok());
        if issued_here {
            return Ok(());
        }
        self.server
            .admit_ticket(
                context_id,
                ticket,
                &shared.session_id,
                UnixTime(shared.expires_at),
            )
            .map_err(|e| e.code().to_owned())
    }
}
