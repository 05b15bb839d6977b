//! A daemon that stops reading cannot make the server hold its frames without bound: once its
//! socket takes no more and 256 frames wait behind it, the server closes the connection with
//! 1011 (PROTOCOL §3), ahead of what was queued, and forgets the rest. The machine shows
//! offline, and the same daemon connects again at once.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::{
    Machine, TestServer, bearer, http, next_frame, online_context, open_socket, say_hello, temp_dir,
};
use serde_json::json;
use tungstenite::Message;

/// At most this many grant changes are sent while the daemon reads nothing: far more than
/// the 256 queued frames and any socket buffers of a few MiB hold (some 6 KiB each).
const MAX_CHANGES: usize = 20_000;

#[test]
fn a_daemon_that_stops_reading_is_closed_with_1011_and_connects_again() {
    let dir = temp_dir("send-queue");
    let server = TestServer::start(&dir);
    let addr = server.addr();
    let machine = Machine::new(41);
    assert_eq!(machine.register(&server, "deaf").status, 201);
    let (ticket, _) = machine.ticket(&server);
    // A receive buffer of a few KiB (fixed, so the kernel does not grow it): the server's
    // writes stop once that and its own send buffer are full.
    let stream = TcpStream::connect(addr).expect("connect");
    nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::RcvBuf, &4096)
        .expect("a small receive buffer");
    stream.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let url = format!("ws://{addr}/v1/execution-contexts/connect?ticket={ticket}");
    let (mut socket, _) = tungstenite::client::client(url.as_str(), stream).expect("handshake");
    let kind = |bytes: &[u8]| -> String {
        let v: serde_json::Value = serde_json::from_slice(bytes).expect("json");
        v["type"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(kind(&next_frame(&mut socket)), "welcome");
    say_hello(&mut socket);
    let admin = bearer(&server.admin());
    let auth = [("authorization", admin.as_str())];
    let context = || http(addr, "GET", "/v1/execution-contexts/deaf", &auth, b"").json();
    online_context(addr, &auth, "deaf");
    // Each change of the grant is a `grant.update` frame for the daemon, which reads none.
    // A long allowlist makes each frame some 6 KiB.
    let hosts: Vec<String> = (0..100)
        .map(|n| format!("service-{n:03}.internal.example.com:443"))
        .collect();
    // Sent until the server gives up on the daemon (it shows offline at once).
    let mut sent = 0;
    while sent < MAX_CHANGES {
        let body = json!({"egress": {"mode": "allowlist", "hosts": hosts},
                          "limits": {"maxConcurrent": 1 + sent % 2}});
        let patched = http(
            addr,
            "PATCH",
            "/v1/execution-contexts/deaf/grant",
            &auth,
            body.to_string().as_bytes(),
        );
        assert_eq!(patched.status, 200, "change {sent}: {}", patched.json());
        sent += 1;
        if sent % 100 == 0 && context()["online"] == false {
            break;
        }
    }
    assert!(
        sent < MAX_CHANGES,
        "still online after {sent} grant changes"
    );
    // Read at full speed now (a window of a few KiB moves some 50 KiB/s).
    nix::sys::socket::setsockopt(
        socket.get_ref(),
        nix::sys::socket::sockopt::RcvBuf,
        &(4 << 20),
    )
    .expect("a large receive buffer");
    // What the socket held arrives, then the close: fewer updates than were made.
    let mut updates = 0;
    let code = loop {
        match socket.read() {
            Ok(Message::Text(text)) => {
                assert_eq!(kind(text.as_bytes()), "grant.update");
                updates += 1;
            }
            Ok(Message::Close(frame)) => break frame.map(|f| (u16::from(f.code), f.reason)),
            Ok(_) => {}
            Err(e) => panic!("the socket ended without a close after {updates} updates: {e}"),
        }
    };
    let (code, reason) = code.expect("a close code");
    assert_eq!(
        (code, reason.as_str()),
        (1011, "send queue full"),
        "after {updates} updates"
    );
    assert!(updates < sent, "{updates} of {sent} updates arrived");
    assert_eq!(context()["online"], false);
    // Nothing is held against the machine: it connects again and hears the grant in force.
    let (ticket, _) = machine.ticket(&server);
    let mut socket = open_socket(addr, &ticket).expect("the socket opens again");
    let welcome: serde_json::Value = serde_json::from_slice(&next_frame(&mut socket)).unwrap();
    assert_eq!(welcome["type"], "welcome", "{welcome}");
    assert_eq!(
        welcome["grant"]["limits"]["maxConcurrent"],
        json!(1 + (sent - 1) % 2),
        "{welcome}"
    );
}
