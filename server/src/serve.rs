//! Listening: the accept loop over plain TCP or TLS (rustls on ring), one hyper HTTP/1
//! connection per socket with upgrades (for the WebSocket), the client's address handed to
//! the routes, the HTTP layer's own refusals in the API's error shape ([`crate::http_layer`]),
//! and a graceful stop: no new connections, open ones finish their request.
//!
//! A request's head must arrive within [`Limits::head_timeout`] (so must the next one on a
//! kept-alive connection); its body is counted and bounded in time by [`Inflight`], and a
//! source address with too many bodies in progress is answered 429 `rate_limited` before any
//! of the new one is read.

use sha2::Digest as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::response::IntoResponse as _;
use futures_util::future::Either;
use hyper::body::{Body as _, Incoming};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::http_layer::{self, JsonErrors};
use crate::inflight::Inflight;
use crate::{Limits, ServeError};

/// How long a stopping server lets open connections finish.
const DRAIN: Duration = Duration::from_secs(10);
/// How long a TLS handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// A TLS acceptor from PEM files.
/// The acceptor for `cert` and `key`, and the SHA-256 (lowercase hex) of the leaf
/// certificate, which the join pins.
pub(crate) fn tls_acceptor(cert: &Path, key: &Path) -> Result<(TlsAcceptor, String), ServeError> {
    let tls = |what: &str, e: &dyn std::fmt::Display| ServeError::Tls(format!("{what}: {e}"));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| tls(&format!("reading {}", cert.display()), &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| tls(&format!("reading {}", cert.display()), &e))?;
    if certs.is_empty() {
        return Err(ServeError::Tls(format!(
            "{} holds no certificate",
            cert.display()
        )));
    }
    let pin = hex::encode(sha2::Sha256::digest(certs[0].as_ref()));
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| tls(&format!("reading {}", key.display()), &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls("protocol versions", &e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls("certificate and key", &e))?;
    Ok((TlsAcceptor::from(Arc::new(config)), pin))
}

/// What every connection is served with.
#[derive(Clone)]
pub(crate) struct Serving {
    pub(crate) router: Router,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) limits: Limits,
}

/// Accepts until `stop` turns true, then lets open connections drain.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    serving: Serving,
    mut stop: watch::Receiver<bool>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => break,
        };
        let (tcp, addr) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        http_layer::keep_alive(&tcp);
        let serving = serving.clone();
        let tls = tls.clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            match tls {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => serve_one(stream, addr, serving, stop).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, %addr, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
                    }
                }
                None => serve_one(tcp, addr, serving, stop).await,
            }
        });
        while tasks.try_join_next().is_some() {}
    }
    let _ = tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
}

async fn serve_one<S>(
    stream: S,
    addr: SocketAddr,
    serving: Serving,
    mut stop: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = JsonErrors::new(stream);
    let handle = io.clone();
    let head_timeout = serving.limits.head_timeout;
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(addr));
        if target_len(req.uri()) > http_layer::MAX_URI {
            let refused = http_layer::URI_TOO_LONG.response();
            return Either::Right(std::future::ready(Ok(refused)));
        }
        let (parts, incoming) = req.into_parts();
        let body = if incoming.is_end_stream() {
            axum::body::Body::new(incoming)
        } else {
            let declared = parts
                .headers
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            match serving.inflight.track(addr.ip(), declared, incoming) {
                Some(tracked) => axum::body::Body::new(tracked),
                None => {
                    // Answered before a byte of the body is read; hyper then closes the
                    // connection, whose body it will not read either.
                    let refused = crate::http::ApiError::rate_limited(1).into_response();
                    return Either::Right(std::future::ready(Ok(refused)));
                }
            }
        };
        let req = hyper::Request::from_parts(parts, body);
        Either::Left(serving.router.clone().oneshot(req))
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_header_size(http_layer::MAX_HEAD)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => match r {
            Err(e) if e.is_timeout() && handle.head_begun() => handle.refuse(http_layer::TIMEOUT).await,
            Err(e) => tracing::debug!(error = %e, %addr, "connection ended with an error"),
            Ok(()) => {}
        },
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// The length of a request's target as sent: its path and query (and authority, in the
/// absolute form).
fn target_len(uri: &axum::http::Uri) -> usize {
    uri.authority().map_or(0, |a| a.as_str().len())
        + uri.path_and_query().map_or(0, |p| p.as_str().len())
}
