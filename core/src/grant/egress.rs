//! The egress decision a daemon makes for every outbound connection of a run.
//!
//! This file owns "may this run reach `host:port`?" under a grant's [`Egress`] and the
//! refusal a run sees. It never resolves names or opens connections.

use super::allowlist::{AllowlistEntry, AllowlistError, Destination};
use crate::wire::Egress;

/// Why a run may not reach a destination. The owner of the machine can lift either refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressDenied {
    /// The grant's egress mode is `none`.
    #[error(
        "network access to `{destination}` was refused: this context's egress mode is `none`; the machine's owner can allow it by setting the context's egress to `allowlist` with `{destination}`"
    )]
    NoNetwork {
        /// `host:port` as the run asked for it, normalized.
        destination: String,
    },
    /// The grant's egress mode is `allowlist` and no entry matches.
    #[error(
        "network access to `{destination}` was refused: it is not on this context's egress allowlist (egress mode `allowlist`); the machine's owner can allow it by adding `{destination}` to the context's egress allowlist"
    )]
    NotAllowlisted {
        /// `host:port` as the run asked for it, normalized.
        destination: String,
    },
}

impl EgressDenied {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        "egress_denied"
    }

    /// The refused `host:port`.
    pub fn destination(&self) -> &str {
        match self {
            EgressDenied::NoNetwork { destination }
            | EgressDenied::NotAllowlisted { destination } => destination,
        }
    }
}

/// Decides whether a run may connect to `host` on `port`.
///
/// `host` is a DNS name (case and one trailing dot ignored), an IPv4 address or an IPv6
/// address with or without brackets. A host that is none of those matches no allowlist entry;
/// a malformed allowlist entry matches nothing.
pub fn check_egress(egress: &Egress, host: &str, port: u16) -> Result<(), EgressDenied> {
    let parsed = Destination::parse(host);
    let destination = match &parsed {
        Some(d) => format!("{d}:{port}"),
        None => format!("{host}:{port}"),
    };
    match egress {
        Egress::All => Ok(()),
        Egress::None => Err(EgressDenied::NoNetwork { destination }),
        Egress::Allowlist { hosts } => {
            let allowed = parsed.is_some_and(|d| {
                hosts
                    .iter()
                    .filter_map(|entry| AllowlistEntry::parse(entry).ok())
                    .any(|entry| entry.matches(&d, port))
            });
            if allowed {
                Ok(())
            } else {
                Err(EgressDenied::NotAllowlisted { destination })
            }
        }
    }
}

/// Checks every allowlist entry; the error names the first malformed one.
pub fn validate_allowlist(hosts: &[String]) -> Result<(), AllowlistError> {
    hosts
        .iter()
        .try_for_each(|entry| AllowlistEntry::parse(entry).map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(hosts: &[&str]) -> Egress {
        Egress::Allowlist {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
        }
    }

    #[test]
    fn modes_none_and_all() {
        assert_eq!(
            check_egress(&Egress::None, "example.com", 443)
                .unwrap_err()
                .code(),
            "egress_denied"
        );
        assert!(check_egress(&Egress::All, "example.com", 443).is_ok());
        assert!(check_egress(&Egress::All, "not a host", 1).is_ok());
    }

    #[test]
    fn allowlist_matching() {
        let egress = allow(&[
            "api.example.com:443",
            "*.cdn.net",
            "10.0.0.7",
            "[::1]:8080",
            "bad:entry:x",
        ]);
        let ok = |host: &str, port| check_egress(&egress, host, port).is_ok();
        assert!(ok("api.example.com", 443));
        assert!(ok("API.Example.COM.", 443));
        assert!(!ok("api.example.com", 80));
        assert!(!ok("example.com", 443));
        assert!(ok("a.cdn.net", 1));
        assert!(ok("x.y.cdn.net", 65535));
        assert!(!ok("cdn.net", 443));
        assert!(ok("10.0.0.7", 22));
        assert!(!ok("10.0.0.8", 22));
        assert!(ok("::1", 8080));
        assert!(ok("[::1]", 8080));
        assert!(!ok("[::1]", 8081));
        assert!(!ok("", 443));
        assert!(!ok("api.example.com..", 443));
    }

    #[test]
    fn malformed_entries_never_match_and_are_named() {
        let egress = allow(&["*", "example.com:0"]);
        assert!(check_egress(&egress, "example.com", 443).is_err());
        assert!(check_egress(&egress, "example.com", 0).is_err());
        let err = validate_allowlist(&["ok.com".into(), "*".into(), "::1".into()]).unwrap_err();
        assert_eq!(err.code(), "invalid_egress_entry");
        assert_eq!(err.entry, "*");
        assert!(
            err.to_string()
                .starts_with("egress allowlist entry `*` is malformed (")
        );
        assert!(validate_allowlist(&["a.com".into(), "*.b.com:1".into(), "[::]".into()]).is_ok());
        assert!(validate_allowlist(&[]).is_ok());
    }

    #[test]
    fn refusal_for_an_allowlist_names_mode_host_port_and_the_fix() {
        let err = check_egress(&allow(&["other.com"]), "API.example.com", 443).unwrap_err();
        assert_eq!(err.destination(), "api.example.com:443");
        assert_eq!(
            err.to_string(),
            "network access to `api.example.com:443` was refused: it is not on this context's egress allowlist (egress mode `allowlist`); the machine's owner can allow it by adding `api.example.com:443` to the context's egress allowlist"
        );
    }

    #[test]
    fn refusal_for_none_names_mode_host_port_and_the_fix() {
        let err = check_egress(&Egress::None, "::1", 8080).unwrap_err();
        assert_eq!(
            err.to_string(),
            "network access to `[::1]:8080` was refused: this context's egress mode is `none`; the machine's owner can allow it by setting the context's egress to `allowlist` with `[::1]:8080`"
        );
    }

    #[test]
    fn refusal_names_an_unparseable_host_as_given() {
        let err = check_egress(&allow(&[]), "bad host", 1).unwrap_err();
        assert_eq!(err.destination(), "bad host:1");
    }
}
