//! The HTTP forms of a gate request: `CONNECT host:port` and a request in absolute form.

use super::{Form, GateError, MAX_HEAD, Progress, Request};

/// The most header fields a request head may have.
const MAX_HEADERS: usize = 64;

/// Headers meant for the proxy, or about the client's connection to it: not forwarded.
const HOP_BY_HOP: &[&str] = &[
    "proxy-connection",
    "proxy-authorization",
    "connection",
    "keep-alive",
];

/// Reads an HTTP request head from the start of `buf`.
pub(super) fn read(buf: &[u8]) -> Result<Progress, GateError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Progress::NeedMore),
        Err(e) => return Err(GateError::Malformed(format!("not an HTTP request: {e}"))),
    };
    let method = req.method.unwrap_or_default();
    let target = req.path.unwrap_or_default();
    let early = buf[len..].to_vec();
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(target)?;
        let port =
            port.ok_or_else(|| GateError::Malformed(format!("CONNECT {target:?} names no port")))?;
        return Ok(Progress::Ready(Request {
            host,
            port,
            form: Form::Connect,
            early,
        }));
    }
    let Some(rest) = strip_prefix_ignore_case(target, "http://") else {
        let why = if strip_prefix_ignore_case(target, "https://").is_some() {
            "an https:// URI goes through CONNECT (set HTTPS_PROXY)"
        } else {
            "a request to the gate names its destination: http://host/path (set HTTP_PROXY) or CONNECT host:port (set HTTPS_PROXY)"
        };
        return Err(GateError::Malformed(format!("{method} {target}: {why}")));
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority_text, path) = rest.split_at(split);
    let (host, port) = authority(authority_text)?;
    let origin = match path {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    let mut head = format!("{method} {origin} HTTP/1.1\r\n").into_bytes();
    let mut has_host = false;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&name.as_str()) {
            continue;
        }
        has_host |= name == "host";
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    if !has_host {
        head.extend_from_slice(format!("Host: {authority_text}\r\n").as_bytes());
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    if head.len() > MAX_HEAD {
        return Err(GateError::TooLong);
    }
    Ok(Progress::Ready(Request {
        host,
        port: port.unwrap_or(80),
        form: Form::Forward { head },
        early,
    }))
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// `host[:port]`, `[v6][:port]`: the host (IPv6 without brackets) and the port if given.
fn authority(text: &str) -> Result<(String, Option<u16>), GateError> {
    let bad = |why: &str| GateError::Malformed(format!("{text:?} is not host:port: {why}"));
    if text.contains('@') {
        return Err(bad("credentials in the authority"));
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or_else(|| bad("an unclosed ["))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| bad("text after ]"))?),
        };
        (v6, port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() || host.contains(['/', ' ', '[', ']']) {
        return Err(bad("no host"));
    }
    let port = port
        .map(|p| match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(bad("the port is not 1 to 65535")),
        })
        .transpose()?;
    Ok((host.to_owned(), port))
}

/// A complete answer: `status` (code and reason), a text body, `Connection: close`.
pub(super) fn text_answer(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
