//! One WebSocket conformance function, run over real TCP and over TLS (an rcgen certificate
//! trusted as the extra CA) on every host: tokio, smol and the blocking host.

mod common;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use outpost_adapters::runtime::{BlockingHost, CLOSE_WAIT, Host, Link, LinkEvent, MAX_UNREAD};
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
        LinkEvent::Message(message) => message.into_bytes(),
        other => panic!("expected a message, got {other:?}"),
    }
}

fn closed(rx: &Receiver<LinkEvent>) -> Option<u16> {
    match rx.recv_timeout(WAIT).unwrap() {
        LinkEvent::Closed { code } => code,
        other => panic!("expected Closed, got {other:?}"),
    }
}

/// A consumer that holds what it was given stops the reads at [`MAX_UNREAD`] (TCP pushes
/// back on the sender); once it lets go, the rest arrives, in order and complete.
fn slow_consumer(host: &dyn Host) {
    const COUNT: u8 = 48;
    const SIZE: usize = 512 * 1024;
    let rx = open(
        host,
        &format!("{}/flood", common::echo_server(None)),
        &Trust::public(),
    );
    let link = opened(&rx);
    link.send(format!("flood:{COUNT}:{SIZE}").into_bytes());
    // Reads go on while less than MAX_UNREAD is held: this many messages, then none.
    let bound = MAX_UNREAD.div_ceil(SIZE);
    let mut held = Vec::new();
    for _ in 0..bound {
        match rx.recv_timeout(WAIT).unwrap() {
            LinkEvent::Message(m) => held.push(m),
            other => panic!("expected a message, got {other:?}"),
        }
    }
    // Held at the bound, the host reads nothing more (however long it is given).
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "{}: a message past the bound of {bound} held ones",
        host.name()
    );
    let mut seen: Vec<u8> = held.iter().map(|m| m[0]).collect();
    drop(held);
    while seen.len() < usize::from(COUNT) {
        let m = message(&rx);
        assert_eq!(m.len(), SIZE);
        seen.push(m[0]);
    }
    assert_eq!(seen, (0..COUNT).collect::<Vec<_>>(), "{}", host.name());
    link.close(1000, "done");
}

/// Messages sent from several threads at once, small ones (which an idle socket takes from
/// the sender's own thread) among large ones (which it cannot take at once, so the host's
/// writer finishes them), come back complete and in each sender's order.
fn order_under_load(host: &dyn Host, url: &str, trust: &Trust) {
    const SENDERS: usize = 4;
    const EACH: usize = 300;
    let rx = open(host, url, trust);
    let link = opened(&rx);
    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let link = link.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let mut text = format!("{sender}:{i}:");
                    if i % 50 == 49 {
                        text.push_str(&"x".repeat(300_000));
                    }
                    link.send(text.into_bytes());
                }
            })
        })
        .collect();
    let mut next = [0usize; SENDERS];
    for _ in 0..SENDERS * EACH {
        let echoed = String::from_utf8(message(&rx)).unwrap();
        let mut parts = echoed.splitn(3, ':');
        let sender: usize = parts.next().unwrap().parse().unwrap();
        let i: usize = parts.next().unwrap().parse().unwrap();
        assert_eq!(i, next[sender], "{}: sender {sender}'s order", host.name());
        let padding = parts.next().unwrap().len();
        assert_eq!(padding, if i % 50 == 49 { 300_000 } else { 0 });
        next[sender] += 1;
    }
    for sender in senders {
        sender.join().unwrap();
    }
    link.close(1000, "done");
    assert_eq!(closed(&rx), Some(1000), "{}", host.name());
}

/// A link opened by `host` to a fresh plain (no TLS) echo server, and its events.
fn plain_echo(host: &dyn Host) -> (Receiver<LinkEvent>, Link) {
    let rx = open(
        host,
        &format!("{}/x", common::echo_server(None)),
        &Trust::public(),
    );
    let link = opened(&rx);
    (rx, link)
}

/// Sends `queued` messages of 256 KiB to a peer that stopped reading and answering, then a
/// close: the host reports the connection closed within `bound` (and 3 s of slack).
fn close_to_a_deaf_peer(host: &dyn Host, queued: usize, bound: Duration) {
    let (rx, link) = plain_echo(host);
    link.send(b"deaf".to_vec());
    for _ in 0..queued {
        link.send(vec![b'x'; 256 * 1024]);
    }
    link.close(1001, "server_silent");
    let asked = std::time::Instant::now();
    assert_eq!(closed(&rx), None, "{}", host.name());
    assert!(
        asked.elapsed() < bound + Duration::from_secs(3),
        "{}: the close took {:?} with {queued} messages queued",
        host.name(),
        asked.elapsed()
    );
}

/// Closes end the closing handshake when the peer lives and are bounded when it does not; a
/// ping is reported as a sign of life.
fn closes_complete(host: &dyn Host) {
    // A message over the limit: the peer gets the 1009 close, not a reset, though it was
    // still writing 8 MiB when the host refused the message.
    let (url, report) = common::oversize_server(8 << 20);
    let rx = open(host, &format!("{url}/x"), &Trust::public());
    let link = opened(&rx);
    link.send(b"go".to_vec());
    assert_eq!(
        report.recv_timeout(WAIT).unwrap(),
        Ok(1009),
        "{}: the peer must read the close code",
        host.name()
    );
    assert_eq!(closed(&rx), None, "{}", host.name());
    // A peer that stopped answering: the host's close gives up after CLOSE_WAIT.
    close_to_a_deaf_peer(host, 0, CLOSE_WAIT);
    // A peer that stopped reading while 64 MiB wait to be written (far more than the
    // sockets' buffers take): the close is queued behind them and can never leave, yet the
    // host gives up on it (the writer has not moved for CLOSE_WAIT, then the reader waits
    // CLOSE_WAIT for the peer's close) instead of holding the connection for ever.
    close_to_a_deaf_peer(host, 256, 3 * CLOSE_WAIT);
    // A ping is a sign of life, reported before what follows it.
    let (rx, link) = plain_echo(host);
    link.send(b"ping".to_vec());
    match rx.recv_timeout(WAIT).unwrap() {
        LinkEvent::Alive => {}
        other => panic!("{}: expected Alive, got {other:?}", host.name()),
    }
    assert_eq!(message(&rx), b"pinged");
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
        order_under_load(host, &url, &trust);
    }
    slow_consumer(host);
    closes_complete(host);
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
    let (_held, port) = common::refusing_port();
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
