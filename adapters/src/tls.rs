//! TLS for every client connection, with rustls on ring: the public web roots
//! (`webpki-roots`) plus, optionally, one extra CA from a PEM file (`--ca`, or the
//! `OUTPOST_CA_FILE` variable), so a private server or a test's self-signed certificate can be
//! trusted, plus the one certificate a join pins (its SHA-256), so a server's self-signed
//! certificate just works for whoever holds its join; and the server URL rules (plain
//! `http://` only to a loopback host).
//!
//! A pinned certificate is trusted as an SSH host key is: the exact certificate (so the exact
//! key, which the handshake's signature proves the server holds), whatever its issuer, names,
//! dates or CA flag; any other certificate must pass the usual checks against the roots.
//!
//! This module owns which certificates a client trusts. It never disables verification.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use outpost_core::join::{JoinError, check_server_url};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest as _, Sha256};

/// The variable naming an extra CA PEM file when `--ca` is not given.
pub const CA_FILE_VAR: &str = "OUTPOST_CA_FILE";

/// Why a TLS configuration or a server URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The extra CA file cannot be read or holds no certificate.
    #[error("the CA file {}: {reason}", .path.display())]
    BadCaFile {
        /// The extra CA file, from `--ca` or [`CA_FILE_VAR`].
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The server URL is refused.
    #[error(transparent)]
    Url(#[from] JoinError),
}

impl TlsError {
    /// The stable code: `bad_ca_file`, or the URL refusal's code.
    pub fn code(&self) -> &'static str {
        match self {
            TlsError::BadCaFile { .. } => "bad_ca_file",
            TlsError::Url(e) => e.code(),
        }
    }
}

/// What a client trusts: the public roots, plus the certificates of an extra CA file, plus
/// the pinned certificates (a join's, one per node of the server).
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// The extra CA's certificates (DER), empty when none was given.
    pub extra: Vec<CertificateDer<'static>>,
    /// The SHA-256 of each server certificate (its DER) trusted as it is, from a join.
    pub pinned: Vec<[u8; 32]>,
    /// Trust the pinned certificates only: neither the roots nor the extra CA vouch for any
    /// other (a server's node relaying to another node, whose certificate it read from their
    /// shared database).
    pub pinned_only: bool,
}

impl Trust {
    /// The public roots only.
    pub fn public() -> Self {
        Self::default()
    }

    /// The public roots plus every certificate in the PEM file at `path`.
    pub fn with_ca_file(path: &Path) -> Result<Self, TlsError> {
        let bad = |reason: String| TlsError::BadCaFile {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        Self::with_ca_pem(&bytes).map_err(bad)
    }

    /// The public roots plus every certificate in `pem`.
    pub fn with_ca_pem(pem: &[u8]) -> Result<Self, String> {
        let extra = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("not PEM certificates: {e}"))?;
        if extra.is_empty() {
            return Err("it holds no certificate".into());
        }
        Ok(Self {
            extra,
            pinned: Vec::new(),
            pinned_only: false,
        })
    }

    /// The certificate whose SHA-256 is `hex` and no other; `None` when `hex` is not 64 hex
    /// digits.
    pub fn only(hex: &str) -> Option<Self> {
        Some(Self {
            extra: Vec::new(),
            pinned: vec![parse_pin(hex)?],
            pinned_only: true,
        })
    }

    /// This trust, plus the certificate whose SHA-256 is `hex` (a join's `tlsSha256`; a
    /// malformed one pins nothing: [`outpost_core::join::Join::parse`] refused it already).
    pub fn pinning(self, hex: Option<&str>) -> Self {
        self.pinning_all(hex)
    }

    /// This trust, plus every certificate whose SHA-256 `pins` lists (a join's `tlsPins`:
    /// one per node, each trusted at any of the server's URLs).
    pub fn pinning_all<'a>(mut self, pins: impl IntoIterator<Item = &'a str>) -> Self {
        for pin in pins.into_iter().filter_map(parse_pin) {
            if !self.pinned.contains(&pin) {
                self.pinned.push(pin);
            }
        }
        self
    }

    /// `explicit` when given, else the file `OUTPOST_CA_FILE` names, else the public roots.
    pub fn from_option(explicit: Option<&Path>) -> Result<Self, TlsError> {
        let from_env = std::env::var_os(CA_FILE_VAR)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        match explicit.map(Path::to_path_buf).or(from_env) {
            Some(path) => Self::with_ca_file(&path),
            None => Ok(Self::public()),
        }
    }

    /// The rustls client configuration (ring provider, TLS 1.2 and 1.3).
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for cert in &self.extra {
            // A certificate that is not a usable trust anchor is skipped, never fatal: the
            // handshake then fails with a clear unknown-issuer error.
            let _ = roots.add(cert.clone());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            // The ring provider supports the default protocol versions.
            .unwrap_or_else(|_| unreachable!("ring supports TLS 1.2 and 1.3"));
        let config = match self.pinned.as_slice() {
            [] => builder.with_root_certificates(roots).with_no_client_auth(),
            pins => {
                let by_roots =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        // The roots are never empty: the public ones are always there.
                        .unwrap_or_else(|_| unreachable!("the web roots are not empty"));
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(PinnedOrRoots {
                        pins: pins.to_vec(),
                        only: self.pinned_only,
                        by_roots,
                    }))
                    .with_no_client_auth()
            }
        };
        Arc::new(config)
    }
}

/// A sentence for a TLS failure that `text` (an error's message) reports about the server's
/// certificate, with what to do; `None` when it is not about the certificate.
pub fn explain_certificate_error(text: &str) -> Option<String> {
    const JOIN: &str = "use the server's join (it pins the certificate; a daemon joined with it and the CLI beside the server use it by themselves), or pass --ca FILE with the certificate or its CA";
    const REMAKE: &str = "use the server's join (it pins the certificate as it is), or make the server a certificate that is not a CA, for its address: openssl req -x509 … -addext basicConstraints=critical,CA:FALSE -addext subjectAltName=IP:ADDRESS";
    let (what, todo) = [
        ("UnknownIssuer", "signed by no CA this client trusts", JOIN),
        (
            "CaUsedAsEndEntity",
            "a CA certificate (CA:TRUE) serving as the server's own",
            REMAKE,
        ),
        (
            "NotValidForName",
            "not made for this host name or address",
            REMAKE,
        ),
        ("Expired", "expired", JOIN),
        ("NotValidYet", "not valid yet", JOIN),
        ("BadSignature", "badly signed", JOIN),
        (
            "UnknownRevocationStatus",
            "of unknown revocation status",
            JOIN,
        ),
        ("Revoked", "revoked", JOIN),
    ]
    .into_iter()
    .find(|(name, _, _)| text.contains(name))
    .map(|(_, what, todo)| (what, todo))
    .or_else(|| {
        text.contains("invalid peer certificate")
            .then_some(("not one this client trusts", JOIN))
    })?;
    Some(format!("the server's TLS certificate is {what}: {todo}"))
}

/// A 64-digit lowercase hex SHA-256.
fn parse_pin(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut pin = [0u8; 32];
    for (i, byte) in pin.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(pin)
}

/// Trusts the pinned certificates as they are, and (unless `only`) any other one the roots
/// vouch for.
#[derive(Debug)]
struct PinnedOrRoots {
    pins: Vec<[u8; 32]>,
    only: bool,
    by_roots: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for PinnedOrRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .pins
            .contains(&<[u8; 32]>::from(Sha256::digest(end_entity.as_ref())))
        {
            return Ok(ServerCertVerified::assertion());
        }
        if self.only {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        self.by_roots
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    // The handshake's signature is checked whatever vouched for the certificate: it proves
    // the server holds the certificate's key.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.by_roots.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.by_roots.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.by_roots.supported_verify_schemes()
    }
}

/// A server base URL taken apart: `https://host:port` (or `http://` to a loopback host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// Whether the scheme is `https`.
    pub secure: bool,
    /// The host name or address (IPv6 without brackets).
    pub host: String,
    /// The port (443 / 80 by default).
    pub port: u16,
    /// The URL as given, without a trailing slash.
    pub base: String,
}

impl ServerUrl {
    /// Checks `url` with `check_server_url` (plain http only to loopback) and splits it.
    pub fn parse(url: &str) -> Result<Self, TlsError> {
        let base = url.trim_end_matches('/');
        let authority = check_server_url(base)?;
        let secure = base.starts_with("https://");
        let bad = || TlsError::Url(JoinError::BadUrl(url.to_owned()));
        let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad()),
            };
            (host.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (authority.to_owned(), None),
            }
        };
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| bad())?,
            None if secure => 443,
            None => 80,
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            secure,
            host,
            port,
            base: base.to_owned(),
        })
    }

    /// The WebSocket URL of `path_and_query` on this server (`wss://` or `ws://`).
    pub fn ws_url(&self, path_and_query: &str) -> String {
        let rest = self
            .base
            .split_once("://")
            .map_or(self.base.as_str(), |(_, r)| r);
        let scheme = if self.secure { "wss" } else { "ws" };
        format!("{scheme}://{rest}{path_and_query}")
    }

    /// The HTTP URL of `path_and_query` on this server.
    pub fn http_url(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.base)
    }
}
