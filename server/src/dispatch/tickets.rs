//! Daemon connects, batched (docs/CLUSTER.md §4, §9): each connect ticket a node's session
//! issues is also kept in the database (its id and its secret's SHA-256, never the secret),
//! so a daemon's WebSocket may reach any node; whichever node it reaches spends the shared
//! copy before the session opens, so a ticket opens once across the nodes. The node a
//! daemon's WebSocket reaches takes the machine if it does not own it (the node that issued
//! the ticket need not), then takes the ticket into the machine's session when that session
//! did not issue it.
//!
//! The tickets issued and the WebSockets presented within one dispatcher batch are carried
//! out together ([`Dispatcher::flush_connects`]): one transaction keeps the tickets, spends
//! the presented ones and takes their machines, with one notification for all the takes; no
//! ticket is answered and no session opened before it commits. A connect storm (a node died,
//! and its daemons come back to the others) costs a commit per batch, not three per daemon.
//!
//! It owns that sharing, spending and batching. It never checks a ticket's secret against
//! anything but the shared digest, and never opens a session itself (the core's `Connect`
//! does).

use outpost_core::server::Input;
use outpost_core::session::{ConnId, IssuedTicket};
use outpost_core::ticket::{TicketError, connect_ticket_digest};
use outpost_core::time::UnixTime;
use tokio::sync::oneshot;

use super::{Declined, Dispatcher, TicketRefused, ToConn, core_server};
use crate::store::{SharedTicket, Spend, Spent, StoreError, off_the_runtime};

/// A ticket issued in the current batch: kept by the batch's transaction, answered after it.
struct Issued {
    shared: Option<SharedTicket>,
    issued: IssuedTicket,
    reply: oneshot::Sender<Result<IssuedTicket, TicketRefused>>,
}

/// A WebSocket presented in the current batch: (machine, connection, ticket).
type Presented = (String, ConnId, String);

/// The current batch's connects, not carried out yet.
#[derive(Default)]
pub(super) struct Connects {
    issued: Vec<Issued>,
    presented: Vec<Presented>,
}

impl Dispatcher {
    /// Issues a connect ticket for `context_id` (a machine this node owns or not: one
    /// registered through another node moments ago is learnt first), kept and answered when
    /// the batch's connects are carried out.
    pub(super) fn issue_ticket(
        &mut self,
        context_id: String,
        secret: [u8; 48],
        reply: oneshot::Sender<Result<IssuedTicket, TicketRefused>>,
    ) -> Result<(), StoreError> {
        if let Err(e) = self.learn_machine(&context_id) {
            let _ = reply.send(Err(TicketRefused::Database(e)));
            return Ok(());
        }
        let now = self.shared.clock.now();
        // Bring the dispatcher's clock up to now so the ticket is stamped with it.
        let _ = self.server.handle_input(now, Input::Timeout);
        self.drain()?;
        let issued = match self.server.issue_ticket(&context_id, secret) {
            Ok(issued) => issued,
            Err(e) => {
                let _ = reply.send(Err(TicketRefused::Ticket(e)));
                return self.drain();
            }
        };
        // Kept where every node finds it: the WebSocket may reach another.
        let shared = connect_ticket_digest(&issued.ticket.expose_secret())
            .ok()
            .map(|(id, secret_sha256)| SharedTicket {
                id,
                context_id: context_id.clone(),
                secret_sha256,
                session_id: issued.session_id.clone(),
                expires_at: issued.ticket.expires_at.0,
            });
        self.connects.issued.push(Issued {
            shared,
            issued,
            reply,
        });
        self.drain()
    }

    /// A WebSocket presented `ticket` for `context_id` on connection `conn`: carried out
    /// with the batch's other connects.
    pub(super) fn present(&mut self, context_id: String, conn: ConnId, ticket: String) {
        self.connects.presented.push((context_id, conn, ticket));
    }

    /// The machine `ticket` opens (not spent: the WebSocket's `Connect` spends it), whether
    /// this node's session or another node's issued it.
    pub(super) fn ticket_context(&self, ticket: &str) -> Result<String, TicketError> {
        let now = self.shared.clock.now().wall;
        match self.server.ticket_context(ticket, now) {
            Ok(id) => Ok(id.to_owned()),
            // Issued by another node, perhaps.
            Err(TicketError::Unknown) => self.shared_ticket_context(ticket, now),
            Err(e) => Err(e),
        }
    }

    /// The machine a ticket another node issued opens, checked against the shared copy
    /// without spending it.
    fn shared_ticket_context(&self, ticket: &str, now: UnixTime) -> Result<String, TicketError> {
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

    /// Carries out the batch's connects: one transaction keeps the tickets issued, spends
    /// the tickets presented and takes the machines they bring here; then the tickets are
    /// answered and the sessions open (or refuse, with their close codes). A database that
    /// does not answer refuses them all (`database_unavailable`): the daemons try again.
    pub(super) fn flush_connects(&mut self) {
        let Connects { issued, presented } = std::mem::take(&mut self.connects);
        if issued.is_empty() && presented.is_empty() {
            return;
        }
        let keep: Vec<SharedTicket> = issued.iter().filter_map(|i| i.shared.clone()).collect();
        // A malformed ticket is left to the session, which says so.
        let spends: Vec<Option<Spend>> = presented
            .iter()
            .map(|(context_id, _, ticket)| {
                let (ticket_id, secret_sha256) = connect_ticket_digest(ticket).ok()?;
                Some(Spend {
                    ticket_id,
                    secret_sha256,
                    context_id: context_id.clone(),
                    take: !self.owns(context_id),
                })
            })
            .collect();
        let to_spend: Vec<Spend> = spends.iter().flatten().cloned().collect();
        let now = self.shared.clock.now().wall.0;
        let (store, node) = (&self.shared.store, self.fences.node_id());
        match off_the_runtime(|| store.connect_batch(node, &keep, &to_spend, now)) {
            Err(e) => {
                tracing::warn!(error = %e, "a batch of daemon connects was not stored");
                for i in issued {
                    let failed = StoreError::new(
                        "keeping a connect ticket",
                        std::io::Error::other(e.to_string()),
                    );
                    let _ = i.reply.send(Err(TicketRefused::Database(failed)));
                }
                for (_, conn, _) in presented {
                    self.refuse(conn, "database_unavailable");
                }
            }
            Ok(spent) => {
                for i in issued {
                    let _ = i.reply.send(Ok(i.issued));
                }
                let taken: Vec<(String, i64)> = spent
                    .iter()
                    .filter_map(|s| match s {
                        Spent::Opened {
                            shared,
                            epoch: Some(epoch),
                        } => Some((shared.context_id.clone(), *epoch)),
                        _ => None,
                    })
                    .collect();
                // The machines taken are adopted before any of their sessions opens.
                let adopted = self.took(&taken);
                if let Err(e) = &adopted {
                    tracing::warn!(error = %e, "machines taken could not be adopted");
                }
                let mut spent = spent.into_iter();
                for ((context_id, conn, ticket), spend) in presented.into_iter().zip(spends) {
                    let outcome = spend.and_then(|_| spent.next());
                    let took = matches!(outcome, Some(Spent::Opened { epoch: Some(_), .. }));
                    if took && adopted.is_err() {
                        self.refuse(conn, "database_unavailable");
                        continue;
                    }
                    self.open(context_id, conn, ticket, outcome);
                }
            }
        }
    }

    /// Closes `conn` before its session opened, saying `why`.
    fn refuse(&mut self, conn: ConnId, why: &str) {
        self.send(
            conn,
            ToConn::Close(
                outpost_core::wire::close_code::POLICY_VIOLATION,
                why.to_owned(),
            ),
        );
        self.conns.remove(&conn);
    }

    /// One presented WebSocket, its ticket spent (`None`: malformed, for the session to
    /// refuse) and its machine, if taken, adopted: a ticket another node issued is taken into
    /// the machine's session, then the session opens.
    fn open(&mut self, context_id: String, conn: ConnId, ticket: String, spent: Option<Spent>) {
        match spent {
            None => {}
            Some(Spent::Refused) => return self.refuse(conn, TicketError::Unknown.code()),
            Some(Spent::Opened { shared, .. }) => {
                let now = self.shared.clock.now().wall;
                let issued_here = self
                    .server
                    .session(&context_id)
                    .is_some_and(|s| s.holds_ticket(&ticket, now).is_ok());
                if !issued_here
                    && let Err(e) = self.server.admit_ticket(
                        &context_id,
                        &ticket,
                        &shared.session_id,
                        UnixTime(shared.expires_at),
                    )
                {
                    return self.refuse(conn, e.code());
                }
            }
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
}
