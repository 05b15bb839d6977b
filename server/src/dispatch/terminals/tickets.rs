//! Viewer tickets: single-use, 30 s, bound to one terminal, one user and one role. A browser
//! cannot put an `Authorization` header on a WebSocket, so the bearer token buys a ticket
//! over HTTP and the socket presents the ticket; the token never appears in a URL.
//!
//! Only SHA-256 digests of tickets are kept, and tickets die with the process.

use std::collections::HashMap;
use std::time::Duration;

use outpost_core::terminal::Role;
use outpost_core::time::Instant;

use crate::secrets;

/// How long a ticket may wait to be used.
pub(crate) const TICKET_LIFETIME: Duration = Duration::from_secs(30);

/// The most tickets outstanding at once; the oldest expired ones go first.
const MAX_TICKETS: usize = 10_000;

/// What a redeemed ticket lets its socket do.
#[derive(Debug, Clone)]
pub(crate) struct ViewerTicket {
    pub(crate) exec_id: String,
    pub(crate) user: String,
    pub(crate) role: Role,
}

/// Why a ticket was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TicketRefused {
    /// Never issued, already used, or for another terminal.
    #[error("the ticket was never issued, was used, or is for another terminal")]
    Unknown,
    /// Issued more than [`TICKET_LIFETIME`] ago.
    #[error("the ticket expired; ask for a new one")]
    Expired,
}

impl TicketRefused {
    /// The stable code (401).
    pub(crate) fn code(self) -> &'static str {
        match self {
            TicketRefused::Unknown => "ticket_invalid",
            TicketRefused::Expired => "ticket_expired",
        }
    }
}

#[derive(Default)]
pub(super) struct Tickets {
    by_digest: HashMap<[u8; 32], (ViewerTicket, Instant)>,
}

impl Tickets {
    /// A new ticket's text; `None` when the random source failed.
    pub(super) fn issue(
        &mut self,
        now: Instant,
        exec_id: String,
        user: String,
        role: Role,
    ) -> Option<String> {
        self.by_digest
            .retain(|_, (_, issued)| now.saturating_duration_since(*issued) < TICKET_LIFETIME);
        if self.by_digest.len() >= MAX_TICKETS {
            return None;
        }
        let text = secrets::new_token().ok()?.replacen("opt_", "vtk_", 1);
        let ticket = ViewerTicket {
            exec_id,
            user,
            role,
        };
        self.by_digest.insert(secrets::hash(&text), (ticket, now));
        Some(text)
    }

    /// Spends `text` for `terminal_id`.
    pub(super) fn redeem(
        &mut self,
        now: Instant,
        terminal_id: &str,
        text: &str,
    ) -> Result<ViewerTicket, TicketRefused> {
        let digest = secrets::hash(text);
        match self.by_digest.get(&digest) {
            Some((ticket, _)) if ticket.exec_id != terminal_id => Err(TicketRefused::Unknown),
            None => Err(TicketRefused::Unknown),
            Some(_) => {
                let (ticket, issued) = self
                    .by_digest
                    .remove(&digest)
                    .ok_or(TicketRefused::Unknown)?;
                if now.saturating_duration_since(issued) >= TICKET_LIFETIME {
                    Err(TicketRefused::Expired)
                } else {
                    Ok(ticket)
                }
            }
        }
    }
}
