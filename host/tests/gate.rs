//! The egress gate over real TCP: HTTP in absolute form, CONNECT and SOCKS5 reach a loopback
//! server the allowlist names literally; another port, a name that resolves into the
//! machine's own addresses and a `none` egress are refused with the destination, the mode
//! and the owner's fix, and reported.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outpost_core::wire::Egress;
use outpost_host::{Gate, GateEvent, GatePolicy};

/// A server answering every request with `hello from PORT`, and the request lines it saw.
fn target() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let lines = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let lines = lines.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut head = Vec::new();
                let mut byte = [0u8];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                lines
                    .lock()
                    .unwrap()
                    .push(text.lines().next().unwrap_or("").to_owned());
                let body = format!("hello from {port}");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, seen)
}

struct Setup {
    gate: Gate,
    events: Arc<Mutex<Vec<GateEvent>>>,
}

fn gate(egress: Egress) -> Setup {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let gate = Gate::start(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        GatePolicy {
            egress,
            context: "box".into(),
        },
        Arc::new(move |e| sink.lock().unwrap().push(e)),
    )
    .unwrap();
    Setup { gate, events }
}

fn allow(hosts: &[String]) -> Egress {
    Egress::Allowlist {
        hosts: hosts.to_vec(),
    }
}

/// Sends `bytes` to the gate and reads everything it answers until it closes.
fn exchange(gate: &Gate, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(gate.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn http_and_connect_reach_an_allowed_destination_and_nothing_else() {
    let (port, seen) = target();
    let (other, _) = target();
    let s = gate(allow(&[format!("127.0.0.1:{port}")]));
    // HTTP_PROXY: an absolute-form request, forwarded in origin form.
    let answer = exchange(
        &s.gate,
        format!("GET http://127.0.0.1:{port}/path?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")
            .as_bytes(),
    );
    assert!(answer.ends_with(&format!("hello from {port}")), "{answer}");
    assert_eq!(seen.lock().unwrap()[0], "GET /path?q=1 HTTP/1.1");
    // HTTPS_PROXY: a CONNECT tunnel, then anything through it (a TLS client's bytes too).
    let answer = exchange(
        &s.gate,
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET /tunnel HTTP/1.1\r\n\r\n").as_bytes(),
    );
    assert!(
        answer.starts_with("HTTP/1.1 200 Connection established\r\n\r\n"),
        "{answer}"
    );
    assert!(answer.ends_with(&format!("hello from {port}")), "{answer}");
    assert_eq!(seen.lock().unwrap()[1], "GET /tunnel HTTP/1.1");
    // Another port: refused, named, with the owner's fix; reported; never connected.
    let answer = exchange(
        &s.gate,
        format!("CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\n").as_bytes(),
    );
    assert!(
        answer.starts_with(&format!(
            "HTTP/1.1 403 egress denied: 127.0.0.1:{other} (allowlist)\r\n"
        )),
        "{answer}"
    );
    assert!(
        answer.contains("it is not on this context's egress allowlist"),
        "{answer}"
    );
    assert!(
        answer.contains(&format!(
            "outpost context grant box --egress 127.0.0.1:{port},127.0.0.1:{other}"
        )),
        "{answer}"
    );
    let events = s.events.lock().unwrap().clone();
    assert!(events.contains(&GateEvent::Connected {
        destination: format!("127.0.0.1:{port}")
    }));
    assert!(
        events.iter().any(|e| matches!(e, GateEvent::Refused { destination, .. } if *destination == format!("127.0.0.1:{other}"))),
        "{events:?}"
    );
}

#[test]
fn a_name_that_resolves_into_the_machine_is_refused_unless_its_address_is_named() {
    let (port, seen) = target();
    let s = gate(allow(&[format!("localhost:{port}")]));
    let answer = exchange(
        &s.gate,
        format!("GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(
        answer.contains("it resolves to 127.0.0.1") || answer.contains("it resolves to ::1"),
        "{answer}"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached the server"
    );
    // Named by its address as well, the name goes through.
    let s = gate(allow(&[
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ]));
    let answer = exchange(
        &s.gate,
        format!("GET http://localhost:{port}/named HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes(),
    );
    assert!(answer.ends_with(&format!("hello from {port}")), "{answer}");
}

#[test]
fn socks5_goes_where_http_goes_and_is_refused_in_its_own_words() {
    let (port, seen) = target();
    let s = gate(allow(&[format!("127.0.0.1:{port}")]));
    let mut request = vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1];
    request.extend_from_slice(&port.to_be_bytes());
    let mut through = request.clone();
    through.extend_from_slice(b"GET /socks HTTP/1.1\r\n\r\n");
    let answer = exchange(&s.gate, &through);
    assert!(answer.as_bytes().starts_with(&[5, 0, 5, 0]), "{answer:?}");
    assert!(answer.ends_with(&format!("hello from {port}")), "{answer}");
    assert_eq!(seen.lock().unwrap()[0], "GET /socks HTTP/1.1");
    let refused = gate(Egress::None);
    let answer = exchange(&refused.gate, &request);
    assert_eq!(
        answer.as_bytes()[..4],
        [5, 0, 5, 2],
        "not allowed by ruleset"
    );
    assert!(matches!(
        refused.events.lock().unwrap()[..],
        [GateEvent::Refused { .. }]
    ));
}

#[test]
fn egress_none_refuses_everything_and_says_how_to_open_it() {
    let (port, seen) = target();
    let s = gate(Egress::None);
    let answer = exchange(
        &s.gate,
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    );
    assert!(
        answer.starts_with(&format!(
            "HTTP/1.1 403 egress denied: 127.0.0.1:{port} (none)\r\n"
        )),
        "{answer}"
    );
    assert!(
        answer.contains("this context's egress mode is `none`"),
        "{answer}"
    );
    assert!(answer.contains(&format!(
        "outpost context grant box --egress 127.0.0.1:{port}"
    )));
    assert!(seen.lock().unwrap().is_empty());
    // A client that speaks no proxy protocol is told so.
    let answer = exchange(&s.gate, b"GET /plain HTTP/1.1\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400 Bad Request"), "{answer}");
    assert!(answer.contains("gate_malformed_request"), "{answer}");
}
