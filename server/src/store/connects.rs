//! A node's daemon connects, batched (docs/CLUSTER.md §9): the connect tickets its sessions
//! issued since the last batch, kept where every node finds them; the tickets the batch's
//! WebSockets presented, spent; and the machines those WebSockets bring here, taken — all in
//! one committed transaction, with one notification to the other nodes for all the takes.
//!
//! It owns that transaction and the takes' notification (`outpost_owners`: `context:node:
//! epoch` entries joined by commas, so a node that let a machine go needs no read to learn
//! it). It never decides whether a machine should be taken (the dispatcher does, before),
//! never opens a session, and never spends a ticket whose secret it has not been shown the
//! digest of.

use super::db::{OptionalExtension as _, Sql as _, params};
use super::handoffs::{SharedTicket, shared_ticket};
use super::{Doing as _, Store, StoreError};

/// A WebSocket's ticket to spend, and what the spend must find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spend {
    /// The ticket's id, hex.
    pub(crate) ticket_id: String,
    /// The SHA-256 of the secret presented, hex: a kept ticket with another is refused.
    pub(crate) secret_sha256: String,
    /// The machine the WebSocket asked for: a ticket for another is refused.
    pub(crate) context_id: String,
    /// Whether this node takes the machine when the ticket opens it (it does not own it).
    pub(crate) take: bool,
}

/// What one [`Spend`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Spent {
    /// Spent on another node, never issued, expired, or presented with another secret or for
    /// another machine: it opens nothing (a kept one is spent all the same) and takes nothing.
    Refused,
    /// It opens the machine: the kept ticket, and the epoch this node now holds when it took
    /// the machine.
    Opened {
        /// The ticket as kept.
        shared: SharedTicket,
        /// The epoch taken at, when [`Spend::take`] asked for it.
        epoch: Option<i64>,
    },
}

/// One take the batch made: (context id, epoch).
type Take = (String, i64);

impl Store {
    /// Node `node_id`'s batch of connects in one committed transaction: the tickets in `keep`
    /// are kept (and expired ones forgotten, `now` in Unix seconds), then each of `spends` is
    /// spent (one statement each: a ticket comes back once, to whichever node spends it
    /// first) and, when it opens its machine and asks to, the machine is taken (its epoch
    /// moves on: whoever held it before can write nothing more for it); a ticket past its
    /// expiry at `now` opens nothing. Owner rows are taken in context order. Over PostgreSQL
    /// the other nodes hear of every take at the commit, in as few notifications as fit.
    /// Returns what each spend came to, in the order given; nothing is kept, spent or taken on
    /// an error.
    pub(crate) fn connect_batch(
        &self,
        node_id: &str,
        keep: &[SharedTicket],
        spends: &[Spend],
        now: u64,
    ) -> Result<Vec<Spent>, StoreError> {
        if keep.is_empty() && spends.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.lock();
        let tx = conn.transaction().doing("connecting daemons")?;
        if !keep.is_empty() {
            tx.execute(
                "DELETE FROM connect_tickets WHERE expires_at <= ?1",
                params![now as i64],
            )
            .doing("forgetting expired tickets")?;
        }
        for ticket in keep {
            tx.execute(
                "INSERT INTO connect_tickets (id, context_id, secret_sha256, session_id, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    ticket.id,
                    ticket.context_id,
                    ticket.secret_sha256,
                    ticket.session_id,
                    ticket.expires_at as i64
                ],
            )
            .doing("keeping a connect ticket")?;
        }
        // Owner rows are locked in context order, as every other bulk take locks them, so
        // that two nodes' transactions never wait on each other in a circle.
        let mut order: Vec<usize> = (0..spends.len()).collect();
        order.sort_by(|a, b| spends[*a].context_id.cmp(&spends[*b].context_id));
        let mut spent = vec![Spent::Refused; spends.len()];
        let mut takes: Vec<Take> = Vec::new();
        for index in order {
            let spend = &spends[index];
            let kept = tx
                .query_row(
                    "DELETE FROM connect_tickets WHERE id = ?1
                     RETURNING id, context_id, secret_sha256, session_id, expires_at",
                    params![spend.ticket_id],
                    shared_ticket,
                )
                .optional()
                .doing("spending a connect ticket")?;
            let Some(shared) = kept.filter(|t| {
                t.secret_sha256 == spend.secret_sha256
                    && t.context_id == spend.context_id
                    && t.expires_at > now
            }) else {
                continue;
            };
            let epoch = if spend.take {
                let epoch: i64 = tx
                    .query_row(
                        &format!(
                            "INSERT INTO context_owner (context_id, node_id, epoch, changed)
                             VALUES (?1, ?2, 1, {})
                             ON CONFLICT (context_id) DO UPDATE SET node_id = excluded.node_id,
                                 epoch = context_owner.epoch + 1, changed = excluded.changed
                             RETURNING epoch",
                            tx.next_owner_change()
                        ),
                        params![spend.context_id, node_id],
                        |r| r.get(0),
                    )
                    .doing("taking a context")?;
                takes.push((spend.context_id.clone(), epoch));
                Some(epoch)
            } else {
                None
            };
            spent[index] = Spent::Opened { shared, epoch };
        }
        announce_takes(&tx, node_id, &takes)?;
        tx.commit().doing("connecting daemons")?;
        Ok(spent)
    }
}

/// Tells the other nodes of `takes` by node `node_id` when the transaction commits (over
/// PostgreSQL; one node alone has nobody to tell): entries `context:node:epoch`, joined by
/// commas, as few notifications as fit. The node that held a machine lets it go at once
/// rather than at its next heartbeat.
pub(super) fn announce_takes(
    tx: &impl super::db::Sql,
    node_id: &str,
    takes: &[Take],
) -> Result<(), StoreError> {
    if !tx.is_postgres() || takes.is_empty() {
        return Ok(());
    }
    let entries = takes
        .iter()
        .map(|(context_id, epoch)| format!("{context_id}:{node_id}:{epoch}"));
    for payload in super::records::joined_payloads(entries) {
        tx.execute(
            "SELECT pg_notify('outpost_owners', ?1)",
            params![payload.as_str()],
        )
        .doing("announcing takes")?;
    }
    Ok(())
}

/// The takes a notification on `outpost_owners` announces, as owner rows (context, node,
/// epoch); an entry that is a context id alone (a node of an earlier version announces
/// that) comes back in the second list, to be read.
pub(crate) fn heard_takes(payload: &str) -> (Vec<super::OwnerRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut bare = Vec::new();
    for entry in payload.split(',').filter(|e| !e.is_empty()) {
        let mut parts = entry.split(':');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(context), Some(node), Some(epoch), None) => match epoch.parse() {
                Ok(epoch) => rows.push((context.to_owned(), node.to_owned(), epoch)),
                Err(_) => bare.push(context.to_owned()),
            },
            (Some(context), None, None, None) => bare.push(context.to_owned()),
            _ => {}
        }
    }
    (rows, bare)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heard_take_is_a_row_and_a_bare_id_is_to_be_read() {
        let (rows, bare) = heard_takes("ec_a:nd_x:3,ec_b,,ec_c:nd_y:x,ec_d:nd_z:1:9");
        assert_eq!(rows, vec![("ec_a".to_owned(), "nd_x".to_owned(), 3)]);
        assert_eq!(bare, vec!["ec_b".to_owned(), "ec_c".to_owned()]);
    }
}
