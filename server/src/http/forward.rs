//! Relaying a request to the node of this cluster that holds what it asks for
//! (docs/CLUSTER.md §3): a terminal's relay and a run's live output live in the memory of the
//! node the machine's daemon is connected to, so a request for them that a load balancer
//! sent to another node is carried to that node, and its answer — a WebSocket's bytes, an
//! event stream — carried back as it comes.
//!
//! This module owns finding that node (the machine's owner, and the address each node writes
//! with its heartbeat), the connection to it (TLS pinned to the certificate it wrote, and no
//! other), the copying — the request with the caller's own headers, the answer, and for a
//! WebSocket the upgraded bytes both ways, which it never reads — and the bounds on a relay
//! whose other side went silent. It never decides who may do what: the node relayed to
//! authenticates the caller itself, from the headers as the caller sent them. And it never
//! relays a request that another node relayed here, nor answers one meant for another node.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse as _, Response};
use hyper_util::rt::TokioIo;
use outpost_adapters::tls::{ServerUrl, Trust};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::error::ApiError;
use super::{App, nodes};
use crate::store::NodeReach;

/// The header a relaying node adds: its id. A request carrying it is answered where it
/// lands, never relayed again.
pub(crate) const RELAYED_BY: &str = "outpost-relayed-by";

/// The header a relaying node adds: the id of the node it means to reach. A node that is
/// not that one (an address that leads elsewhere: a balancer, a loopback on another machine)
/// refuses the request rather than answer for another node.
pub(crate) const RELAYED_TO: &str = "outpost-relayed-to";

/// The longest a relayed answer's body, or a joined WebSocket, may stay silent before the
/// relay gives up on it: three of the event stream's 15 s keep-alive comments.
const SILENT_LIMIT: Duration = Duration::from_secs(45);

/// How long one direction of a joined WebSocket may go on after the other ended (a close
/// frame's answer), before both are dropped.
const CLOSING_GRACE: Duration = Duration::from_secs(10);

/// The longest a relay waits for the other node's TCP and TLS handshakes.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);

/// The longest a relay waits for the other node's answer to begin (a terminal's opening
/// waits for the run to be placed; a stream's head comes at once).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// Headers of one hop only, never copied to the next (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Another live node of this cluster, and how to reach it.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// `nd_…`.
    pub(crate) id: String,
    /// Its own URL and certificate, from its last heartbeat.
    pub(crate) reach: NodeReach,
}

/// Whether another node relayed this request here, so it is answered here; refused 502
/// `node_unreachable` when it was meant for another node, or comes from this node itself (its
/// relay's address led back to it).
pub(crate) fn relayed(app: &App, headers: &HeaderMap) -> Result<bool, ApiError> {
    let Some(by) = headers.get(RELAYED_BY) else {
        return Ok(false);
    };
    let me = app.node.0.as_str();
    let to = headers.get(RELAYED_TO).and_then(|v| v.to_str().ok());
    if by.as_bytes() == me.as_bytes() || to.is_some_and(|to| to != me) {
        tracing::warn!(
            meant_for = to.unwrap_or("?"),
            by = %String::from_utf8_lossy(by.as_bytes()),
            "a relay meant for another node reached this one: check the nodes' --node-url"
        );
        return Err(ApiError::new(
            502,
            "node_unreachable",
            format!(
                "a relay meant for node {} reached node {me}: the address that node wrote (--node-url) leads elsewhere",
                to.unwrap_or("?")
            ),
        ));
    }
    Ok(true)
}

/// The live node other than this one that owns machine `context_id` now: the node its
/// daemon's connection last reached (a connect takes the machine at once, before any
/// heartbeat lists it), or the one that adopted it from a dead node. `None` when this node
/// owns it, no node does, or its owner is not live or is of an earlier version that wrote no
/// address to reach it at.
pub(crate) async fn holder(app: &App, context_id: &str) -> Result<Option<Peer>, ApiError> {
    let store = app.shared.store.clone();
    let (context, here) = (context_id.to_owned(), app.node.0.clone());
    let found = tokio::task::spawn_blocking(move || {
        let Some((owner, _)) = store.context_owner(&context)? else {
            return Ok(None);
        };
        if owner == here {
            return Ok(None);
        }
        let reach = store.live_node_reach(&owner, nodes::LIVE.as_millis() as u64)?;
        Ok::<_, crate::store::StoreError>(reach.map(|reach| Peer { id: owner, reach }))
    })
    .await
    .map_err(ApiError::internal)??;
    Ok(found)
}

/// Every other live node, with how to reach it (`None`: a node of an earlier version, or one
/// with no address the others could use).
pub(crate) async fn others(app: &App) -> Result<Vec<(String, Option<NodeReach>)>, ApiError> {
    let store = app.shared.store.clone();
    let rows = tokio::task::spawn_blocking(move || {
        store.live_node_reaches(nodes::LIVE.as_millis() as u64)
    })
    .await
    .map_err(ApiError::internal)??;
    let here = &app.node.0;
    Ok(rows.into_iter().filter(|(id, _)| id != here).collect())
}

/// Sends `req` to `peer` as the caller sent it (with [`RELAYED_BY`] added) and gives back the
/// answer, its body streamed as it comes. A WebSocket upgrade the peer accepts is joined to
/// the caller's: the bytes are copied both ways until either side closes. Refused 502
/// `node_unreachable` when the peer cannot be reached or does not answer.
pub(crate) async fn relay(app: &App, peer: &Peer, mut req: Request) -> Result<Response, ApiError> {
    let unreachable = |why: String| {
        // The details are the operator's: the caller is told which node, not its address.
        tracing::warn!(node = %peer.id, url = %peer.reach.url, error = %why, "a relay to another node failed");
        ApiError::new(
            502,
            "node_unreachable",
            format!(
                "node {}, which holds what was asked, did not answer this node ({why}); retry, or ask that node directly. An opening may have reached it: GET /v1/terminals lists what it holds",
                peer.id
            ),
        )
    };
    let url = ServerUrl::parse(&peer.reach.url).map_err(|e| unreachable(e.to_string()))?;
    let upgrading = wants_upgrade(req.headers());
    let caller_upgrade = upgrading.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let mut out = hyper::Request::builder()
        .method(parts.method)
        .uri(path)
        .body(body)
        .map_err(ApiError::internal)?;
    let headers = out.headers_mut();
    copy_end_to_end(&parts.headers, headers);
    if upgrading {
        for name in [header::CONNECTION, header::UPGRADE] {
            if let Some(value) = parts.headers.get(&name) {
                headers.insert(name, value.clone());
            }
        }
    }
    let authority = if url.host.contains(':') {
        format!("[{}]:{}", url.host, url.port)
    } else {
        format!("{}:{}", url.host, url.port)
    };
    headers.insert(
        header::HOST,
        HeaderValue::from_str(&authority).map_err(|e| unreachable(e.to_string()))?,
    );
    for (name, value) in [(RELAYED_BY, &app.node.0), (RELAYED_TO, &peer.id)] {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).map_err(ApiError::internal)?,
        );
    }
    let tcp = tokio::time::timeout(
        CONNECT_WITHIN,
        TcpStream::connect((url.host.as_str(), url.port)),
    )
    .await
    .map_err(|_| unreachable(format!("no connection within {CONNECT_WITHIN:?}")))?
    .map_err(|e| unreachable(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    crate::http_layer::keep_alive(&tcp);
    let answer = if url.secure {
        let config = client_config(peer.reach.tls_sha256.as_deref())
            .map_err(|e| unreachable(e.to_string()))?;
        let connector = tokio_rustls::TlsConnector::from(config);
        let name = rustls_pki_types::ServerName::try_from(url.host.clone())
            .map_err(|e| unreachable(e.to_string()))?;
        let tls = tokio::time::timeout(CONNECT_WITHIN, connector.connect(name, tcp))
            .await
            .map_err(|_| unreachable(format!("no TLS handshake within {CONNECT_WITHIN:?}")))?
            .map_err(|e| unreachable(e.to_string()))?;
        send(tls, out).await
    } else {
        send(tcp, out).await
    };
    let (sender, mut answer) = answer.map_err(unreachable)?;
    if answer.status() == hyper::StatusCode::SWITCHING_PROTOCOLS
        && let Some(caller_upgrade) = caller_upgrade
    {
        let peer_upgrade = hyper::upgrade::on(&mut answer);
        let peer_id = peer.id.clone();
        tokio::spawn(async move {
            let upgraded = tokio::join!(caller_upgrade, peer_upgrade);
            drop(sender);
            match upgraded {
                (Ok(caller), Ok(peer_side)) => join(caller, peer_side).await,
                (Err(e), _) | (_, Err(e)) => {
                    tracing::debug!(error = %e, peer = %peer_id, "a relayed upgrade failed");
                }
            }
        });
        let (parts, _) = answer.into_parts();
        return Ok(Response::from_parts(parts, Body::empty()));
    }
    let (mut parts, body) = answer.into_parts();
    drop_hop_by_hop(&mut parts.headers);
    let body = SilenceLimited::new(body, sender);
    Ok(Response::from_parts(parts, Body::new(body)).into_response())
}

/// The TLS client configuration for a node whose certificate's SHA-256 is `pin`: that
/// certificate and no other. With no pin (a `--node-url` to a TLS front the node did not
/// write a certificate for), the public roots and `OUTPOST_CA_FILE`'s. Made once per pin.
fn client_config(pin: Option<&str>) -> Result<Arc<rustls::ClientConfig>, String> {
    static MADE: Mutex<Vec<(Option<String>, Arc<rustls::ClientConfig>)>> = Mutex::new(Vec::new());
    let key = pin.map(str::to_owned);
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, config)) = made.iter().find(|(k, _)| *k == key) {
        return Ok(config.clone());
    }
    let trust = match pin {
        Some(pin) => Trust::only(pin).ok_or_else(|| format!("the pin {pin:?} is not a SHA-256"))?,
        None => Trust::from_option(None).map_err(|e| e.to_string())?,
    };
    let config = trust.client_config();
    // A handful of nodes: the list never grows past them by much (a node's pin changes
    // only with its certificate).
    if made.len() >= 64 {
        made.clear();
    }
    made.push((key, config.clone()));
    Ok(config)
}

/// Joins the caller's upgraded connection to the peer's, bytes both ways. When one
/// direction ends, the other gets [`CLOSING_GRACE`] to finish (the close frame's answer); a
/// direction silent for longer than TCP keep-alive allows ends with an error.
async fn join(caller: hyper::upgrade::Upgraded, peer: hyper::upgrade::Upgraded) {
    use tokio::io::AsyncWriteExt as _;
    let (mut caller_reads, mut caller_writes) = tokio::io::split(TokioIo::new(caller));
    let (mut peer_reads, mut peer_writes) = tokio::io::split(TokioIo::new(peer));
    let up = async {
        let _ = tokio::io::copy(&mut caller_reads, &mut peer_writes).await;
        let _ = peer_writes.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut peer_reads, &mut caller_writes).await;
        let _ = caller_writes.shutdown().await;
    };
    tokio::pin!(up, down);
    tokio::select! {
        () = &mut up => { let _ = tokio::time::timeout(CLOSING_GRACE, down).await; }
        () = &mut down => { let _ = tokio::time::timeout(CLOSING_GRACE, up).await; }
    }
}

/// A relayed answer's body that ends with an error once the peer sent nothing for
/// [`SILENT_LIMIT`]: a node cut off mid-stream does not hold the caller's stream forever.
struct SilenceLimited {
    body: Pin<Box<hyper::body::Incoming>>,
    silent: Pin<Box<tokio::time::Sleep>>,
    /// Held while the body is read: its connection stays open for it.
    _sender: Sender,
}

impl SilenceLimited {
    fn new(body: hyper::body::Incoming, sender: Sender) -> Self {
        Self {
            body: Box::pin(body),
            silent: Box::pin(tokio::time::sleep(SILENT_LIMIT)),
            _sender: sender,
        }
    }
}

impl hyper::body::Body for SilenceLimited {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        match self.body.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => {
                let again = tokio::time::Instant::now() + SILENT_LIMIT;
                self.silent.as_mut().reset(again);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match self.silent.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                    "the node relayed to sent nothing for {SILENT_LIMIT:?}"
                )
                .into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Removes the headers of one hop from an answer: the usual ones and those its `Connection`
/// header names.
fn drop_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = connection_tokens(headers).collect();
    for name in HOP_BY_HOP.iter().copied().map(str::to_owned).chain(named) {
        headers.remove(name.as_str());
    }
}

/// The lowercase tokens of a message's `Connection` headers.
fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
}

/// One request on a connection of its own (HTTP/1.1, upgrades allowed), its answer's head
/// within [`ANSWER_WITHIN`].
/// The connection's sender comes back with the answer: a connection whose every sender is
/// gone closes, and one handing its socket over to an upgrade must stay open until it did.
async fn send<S>(
    io: S,
    req: hyper::Request<Body>,
) -> Result<(Sender, hyper::Response<hyper::body::Incoming>), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "a relayed connection ended");
        }
    });
    let answer = tokio::time::timeout(ANSWER_WITHIN, sender.send_request(req))
        .await
        .map_err(|_| format!("no answer within {ANSWER_WITHIN:?}"))?
        .map_err(|e| e.to_string())?;
    Ok((sender, answer))
}

/// The sending half of a relayed connection.
type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// Whether the caller asks to switch protocols (a WebSocket).
pub(crate) fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) && connection_tokens(headers).any(|t| t == "upgrade")
}

/// Copies the caller's end-to-end headers: every one but those of one hop, those the
/// `Connection` header names, `Host` (the next hop's is set), the relay's own headers a
/// caller may have sent, and a `Content-Length` beside a `Transfer-Encoding` (the body is
/// framed again for the next hop).
fn copy_end_to_end(from: &HeaderMap, to: &mut HeaderMap) {
    let named: Vec<String> = connection_tokens(from).collect();
    let chunked = from.contains_key(header::TRANSFER_ENCODING);
    for (name, value) in from {
        let lower = name.as_str();
        if HOP_BY_HOP.contains(&lower)
            || named.iter().any(|n| n == lower)
            || name == header::HOST
            || lower == RELAYED_BY
            || lower == RELAYED_TO
            || (chunked && name == header::CONTENT_LENGTH)
        {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS server on loopback whose certificate for `localhost` a new CA signed, taking
    /// handshakes until the test ends: its address, the certificate's SHA-256 and the CA.
    async fn tls_server() -> (std::net::SocketAddr, String, String) {
        use sha2::Digest as _;
        let ca_key = rcgen::KeyPair::generate().expect("a key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "outpost test CA");
        let ca_pem = ca.self_signed(&ca_key).expect("a CA").pem();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("a certificate");
        let der = cert.der().to_vec();
        let pin = hex::encode(sha2::Sha256::digest(&der));
        let key = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("a key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![der.into()], key)
        .expect("a server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = acceptor.accept(tcp).await;
                });
            }
        });
        (addr, pin, ca_pem)
    }

    async fn handshake(
        addr: std::net::SocketAddr,
        config: Arc<rustls::ClientConfig>,
    ) -> Result<(), String> {
        let connector = tokio_rustls::TlsConnector::from(config);
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("a name");
        connector
            .connect(name, tcp)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_relay_trusts_the_certificate_its_node_wrote_and_no_other() {
        let (addr, pin, ca_pem) = tls_server().await;
        let pinned = client_config(Some(&pin)).expect("a configuration");
        handshake(addr, pinned)
            .await
            .expect("the pinned certificate");
        let other = format!("{:0>64}", "1");
        // A CA that vouches for the certificate would let a join's pin through; not a relay's.
        let vouched = Trust::with_ca_pem(ca_pem.as_bytes())
            .expect("the CA")
            .pinning(Some(&other))
            .client_config();
        handshake(addr, vouched)
            .await
            .expect("vouched for by the CA");
        let strict = client_config(Some(&other)).expect("a configuration");
        let refused = handshake(addr, strict)
            .await
            .expect_err("another certificate");
        assert!(refused.contains("certificate"), "{refused}");
        assert!(client_config(Some("not hex")).is_err());
    }

    #[test]
    fn only_end_to_end_headers_are_copied_and_an_upgrade_is_recognised() {
        let mut from = HeaderMap::new();
        from.insert("authorization", HeaderValue::from_static("Bearer x"));
        from.insert(
            "connection",
            HeaderValue::from_static("keep-alive, X-Private"),
        );
        from.insert("x-private", HeaderValue::from_static("one hop"));
        from.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        from.insert("host", HeaderValue::from_static("balancer.example"));
        from.insert(RELAYED_BY, HeaderValue::from_static("nd_forged"));
        from.insert(RELAYED_TO, HeaderValue::from_static("nd_forged"));
        from.insert("content-length", HeaderValue::from_static("5"));
        from.append("accept", HeaderValue::from_static("text/event-stream"));
        let mut to = HeaderMap::new();
        copy_end_to_end(&from, &mut to);
        let mut names: Vec<&str> = to.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["accept", "authorization"]);
        assert!(!wants_upgrade(&from));
        let mut ws = HeaderMap::new();
        ws.insert(
            "connection",
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        ws.insert("upgrade", HeaderValue::from_static("websocket"));
        assert!(wants_upgrade(&ws));
        ws.remove("upgrade");
        assert!(
            !wants_upgrade(&ws),
            "Connection: upgrade alone is no upgrade"
        );
    }
}
