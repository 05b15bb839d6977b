//! TLS for every client connection, with rustls on ring: the public web roots
//! (`webpki-roots`) plus, optionally, one extra CA from a PEM file (`--ca`, or the
//! `OUTPOST_CA_FILE` variable), so a private server or a test's self-signed certificate can be
//! trusted; and the server URL rules (plain `http://` only to a loopback host).
//!
//! This module owns which certificates a client trusts. It never disables verification.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use outpost_core::join::{JoinError, check_server_url};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The variable naming an extra CA PEM file when `--ca` is not given.
pub const CA_FILE_VAR: &str = "OUTPOST_CA_FILE";

/// Why a TLS configuration or a server URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The extra CA file cannot be read or holds no certificate.
    #[error("the CA file {}: {reason}", .path.display())]
    BadCaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The server URL is refused.
    #[error(transparent)]
    Url(#[from] JoinError),
}

impl TlsError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            TlsError::BadCaFile { .. } => "bad_ca_file",
            TlsError::Url(e) => e.code(),
        }
    }
}

/// What a client trusts: the public roots, plus the certificates of an extra CA file.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// The extra CA's certificates (DER), empty when none was given.
    pub extra: Vec<CertificateDer<'static>>,
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
        Ok(Self { extra })
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
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth());
        // The ring provider supports the default protocol versions.
        Arc::new(config.unwrap_or_else(|_| unreachable!("ring supports TLS 1.2 and 1.3")))
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
