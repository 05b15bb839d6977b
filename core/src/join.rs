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
}

impl std::fmt::Debug for Join {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Join")
            .field("url", &self.url)
            .field("root", &self.root.id)
            .field("token", &"[redacted]")
            .field("tls_sha256", &self.tls_sha256)
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
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RootJson {
    id: String,
    public_key: String,
}

impl Join {
    /// The join string: [`JOIN_PREFIX`] followed by the base64url of its JSON (`url`, `root`,
    /// `token`, and `tlsSha256` when pinned); [`Join::parse`] reads it back.
    pub fn encode(&self) -> String {
        let json = JoinJson {
            url: self.url.clone(),
            root: RootJson {
                id: self.root.id.clone(),
                public_key: b64::encode(self.root.public_key.as_bytes()),
            },
            token: self.token.clone(),
            tls_sha256: self.tls_sha256.clone(),
        };
        let text = serde_json::to_string(&json).unwrap_or_default();
        format!("{JOIN_PREFIX}{}", b64::encode(text.as_bytes()))
    }

    /// Reads a join string (surrounding whitespace allowed) and checks its URL with
    /// [`check_server_url`].
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
        if let Some(pin) = &json.tls_sha256
            && !(pin.len() == 64 && pin.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        {
            return Err(JoinError::Malformed(
                "tlsSha256 is not 64 lowercase hex digits".into(),
            ));
        }
        Ok(Join {
            url: json.url.trim_end_matches('/').to_owned(),
            root: RootKey {
                id: json.root.id,
                public_key,
            },
            token: json.token,
            tls_sha256: json.tls_sha256,
        })
    }
}

/// The `host[:port]` of an `http(s)://` URL, after checking that plain `http` goes only to a
/// loopback host (a ticket travels in the WebSocket URL).
pub fn check_server_url(url: &str) -> Result<&str, JoinError> {
    let (secure, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(JoinError::BadUrl(url.to_owned()));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(JoinError::BadUrl(url.to_owned()));
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
        }
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
