//! A terminal's viewer for the tests: a WebSocket on a server's viewer route
//! (`/v1/terminals/{id}/connect`), everything it was shown, and the keys and control messages
//! it sends. It never checks what it reads: each test says what it waits for.
#![allow(dead_code)]

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use super::Server;

pub type Socket = WebSocket<MaybeTlsStream<TcpStream>>;

/// A viewer: its socket and everything it has been shown.
pub struct Viewer {
    pub socket: Socket,
    /// The terminal bytes shown (only the last [`Viewer::keep`] when that is set).
    pub screen: Vec<u8>,
    pub texts: Vec<Value>,
    pub closed: Option<u16>,
    /// Where in `screen` the replay began and where live output began.
    pub replay_from: Option<usize>,
    pub live_from: Option<usize>,
    /// Keep only about this many of the latest bytes in `screen` (a flood's reader).
    pub keep: Option<usize>,
    /// Terminal bytes received in all.
    pub received: u64,
}

impl Viewer {
    pub fn connect(server: &Server, terminal: &str, ticket: &str) -> Viewer {
        let url = format!(
            "ws://127.0.0.1:{}/v1/terminals/{terminal}/connect?ticket={ticket}",
            server.port
        );
        let (socket, _) = tungstenite::connect(url).expect("the viewer socket opens");
        if let MaybeTlsStream::Plain(tcp) = socket.get_ref() {
            tcp.set_read_timeout(Some(Duration::from_millis(200)))
                .expect("a read timeout");
        }
        Viewer {
            socket,
            screen: Vec::new(),
            texts: Vec::new(),
            closed: None,
            replay_from: None,
            live_from: None,
            keep: None,
            received: 0,
        }
    }

    /// Reads until `done` says so, failing after [`common::PATIENCE`] with what was shown.
    pub fn until(&mut self, what: &str, done: impl Fn(&Viewer) -> bool) {
        let deadline = Instant::now() + super::PATIENCE;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen: {:?}; messages: {:?}",
                String::from_utf8_lossy(&self.screen),
                self.texts
            );
            match self.socket.read() {
                Ok(Message::Binary(bytes)) => {
                    self.received += bytes.len() as u64;
                    self.screen.extend_from_slice(&bytes);
                    if let Some(keep) = self.keep
                        && self.screen.len() > 2 * keep
                    {
                        self.screen.drain(..self.screen.len() - keep);
                    }
                }
                Ok(Message::Text(text)) => {
                    let message: Value = serde_json::from_str(&text).expect("a JSON text message");
                    match message["type"].as_str() {
                        Some("replay") => self.replay_from = Some(self.screen.len()),
                        Some("live") => self.live_from = Some(self.screen.len()),
                        _ => {}
                    }
                    self.texts.push(message);
                }
                Ok(Message::Close(frame)) => {
                    self.closed = Some(frame.map(|f| u16::from(f.code)).unwrap_or(1005));
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => {
                    if self.closed.is_none() {
                        self.closed = Some(1006);
                    }
                    assert!(done(self), "the socket ended before {what}");
                    return;
                }
            }
        }
    }

    pub fn shows(&self, text: &str) -> bool {
        self.shows_after(0, text)
    }

    /// Where the screen ends now, for [`Viewer::shows_after`].
    pub fn mark(&self) -> usize {
        self.screen.len()
    }

    /// Whether `text` was shown after `mark`.
    pub fn shows_after(&self, mark: usize, text: &str) -> bool {
        contains(&self.screen[mark.min(self.screen.len())..], text.as_bytes())
    }

    /// The bytes of the replay (between `replay` and `live`).
    pub fn replay(&self) -> &[u8] {
        match (self.replay_from, self.live_from) {
            (Some(from), Some(to)) => &self.screen[from..to],
            _ => panic!("no replay yet: {:?}", self.texts),
        }
    }

    pub fn said(&self, kind: &str) -> Option<&Value> {
        self.texts.iter().find(|t| t["type"] == kind)
    }

    /// The `error` messages' codes, in order.
    pub fn errors(&self) -> Vec<&str> {
        self.texts
            .iter()
            .filter(|t| t["type"] == "error")
            .filter_map(|t| t["code"].as_str())
            .collect()
    }

    /// Its connection goes away without a close frame, as a tab whose network drops.
    pub fn drop_without_close(self) {
        if let MaybeTlsStream::Plain(tcp) = self.socket.get_ref() {
            tcp.shutdown(std::net::Shutdown::Both)
                .expect("the connection shuts");
        }
    }

    pub fn type_keys(&mut self, keys: &str) {
        self.socket
            .send(Message::Binary(keys.as_bytes().to_vec().into()))
            .expect("keys sent");
    }

    pub fn control(&mut self, message: Value) {
        self.socket
            .send(Message::Text(message.to_string().into()))
            .expect("a control message sent");
    }
}

/// Whether `needle` is in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}
