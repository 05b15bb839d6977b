//! The signed client's requests verify with core's `verify_signature` on a real HTTP listener:
//! content digest, a nonce unique per request; error answers become typed errors.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc::{Receiver, channel};

use outpost_adapters::http::{HttpError, RegisterRequest, SignedClient};
use outpost_adapters::tls::{ServerUrl, Trust};
use outpost_core::httpsig::{HttpRequest, OUTPOST_LABEL, Profile, verify_signature};
use outpost_core::join::machine_key_id;
use outpost_core::sign::Ed25519Signer;

/// Serves `answers` (status, body) to one request each, and hands back each request read.
fn server(answers: Vec<(u16, String)>) -> (String, Receiver<HttpRequest>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let url_base = base.clone();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for (status, body) in answers {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap().to_owned();
            let target = parts.next().unwrap().to_owned();
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                let (n, v) = h.split_once(':').unwrap();
                headers.push((n.trim().to_owned(), v.trim().to_owned()));
            }
            let len = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .map_or(0, |(_, v)| v.parse().unwrap());
            let mut content = vec![0; len];
            reader.read_exact(&mut content).unwrap();
            tx.send(HttpRequest {
                method,
                url: format!("{url_base}{target}"),
                headers,
                body: content,
            })
            .unwrap();
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
    });
    (base, rx)
}

const SEED: [u8; 32] = [7; 32];

#[test]
fn every_request_verifies_with_a_digest_and_a_fresh_nonce() {
    let registered = r#"{"contextId":"ec_1","name":"box","operator":"admin","keyId":"mk_x","grant":{"egress":{"mode":"none"},"limits":{"maxConcurrent":2}},"grantVersion":1}"#;
    let ticket = r#"{"ticket":"otk_secret","sessionId":"sess_1","expiresAt":1767225660}"#;
    let (base, rx) = server(vec![(201, registered.into()), (200, ticket.into())]);
    let client = SignedClient::new(ServerUrl::parse(&base).unwrap(), SEED, &Trust::public());
    let public = Ed25519Signer::from_seed("k", SEED).verifying_key();
    assert_eq!(client.key_id(), machine_key_id(&public));
    let reg = client
        .register(
            "opt_token",
            &RegisterRequest {
                name: "box".into(),
                public_key: client.public_key_b64(),
                max_concurrent: Some(2),
                environments: Some(vec![outpost_core::wire::Environment::Shell]),
                daemon_version: Some("0.1.0".into()),
            },
        )
        .unwrap();
    assert_eq!(reg.context_id, "ec_1");
    let t = client.connect_ticket().unwrap();
    assert_eq!(t.session_id, "sess_1");
    assert!(
        !format!("{t:?}").contains("secret"),
        "a ticket's Debug redacts it"
    );
    assert!(client.connect_url(&t).starts_with("ws://127.0.0.1:"));

    let key_id = client.key_id().to_owned();
    let lookup = move |id: &str| (id == key_id).then_some(public);
    let first = rx.recv().unwrap();
    let second = rx.recv().unwrap();
    assert_eq!(
        first.header("authorization").as_deref(),
        Some("Bearer opt_token")
    );
    let mut nonces = Vec::new();
    for req in [&first, &second] {
        let verified = verify_signature(req, OUTPOST_LABEL, &lookup, &Profile::outpost())
            .unwrap_or_else(|e| panic!("{} {}: {e}", req.method, req.url));
        let p = &verified.params;
        assert!(p.expires.unwrap() - p.created.unwrap() <= 300);
        assert_eq!(p.alg.as_deref(), Some("ed25519"));
        nonces.push(p.nonce.clone().unwrap());
    }
    assert!(
        first
            .header("content-digest")
            .unwrap()
            .starts_with("sha-256=:")
    );
    assert!(first.url.ends_with("/v1/execution-contexts"));
    assert!(second.body.is_empty() && second.header("content-digest").is_none());
    assert_ne!(nonces[0], nonces[1], "a nonce is never reused");

    // Tampering with the body breaks the digest.
    let mut tampered = first.clone();
    tampered.body[0] = b' ';
    let err = verify_signature(&tampered, OUTPOST_LABEL, &lookup, &Profile::outpost()).unwrap_err();
    assert_eq!(err.code(), "content_digest_mismatch");
}

#[test]
fn error_answers_carry_their_code_and_status() {
    let (base, _rx) = server(vec![
        (
            403,
            r#"{"error":{"code":"context_revoked","message":"revoked"}}"#.into(),
        ),
        (502, "<html>bad gateway</html>".into()),
    ]);
    let client = SignedClient::new(ServerUrl::parse(&base).unwrap(), SEED, &Trust::public());
    let err = client.connect_ticket().unwrap_err();
    assert!(matches!(err, HttpError::Api { status: 403, .. }), "{err:?}");
    assert_eq!(err.code(), "context_revoked");
    assert!(err.to_string().contains("revoked"));
    let err = client.connect_ticket().unwrap_err();
    assert_eq!((err.code(), err.status()), ("bad_answer", Some(502)));
    // Nothing listening.
    let (_held, port) = common::refusing_port();
    let client = SignedClient::new(
        ServerUrl::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
        SEED,
        &Trust::public(),
    );
    assert_eq!(
        client.connect_ticket().unwrap_err().code(),
        "server_unreachable"
    );
}

#[test]
fn plain_http_is_refused_to_a_host_that_is_not_loopback() {
    assert_eq!(
        ServerUrl::parse("http://example.com:8440")
            .unwrap_err()
            .code(),
        "insecure_server_url"
    );
    let url = ServerUrl::parse("https://example.com").unwrap();
    assert_eq!((url.port, url.secure), (443, true));
    assert_eq!(url.ws_url("/x?ticket=t"), "wss://example.com/x?ticket=t");
    let url = ServerUrl::parse("http://[::1]:8440/").unwrap();
    assert_eq!((url.host.as_str(), url.port), ("::1", 8440));
}

#[test]
fn a_client_that_cannot_reach_one_url_moves_to_the_next_and_signs_for_it() {
    let ticket = r#"{"ticket":"otk_secret","sessionId":"sess_2","expiresAt":1767225660}"#;
    let (live, rx) = server(vec![(200, ticket.into()), (200, ticket.into())]);
    let (_held, dead_port) = common::refusing_port();
    let dead = format!("http://127.0.0.1:{dead_port}");
    let client = SignedClient::new(ServerUrl::parse(&dead).unwrap(), SEED, &Trust::public())
        .with_alternates(vec![
            ServerUrl::parse(&live).unwrap(),
            // Listed twice: kept once.
            ServerUrl::parse(&live).unwrap(),
        ]);
    assert_eq!(client.in_use(), 0);
    // The failed request fails as it would have, and moves the client on.
    assert_eq!(
        client.connect_ticket().unwrap_err().code(),
        "server_unreachable"
    );
    assert_eq!(client.server().base, live);
    let t = client.connect_ticket().unwrap();
    assert_eq!(t.session_id, "sess_2");
    assert!(
        client
            .connect_url(&t)
            .starts_with(&live.replace("http", "ws"))
    );
    // Signed for the authority it reached, not the one it was made for.
    let public = Ed25519Signer::from_seed("k", SEED).verifying_key();
    let key_id = client.key_id().to_owned();
    let lookup = move |id: &str| (id == key_id).then_some(public);
    let reached = rx.recv().unwrap();
    verify_signature(&reached, OUTPOST_LABEL, &lookup, &Profile::outpost())
        .expect("the request verifies at the URL it reached");
    // A failure reported late, for a URL the client already left, moves nothing.
    client.move_on_from(0);
    assert_eq!(client.server().base, live);
    // Moving on from the last goes back to the first...
    client.move_on_from(1);
    assert_eq!(client.server().base, dead);
    // ...and a late failure from the first time the first was in use still moves nothing.
    client.move_on_from(0);
    assert_eq!(
        (client.in_use(), client.server().base.as_str()),
        (2, dead.as_str())
    );
}
