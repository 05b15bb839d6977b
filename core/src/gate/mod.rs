//! The egress gate's protocol: how a run's client asks the gate — the proxy a daemon runs
//! outside a run's network namespace, the run's only way out under an `allowlist` egress —
//! for a destination, and how the gate answers.
//!
//! A client speaks one of three ways, told apart by its first byte: HTTP `CONNECT host:port`
//! (a tunnel, what `HTTPS_PROXY` makes clients do), an HTTP request in absolute form
//! (`GET http://host:port/path`, what `HTTP_PROXY` makes them do; forwarded in origin form
//! with `Connection: close`), or SOCKS5 (`ALL_PROXY=socks5h://…`, `CONNECT` only, no
//! authentication). [`Handshake`] reads those bytes as they arrive and says what to answer
//! and, once the request is whole, what it asks for ([`Request`]); the gate then decides with
//! [`crate::grant::check_egress`] and [`is_internal`], and answers with [`Request::granted`]
//! or [`Request::refused`].
//!
//! This module never opens a socket, resolves a name or reads a clock; it owns the bytes.

mod http;
mod ranges;
mod socks;

#[cfg(test)]
mod tests;

pub use ranges::is_internal;

/// The most bytes of a request head (HTTP) or handshake (SOCKS5) the gate reads before it
/// gives up on a client.
pub const MAX_HEAD: usize = 16 * 1024;

/// How the client asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Form {
    /// `CONNECT host:port`: a tunnel once granted.
    Connect,
    /// An HTTP request in absolute form: the head to send the destination (origin form,
    /// `Connection: close`, the proxy's own headers removed), then the client's bytes as they
    /// come.
    Forward {
        /// The rewritten request head, ending with its blank line.
        head: Vec<u8>,
    },
    /// SOCKS5 `CONNECT`: a tunnel once granted.
    Socks,
}

/// What a client asks the gate for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The destination's host as the client named it: a DNS name or an IP address (IPv6
    /// without brackets).
    pub host: String,
    /// The destination's port.
    pub port: u16,
    /// How it asked.
    pub form: Form,
    /// Bytes the client sent after its request (the start of a body, or of the tunnel's
    /// traffic), to pass on first.
    pub early: Vec<u8>,
}

/// Why a client's bytes are not a request the gate reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// Neither HTTP nor SOCKS5, or malformed.
    #[error("not a proxy request the gate reads: {0}")]
    Malformed(String),
    /// A head longer than [`MAX_HEAD`].
    #[error("the request head is over {MAX_HEAD} bytes")]
    TooLong,
    /// SOCKS5 other than `CONNECT` without authentication.
    #[error("the gate takes SOCKS5 CONNECT without authentication only: {0}")]
    Unsupported(String),
}

impl GateError {
    /// The stable code: `gate_malformed_request`, `gate_request_too_long` or `gate_unsupported`.
    pub fn code(&self) -> &'static str {
        match self {
            GateError::Malformed(_) => "gate_malformed_request",
            GateError::TooLong => "gate_request_too_long",
            GateError::Unsupported(_) => "gate_unsupported",
        }
    }

    /// What to answer the client that sent it (then close).
    pub fn answer(&self, socks: bool) -> Vec<u8> {
        if socks {
            // General failure (or "command not supported") in the SOCKS5 reply shape.
            let rep = if matches!(self, GateError::Unsupported(_)) {
                0x07
            } else {
                0x01
            };
            return socks::reply(rep);
        }
        let status = match self {
            GateError::TooLong => "431 Request Header Fields Too Large",
            _ => "400 Bad Request",
        };
        http::text_answer(status, &format!("{}: {self}\n", self.code()))
    }
}

/// What the gate does after reading some bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Read more.
    NeedMore,
    /// Write these bytes to the client (SOCKS5's method selection), then feed again — with no
    /// bytes first, as the next message may be read already.
    Reply(Vec<u8>),
    /// The request is whole.
    Ready(Request),
}

/// One client's opening bytes, read as they arrive.
#[derive(Debug, Default)]
pub struct Handshake {
    buf: Vec<u8>,
    socks: Option<socks::Socks>,
}

impl Handshake {
    /// A handshake with nothing read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the client speaks SOCKS5 (so refusals take its reply shape).
    pub fn is_socks(&self) -> bool {
        self.socks.is_some()
    }

    /// Takes `bytes` the client sent; says what to do next. After an error or
    /// [`Progress::Ready`] the handshake is over.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Progress, GateError> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() > MAX_HEAD {
            return Err(GateError::TooLong);
        }
        if self.socks.is_none() {
            match self.buf.first() {
                None => return Ok(Progress::NeedMore),
                Some(&socks::VERSION) => self.socks = Some(socks::Socks::default()),
                Some(_) => return http::read(&self.buf),
            }
        }
        match &mut self.socks {
            Some(socks) => socks.read(&mut self.buf),
            None => Ok(Progress::NeedMore),
        }
    }
}

impl Request {
    /// `host:port` as a refusal and the audit name it (IPv6 in brackets).
    pub fn destination(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// What to answer the client once the destination is connected: nothing for a forwarded
    /// request (the destination's own answer follows).
    pub fn granted(&self) -> Vec<u8> {
        match &self.form {
            Form::Connect => b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
            Form::Forward { .. } => Vec::new(),
            Form::Socks => socks::reply(0x00),
        }
    }

    /// What to answer the client when the gate refuses: for HTTP, `403` whose status line
    /// carries `summary` (the destination and the mode, one line) and whose body is `why`
    /// (all of it, with the owner's fix); SOCKS5's "not allowed by ruleset" (its reply has
    /// no room for words). `unreachable`: the destination was allowed but could not be
    /// reached (`502`, SOCKS5 "host unreachable").
    pub fn refused(&self, summary: &str, why: &str, unreachable: bool) -> Vec<u8> {
        let summary: String = summary
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        match (&self.form, unreachable) {
            (Form::Socks, false) => socks::reply(0x02),
            (Form::Socks, true) => socks::reply(0x04),
            (_, false) => http::text_answer(&format!("403 {summary}"), &format!("{why}\n")),
            (_, true) => http::text_answer(&format!("502 {summary}"), &format!("{why}\n")),
        }
    }
}
