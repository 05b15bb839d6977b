//! The gate's reading of its clients, byte by byte and cut at every point.

use super::*;
use std::net::IpAddr;

/// Feeds `bytes` all at once; the request, with what followed it as `early`.
fn read_at_once(bytes: &[u8]) -> Request {
    let mut h = Handshake::new();
    let mut rest = bytes;
    loop {
        match h.feed(rest).expect("a request") {
            Progress::Ready(req) => return req,
            Progress::Reply(_) => rest = &[],
            Progress::NeedMore => panic!("cut short"),
        }
    }
}

/// Feeds `bytes` one at a time, answering SOCKS5's greeting; the request and what was
/// answered on the way (the bytes after the request are never fed).
fn read_all(bytes: &[u8]) -> (Result<Request, GateError>, Vec<u8>) {
    let mut h = Handshake::new();
    let mut answered = Vec::new();
    for b in bytes {
        match h.feed(&[*b]) {
            Ok(Progress::NeedMore) => {}
            Ok(Progress::Reply(r)) => answered.extend(r),
            Ok(Progress::Ready(req)) => return (Ok(req), answered),
            Err(e) => return (Err(e), answered),
        }
    }
    (Err(GateError::Malformed("cut short".into())), answered)
}

#[test]
fn connect_names_a_tunnel_and_keeps_what_followed() {
    let (req, _) = read_all(
        b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n\x16\x03",
    );
    let req = req.unwrap();
    assert_eq!((req.host.as_str(), req.port), ("api.example.com", 443));
    assert_eq!(req.form, Form::Connect);
    assert_eq!(req.destination(), "api.example.com:443");
    let (req, _) = read_all(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n");
    let req = req.unwrap();
    assert_eq!(
        (req.host.as_str(), req.destination()),
        ("::1", "[::1]:8443".to_owned())
    );
    assert_eq!(
        req.granted(),
        b"HTTP/1.1 200 Connection established\r\n\r\n"
    );
}

#[test]
fn an_absolute_request_is_forwarded_in_origin_form_closing_after_one_answer() {
    let (req, _) = read_all(
        b"GET http://Example.com:8080/a/b?x=1 HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: x\r\nAccept: */*\r\n\r\nBODY",
    );
    let req = req.unwrap();
    assert_eq!((req.host.as_str(), req.port), ("Example.com", 8080));
    let Form::Forward { head } = &req.form else {
        panic!("{req:?}");
    };
    assert_eq!(
        std::str::from_utf8(head).unwrap(),
        "GET /a/b?x=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(
        read_at_once(b"GET http://h/ HTTP/1.1\r\n\r\nBODY").early,
        b"BODY",
        "what followed the head is passed on"
    );
    assert!(req.granted().is_empty());
    let (req, _) = read_all(b"POST http://h?q HTTP/1.0\r\n\r\n");
    let Form::Forward { head } = req.unwrap().form else {
        panic!()
    };
    assert!(head.starts_with(b"POST /?q HTTP/1.1\r\nHost: h\r\n"));
}

#[test]
fn socks5_connect_by_name_and_by_address() {
    let mut bytes = vec![5, 2, 0, 2, 5, 1, 0, 3, 11];
    bytes.extend_from_slice(b"example.com");
    bytes.extend_from_slice(&443u16.to_be_bytes());
    bytes.extend_from_slice(b"hello");
    let (req, answered) = read_all(&bytes);
    let req = req.unwrap();
    assert_eq!(answered, [5, 0], "no authentication chosen");
    assert_eq!(
        (req.host.as_str(), req.port, &req.form),
        ("example.com", 443, &Form::Socks)
    );
    assert_eq!(read_at_once(&bytes).early, b"hello");
    assert_eq!(req.granted(), [5, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(req.refused("x", "y", false)[1], 0x02);
    let (req, _) = read_all(&[5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0x1f, 0x90]);
    assert_eq!(req.unwrap().destination(), "127.0.0.1:8080");
}

#[test]
fn what_the_gate_does_not_take_is_a_typed_refusal_with_an_answer() {
    for (bytes, code) in [
        (&b"GET /path HTTP/1.1\r\n\r\n"[..], "gate_malformed_request"),
        (b"GET https://x/ HTTP/1.1\r\n\r\n", "gate_malformed_request"),
        (b"CONNECT host HTTP/1.1\r\n\r\n", "gate_malformed_request"),
        (
            b"CONNECT u@host:1 HTTP/1.1\r\n\r\n",
            "gate_malformed_request",
        ),
        (b"CONNECT host:0 HTTP/1.1\r\n\r\n", "gate_malformed_request"),
        (
            b"CONNECT host:99999 HTTP/1.1\r\n\r\n",
            "gate_malformed_request",
        ),
        (b"\x00\x01", "gate_malformed_request"),
        (&[5, 1, 2][..], "gate_unsupported"),
        (
            &[5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80][..],
            "gate_unsupported",
        ),
        (&[5, 1, 0, 5, 1, 0, 9][..], "gate_malformed_request"),
    ] {
        let (req, _) = read_all(bytes);
        let err = req.unwrap_err();
        assert_eq!(err.code(), code, "{bytes:?}: {err}");
        assert!(!err.answer(bytes[0] == 5).is_empty());
    }
    let mut h = Handshake::new();
    let long = vec![b'a'; MAX_HEAD + 1];
    assert_eq!(h.feed(&long), Err(GateError::TooLong));
}

#[test]
fn a_refusal_names_the_destination_in_its_status_line_and_all_of_it_in_its_body() {
    let (req, _) = read_all(b"CONNECT a.example:8443 HTTP/1.1\r\n\r\n");
    let answer = req.unwrap().refused(
        "egress denied: a.example:8443 (allowlist)",
        "network access to `a.example:8443` was refused",
        false,
    );
    let text = String::from_utf8(answer).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 403 egress denied: a.example:8443 (allowlist)\r\n"),
        "{text}"
    );
    assert!(
        text.ends_with("\r\n\r\nnetwork access to `a.example:8443` was refused\n"),
        "{text}"
    );
}

#[test]
fn internal_addresses_are_the_machine_s_and_its_network_s() {
    let internal = |s: &str| is_internal(s.parse::<IpAddr>().unwrap());
    for ip in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.1",
        "::1",
        "fd00::1",
        "fe80::1",
        "::",
        "::ffff:10.0.0.1",
        "::ffff:127.0.0.1",
        "198.18.0.1",
    ] {
        assert!(internal(ip), "{ip}");
    }
    for ip in [
        "1.1.1.1",
        "93.184.216.34",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
    ] {
        assert!(!internal(ip), "{ip}");
    }
}
