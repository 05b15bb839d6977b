//! The refusals of the HTTP layer itself, answered in the API's error shape
//! (`{"error":{"code","message"}}`, PROTOCOL §11) like every other error: a request head too
//! large (431 `headers_too_large`), a request target too long (414 `uri_too_long`), a request
//! line or header that does not parse (400 `malformed_request`) and a head that does not
//! arrive in time (408 `request_timeout`).
//!
//! hyper parses the request head before any route sees it, and answers a head it refuses with
//! a status and an empty body, or (on its header timeout) with nothing. This module owns the
//! connection wrapper ([`JsonErrors`]) that puts the JSON answers in their place: it
//! recognises hyper's own answers among the bytes hyper writes (a 400, 414 or 431 with an
//! empty body, which no route ever answers: every route's error carries a JSON body) and
//! writes the JSON answer instead, and it keeps a handle by which the accept loop answers 408
//! after hyper gave up on a head the client had begun (an idle connection is closed without
//! an answer). It also sets TCP keep-alive on the connections the server takes and makes
//! ([`keep_alive`]). It never reads, parses or alters anything else a connection carries,
//! and it never decides what a route answers.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};

/// The longest request target (path and query) a route is asked to read, in bytes: longer is
/// 414 `uri_too_long`.
pub(crate) const MAX_URI: usize = 8 * 1024;

/// The largest request head (request line and headers), in bytes: larger is 431
/// `headers_too_large` (so is a head of more than 100 headers).
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// One refusal of the HTTP layer: status, reason phrase, code and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    status: u16,
    reason: &'static str,
    /// The stable error code.
    pub(crate) code: &'static str,
    message: &'static str,
}

/// 400 `malformed_request`.
pub(crate) const MALFORMED: Refusal = Refusal {
    status: 400,
    reason: "Bad Request",
    code: "malformed_request",
    message: "the request line or a header is not HTTP/1.1",
};

/// 414 `uri_too_long`.
pub(crate) const URI_TOO_LONG: Refusal = Refusal {
    status: 414,
    reason: "URI Too Long",
    code: "uri_too_long",
    message: "the request target (path and query) is longer than 8 KiB",
};

/// 431 `headers_too_large`.
pub(crate) const HEADERS_TOO_LARGE: Refusal = Refusal {
    status: 431,
    reason: "Request Header Fields Too Large",
    code: "headers_too_large",
    message: "the request head is larger than 64 KiB or has more than 100 headers",
};

/// 408 `request_timeout`.
pub(crate) const TIMEOUT: Refusal = Refusal {
    status: 408,
    reason: "Request Timeout",
    code: "request_timeout",
    message: "the request head did not arrive within 30 s",
};

impl Refusal {
    /// The refusal's JSON body.
    pub(crate) fn body(&self) -> String {
        serde_json::json!({"error": {"code": self.code, "message": self.message}}).to_string()
    }

    /// The whole HTTP/1.1 answer, closing the connection.
    fn answer(&self) -> Vec<u8> {
        let body = self.body();
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.status,
            self.reason,
            body.len()
        )
        .into_bytes()
    }

    /// The answer for a route, as the router's answers are built.
    pub(crate) fn response(&self) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        let status = axum::http::StatusCode::from_u16(self.status)
            .unwrap_or(axum::http::StatusCode::BAD_REQUEST);
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.body(),
        )
            .into_response()
    }
}

/// The refusal hyper's own answer in `written` stands for: a whole head of status 400, 414 or
/// 431 with `content-length: 0` and nothing after it.
fn hypers_answer(written: &[u8]) -> Option<Refusal> {
    let refusal = match written.get(..13)? {
        b"HTTP/1.1 400 " => MALFORMED,
        b"HTTP/1.1 414 " => URI_TOO_LONG,
        b"HTTP/1.1 431 " => HEADERS_TOO_LARGE,
        _ => return None,
    };
    let head = written.strip_suffix(b"\r\n\r\n")?;
    if head.windows(4).any(|w| w == b"\r\n\r\n") {
        return None;
    }
    let empty = head
        .split(|b| *b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .any(|line| line.eq_ignore_ascii_case(b"content-length: 0"));
    empty.then_some(refusal)
}

struct State<S> {
    io: S,
    /// A JSON answer still to be written in place of hyper's, and how much of it was.
    pending: Vec<u8>,
    written: usize,
    /// Bytes read since the last write: a head that timed out with none was an idle
    /// connection (closed without an answer: a keep-alive client would take a 408 sent then
    /// for the answer to its next request), with some a head that came too slowly.
    read_since_write: usize,
}

impl<S: AsyncWrite + Unpin> State<S> {
    /// Writes what is pending; ready once nothing is.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        Poll::Ready(Ok(()))
    }
}

/// A connection as hyper sees it: reads and writes pass through untouched, except hyper's own
/// answer to a head it refused, which is replaced by the JSON answer. Cloning gives the accept
/// loop a handle on the same connection ([`JsonErrors::refuse`]).
pub(crate) struct JsonErrors<S> {
    state: Arc<Mutex<State<S>>>,
}

impl<S> Clone for JsonErrors<S> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
        }
    }
}

impl<S> JsonErrors<S> {
    /// Wraps a connection.
    pub(crate) fn new(io: S) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                io,
                pending: Vec::new(),
                written: 0,
                read_since_write: 0,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<S: AsyncWrite + Unpin> JsonErrors<S> {
    /// Whether the client sent anything since the server last wrote: a request head begun.
    pub(crate) fn head_begun(&self) -> bool {
        self.lock().read_since_write > 0
    }

    /// Answers `refusal` and closes the connection (for a head hyper gave up waiting for).
    pub(crate) async fn refuse(self, refusal: Refusal) {
        {
            let mut state = self.lock();
            state.pending = refusal.answer();
            state.written = 0;
        }
        let mut this = self;
        let _ = this.flush().await;
        let _ = this.shutdown().await;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut state = self.lock();
        let before = buf.filled().len();
        ready!(Pin::new(&mut state.io).poll_read(cx, buf))?;
        state.read_since_write += buf.filled().len() - before;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut state = self.lock();
        ready!(state.drain(cx))?;
        if let Some(refusal) = hypers_answer(buf) {
            tracing::debug!(code = refusal.code, "a request head was refused");
            state.pending = refusal.answer();
            state.written = 0;
            return Poll::Ready(Ok(buf.len()));
        }
        let n = ready!(Pin::new(&mut state.io).poll_write(cx, buf))?;
        if n > 0 {
            state.read_since_write = 0;
        }
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut state = self.lock();
        ready!(state.drain(cx))?;
        if let [only] = bufs
            && let Some(refusal) = hypers_answer(only)
        {
            tracing::debug!(code = refusal.code, "a request head was refused");
            state.pending = refusal.answer();
            state.written = 0;
            return Poll::Ready(Ok(only.len()));
        }
        let n = ready!(Pin::new(&mut state.io).poll_write_vectored(cx, bufs))?;
        if n > 0 {
            state.read_since_write = 0;
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.lock().io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.lock();
        ready!(state.drain(cx))?;
        Pin::new(&mut state.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.lock();
        ready!(state.drain(cx))?;
        Pin::new(&mut state.io).poll_shutdown(cx)
    }
}

/// TCP keep-alive: probes after this much silence, every 10 s, 3 of them, so that a peer
/// that vanished without a word (a viewer whose network dropped, a node cut off) is let go
/// within about a minute, and what was relayed for it with it.
const KEEPALIVE_IDLE_SECS: u32 = 30;

/// Sets TCP keep-alive on `tcp` ([`KEEPALIVE_IDLE_SECS`]); a socket that refuses keeps
/// working without it.
pub(crate) fn keep_alive(tcp: &tokio::net::TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = setsockopt(tcp, sockopt::KeepAlive, &true);
    let _ = setsockopt(tcp, sockopt::TcpKeepIdle, &KEEPALIVE_IDLE_SECS);
    let _ = setsockopt(tcp, sockopt::TcpKeepInterval, &10);
    let _ = setsockopt(tcp, sockopt::TcpKeepCount, &3);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_empty_answers_are_recognised() {
        let auto =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(hypers_answer(auto), Some(HEADERS_TOO_LARGE));
        let auto = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(hypers_answer(auto), Some(MALFORMED));
        for other in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 10\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 00\r\n",
            b"\x81\x05hello",
            b"",
        ] {
            assert_eq!(
                hypers_answer(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[test]
    fn each_answer_is_json_with_its_length() {
        for refusal in [MALFORMED, URI_TOO_LONG, HEADERS_TOO_LARGE, TIMEOUT] {
            let answer = String::from_utf8(refusal.answer()).expect("text");
            let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
            assert!(head.contains(&format!("content-length: {}", body.len())));
            let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
            assert_eq!(json["error"]["code"], refusal.code);
        }
    }
}
