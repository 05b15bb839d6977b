//! The join string (`outpost-join-v1.…`, PROTOCOL §11.1) and the machine key id (§11.3).
//!
//! This module owns their text forms: a server writes a join once, a daemon reads it and pins
//! the root it names. It never decides whether a URL may be used beyond the one rule a join
//! carries: plain `http://` only to a loopback host.

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::b64;
use crate::keyset::{RootKey, is_loopback_host};

/// The prefix every join string starts with.
pub const JOIN_PREFIX: &str = "outpost-join-v1.";

/// The most URLs (and, apart, the most certificate pins) one join may list: a server of that
/// many nodes lists them all, and a reader never holds an unbounded list.
pub const MAX_JOIN_URLS: usize = 16;

/// What a daemon needs to trust a server on first contact: where it is, the root key to pin,
/// and a token that may register machines.
#[derive(Clone, PartialEq, Eq)]
pub struct Join {
    /// The server's base URL, `https://host:port` (or `http://` to a loopback host).
    pub url: String,
    /// The root key the daemon pins.
    pub root: RootKey,
    /// A bearer token with the `execution_context:create` scope.
    pub token: String,
    /// The SHA-256 of the server's TLS certificate (its leaf, DER), lowercase hex, when the
    /// server serves HTTPS: a client that holds the join trusts that certificate even where
    /// no CA it knows signed it (a self-signed one), as it pins the root key.
    pub tls_sha256: Option<String>,
    /// The other URLs the same server is reached at (its other nodes, docs/CLUSTER.md §3),
    /// tried in this order after `url` when the one in use cannot be reached; each is
    /// checked as `url` is, none repeats `url`.
    pub alternates: Vec<String>,
    /// The SHA-256 of the certificates the server's other nodes serve (lowercase hex, none
    /// repeating `tls_sha256`): a client trusts any of them, or `tls_sha256`, at any of the
    /// URLs (a TCP front passes each node's own certificate through).
    pub other_pins: Vec<String>,
}

impl std::fmt::Debug for Join {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Join")
            .field("url", &self.url)
            .field("root", &self.root.id)
            .field("token", &"[redacted]")
            .field("tls_sha256", &self.tls_sha256)
            .field("alternates", &self.alternates)
            .field("other_pins", &self.other_pins)
            .finish()
    }
}

/// Why a join string (or a server URL) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// Not `outpost-join-v1.` followed by base64url JSON with `url`, `root` and `token`.
    #[error(
        "not a join string: {0}; copy the whole line `outpost serve` printed (or its state folder's `join` file)"
    )]
    Malformed(String),
    /// The URL is plain `http://` to a host that is not loopback.
    #[error(
        "the server URL {0:?} is plain http to a host that is not loopback; use https (`outpost serve --tls-cert … --tls-key …`)"
    )]
    InsecureUrl(String),
    /// The URL is not `http(s)://host[:port]`.
    #[error("the server URL {0:?} is not http(s)://host[:port]")]
    BadUrl(String),
}

impl JoinError {
    /// The stable `snake_case` code: `join_malformed`, `insecure_server_url` or
    /// `invalid_server_url`.
    pub fn code(&self) -> &'static str {
        match self {
            JoinError::Malformed(_) => "join_malformed",
            JoinError::InsecureUrl(_) => "insecure_server_url",
            JoinError::BadUrl(_) => "invalid_server_url",
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JoinJson {
    url: String,
    root: RootJson,
    token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tls_sha256: Option<String>,
    /// Every URL, `url` first; written only when there is more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    urls: Vec<String>,
    /// Every pin, `tlsSha256` among them; written only when there is one beyond it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tls_pins: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RootJson {
    id: String,
    public_key: String,
}

impl Join {
    /// Every URL the server is reached at: `url`, then the alternates.
    pub fn urls(&self) -> Vec<String> {
        std::iter::once(self.url.clone())
            .chain(self.alternates.iter().cloned())
            .collect()
    }

    /// Every certificate pin: `tls_sha256` when there is one, then the other nodes'.
    pub fn pins(&self) -> Vec<String> {
        self.tls_sha256
            .iter()
            .chain(self.other_pins.iter())
            .cloned()
            .collect()
    }

    /// This join (a node's own URL and certificate) listing after them every other node's URL
    /// and certificate in `nodes` (each node's URL for daemons and the SHA-256 of the
    /// certificate it serves, in the order to try them), so that a daemon that cannot reach
    /// one node tries the next. Nodes behind one front share its URL, which is listed once;
    /// each node's own certificate is pinned, since a TCP front passes it through. A URL a
    /// reader would refuse is left out, and each list stops at [`MAX_JOIN_URLS`] entries.
    pub fn listing(&self, nodes: &[(String, Option<String>)]) -> Join {
        let mut join = self.clone();
        for (url, pin) in nodes {
            let url = url.trim_end_matches('/');
            if check_server_url(url).is_err() {
                continue;
            }
            if url != join.url
                && !join.alternates.iter().any(|a| a == url)
                && join.alternates.len() + 1 < MAX_JOIN_URLS
            {
                join.alternates.push(url.to_owned());
            }
            if let Some(pin) = pin
                && join.tls_sha256.as_ref() != Some(pin)
                && !join.other_pins.contains(pin)
                && join.other_pins.len() + 1 < MAX_JOIN_URLS
            {
                join.other_pins.push(pin.clone());
            }
        }
        join
    }

    /// The join string: [`JOIN_PREFIX`] followed by the base64url of its JSON (`url`, `root`,
    /// `token`, `tlsSha256` when pinned, and `urls` and `tlsPins` when the server has more
    /// than one node to list); [`Join::parse`] reads it back.
    pub fn encode(&self) -> String {
        let json = JoinJson {
            url: self.url.clone(),
            root: RootJson {
                id: self.root.id.clone(),
                public_key: b64::encode(self.root.public_key.as_bytes()),
            },
            token: self.token.clone(),
            tls_sha256: self.tls_sha256.clone(),
            urls: if self.alternates.is_empty() {
                Vec::new()
            } else {
                self.urls()
            },
            tls_pins: if self.other_pins.is_empty() {
                Vec::new()
            } else {
                self.pins()
            },
        };
        let text = serde_json::to_string(&json).unwrap_or_default();
        format!("{JOIN_PREFIX}{}", b64::encode(text.as_bytes()))
    }

    /// Reads a join string (surrounding whitespace allowed) and checks each of its URLs with
    /// [`check_server_url`]. A join of an earlier version, without `urls` and `tlsPins`, has
    /// no alternates; a reader of an earlier version reads `url` and `tlsSha256` alone.
    pub fn parse(text: &str) -> Result<Join, JoinError> {
        let text = text.trim();
        let body = text.strip_prefix(JOIN_PREFIX).ok_or_else(|| {
            JoinError::Malformed(format!("it does not start with {JOIN_PREFIX:?}"))
        })?;
        let bytes = b64::decode(body).map_err(|e| {
            JoinError::Malformed(format!("the part after the prefix is not base64url: {e}"))
        })?;
        let json: JoinJson = serde_json::from_slice(&bytes)
            .map_err(|e| JoinError::Malformed(format!("its JSON is not a join: {e}")))?;
        let key = b64::decode_array::<32>(&json.root.public_key)
            .map_err(|e| JoinError::Malformed(format!("root.publicKey: {e}")))?;
        let public_key = VerifyingKey::from_bytes(&key)
            .map_err(|_| JoinError::Malformed("root.publicKey is not an Ed25519 key".into()))?;
        if json.token.is_empty() {
            return Err(JoinError::Malformed("token is empty".into()));
        }
        check_server_url(&json.url)?;
        let well_formed_pin = |pin: &str| {
            pin.len() == 64 && pin.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if let Some(pin) = &json.tls_sha256
            && !well_formed_pin(pin)
        {
            return Err(JoinError::Malformed(
                "tlsSha256 is not 64 lowercase hex digits".into(),
            ));
        }
        // Bounded before the work, and again below once repeats are dropped, counting `url`
        // and `tlsSha256` (what `encode` writes back).
        let too_many = || {
            JoinError::Malformed(format!(
                "it lists more than {MAX_JOIN_URLS} URLs or certificate pins (urls, tlsPins)"
            ))
        };
        if json.urls.len() > MAX_JOIN_URLS + 1 || json.tls_pins.len() > MAX_JOIN_URLS + 1 {
            return Err(too_many());
        }
        let url = json.url.trim_end_matches('/').to_owned();
        let mut alternates: Vec<String> = Vec::new();
        for other in &json.urls {
            check_server_url(other)?;
            let other = other.trim_end_matches('/');
            if other != url && !alternates.iter().any(|a| a == other) {
                alternates.push(other.to_owned());
            }
        }
        let mut other_pins: Vec<String> = Vec::new();
        for pin in &json.tls_pins {
            if !well_formed_pin(pin) {
                return Err(JoinError::Malformed(
                    "a tlsPins entry is not 64 lowercase hex digits".into(),
                ));
            }
            if json.tls_sha256.as_deref() != Some(pin) && !other_pins.contains(pin) {
                other_pins.push(pin.clone());
            }
        }
        if alternates.len() + 1 > MAX_JOIN_URLS
            || other_pins.len() + usize::from(json.tls_sha256.is_some()) > MAX_JOIN_URLS
        {
            return Err(too_many());
        }
        Ok(Join {
            url,
            root: RootKey {
                id: json.root.id,
                public_key,
            },
            token: json.token,
            tls_sha256: json.tls_sha256,
            alternates,
            other_pins,
        })
    }
}

/// The `host[:port]` of an `http(s)://` URL, after checking that it names a host and, when it
/// gives one, a port (1–65535 digits that fit 16 bits; an IPv6 address in brackets), and that
/// plain `http` goes only to a loopback host (a ticket travels in the WebSocket URL).
pub fn check_server_url(url: &str) -> Result<&str, JoinError> {
    let (secure, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(JoinError::BadUrl(url.to_owned()));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let bad = || JoinError::BadUrl(url.to_owned());
    if authority.is_empty() || authority.contains('@') {
        return Err(bad());
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (host, after) = bracketed.split_once(']').ok_or_else(bad)?;
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None if after.is_empty() => (host, None),
                None => return Err(bad()),
            }
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() || port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err(bad());
    }
    if !secure && !is_loopback_host(authority) {
        return Err(JoinError::InsecureUrl(url.to_owned()));
    }
    Ok(authority)
}

/// A machine key's id (PROTOCOL §11.3): `mk_` and the first 22 characters of
/// base64url(SHA-256(public key)).
pub fn machine_key_id(public_key: &VerifyingKey) -> String {
    let digest = Sha256::digest(public_key.as_bytes());
    let text = b64::encode(&digest);
    format!("mk_{}", &text[..22])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(url: &str) -> Join {
        Join {
            url: url.into(),
            root: crate::keyset::test_root::root_key(),
            token: "opt_abc".into(),
            tls_sha256: None,
            alternates: Vec::new(),
            other_pins: Vec::new(),
        }
    }

    #[test]
    fn a_join_of_several_nodes_lists_every_url_and_pin_and_an_earlier_reader_sees_the_first() {
        let j = Join {
            tls_sha256: Some("ab".repeat(32)),
            alternates: vec![
                "https://b.example:8440".into(),
                "https://c.example:8440".into(),
            ],
            other_pins: vec!["cd".repeat(32)],
            ..join("https://a.example:8440")
        };
        let text = j.encode();
        let back = Join::parse(&text).unwrap();
        assert_eq!(back, j);
        assert_eq!(
            back.urls(),
            [
                "https://a.example:8440",
                "https://b.example:8440",
                "https://c.example:8440"
            ]
        );
        assert_eq!(back.pins(), ["ab".repeat(32), "cd".repeat(32)]);
        // The JSON an earlier reader reads: `url` and `tlsSha256` as before.
        let json: serde_json::Value =
            serde_json::from_slice(&b64::decode(&text[JOIN_PREFIX.len()..]).unwrap()).unwrap();
        assert_eq!(json["url"], "https://a.example:8440");
        assert_eq!(json["urls"].as_array().map(Vec::len), Some(3));
        assert_eq!(json["tlsPins"].as_array().map(Vec::len), Some(2));
        // One node: neither list is written.
        let single = join("https://a.example:8440").encode();
        let json: serde_json::Value =
            serde_json::from_slice(&b64::decode(&single[JOIN_PREFIX.len()..]).unwrap()).unwrap();
        assert!(
            json.get("urls").is_none() && json.get("tlsPins").is_none(),
            "{json}"
        );
    }

    #[test]
    fn a_join_lists_the_other_nodes_after_this_one_each_once() {
        let this = Join {
            tls_sha256: Some("aa".repeat(32)),
            ..join("https://a.example:8440")
        };
        let nodes = [
            ("https://a.example:8440".to_owned(), Some("aa".repeat(32))),
            ("https://b.example:8440/".to_owned(), Some("bb".repeat(32))),
            ("https://b.example:8440".to_owned(), Some("cc".repeat(32))),
            ("http://c.example:8440".to_owned(), None),
        ];
        let listed = this.listing(&nodes);
        assert_eq!(
            listed.urls(),
            ["https://a.example:8440", "https://b.example:8440"]
        );
        assert_eq!(
            listed.pins(),
            ["aa".repeat(32), "bb".repeat(32), "cc".repeat(32)]
        );
        assert_eq!(Join::parse(&listed.encode()).unwrap(), listed);
        // One node: the join is the one it always was.
        assert_eq!(this.listing(&nodes[..1]), this);
        // Many: each list stops at the bound a reader accepts.
        let many: Vec<(String, Option<String>)> = (0..40)
            .map(|i| (format!("https://n{i}.example"), Some(format!("{i:064x}"))))
            .collect();
        let listed = this.listing(&many);
        assert_eq!(listed.urls().len(), MAX_JOIN_URLS);
        assert_eq!(listed.pins().len(), MAX_JOIN_URLS);
        assert_eq!(Join::parse(&listed.encode()).unwrap(), listed);
    }

    #[test]
    fn a_listed_url_or_pin_is_checked_as_the_first_is_and_the_lists_are_bounded() {
        let with = |urls: Vec<&str>, pins: Vec<String>| {
            let json = serde_json::json!({
                "url": "https://a.example:8440",
                "root": {"id": "r", "publicKey": b64::encode(crate::keyset::test_root::root_key().public_key.as_bytes())},
                "token": "opt_abc",
                "urls": urls,
                "tlsPins": pins,
            });
            Join::parse(&format!(
                "{JOIN_PREFIX}{}",
                b64::encode(json.to_string().as_bytes())
            ))
        };
        let insecure = with(
            vec!["https://a.example:8440", "http://b.example:8440"],
            vec![],
        );
        assert_eq!(insecure.unwrap_err().code(), "insecure_server_url");
        let bad_pin = with(vec![], vec!["XY".repeat(32)]);
        assert!(bad_pin.unwrap_err().to_string().contains("tlsPins"));
        let many: Vec<String> = (0..=MAX_JOIN_URLS + 1)
            .map(|i| format!("https://n{i}.example"))
            .collect();
        let too_many = with(many.iter().map(String::as_str).collect(), vec![]);
        assert_eq!(too_many.unwrap_err().code(), "join_malformed");
        // Sixteen others besides `url` are seventeen in all: refused, as `encode` would
        // write them back.
        let others: Vec<String> = (0..MAX_JOIN_URLS)
            .map(|i| format!("https://n{i}.example"))
            .collect();
        let over = with(others.iter().map(String::as_str).collect(), vec![]);
        assert_eq!(over.unwrap_err().code(), "join_malformed");
        let fifteen = with(others[1..].iter().map(String::as_str).collect(), vec![]).unwrap();
        assert_eq!(Join::parse(&fifteen.encode()).unwrap(), fifteen);
        // A listed URL whose port is not one is refused, as `url` would be.
        let bad_port = with(vec!["https://b.example:notaport"], vec![]);
        assert_eq!(bad_port.unwrap_err().code(), "invalid_server_url");
        // Repeats and the first URL listed again are dropped.
        let repeated = with(
            vec![
                "https://a.example:8440",
                "https://b.example/",
                "https://b.example",
            ],
            vec!["ab".repeat(32), "ab".repeat(32)],
        )
        .unwrap();
        assert_eq!(repeated.alternates, ["https://b.example"]);
        assert_eq!(repeated.other_pins, ["ab".repeat(32)]);
    }

    #[test]
    fn a_join_reads_back_what_was_written_and_hides_its_token_in_debug() {
        let j = join("https://outpost.example:8440");
        let back = Join::parse(&format!("  {}\n", j.encode())).unwrap();
        assert_eq!(back, j);
        assert!(!format!("{back:?}").contains("opt_abc"));
    }

    #[test]
    fn a_join_carries_the_tls_pin_and_refuses_a_malformed_one() {
        let pinned = Join {
            tls_sha256: Some("ab".repeat(32)),
            ..join("https://10.0.0.5:8440")
        };
        assert_eq!(Join::parse(&pinned.encode()).unwrap(), pinned);
        let bad = Join {
            tls_sha256: Some("AB".repeat(32)),
            ..join("https://10.0.0.5:8440")
        };
        let err = Join::parse(&bad.encode()).unwrap_err();
        assert_eq!(err.code(), "join_malformed");
        assert!(err.to_string().contains("tlsSha256"), "{err}");
    }

    #[test]
    fn plain_http_is_refused_unless_the_host_is_loopback() {
        let bad = Join::parse(&join("http://outpost.example:8440").encode()).unwrap_err();
        assert_eq!(bad.code(), "insecure_server_url");
        assert!(Join::parse(&join("http://127.0.0.1:8440").encode()).is_ok());
        assert!(Join::parse(&join("http://[::1]:8440").encode()).is_ok());
        assert_eq!(
            check_server_url("ftp://x").unwrap_err().code(),
            "invalid_server_url"
        );
        assert_eq!(
            check_server_url("https://u:p@x").unwrap_err().code(),
            "invalid_server_url"
        );
        for bad in [
            "https://x:99999",
            "https://x:",
            "https://:8440",
            "https://[::1",
            "https://[::1]x",
            "https://x:1:2",
        ] {
            assert_eq!(
                check_server_url(bad).unwrap_err().code(),
                "invalid_server_url",
                "{bad}"
            );
        }
        assert!(check_server_url("https://[2001:db8::1]:8440").is_ok());
    }

    #[test]
    fn malformed_joins_say_what_is_wrong() {
        for text in [
            "",
            "outpost-join-v2.e30",
            "outpost-join-v1.!!",
            "outpost-join-v1.e30",
        ] {
            assert_eq!(
                Join::parse(text).unwrap_err().code(),
                "join_malformed",
                "{text}"
            );
        }
    }

    #[test]
    fn a_machine_key_id_is_stable_and_short() {
        let key = crate::keyset::test_root::root_key().public_key;
        let id = machine_key_id(&key);
        assert_eq!(id.len(), 25);
        assert!(id.starts_with("mk_"));
        assert_eq!(id, machine_key_id(&key));
    }
}
