//! Relaying a request to the node of this cluster that holds what it asks for
//! (docs/CLUSTER.md §3): a terminal's relay and a run's live output live in the memory of the
//! node the machine's daemon is connected to, so a request for them that a load balancer
//! sent to another node is carried to that node, and its answer — a WebSocket's bytes, an
//! event stream — carried back as it comes.
//!
//! This module owns finding that node (the sessions and the address each node writes with its
//! heartbeat), the connection to it (TLS pinned to the certificate it wrote, as a join pins a
//! server's) and the copying: the request with the caller's own headers, the answer, and for a
//! WebSocket the upgraded bytes both ways, which it never reads. It never decides who may do
//! what: the node relayed to authenticates the caller itself, from the headers as the caller
//! sent them. And it never relays a request that another node relayed here.

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

/// Whether another node relayed this request here.
pub(crate) fn relayed(headers: &HeaderMap) -> bool {
    headers.contains_key(RELAYED_BY)
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

/// Every other live node that wrote an address to reach it at.
pub(crate) async fn others(app: &App) -> Result<Vec<Peer>, ApiError> {
    let store = app.shared.store.clone();
    let rows = tokio::task::spawn_blocking(move || {
        store.live_node_reaches(nodes::LIVE.as_millis() as u64)
    })
    .await
    .map_err(ApiError::internal)??;
    let here = &app.node.0;
    Ok(rows
        .into_iter()
        .filter(|(id, _)| id != here)
        .map(|(id, reach)| Peer { id, reach })
        .collect())
}

/// Sends `req` to `peer` as the caller sent it (with [`RELAYED_BY`] added) and gives back the
/// answer, its body streamed as it comes. A WebSocket upgrade the peer accepts is joined to
/// the caller's: the bytes are copied both ways until either side closes. Refused 502
/// `node_unreachable` when the peer cannot be reached or does not answer.
pub(crate) async fn relay(app: &App, peer: &Peer, mut req: Request) -> Result<Response, ApiError> {
    let unreachable = |why: String| {
        ApiError::new(
            502,
            "node_unreachable",
            format!(
                "node {} at {}, to which the machine is connected, does not answer this node: {why}; retry, or check that the nodes reach each other at their --node-url",
                peer.id, peer.reach.url
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
    headers.insert(
        HeaderName::from_static(RELAYED_BY),
        HeaderValue::from_str(&app.node.0).map_err(ApiError::internal)?,
    );
    let tcp = tokio::time::timeout(
        CONNECT_WITHIN,
        TcpStream::connect((url.host.as_str(), url.port)),
    )
    .await
    .map_err(|_| unreachable(format!("no connection within {CONNECT_WITHIN:?}")))?
    .map_err(|e| unreachable(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    let answer = if url.secure {
        let trust = Trust::from_option(None)
            .map_err(|e| unreachable(e.to_string()))?
            .pinning(peer.reach.tls_sha256.as_deref());
        let connector = tokio_rustls::TlsConnector::from(trust.client_config());
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
    let mut answer = answer.map_err(unreachable)?;
    if answer.status() == hyper::StatusCode::SWITCHING_PROTOCOLS
        && let Some(caller_upgrade) = caller_upgrade
    {
        let peer_upgrade = hyper::upgrade::on(&mut answer);
        let peer_id = peer.id.clone();
        tokio::spawn(async move {
            let (caller, peer_side) = match tokio::join!(caller_upgrade, peer_upgrade) {
                (Ok(caller), Ok(peer_side)) => (caller, peer_side),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::debug!(error = %e, peer = %peer_id, "a relayed upgrade failed");
                    return;
                }
            };
            let (mut caller, mut peer_side) = (TokioIo::new(caller), TokioIo::new(peer_side));
            let _ = tokio::io::copy_bidirectional(&mut caller, &mut peer_side).await;
        });
        let (parts, _) = answer.into_parts();
        return Ok(Response::from_parts(parts, Body::empty()));
    }
    let (mut parts, body) = answer.into_parts();
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    Ok(Response::from_parts(parts, Body::new(body)).into_response())
}

/// One request on a connection of its own (HTTP/1.1, upgrades allowed), its answer's head
/// within [`ANSWER_WITHIN`].
async fn send<S>(
    io: S,
    req: hyper::Request<Body>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
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
    tokio::time::timeout(ANSWER_WITHIN, sender.send_request(req))
        .await
        .map_err(|_| format!("no answer within {ANSWER_WITHIN:?}"))?
        .map_err(|e| e.to_string())
}

/// Whether the caller asks to switch protocols (a WebSocket).
pub(crate) fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Copies the caller's end-to-end headers: every one but those of one hop, those the
/// `Connection` header names, `Host` (the next hop's is set) and a [`RELAYED_BY`] the caller
/// may have sent.
fn copy_end_to_end(from: &HeaderMap, to: &mut HeaderMap) {
    let named: Vec<String> = from
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    for (name, value) in from {
        let lower = name.as_str();
        if HOP_BY_HOP.contains(&lower)
            || named.iter().any(|n| n == lower)
            || name == header::HOST
            || lower == RELAYED_BY
        {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
