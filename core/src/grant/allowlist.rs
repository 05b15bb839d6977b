//! Egress allowlist entries and destinations: parsing, normalizing and matching.
//!
//! This file owns the entry grammar — `host`, `host:port`, `*.suffix`, `*.suffix:port`, an
//! IPv4 address, `[ipv6]`, each with an optional port — and what a destination is. It never
//! resolves names: `*.example.com` is a statement about names, not addresses.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Why an allowlist entry is malformed. A malformed entry never matches anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "egress allowlist entry `{entry}` is malformed ({reason}); write `host`, `*.suffix`, an IPv4 address or `[ipv6]`, each with an optional `:port`"
)]
pub struct AllowlistError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl AllowlistError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        "invalid_egress_entry"
    }
}

/// A host a run wants to reach, normalized: lowercase, one trailing dot removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A DNS name.
    Name(String),
    /// An IPv4 address.
    V4(Ipv4Addr),
    /// An IPv6 address (written with or without brackets).
    V6(Ipv6Addr),
}

impl Destination {
    /// Normalizes `host`; `None` when it is neither a valid name nor an IP address.
    pub fn parse(host: &str) -> Option<Self> {
        let lower = host.to_ascii_lowercase();
        if let Some(inner) = lower.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return inner.parse().ok().map(Destination::V6);
        }
        if let Ok(v6) = lower.parse::<Ipv6Addr>() {
            return Some(Destination::V6(v6));
        }
        let name = lower.strip_suffix('.').unwrap_or(&lower);
        if let Ok(v4) = name.parse::<Ipv4Addr>() {
            return Some(Destination::V4(v4));
        }
        is_host_name(name).then(|| Destination::Name(name.to_owned()))
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Name(name) => f.write_str(name),
            Destination::V4(v4) => write!(f, "{v4}"),
            Destination::V6(v6) => write!(f, "[{v6}]"),
        }
    }
}

/// What an entry's host part allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedHost {
    /// Exactly this name.
    Name(String),
    /// Names strictly below this suffix, at any depth (`*.example.com`).
    Subdomains(String),
    /// This IPv4 address.
    V4(Ipv4Addr),
    /// This IPv6 address.
    V6(Ipv6Addr),
}

/// One parsed allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowlistEntry {
    /// Which hosts.
    pub host: AllowedHost,
    /// Which port; `None` allows any.
    pub port: Option<u16>,
}

impl AllowlistEntry {
    /// Parses an entry; case-insensitive, one trailing dot on the name ignored.
    pub fn parse(entry: &str) -> Result<Self, AllowlistError> {
        let bad = |reason| AllowlistError {
            entry: entry.to_owned(),
            reason,
        };
        if entry.is_empty() {
            return Err(bad("it is empty"));
        }
        let lower = entry.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix('[') {
            let (inner, after) = rest.split_once(']').ok_or(bad("`[` without `]`"))?;
            let v6 = inner.parse().map_err(|_| bad("not an IPv6 address"))?;
            let port = match after {
                "" => None,
                _ => Some(
                    parse_port(after.strip_prefix(':').ok_or(bad("junk after `]`"))?)
                        .ok_or(bad("bad port"))?,
                ),
            };
            return Ok(Self {
                host: AllowedHost::V6(v6),
                port,
            });
        }
        let (host, port) = match lower.split_once(':') {
            None => (lower.as_str(), None),
            Some((_, p)) if p.contains(':') => return Err(bad("IPv6 addresses need brackets")),
            Some((h, p)) => (h, Some(parse_port(p).ok_or(bad("bad port"))?)),
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        let host = if let Some(suffix) = host.strip_prefix("*.") {
            if !is_host_name(suffix) {
                return Err(bad("not a host name after `*.`"));
            }
            AllowedHost::Subdomains(suffix.to_owned())
        } else if host.contains('*') {
            return Err(bad("`*` is only allowed as a leading `*.`"));
        } else if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            AllowedHost::V4(host.parse().map_err(|_| bad("not an IPv4 address"))?)
        } else if is_host_name(host) {
            AllowedHost::Name(host.to_owned())
        } else {
            return Err(bad("not a host name"));
        };
        Ok(Self { host, port })
    }

    /// True when this entry allows `destination` on `port`.
    pub fn matches(&self, destination: &Destination, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, destination) {
            (AllowedHost::Name(allowed), Destination::Name(name)) => allowed == name,
            (AllowedHost::Subdomains(suffix), Destination::Name(name)) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (AllowedHost::V4(allowed), Destination::V4(ip)) => allowed == ip,
            (AllowedHost::V6(allowed), Destination::V6(ip)) => allowed == ip,
            _ => false,
        }
    }
}

/// A port: 1 to 65535, decimal digits only.
fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|p| *p != 0)
}

/// A lowercase DNS name: labels of 1–63 `[a-z0-9_-]` not starting or ending with `-`, at most
/// 253 bytes, and a last label that is not all digits (that would be a broken IPv4 address).
pub(crate) fn is_host_name(name: &str) -> bool {
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    let labels_ok = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    });
    let last_is_numeric = name
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()));
    labels_ok && !last_is_numeric
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_entry_form() {
        let parse = |s: &str| AllowlistEntry::parse(s).unwrap();
        assert_eq!(
            parse("API.Example.com.").host,
            AllowedHost::Name("api.example.com".into())
        );
        assert_eq!(parse("example.com:443").port, Some(443));
        assert_eq!(
            parse("*.example.com").host,
            AllowedHost::Subdomains("example.com".into())
        );
        assert_eq!(parse("*.example.com.:8443").port, Some(8443));
        assert_eq!(
            parse("10.0.0.1:5432").host,
            AllowedHost::V4(Ipv4Addr::new(10, 0, 0, 1))
        );
        assert_eq!(parse("[::1]").host, AllowedHost::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(parse("[::1]:8080").port, Some(8080));
    }

    #[test]
    fn refuses_malformed_entries() {
        for bad in [
            "",
            "*",
            "*.",
            "a.*.com",
            "*example.com",
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:+80",
            "example.com:http",
            "::1",
            "[::1",
            "[::1]x",
            "[::1]:",
            "[nope]",
            "1.2.3.999",
            "1.2.3",
            "foo.123",
            "-a.com",
            "a-.com",
            "a..com",
            "a b.com",
            "héllo.com",
            "a/b",
            "example.com.:443:1",
        ] {
            let err = AllowlistEntry::parse(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_egress_entry");
            assert_eq!(err.entry, bad);
        }
    }

    #[test]
    fn destinations_normalize() {
        assert_eq!(
            Destination::parse("API.example.COM."),
            Some(Destination::Name("api.example.com".into()))
        );
        assert_eq!(
            Destination::parse("[::1]"),
            Some(Destination::V6(Ipv6Addr::LOCALHOST))
        );
        assert_eq!(
            Destination::parse("0:0::1"),
            Some(Destination::V6(Ipv6Addr::LOCALHOST))
        );
        assert_eq!(
            Destination::parse("127.0.0.1"),
            Some(Destination::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(Destination::parse("example.com.."), None);
        assert_eq!(Destination::parse(""), None);
        assert_eq!(Destination::parse("[::1]").unwrap().to_string(), "[::1]");
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let entry = AllowlistEntry::parse("*.example.com").unwrap();
        let m = |host: &str| entry.matches(&Destination::parse(host).unwrap(), 443);
        assert!(m("a.example.com"));
        assert!(m("a.b.c.example.com"));
        assert!(!m("example.com"));
        assert!(!m("badexample.com"));
        assert!(!m("example.com.evil.net"));
    }

    #[test]
    fn addresses_match_by_value_not_text() {
        let entry = AllowlistEntry::parse("[0:0::1]:80").unwrap();
        assert!(entry.matches(&Destination::parse("::1").unwrap(), 80));
        assert!(!entry.matches(&Destination::parse("::1").unwrap(), 81));
        let v4 = AllowlistEntry::parse("127.0.0.1").unwrap();
        assert!(!v4.matches(&Destination::parse("localhost").unwrap(), 80));
    }
}
