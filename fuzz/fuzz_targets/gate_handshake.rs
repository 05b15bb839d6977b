//! Arbitrary bytes as a client's opening of the egress gate (HTTP CONNECT, an absolute-form
//! request, SOCKS5), split at an arbitrary point. Nothing may panic; what is read split is
//! what is read whole; a request names a host and a port, and a forwarded head is in origin
//! form, whole, closing after one answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::gate::{Form, GateError, Handshake, Progress, Request};

/// Feeds `chunks` in order (and once more with nothing after a reply).
fn read(chunks: &[&[u8]]) -> Option<Result<Request, GateError>> {
    let mut h = Handshake::new();
    for chunk in chunks {
        let mut input: &[u8] = chunk;
        loop {
            match h.feed(input) {
                Ok(Progress::NeedMore) => break,
                Ok(Progress::Reply(_)) => input = &[],
                Ok(Progress::Ready(r)) => return Some(Ok(r)),
                Err(e) => return Some(Err(e)),
            }
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(bytes.len());
    let whole = read(&[bytes]);
    let split = read(&[&bytes[..at], &bytes[at..]]);
    if let (Some(Ok(a)), Some(Ok(b))) = (&whole, &split) {
        assert_eq!((&a.host, a.port, &a.form), (&b.host, b.port, &b.form));
    }
    if let Some(Ok(request)) = whole {
        assert!(!request.host.is_empty() && request.port > 0);
        assert!(!request.destination().is_empty());
        if let Form::Forward { head } = &request.form {
            assert!(head.ends_with(b"Connection: close\r\n\r\n"));
            let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
            assert!(line.windows(2).any(|w| w == b" /"), "{line:?}");
        }
        let _ = request.refused("summary\r\nx", "why", false);
    }
});
