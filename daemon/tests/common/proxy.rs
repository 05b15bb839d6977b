//! A TCP proxy between a daemon and the server that can cut every connection, tamper with
//! the server's `run.request` frames, hold the server's bytes back (a reader that stopped
//! reading), inject a message over the limit, and reports the close codes the daemon sends.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// What the proxy does to the server's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pass everything.
    Pass,
    /// Alter one byte of every `run.request` (same length: the frame still parses, its
    /// signature no longer verifies).
    TamperRunRequests,
    /// Read what the server sends but hold it back from the daemon (a reader that has
    /// stopped reading), counting the bytes; they go on, in order, once the mode changes.
    Hold,
}

#[derive(Default)]
struct State {
    mode: Option<Mode>,
    /// (daemon side, server side) of every connection.
    conns: Vec<(TcpStream, Arc<Mutex<TcpStream>>)>,
    /// WebSocket upgrades seen.
    upgrades: usize,
    /// Close codes the daemon sent.
    closes: Vec<u16>,
    /// `status` frames the daemon sent (its heartbeats, when idle).
    statuses: usize,
    tampered: usize,
    /// Bytes the server sent while [`Mode::Hold`] held them.
    held: usize,
}

/// The proxy.
#[derive(Clone)]
pub struct Proxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl Proxy {
    /// A proxy to `upstream` (`host:port`).
    pub fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State {
            mode: Some(Mode::Pass),
            ..State::default()
        }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let to_client = Arc::new(Mutex::new(client.try_clone().expect("clone")));
                shared
                    .lock()
                    .unwrap()
                    .conns
                    .push((server.try_clone().expect("clone"), to_client.clone()));
                let (state_up, state_down) = (shared.clone(), shared.clone());
                let (mut client_read, mut server_write) =
                    (client, server.try_clone().expect("clone"));
                std::thread::spawn(move || up(&mut client_read, &mut server_write, &state_up));
                let mut server_read = server;
                std::thread::spawn(move || down(&mut server_read, &to_client, &state_down));
            }
        });
        Proxy { url, state }
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = Some(mode);
    }

    /// Cuts every connection (as a network failure would).
    pub fn cut(&self) {
        let mut state = self.state.lock().unwrap();
        for (server, client) in state.conns.drain(..) {
            let _ = server.shutdown(Shutdown::Both);
            let _ = client.lock().unwrap().shutdown(Shutdown::Both);
        }
    }

    /// Sends the daemon a text message one byte over 1 MiB on every open connection.
    pub fn inject_oversized(&self) {
        let len: u64 = (1 << 20) + 1;
        let mut frame = vec![0x81u8, 127];
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend(std::iter::repeat_n(b'x', len as usize));
        let state = self.state.lock().unwrap();
        for (_, client) in &state.conns {
            let _ = client.lock().unwrap().write_all(&frame);
        }
    }

    pub fn upgrades(&self) -> usize {
        self.state.lock().unwrap().upgrades
    }

    pub fn closes(&self) -> Vec<u16> {
        self.state.lock().unwrap().closes.clone()
    }

    pub fn statuses(&self) -> usize {
        self.state.lock().unwrap().statuses
    }

    /// Bytes the server has sent since [`Mode::Hold`] began holding them.
    pub fn held(&self) -> usize {
        self.state.lock().unwrap().held
    }

    pub fn tampered(&self) -> usize {
        self.state.lock().unwrap().tampered
    }
}

/// Daemon → server: copied; upgrades counted; the daemon's frames followed one after the
/// other (they are masked, as every client frame is), so its close codes and `status` frames
/// are read wherever the reads happen to split them.
fn up(from: &mut TcpStream, to: &mut TcpStream, state: &Mutex<State>) {
    let mut buf = vec![0u8; 64 * 1024];
    // Set once this connection asked for the upgrade (plain HTTP requests pass too).
    let mut frames: Option<Frames> = None;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if chunk.starts_with(b"GET ") && contains(chunk, b"Upgrade: websocket") {
            state.lock().unwrap().upgrades += 1;
            frames = Some(Frames::default());
        } else if let Some(frames) = &mut frames {
            for (opcode, payload) in frames.feed(chunk) {
                let mut state = state.lock().unwrap();
                match opcode {
                    0x8 if payload.len() >= 2 => {
                        state
                            .closes
                            .push(u16::from_be_bytes([payload[0], payload[1]]));
                    }
                    0x1 if contains(&payload, b"\"type\":\"status\"") => state.statuses += 1,
                    _ => {}
                }
            }
        }
        if to.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Follows a stream of masked WebSocket frames: keeps the payloads of small frames (up to
/// [`Frames::KEPT`] bytes, unmasked) and skips over the others.
#[derive(Default)]
struct Frames {
    /// Bytes of a header not yet complete.
    header: Vec<u8>,
    /// The frame being read.
    body: Option<Body>,
}

/// A frame's payload being read.
struct Body {
    opcode: u8,
    mask: [u8; 4],
    /// Bytes of payload still to come.
    left: u64,
    /// The payload so far, unmasked, when it is small enough to keep.
    kept: Option<Vec<u8>>,
}

impl Frames {
    const KEPT: u64 = 4096;

    /// Every frame `chunk` completes, as (opcode, unmasked payload; empty when not kept).
    fn feed(&mut self, mut chunk: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut done = Vec::new();
        while !chunk.is_empty() {
            if let Some(Body {
                opcode,
                mask,
                left,
                kept,
            }) = &mut self.body
            {
                let take = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(chunk.len());
                if let Some(kept) = kept {
                    let at = kept.len();
                    let unmasked = chunk[..take].iter().enumerate();
                    kept.extend(unmasked.map(|(i, b)| b ^ mask[(at + i) % 4]));
                }
                *left -= take as u64;
                chunk = &chunk[take..];
                if *left == 0 {
                    done.push((*opcode, kept.take().unwrap_or_default()));
                    self.body = None;
                }
                continue;
            }
            self.header.push(chunk[0]);
            chunk = &chunk[1..];
            let h = &self.header;
            if h.len() < 2 {
                continue;
            }
            let extra = match h[1] & 0x7f {
                126 => 2,
                127 => 8,
                _ => 0,
            };
            let masked = h[1] & 0x80 != 0;
            if h.len() < 2 + extra + if masked { 4 } else { 0 } {
                continue;
            }
            let len = match extra {
                2 => u64::from(u16::from_be_bytes([h[2], h[3]])),
                8 => u64::from_be_bytes(h[2..10].try_into().unwrap()),
                _ => u64::from(h[1] & 0x7f),
            };
            let mask = if masked {
                h[2 + extra..6 + extra].try_into().unwrap()
            } else {
                [0; 4]
            };
            let opcode = h[0] & 0x0f;
            self.header.clear();
            if len == 0 {
                done.push((opcode, Vec::new()));
            } else {
                let kept = (len <= Self::KEPT).then(Vec::new);
                self.body = Some(Body {
                    opcode,
                    mask,
                    left: len,
                    kept,
                });
            }
        }
        done
    }
}

/// Server → daemon: copied, tampered with or held back when the mode says so.
fn down(from: &mut TcpStream, to: &Mutex<TcpStream>, state: &Mutex<State>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut held = Vec::new();
    // Wakes now and then to let held bytes go once the mode changes.
    let _ = from.set_read_timeout(Some(std::time::Duration::from_millis(20)));
    loop {
        let mode = state.lock().unwrap().mode;
        if mode != Some(Mode::Hold)
            && !held.is_empty()
            && to
                .lock()
                .unwrap()
                .write_all(&std::mem::take(&mut held))
                .is_err()
        {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        let chunk = &mut buf[..n];
        let mode = state.lock().unwrap().mode;
        if mode == Some(Mode::Hold) {
            held.extend_from_slice(chunk);
            state.lock().unwrap().held += n;
            continue;
        }
        if mode == Some(Mode::TamperRunRequests)
            && contains(chunk, b"\"run.request\"")
            && let Some(at) = find(chunk, b"\"runId\":\"")
        {
            let byte = &mut chunk[at + 9];
            *byte = if *byte == b'x' { b'y' } else { b'x' };
            state.lock().unwrap().tampered += 1;
        }
        if to.lock().unwrap().write_all(chunk).is_err() {
            break;
        }
    }
    let _ = to.lock().unwrap().shutdown(Shutdown::Write);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}
