//! SOCKS5 (RFC 1928) as the gate speaks it: no authentication, `CONNECT` only, the
//! destination as a name (`socks5h`) or an address.

use super::{Form, GateError, Progress, Request};

/// The first byte of every SOCKS5 message.
pub(super) const VERSION: u8 = 0x05;

/// Where a SOCKS5 client is.
#[derive(Debug, Default)]
pub(super) enum Socks {
    /// Its greeting (the methods it offers) is due.
    #[default]
    Greeting,
    /// Its request is due.
    Request,
}

impl Socks {
    /// Reads what `buf` holds of the current message, consuming it when whole.
    pub(super) fn read(&mut self, buf: &mut Vec<u8>) -> Result<Progress, GateError> {
        match self {
            Socks::Greeting => {
                let [VERSION, count, ..] = buf[..] else {
                    return Ok(Progress::NeedMore);
                };
                let len = 2 + usize::from(count);
                if buf.len() < len {
                    return Ok(Progress::NeedMore);
                }
                if !buf[2..len].contains(&0x00) {
                    return Err(GateError::Unsupported(
                        "the client offers no \"no authentication\" method".into(),
                    ));
                }
                buf.drain(..len);
                *self = Socks::Request;
                // "No authentication required"; the request may already be in `buf`.
                Ok(Progress::Reply(vec![VERSION, 0x00]))
            }
            Socks::Request => read_request(buf),
        }
    }
}

fn read_request(buf: &[u8]) -> Result<Progress, GateError> {
    let [version, command, _reserved, kind, ..] = buf[..] else {
        return Ok(Progress::NeedMore);
    };
    if version != VERSION {
        return Err(GateError::Malformed(format!(
            "SOCKS version {version} in a SOCKS5 request"
        )));
    }
    let (host, at) = match kind {
        0x01 => {
            let Some(a) = buf.get(4..8) else {
                return Ok(Progress::NeedMore);
            };
            (
                std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string(),
                8,
            )
        }
        0x04 => {
            let Some(a) = buf.get(4..20) else {
                return Ok(Progress::NeedMore);
            };
            let mut octets = [0u8; 16];
            octets.copy_from_slice(a);
            (std::net::Ipv6Addr::from(octets).to_string(), 20)
        }
        0x03 => {
            let Some(&len) = buf.get(4) else {
                return Ok(Progress::NeedMore);
            };
            let end = 5 + usize::from(len);
            let Some(name) = buf.get(5..end) else {
                return Ok(Progress::NeedMore);
            };
            let name = std::str::from_utf8(name)
                .ok()
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_graphic()))
                .ok_or_else(|| {
                    GateError::Malformed("a SOCKS5 host name that is not text".into())
                })?;
            (name.to_owned(), end)
        }
        other => {
            return Err(GateError::Malformed(format!("SOCKS5 address type {other}")));
        }
    };
    let Some(p) = buf.get(at..at + 2) else {
        return Ok(Progress::NeedMore);
    };
    let port = u16::from_be_bytes([p[0], p[1]]);
    if command != 0x01 {
        return Err(GateError::Unsupported(format!("SOCKS5 command {command}")));
    }
    if port == 0 {
        return Err(GateError::Malformed("SOCKS5 port 0".into()));
    }
    let early = buf[at + 2..].to_vec();
    Ok(Progress::Ready(Request {
        host,
        port,
        form: Form::Socks,
        early,
    }))
}

/// A SOCKS5 reply with code `rep` and an unspecified bound address.
pub(super) fn reply(rep: u8) -> Vec<u8> {
    vec![VERSION, rep, 0x00, 0x01, 0, 0, 0, 0, 0, 0]
}
