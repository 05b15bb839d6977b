//! Viewer tickets: single-use, 30 s, bound to one terminal, one user and one role. A browser
//! cannot put an `Authorization` header on a WebSocket, so the bearer token buys a ticket
//! over HTTP and the socket presents the ticket; the token never appears in a URL.
//!
//! The tickets are the core's ([`outpost_core::ticket::TicketStore`], the store connect
//! tickets use, with the `vtk_` prefix): only digests of their secrets are kept, and they die
//! with the process. This file adds what is a viewer's own: a ticket opens only the terminal
//! it was issued for, and the route's documented codes.

use std::time::Duration;

use outpost_core::ids::ExecutionId;
use outpost_core::terminal::Role;
use outpost_core::ticket::{TicketError, TicketStore, VIEWER_TICKET_PREFIX};
use outpost_core::time::UnixTime;

use crate::secrets;

/// How long a ticket may wait to be used.
pub(crate) const TICKET_LIFETIME: Duration = Duration::from_secs(30);

/// The most tickets outstanding at once; the expired ones go first.
const MAX_TICKETS: usize = 10_000;

/// What a redeemed ticket lets its socket do.
#[derive(Debug, Clone)]
pub(crate) struct ViewerTicket {
    /// The terminal (its run's id) the ticket opens, and no other.
    pub(crate) exec_id: ExecutionId,
    /// The user it was issued to, who the viewer acts as.
    pub(crate) user: String,
    /// Whether the viewer may type or only watch.
    pub(crate) role: Role,
}

/// Whether `text` has a viewer ticket's form (`vtk_` and 64 base64url characters), whatever
/// store issued it: a node checks that before it relays a socket to the node that did.
pub(crate) fn well_formed(text: &str) -> bool {
    text.strip_prefix(VIEWER_TICKET_PREFIX).is_some_and(|rest| {
        rest.len() == 64
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// Why a ticket was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TicketRefused {
    /// Not a viewer ticket's text at all.
    #[error("the ticket is not vtk_ and 64 base64url characters")]
    Malformed,
    /// Never issued, already used, or for another terminal.
    #[error("the ticket was never issued, was used, or is for another terminal")]
    Unknown,
    /// Issued more than [`TICKET_LIFETIME`] ago.
    #[error("the ticket expired; ask for a new one")]
    Expired,
}

impl TicketRefused {
    /// The stable code (401): the terminal route's documented `ticket_invalid` and
    /// `ticket_expired`, and the connect tickets' `ticket_malformed`.
    pub(crate) fn code(self) -> &'static str {
        match self {
            TicketRefused::Malformed => "ticket_malformed",
            TicketRefused::Unknown => "ticket_invalid",
            TicketRefused::Expired => "ticket_expired",
        }
    }
}

impl From<TicketError> for TicketRefused {
    fn from(e: TicketError) -> Self {
        match e {
            TicketError::Malformed => TicketRefused::Malformed,
            TicketError::Expired(_) => TicketRefused::Expired,
            TicketError::Unknown | TicketError::StoreFull => TicketRefused::Unknown,
        }
    }
}

/// The terminal relay's outstanding viewer tickets.
pub(super) struct Tickets {
    store: TicketStore<ViewerTicket>,
}

impl Default for Tickets {
    fn default() -> Self {
        Self {
            store: TicketStore::with_prefix(
                VIEWER_TICKET_PREFIX,
                TICKET_LIFETIME.as_secs(),
                MAX_TICKETS,
            ),
        }
    }
}

/// Why no viewer ticket was issued.
#[derive(Debug, Clone)]
pub(crate) enum IssueRefused {
    /// No open terminal of the caller's by that id (404 `terminal_unknown`).
    NoTerminal,
    /// [`MAX_TICKETS`] are outstanding (503 `ticket_store_full`, as for connect tickets).
    StoreFull,
    /// The server could not draw the ticket's randomness (503 `random_unavailable`).
    NoRandom(crate::secrets::RandomError),
}

impl Tickets {
    /// A new ticket's text.
    pub(super) fn issue(
        &mut self,
        now: UnixTime,
        exec_id: ExecutionId,
        user: String,
        role: Role,
    ) -> Result<String, IssueRefused> {
        let random = secrets::random::<48>().map_err(IssueRefused::NoRandom)?;
        let ticket = ViewerTicket {
            exec_id,
            user,
            role,
        };
        match self.store.issue(random, ticket, now) {
            Ok(issued) => Ok(issued.expose_secret()),
            // The store refuses nothing else when issuing.
            Err(_) => Err(IssueRefused::StoreFull),
        }
    }

    /// Spends `text` for `terminal_id`; a ticket for another terminal is refused and kept.
    pub(super) fn redeem(
        &mut self,
        now: UnixTime,
        terminal_id: &str,
        text: &str,
    ) -> Result<ViewerTicket, TicketRefused> {
        let opens = self.store.peek(text, now)?;
        if opens.exec_id != terminal_id {
            return Err(TicketRefused::Unknown);
        }
        Ok(self.store.consume(text, now)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_ticket_is_well_formed_and_other_text_is_not() {
        let mut tickets = Tickets::default();
        let now = UnixTime(1_700_000_000);
        let text = tickets
            .issue(now, "ex_1".into(), "ana".into(), Role::Operator)
            .expect("a ticket");
        assert!(well_formed(&text), "{text}");
        for bad in [
            "",
            "vtk_",
            "ctk_abc",
            &format!("{text}x"),
            &text.replace('_', "/"),
        ] {
            assert!(!well_formed(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_full_store_refuses_as_full_and_a_ticket_opens_its_own_terminal_alone() {
        let now = UnixTime(1_700_000_000);
        let mut tickets = Tickets::default();
        let issue = |t: &mut Tickets, n: usize| {
            t.issue(now, format!("ex_{n}").into(), "ana".into(), Role::Operator)
        };
        let first = issue(&mut tickets, 0).expect("a ticket");
        for n in 1..MAX_TICKETS {
            issue(&mut tickets, n).expect("room for it");
        }
        assert!(matches!(
            issue(&mut tickets, MAX_TICKETS),
            Err(IssueRefused::StoreFull)
        ));
        // Another terminal's ticket is refused and kept; its own terminal spends it.
        assert!(matches!(
            tickets.redeem(now, "ex_1", &first),
            Err(TicketRefused::Unknown)
        ));
        let opened = tickets
            .redeem(now, "ex_0", &first)
            .expect("its own terminal");
        assert_eq!(
            (opened.exec_id.as_str(), opened.user.as_str()),
            ("ex_0", "ana")
        );
        assert!(matches!(
            tickets.redeem(now, "ex_0", &first),
            Err(TicketRefused::Unknown)
        ));
        // A ticket spent makes room for one more.
        assert!(issue(&mut tickets, MAX_TICKETS).is_ok());
    }
}
