//! The root keys a daemon pins, and the rule for the committed test root.

use std::net::IpAddr;

use ed25519_dalek::VerifyingKey;

use super::test_root;

/// A root key: it signs key sets, never frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootKey {
    /// The root's id, named by a key set's `root` member.
    pub id: String,
    /// Its public key.
    pub public_key: VerifyingKey,
}

/// The roots a daemon trusts to vouch for frame keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedRoots {
    roots: Vec<RootKey>,
}

impl PinnedRoots {
    /// Pins these roots — except the test root, which is dropped whether named by its id or
    /// by its key: the only way to trust it is [`PinnedRoots::with_test_root_if_local`].
    pub fn new(roots: Vec<RootKey>) -> Self {
        let test = test_root::root_key();
        let roots = roots
            .into_iter()
            .filter(|r| r.id != test.id && r.public_key != test.public_key)
            .collect();
        Self { roots }
    }

    /// Adds the committed test root — whose private key is public — but only when the
    /// caller enables it **and** `server_host` is `localhost` or a loopback address.
    /// For any other host the switch is ignored; check [`PinnedRoots::trusts_test_root`]
    /// to tell the user.
    pub fn with_test_root_if_local(mut self, server_host: &str, enabled: bool) -> Self {
        if enabled && is_loopback_host(server_host) && !self.trusts_test_root() {
            self.roots.push(test_root::root_key());
        }
        self
    }

    /// Whether the test root is among the pinned roots.
    pub fn trusts_test_root(&self) -> bool {
        self.roots.iter().any(|r| r.id == test_root::ROOT_ID)
    }

    /// The pinned root with this id.
    pub fn get(&self, id: &str) -> Option<&VerifyingKey> {
        self.roots
            .iter()
            .find(|r| r.id == id)
            .map(|r| &r.public_key)
    }
}

/// True for `localhost` (any case, optional trailing dot) and loopback IP addresses
/// (`127.0.0.0/8`, `::1`), with or without a port or IPv6 brackets.
/// `localhost.example.com`, `127.0.0.1.example.com` and `0.0.0.0` are not loopback.
pub fn is_loopback_host(host: &str) -> bool {
    let host = strip_port(host);
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // "[::1]" or "[::1]:8080"
        return match rest.find(']') {
            Some(end) if rest[end + 1..].is_empty() || rest[end + 1..].starts_with(':') => {
                &rest[..end]
            }
            _ => host,
        };
    }
    match host.rsplit_once(':') {
        // One colon: "name:port". More than one: a bare IPv6 address.
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "LOCALHOST",
            "localhost.",
            "localhost:8080",
            "127.0.0.1",
            "127.3.2.1:9",
            "::1",
            "[::1]",
            "[::1]:443",
        ] {
            assert!(is_loopback_host(h), "{h} should be loopback");
        }
        for h in [
            "example.com",
            "localhost.example.com",
            "127.0.0.1.example.com",
            "0.0.0.0",
            "10.0.0.1",
            "::",
            "[::2]",
            "",
            "localhost:80:80",
        ] {
            assert!(!is_loopback_host(h), "{h} should not be loopback");
        }
    }

    #[test]
    fn the_test_root_cannot_be_pinned_directly() {
        let mut under_another_name = test_root::root_key();
        under_another_name.id = "root-prod".into();
        let pinned = PinnedRoots::new(vec![test_root::root_key(), under_another_name]);
        assert!(!pinned.trusts_test_root());
        assert!(pinned.get("root-prod").is_none());
        assert!(pinned.get(test_root::ROOT_ID).is_none());
    }

    #[test]
    fn test_root_needs_the_switch_and_a_local_host() {
        let none = PinnedRoots::default();
        assert!(
            !none
                .clone()
                .with_test_root_if_local("localhost", false)
                .trusts_test_root()
        );
        assert!(
            !none
                .clone()
                .with_test_root_if_local("example.com", true)
                .trusts_test_root()
        );
        assert!(
            none.clone()
                .with_test_root_if_local("127.0.0.1:7000", true)
                .trusts_test_root()
        );
    }
}
