//! Tickets: single-use bearer secrets that open a WebSocket — a daemon's (`otk_`, the
//! connect ticket) and a terminal viewer's (`vtk_`, because a browser cannot put a bearer
//! token on a WebSocket). One store serves both; what a ticket was issued for (its subject)
//! is the store's type parameter.
//!
//! A ticket is its prefix followed by 64 base64url characters: a 16-byte id and a 32-byte
//! secret. The store keeps, per id, only the SHA-256 of the secret, its expiry and its
//! subject. Presenting a ticket consumes it whatever the outcome; the secret is compared in
//! constant time. Tickets never print: `Debug` and `Display` show a redacted form.
//!
//! This module owns issuing, looking and consuming; randomness and time are passed in.

use core::fmt;
use std::collections::HashMap;

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::b64;
use crate::time::UnixTime;

/// The text prefix of a daemon's connect ticket.
pub const TICKET_PREFIX: &str = "otk_";
/// The text prefix of a terminal viewer's ticket.
pub const VIEWER_TICKET_PREFIX: &str = "vtk_";

const ID_LEN: usize = 16;
const SECRET_LEN: usize = 32;

/// A ticket as issued: hand its text to the one who opens the WebSocket, never log it.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectTicket {
    prefix: &'static str,
    id: [u8; ID_LEN],
    secret: [u8; SECRET_LEN],
    /// When it stops being accepted.
    pub expires_at: UnixTime,
}

impl ConnectTicket {
    /// The ticket's text, for the `?ticket=` query parameter. The only way to see the secret.
    pub fn expose_secret(&self) -> String {
        let mut raw = [0u8; ID_LEN + SECRET_LEN];
        raw[..ID_LEN].copy_from_slice(&self.id);
        raw[ID_LEN..].copy_from_slice(&self.secret);
        format!("{}{}", self.prefix, b64::encode(&raw))
    }
}

impl fmt::Debug for ConnectTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ConnectTicket({}[redacted], expires_at: {})",
            self.prefix, self.expires_at
        )
    }
}

impl fmt::Display for ConnectTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[redacted]", self.prefix)
    }
}

/// Why a ticket was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    /// Not ticket text.
    #[error("malformed ticket")]
    Malformed,
    /// Never issued, already used, or the secret is wrong.
    #[error("unknown or already used ticket")]
    Unknown,
    /// Issued, but expired before use.
    #[error("ticket expired at {0}")]
    Expired(UnixTime),
    /// Too many live tickets.
    #[error("too many outstanding tickets")]
    StoreFull,
}

impl TicketError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            TicketError::Malformed => "ticket_malformed",
            TicketError::Unknown => "ticket_unknown",
            TicketError::Expired(_) => "ticket_expired",
            TicketError::StoreFull => "ticket_store_full",
        }
    }
}

#[derive(Debug, Clone)]
struct Outstanding<S> {
    secret_hash: [u8; 32],
    expires_at: UnixTime,
    subject: S,
}

/// Outstanding tickets of one kind, each for a subject `S` (a connect ticket's session id, a
/// viewer ticket's terminal, user and role).
#[derive(Debug, Clone)]
pub struct TicketStore<S = String> {
    prefix: &'static str,
    ttl_secs: u64,
    capacity: usize,
    outstanding: HashMap<[u8; ID_LEN], Outstanding<S>>,
}

impl<S> TicketStore<S> {
    /// A store of connect tickets (`otk_`) that live `ttl_secs` and of which it holds at most
    /// `capacity` at once.
    pub fn new(ttl_secs: u64, capacity: usize) -> Self {
        Self::with_prefix(TICKET_PREFIX, ttl_secs, capacity)
    }

    /// A store whose tickets start with `prefix` (`vtk_` for viewers), live `ttl_secs`, and of
    /// which it holds at most `capacity` at once.
    pub fn with_prefix(prefix: &'static str, ttl_secs: u64, capacity: usize) -> Self {
        Self {
            prefix,
            ttl_secs,
            capacity,
            outstanding: HashMap::new(),
        }
    }

    /// Tickets issued and neither used nor evicted.
    pub fn len(&self) -> usize {
        self.outstanding.len()
    }

    /// True when no ticket is outstanding.
    pub fn is_empty(&self) -> bool {
        self.outstanding.is_empty()
    }

    /// Issues a ticket for `subject` from 48 fresh random bytes supplied by the host; the
    /// expired ones go first, and a full store refuses (`ticket_store_full`).
    pub fn issue(
        &mut self,
        random: [u8; ID_LEN + SECRET_LEN],
        subject: impl Into<S>,
        now: UnixTime,
    ) -> Result<ConnectTicket, TicketError> {
        self.outstanding.retain(|_, t| t.expires_at > now);
        if self.outstanding.len() >= self.capacity {
            return Err(TicketError::StoreFull);
        }
        let mut id = [0u8; ID_LEN];
        id.copy_from_slice(&random[..ID_LEN]);
        let mut secret = [0u8; SECRET_LEN];
        secret.copy_from_slice(&random[ID_LEN..]);
        let ticket = ConnectTicket {
            prefix: self.prefix,
            id,
            secret,
            expires_at: now.plus_secs(self.ttl_secs),
        };
        self.outstanding.insert(
            id,
            Outstanding {
                secret_hash: Sha256::digest(secret).into(),
                expires_at: ticket.expires_at,
                subject: subject.into(),
            },
        );
        Ok(ticket)
    }

    /// The subject `text` was issued for, without spending it: what a host checks before it
    /// opens the WebSocket the ticket is for. A wrong secret is `ticket_unknown`, as in
    /// [`TicketStore::consume`], and spends nothing either.
    pub fn peek(&self, text: &str, now: UnixTime) -> Result<&S, TicketError> {
        let (id, secret) = self.split(text)?;
        let entry = self.outstanding.get(&id).ok_or(TicketError::Unknown)?;
        let presented: [u8; 32] = Sha256::digest(secret).into();
        if !bool::from(presented.ct_eq(&entry.secret_hash)) {
            return Err(TicketError::Unknown);
        }
        if now >= entry.expires_at {
            return Err(TicketError::Expired(entry.expires_at));
        }
        Ok(&entry.subject)
    }

    /// Consumes a presented ticket and returns the subject it was issued for.
    ///
    /// Whatever the outcome, a ticket with this id can never be used again.
    pub fn consume(&mut self, text: &str, now: UnixTime) -> Result<S, TicketError> {
        let (id, _) = self.split(text)?;
        let checked = self.peek(text, now).map(|_| ());
        // Burned whatever the look found: a wrong guess spends the ticket it aimed at.
        let entry = self.outstanding.remove(&id);
        checked?;
        entry.map(|e| e.subject).ok_or(TicketError::Unknown)
    }

    /// Takes in a ticket issued by another store for `subject` (the same secret, the same
    /// expiry), as a host that checked it against its shared copy does: from now on it opens
    /// once here. A malformed text, an expired ticket or a full store is refused as
    /// [`TicketStore::issue`] would.
    pub fn admit(
        &mut self,
        text: &str,
        subject: impl Into<S>,
        expires_at: UnixTime,
        now: UnixTime,
    ) -> Result<(), TicketError> {
        let (id, secret) = self.split(text)?;
        if now >= expires_at {
            return Err(TicketError::Expired(expires_at));
        }
        self.outstanding.retain(|_, t| t.expires_at > now);
        if self.outstanding.len() >= self.capacity {
            return Err(TicketError::StoreFull);
        }
        self.outstanding.insert(
            id,
            Outstanding {
                secret_hash: Sha256::digest(secret).into(),
                expires_at,
                subject: subject.into(),
            },
        );
        Ok(())
    }

    /// A ticket's id and secret (`ticket_malformed` when `text` is not this store's prefix and
    /// 64 base64url characters).
    fn split(&self, text: &str) -> Result<([u8; ID_LEN], [u8; SECRET_LEN]), TicketError> {
        let raw = text
            .strip_prefix(self.prefix)
            .and_then(|b| b64::decode_array::<{ ID_LEN + SECRET_LEN }>(b).ok())
            .ok_or(TicketError::Malformed)?;
        let mut id = [0u8; ID_LEN];
        id.copy_from_slice(&raw[..ID_LEN]);
        let mut secret = [0u8; SECRET_LEN];
        secret.copy_from_slice(&raw[ID_LEN..]);
        Ok((id, secret))
    }
}

/// A connect ticket's id (hex) and its secret's SHA-256 (hex): what a server keeps of it
/// where several nodes share it, never the secret itself. `ticket_malformed` when `text` is
/// not `otk_` and 64 base64url characters.
pub fn connect_ticket_digest(text: &str) -> Result<(String, String), TicketError> {
    let store: TicketStore = TicketStore::new(0, 0);
    let (id, secret) = store.split(text)?;
    Ok((hex::encode(id), hex::encode(Sha256::digest(secret))))
}

/// Replaces the value of any `ticket` query parameter in `url` with `[redacted]`, for logs.
pub fn redact_ticket_in_url(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let redacted: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("ticket", _)) => "ticket=[redacted]".to_owned(),
            _ => pair.to_owned(),
        })
        .collect();
    let mut out = format!("{base}?{}", redacted.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: u8) -> [u8; 48] {
        let mut r = [0u8; 48];
        for (i, b) in r.iter_mut().enumerate() {
            *b = n.wrapping_mul(31).wrapping_add(i as u8);
        }
        r
    }

    #[test]
    fn a_ticket_opens_once() {
        let mut store: TicketStore = TicketStore::new(60, 10);
        let t = store.issue(random(1), "ctx-1", UnixTime(100)).unwrap();
        let text = t.expose_secret();
        assert!(text.starts_with("otk_") && text.len() == 4 + 64);
        assert_eq!(store.consume(&text, UnixTime(120)).unwrap(), "ctx-1");
        assert_eq!(
            store.consume(&text, UnixTime(120)).unwrap_err().code(),
            "ticket_unknown"
        );
    }

    #[test]
    fn expiry_wrong_secret_and_garbage() {
        let mut store: TicketStore = TicketStore::new(60, 10);
        let t = store.issue(random(2), "ctx", UnixTime(100)).unwrap();
        assert_eq!(
            store
                .consume(&t.expose_secret(), UnixTime(160))
                .unwrap_err()
                .code(),
            "ticket_expired"
        );

        let t = store.issue(random(3), "ctx", UnixTime(100)).unwrap();
        let mut forged = t.expose_secret().into_bytes();
        let last = forged.len() - 2; // change the secret, keep the id
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(forged).unwrap();
        assert_eq!(
            store.consume(&forged, UnixTime(101)).unwrap_err().code(),
            "ticket_unknown"
        );
        // The wrong guess burned the ticket.
        assert_eq!(
            store
                .consume(&t.expose_secret(), UnixTime(101))
                .unwrap_err()
                .code(),
            "ticket_unknown"
        );

        for bad in [
            "",
            "otk_",
            "otk_!!",
            "xyz_AAAA",
            &format!("otk_{}", "A".repeat(65)),
        ] {
            assert_eq!(
                store.consume(bad, UnixTime(101)).unwrap_err().code(),
                "ticket_malformed"
            );
        }
    }

    #[test]
    fn a_look_spends_nothing_and_a_store_reads_only_its_own_prefix() {
        let mut viewers: TicketStore<(String, u8)> =
            TicketStore::with_prefix(VIEWER_TICKET_PREFIX, 30, 10);
        let t = viewers
            .issue(random(8), ("run_1".to_owned(), 1), UnixTime(100))
            .unwrap();
        let text = t.expose_secret();
        assert!(text.starts_with("vtk_"), "{text}");
        assert_eq!(viewers.peek(&text, UnixTime(110)).unwrap().0, "run_1");
        assert_eq!(viewers.peek(&text, UnixTime(110)).unwrap().1, 1);
        assert_eq!(
            viewers.peek(&text, UnixTime(130)).unwrap_err().code(),
            "ticket_expired"
        );
        let as_connect = text.replacen("vtk_", "otk_", 1);
        assert_eq!(
            viewers
                .consume(&as_connect, UnixTime(110))
                .unwrap_err()
                .code(),
            "ticket_malformed"
        );
        assert_eq!(viewers.consume(&text, UnixTime(110)).unwrap().0, "run_1");
        assert_eq!(
            viewers.peek(&text, UnixTime(110)).unwrap_err().code(),
            "ticket_unknown"
        );
    }

    #[test]
    fn bounded_and_self_cleaning() {
        let mut store: TicketStore = TicketStore::new(60, 2);
        store.issue(random(4), "a", UnixTime(0)).unwrap();
        store.issue(random(5), "b", UnixTime(0)).unwrap();
        assert_eq!(
            store.issue(random(6), "c", UnixTime(0)).unwrap_err().code(),
            "ticket_store_full"
        );
        assert!(store.issue(random(6), "c", UnixTime(60)).is_ok());
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn tickets_never_print() {
        let mut store: TicketStore = TicketStore::new(60, 2);
        let t = store.issue(random(7), "a", UnixTime(0)).unwrap();
        let secret_part = &t.expose_secret()[4..];
        for shown in [format!("{t}"), format!("{t:?}"), format!("{t:#?}")] {
            assert!(!shown.contains(secret_part), "{shown}");
            assert!(!shown.contains(&secret_part[..16]), "{shown}");
            assert!(shown.contains("[redacted]"));
        }
        assert_eq!(
            redact_ticket_in_url(&format!(
                "wss://h/v1/connect?x=1&ticket={}#f",
                t.expose_secret()
            )),
            "wss://h/v1/connect?x=1&ticket=[redacted]#f"
        );
    }
}
