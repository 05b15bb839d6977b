//! One WebSocket conformance function, run over real TCP and over TLS (an rcgen certificate
//! trusted as the extra CA) on every host: tokio, smol and the blocking host.

mod common;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use outpost_adapters::runtime::{BlockingHost, Host, Link, LinkEvent};
use outpost_adapters::tls::Trust;

const WAIT: Duration = Duration::from_secs(10);

fn open(host: &dyn Host, url: &str, trust: &Trust) -> Receiver<LinkEvent> {
    let (tx, rx) = channel();
    host.open(
        url.to_owned(),
        trust.client_config(),
        Arc::new(move |e| {
            let _ = tx.send(e);
        }),
    );
    rx
}

fn opened(rx: &Receiver<LinkEvent>) -> Link {
    match rx.recv_timeout(WAIT).unwrap() {
        LinkEvent::Opened(link) => link,
        other => panic!("expected Opened, got {other:?}"),
    }
}

fn message(rx: &Receiver<LinkEvent>) -> Vec<u8> {
    match rx.recv_timeout(WAIT).unwrap() {
        LinkEvent::Message(bytes) => bytes,
        other => panic!("expected a message, got {other:?}"),
    }
}

fn closed(rx: &Receiver<LinkEvent>) -> Option<u16> {
    match rx.recv_timeout(WAIT).unwrap() {
        LinkEvent::Closed { code } => code,
        other => panic!("expected Closed, got {other:?}"),
    }
}

/// Everything a host must do with a WebSocket.
fn conformance(host: &dyn Host) {
    let cert = common::test_cert();
    for (base, trust) in [
        (common::echo_server(None), Trust::public()),
        (
            common::echo_server(Some(cert.server.clone())),
            cert.trust.clone(),
        ),
    ] {
        let url = format!("{base}/v1/execution-contexts/connect?ticket=otk_x");
        // Text and binary round trips, in order, then a server close code arrives.
        let rx = open(host, &url, &trust);
        let link = opened(&rx);
        link.send(br#"{"type":"status"}"#.to_vec());
        link.send(vec![0xff, 0x00, 0x01]);
        let big = vec![b'a'; 600_000];
        link.send(big.clone());
        assert_eq!(message(&rx), br#"{"type":"status"}"#, "{}", host.name());
        assert_eq!(message(&rx), vec![0xff, 0x00, 0x01]);
        assert_eq!(message(&rx), big);
        link.send(b"close:4001".to_vec());
        assert_eq!(closed(&rx), Some(4001), "{} {base}", host.name());
        // A close we start is answered with the same code.
        let rx = open(host, &url, &trust);
        let link = opened(&rx);
        link.send(b"one".to_vec());
        link.close(1000, "drained");
        link.send(b"dropped after the close".to_vec());
        assert_eq!(message(&rx), b"one");
        assert_eq!(closed(&rx), Some(1000));
    }
    // TLS to a certificate nobody vouches for fails, with a reason.
    let untrusted = common::echo_server(Some(cert.server.clone()));
    match open(host, &format!("{untrusted}/x"), &Trust::public())
        .recv_timeout(WAIT)
        .unwrap()
    {
        LinkEvent::Failed(reason) => assert!(
            reason.contains("handshake") || reason.contains("certificate"),
            "{reason}"
        ),
        other => panic!(
            "{}: an untrusted certificate must fail, got {other:?}",
            host.name()
        ),
    }
    // Nothing listening: a failure naming the address.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    match open(host, &format!("ws://127.0.0.1:{port}/x"), &Trust::public())
        .recv_timeout(WAIT)
        .unwrap()
    {
        LinkEvent::Failed(reason) => assert!(reason.contains("127.0.0.1"), "{reason}"),
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[test]
fn blocking_host_conforms() {
    conformance(&BlockingHost::default());
}

#[cfg(feature = "tokio")]
#[test]
fn tokio_host_conforms() {
    use outpost_adapters::runtime::{AsyncHost, TokioRuntime};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    conformance(&AsyncHost::new(
        TokioRuntime::new(rt.handle().clone()),
        "tokio",
    ));
}

#[cfg(feature = "smol")]
#[test]
fn smol_host_conforms() {
    use outpost_adapters::runtime::{AsyncHost, SmolRuntime};
    conformance(&AsyncHost::new(SmolRuntime, "smol"));
}
