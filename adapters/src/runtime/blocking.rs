//! [`Host`] on plain std threads with tungstenite's sync API: one thread per WebSocket that
//! waits in `poll(2)` on the socket and on a wake-up pipe the [`Link`] writes to when it
//! queues a message, so a send leaves at once and an idle connection costs no wake-ups. No
//! async runtime is involved.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use rustls::pki_types::ServerName;
use tungstenite::{Error as WsError, Message};

use super::link::{CLOSE_WAIT, CONNECT_TIMEOUT, Inbound, MESSAGE_TOO_BIG, Unread, ws_config};
use super::outbox::{Messages as _, Out, Tungstenite};
use super::tls_nonblocking::NonBlockingTls;
use super::{EventFn, Host, Link, LinkEvent, redact, target_of};

/// A [`Host`] on std threads: blocking work on a pool of reused threads, one thread per
/// WebSocket.
#[derive(Debug, Clone, Default)]
pub struct BlockingHost {
    pool: super::pool::Pool,
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

impl Host for BlockingHost {
    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>) {
        self.pool.spawn(work);
    }

    fn open(&self, url: String, tls: Arc<rustls::ClientConfig>, events: EventFn) {
        std::thread::spawn(move || drive(url, tls, events));
    }

    fn name(&self) -> &'static str {
        "blocking"
    }
}

fn connect(
    url: &str,
    tls: Arc<rustls::ClientConfig>,
) -> Result<(Box<dyn Stream>, TcpStream), String> {
    let target = target_of(url, tls)?;
    let addrs: Vec<_> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| format!("resolving {}: {e}", target.host))?
        .collect();
    let mut last = format!("{} resolves to no address", target.host);
    let mut tcp = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = format!("connecting to {addr}: {e}"),
        }
    }
    let tcp = tcp.ok_or(last)?;
    let control = tcp.try_clone().map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    control
        .set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let stream: Box<dyn Stream> = match target.tls {
        None => Box::new(tcp),
        Some(config) => {
            let name = ServerName::try_from(target.host.clone()).map_err(|e| e.to_string())?;
            let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
            Box::new(NonBlockingTls(rustls::StreamOwned::new(conn, tcp)))
        }
    };
    Ok((stream, control))
}

fn drive(url: String, tls: Arc<rustls::ClientConfig>, events: EventFn) {
    let (stream, control) = match connect(&url, tls) {
        Ok(s) => s,
        Err(e) => return events(LinkEvent::Failed(e)),
    };
    let mut ws =
        match tungstenite::client::client_with_config(url.as_str(), stream, Some(ws_config())) {
            Ok((ws, _response)) => ws,
            Err(e) => {
                return events(LinkEvent::Failed(format!(
                    "WebSocket handshake with {}: {e}",
                    redact(&url)
                )));
            }
        };
    // Non-blocking from here: `poll(2)` does the waiting (a socket timeout would round up
    // to a scheduler tick on every read that finds nothing).
    if let Err(e) = control.set_nonblocking(true) {
        return events(LinkEvent::Failed(e.to_string()));
    }
    let (wake_tx, mut wake_rx) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(e) => return events(LinkEvent::Failed(format!("a wake-up pipe: {e}"))),
    };
    if let Err(e) = wake_tx
        .set_nonblocking(true)
        .and_then(|()| wake_rx.set_nonblocking(true))
    {
        return events(LinkEvent::Failed(format!("a wake-up pipe: {e}")));
    }
    let link = Link::new();
    let outbox = link.outbox.clone();
    let unread = Arc::new(Unread::default());
    match wake_tx.try_clone() {
        Ok(notify) => unread.notify_with(notify),
        Err(e) => return events(LinkEvent::Failed(format!("a wake-up pipe: {e}"))),
    }
    outbox.notify_with(wake_tx);
    events(LinkEvent::Opened(link));
    let mut code = None;
    // Set once this side has sent its close: the peer has until then to close too.
    let mut close_deadline: Option<std::time::Instant> = None;
    // Whether a message was written since the last flush that finished (for the timeline).
    let mut wrote = false;
    'conn: loop {
        // Everything queued is written, then flushed once (below): one write to the socket
        // for all.
        while close_deadline.is_none()
            && let Some(out) = outbox.try_take()
        {
            let sent = match out {
                Out::Send(bytes) => {
                    wrote = true;
                    ws.write(Tungstenite::frame(bytes))
                }
                Out::Close(code, reason) => {
                    close_deadline = Some(std::time::Instant::now() + CLOSE_WAIT);
                    ws.write(Tungstenite::close(code, reason))
                }
                Out::Ping => ws.write(Tungstenite::ping()),
                // Only an async host's direct sends leave these; this host never has one.
                Out::Flush | Out::Failed => Ok(()),
            };
            match sent {
                // Held by tungstenite until the socket takes it: the flush below retries.
                Ok(()) => {}
                Err(e) if would_block(&e) => {}
                Err(_) => break 'conn,
            }
        }
        // Everything that already arrived (TLS may hold decrypted bytes the socket no longer
        // shows as readable) while the consumer has room, then wait for the socket (when
        // there is room), a queued message or room.
        while unread.has_room() {
            match ws.read() {
                Ok(Message::Text(text)) => {
                    tracing::trace!(target: "outpost::timeline", stage = "link.read");
                    events(LinkEvent::Message(Inbound::new(
                        text.as_bytes().to_vec(),
                        &unread,
                    )))
                }
                Ok(Message::Binary(bytes)) => {
                    events(LinkEvent::Message(Inbound::new(bytes.to_vec(), &unread)))
                }
                Ok(Message::Close(frame)) => code = frame.map(|f| u16::from(f.code)),
                Ok(Message::Ping(_) | Message::Pong(_)) => events(LinkEvent::Alive),
                Ok(Message::Frame(_)) => {}
                Err(e) if would_block(&e) => break,
                Err(WsError::Capacity(_)) => {
                    // A message over the limit: say so (1009), then read and drop what the
                    // peer still sends until it closes (bounded), so the close reaches it
                    // instead of a reset that discards it.
                    let _ = ws.send(Tungstenite::close(
                        MESSAGE_TOO_BIG,
                        "message too big".into(),
                    ));
                    let _ = ws.flush();
                    discard_to_end(&control);
                    break 'conn;
                }
                Err(_) => break 'conn,
            }
        }
        // One flush for what was written above and what a read queued of its own (a pong,
        // the reply to a close, TLS bytes); what the socket would not take yet makes the
        // poll wait for room to write.
        let unflushed = match ws.flush() {
            Ok(()) => {
                if std::mem::take(&mut wrote) {
                    tracing::trace!(target: "outpost::timeline", stage = "link.written");
                }
                false
            }
            Err(e) if would_block(&e) => true,
            Err(_) => break 'conn,
        };
        let mut wanted = PollFlags::empty();
        if unread.has_room() {
            wanted |= PollFlags::POLLIN;
        }
        if unflushed {
            wanted |= PollFlags::POLLOUT;
        }
        let mut fds = [
            PollFd::new(control.as_fd(), wanted),
            PollFd::new(wake_rx.as_fd(), PollFlags::POLLIN),
        ];
        // Nothing to wait for but the socket and the pipe, so no timeout (no wake-ups on an
        // idle connection: the peer's pings and the driver's sends wake it), except for the
        // peer's answer to a close this side sent.
        let timeout = match close_deadline {
            Some(at) => match at.checked_duration_since(std::time::Instant::now()) {
                Some(left) => PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
                None => break, // The peer never answered the close: drop the connection.
            },
            None => PollTimeout::NONE,
        };
        let _ = poll(&mut fds, timeout);
        let mut drained = [0u8; 64];
        while matches!(wake_rx.read(&mut drained), Ok(n) if n > 0) {}
    }
    outbox.shut();
    events(LinkEvent::Closed { code });
}

/// After a close this side sent: reads and drops what the peer still sends until it closes
/// its side, at most [`CLOSE_WAIT`].
fn discard_to_end(control: &TcpStream) {
    let deadline = std::time::Instant::now() + CLOSE_WAIT;
    let mut scratch = [0u8; 16 * 1024];
    let mut reader = control;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let mut fds = [PollFd::new(control.as_fd(), PollFlags::POLLIN)];
        let wait = PollTimeout::try_from(left).unwrap_or(PollTimeout::NONE);
        if !matches!(poll(&mut fds, wait), Ok(n) if n > 0) {
            return;
        }
        match reader.read(&mut scratch) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Whether a socket call only has to be made again later: nothing to do now, or a signal
/// interrupted it (`EINTR`).
fn would_block(e: &WsError) -> bool {
    matches!(e, WsError::Io(io) if matches!(
        io.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    ))
}
