//! `outpost attach CONTEXT`: a terminal viewer on the command line. It opens a terminal on a
//! context (or joins one with `--terminal ID`), puts the local terminal in raw mode, sends
//! every key as it is typed and the window's size on every `SIGWINCH`, and writes what the
//! relay sends untouched. The detach key (Ctrl-] unless `--detach-key` says otherwise) leaves
//! the terminal running; the program's exit ends `attach` with the program's exit code.
//!
//! Without a terminal on stdin (a pipe), it sends stdin as typed and keeps the size it was
//! given: scripts can drive a terminal too. It never interprets the terminal's bytes.
//!
//! A signal (a resize's `SIGWINCH`, at any moment) never ends it: every read and write it
//! makes retries on `EINTR`. Once nobody reads its stdout it ends quietly (status 141).

use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use outpost_adapters::tls::{ServerUrl, Trust};
use outpost_core::api::requests::TerminalOpen;
use outpost_core::api::{TerminalOpened, TerminalTicket};
use outpost_core::terminal::{ViewerControl, ViewerText};
use serde_json::json;
use tungstenite::Message;

use crate::client::api::Api;

/// How long a socket read waits before the keys typed meanwhile are sent.
const POLL: Duration = Duration::from_millis(5);

/// What the command line asked for.
pub struct AttachArgs<'a> {
    pub context: &'a str,
    pub server: Option<&'a str>,
    pub terminal: Option<&'a str>,
    pub detach_key: &'a str,
}

/// What the key and window threads hand the socket's thread.
enum Local {
    Keys(Vec<u8>),
    Size(u16, u16),
    Detach,
    Eof,
}

/// A connection to the server, plain or TLS.
pub(crate) trait Stream: std::io::Read + std::io::Write + Send {}
impl<T: std::io::Read + std::io::Write + Send> Stream for T {}

/// Runs the viewer until the program exits (its exit code), the terminal ends (1), or the
/// detach key (0).
pub fn attach(args: &AttachArgs<'_>) -> anyhow::Result<ExitCode> {
    let detach = detach_byte(args.detach_key)?;
    let api = Api::from_env(args.server)?;
    let tty = rustix::termios::isatty(std::io::stdin());
    let (cols, rows) = if tty { window_size() } else { (80, 24) };
    let (terminal, ticket) = match args.terminal {
        Some(id) => {
            let t: TerminalTicket = api.post(&format!("/v1/terminals/{id}/tickets"), &json!({}))?;
            (id.to_owned(), t.ticket)
        }
        None => {
            let path = format!("/v1/execution-contexts/{}/terminals", args.context);
            let size = TerminalOpen {
                cols: Some(cols),
                rows: Some(rows),
            };
            let t: TerminalOpened = api.post(&path, &size)?;
            (t.terminal_id.into_string(), t.ticket)
        }
    };
    let url = ServerUrl::parse(api.base()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let trust = api.trust()?;
    let ws_url = url.ws_url(&format!("/v1/terminals/{terminal}/connect?ticket={ticket}"));
    let (tcp, stream) = connect(&url, &trust)?;
    let (mut socket, _) = tungstenite::client::client(ws_url.as_str(), stream)
        .map_err(|e| anyhow::anyhow!("opening the terminal's WebSocket: {e}"))?;
    tcp.set_read_timeout(Some(POLL))?;
    eprintln!(
        "outpost: attached to {terminal} on {} — {} detaches\r",
        args.context, args.detach_key
    );
    let _raw = if tty { Some(RawMode::enter()?) } else { None };
    let (tx, rx) = mpsc::channel();
    spawn_keys(tx.clone(), detach);
    if tty {
        spawn_window(tx)?;
    }
    let mut out = std::io::stdout().lock();
    loop {
        for local in rx.try_iter() {
            let message = match local {
                Local::Keys(keys) => Message::Binary(keys.into()),
                Local::Size(cols, rows) => Message::Text(
                    serde_json::to_string(&ViewerControl::Resize { cols, rows })?.into(),
                ),
                Local::Detach => {
                    let _ = socket.close(None);
                    eprintln!("\r\noutpost: detached; {terminal} keeps running\r");
                    return Ok(ExitCode::SUCCESS);
                }
                Local::Eof => continue,
            };
            send(&mut socket, message)?;
        }
        match socket.read() {
            Ok(Message::Binary(bytes)) => {
                if let Err(e) = out.write_all(&bytes).and_then(|()| out.flush()) {
                    if crate::stdout::is_broken_pipe(&e) {
                        // Nobody reads the screen any more: end quietly (the local terminal's
                        // mode is restored on the way out).
                        return Ok(ExitCode::from(crate::stdout::BROKEN_PIPE));
                    }
                    return Err(e.into());
                }
            }
            Ok(Message::Text(text)) => match ViewerText::parse(&text) {
                Some(ViewerText::Exit { exit_code }) => {
                    let code = exit_code.unwrap_or(1);
                    return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
                }
                Some(ViewerText::Closed { reason }) => {
                    eprintln!("\r\noutpost: the terminal ended ({reason})\r");
                    return Ok(ExitCode::FAILURE);
                }
                Some(ViewerText::Error { code, message }) => {
                    eprintln!("\r\noutpost: {message} ({code})\r");
                }
                _ => {}
            },
            Ok(Message::Close(frame)) => {
                let why = frame.map(|f| f.reason.to_string()).unwrap_or_default();
                eprintln!("\r\noutpost: the server closed the terminal {why}\r");
                return Ok(ExitCode::FAILURE);
            }
            Ok(_) => {}
            Err(e) if again(&e) => {}
            Err(e) => bail!("the terminal's connection ended: {e}"),
        }
    }
}

/// Whether a socket call only has to be made again: its read timeout passed with nothing
/// to read, or a signal (`SIGWINCH` on a resize) interrupted it. A socket read with a timeout
/// fails with `EINTR` on a signal even though its handler asks for restarts.
fn again(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(io) if matches!(
        io.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    ))
}

/// Sends `message`; a write a signal interrupted is finished by flushing again (the message
/// is queued once, never twice).
fn send(
    socket: &mut tungstenite::WebSocket<Box<dyn Stream>>,
    message: Message,
) -> anyhow::Result<()> {
    let mut sent = socket.send(message);
    while let Err(e) = &sent
        && again(e)
    {
        sent = socket.flush();
    }
    sent.context("sending to the terminal")
}

/// `ctrl-]`, `ctrl-a`, …: the byte the key sends.
fn detach_byte(key: &str) -> anyhow::Result<u8> {
    match key.strip_prefix("ctrl-").map(str::as_bytes) {
        Some([c]) if (b'@'..=b'_').contains(&c.to_ascii_uppercase()) => {
            Ok(c.to_ascii_uppercase() & 0x1f)
        }
        _ => bail!("--detach-key {key:?}: use ctrl- and one of a–z, [, \\, ], ^, _"),
    }
}

/// A connection to `url`'s host (TLS when it is `https`, trusting `trust`): a handle on its
/// TCP socket (for timeouts) and the stream to speak on.
pub(crate) fn connect(
    url: &ServerUrl,
    trust: &Trust,
) -> anyhow::Result<(TcpStream, Box<dyn Stream>)> {
    let addr = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", url.host))?
        .next()
        .with_context(|| format!("{} resolves to no address", url.host))?;
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    tcp.set_nodelay(true)?;
    let control = tcp.try_clone()?;
    let stream: Box<dyn Stream> = if url.secure {
        let name = rustls::pki_types::ServerName::try_from(url.host.clone())?;
        let conn = rustls::ClientConnection::new(trust.client_config(), name)?;
        Box::new(rustls::StreamOwned::new(conn, tcp))
    } else {
        Box::new(tcp)
    };
    Ok((control, stream))
}

fn spawn_keys(tx: mpsc::Sender<Local>, detach: u8) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            let n = match stdin.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => {
                    let _ = tx.send(Local::Eof);
                    return;
                }
                Ok(n) => n,
            };
            let keys = &buf[..n];
            if let Some(at) = keys.iter().position(|&b| b == detach) {
                let _ = tx.send(Local::Keys(keys[..at].to_vec()));
                let _ = tx.send(Local::Detach);
                return;
            }
            if tx.send(Local::Keys(keys.to_vec())).is_err() {
                return;
            }
        }
    });
}

fn spawn_window(tx: mpsc::Sender<Local>) -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGWINCH])?;
    std::thread::spawn(move || {
        for _ in signals.forever() {
            let (cols, rows) = window_size();
            if tx.send(Local::Size(cols, rows)).is_err() {
                return;
            }
        }
    });
    Ok(())
}

fn window_size() -> (u16, u16) {
    match rustix::termios::tcgetwinsize(std::io::stdout()) {
        Ok(w) if w.ws_col > 0 && w.ws_row > 0 => (w.ws_col, w.ws_row),
        _ => (80, 24),
    }
}

/// The local terminal in raw mode until dropped.
struct RawMode(rustix::termios::Termios);

impl RawMode {
    fn enter() -> anyhow::Result<Self> {
        use rustix::termios::{OptionalActions, tcgetattr, tcsetattr};
        let saved = tcgetattr(std::io::stdin()).context("reading the terminal's mode")?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(std::io::stdin(), OptionalActions::Now, &raw)
            .context("setting the terminal to raw mode")?;
        Ok(Self(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.0,
        );
    }
}
