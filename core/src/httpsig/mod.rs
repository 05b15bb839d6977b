//! HTTP Message Signatures (RFC 9421) with Ed25519, and `Content-Digest` (RFC 9530), for
//! the requests a daemon makes.
//!
//! The general machinery ([`signature_base`], [`sign_request`], [`verify_signature`])
//! follows RFC 9421 and reproduces its Appendix B.2.6 byte for byte. On top of it,
//! [`Profile::outpost`] is the profile every daemon request must meet:
//!
//! - label `outpost`, algorithm `ed25519` (the `alg` parameter is required);
//! - covered components `@method`, `@authority`, `@path`, `@query`, and `content-digest`
//!   whenever the request has a body;
//! - parameters `created`, `expires` (at most five minutes after `created`), `nonce` and
//!   `keyid` are all required.
//!
//! Freshness and single use (`created`, `expires`, `nonce`) are checked by
//! [`crate::replay::ReplayGuard`] *after* the signature verifies, so a forged request never
//! spends a nonce.
//!
//! This module owns the bytes of the signature base and the parsing of the two signature
//! fields. It never sends a request and never reads a clock.

mod components;
mod digest;
mod signature;

pub use digest::{DigestAlgorithm, check_content_digest, content_digest};
pub use signature::{
    ALG_ED25519, OUTPOST_LABEL, Profile, SignatureParams, VerifiedRequest, sign_request,
    signature_base, verify_signature,
};

/// An HTTP request as far as signatures are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// The method, as sent (`POST`).
    pub method: String,
    /// The absolute target URI (`https://host/path?query`).
    pub url: String,
    /// Header fields in order, names in any case; repeated names are allowed.
    pub headers: Vec<(String, String)>,
    /// The body bytes as sent, which `Content-Digest` covers; empty for a request without one.
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// The combined value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    }

    /// Replaces every `name` header with one holding `value`.
    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.into()));
    }
}

/// Why a request signature or digest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpSigError {
    /// A field is not a valid structured field of the expected shape.
    #[error("malformed {field}: {reason}")]
    MalformedField {
        /// The field or component.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// No signature with the expected label.
    #[error("no signature labelled {0:?}")]
    MissingSignature(String),
    /// A covered component is absent from the request.
    #[error("covered component {0:?} is not in the request")]
    MissingComponent(String),
    /// A component identifier outside what we support.
    #[error("unsupported component {0:?}")]
    UnsupportedComponent(String),
    /// The profile requires a component the signature does not cover.
    #[error("the signature must cover {0:?}")]
    ComponentNotCovered(String),
    /// The profile requires a parameter the signature lacks.
    #[error("the signature must have parameter {0:?}")]
    MissingParameter(&'static str),
    /// A parameter has the wrong type or value.
    #[error("parameter {name:?} is invalid: {reason}")]
    InvalidParameter {
        /// The `Signature-Input` parameter at fault (`created`, `expires`, `keyid`, `alg`, …).
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// `keyid` names no key the verifier knows.
    #[error("unknown key {0:?}")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
    /// A digest in `Content-Digest` does not match the content.
    #[error("{0} digest does not match the content")]
    ContentDigestMismatch(&'static str),
    /// `Content-Digest` carries no digest of an algorithm we support.
    #[error("Content-Digest has no sha-256 or sha-512 digest")]
    NoSupportedDigest,
    /// The [`Signer`](crate::sign::Signer) returned an error while signing a request.
    #[error(transparent)]
    Signer(#[from] crate::sign::SignerError),
}

impl HttpSigError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            HttpSigError::MalformedField { .. } => "malformed_field",
            HttpSigError::MissingSignature(_) => "missing_signature",
            HttpSigError::MissingComponent(_) => "missing_component",
            HttpSigError::UnsupportedComponent(_) => "unsupported_component",
            HttpSigError::ComponentNotCovered(_) => "component_not_covered",
            HttpSigError::MissingParameter(_) => "missing_parameter",
            HttpSigError::InvalidParameter { .. } => "invalid_parameter",
            HttpSigError::UnknownKey(_) => "unknown_key",
            HttpSigError::BadSignature => "bad_signature",
            HttpSigError::ContentDigestMismatch(_) => "content_digest_mismatch",
            HttpSigError::NoSupportedDigest => "no_supported_digest",
            HttpSigError::Signer(_) => "signer_failed",
        }
    }
}

#[cfg(test)]
mod tests;
