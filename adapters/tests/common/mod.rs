//! Real servers for the adapters' tests: a WebSocket echo server on a std TcpListener, plain
//! or TLS with an rcgen self-signed certificate for `localhost`.
#![allow(dead_code)]

mod refusing_port;
pub use refusing_port::refusing_port;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use outpost_adapters::tls::Trust;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tungstenite::Message;
use tungstenite::protocol::frame::CloseFrame;
use tungstenite::protocol::frame::coding::CloseCode;

/// A self-signed certificate for `localhost` and the trust that accepts it.
pub struct TestCert {
    pub server: Arc<rustls::ServerConfig>,
    pub trust: Trust,
    pub pem: String,
}

pub fn test_cert() -> TestCert {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let der = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .unwrap();
    let pem = certified.cert.pem();
    TestCert {
        server: Arc::new(server),
        trust: Trust::with_ca_pem(pem.as_bytes()).unwrap(),
        pem,
    }
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// Accepts WebSocket connections forever on a background thread; each connection echoes
/// messages back, answers the text `close:<code>` by closing with that code, `ping` with a
/// WebSocket ping and then the text `pinged`, and `deaf` by never reading or writing again
/// (a peer that stopped: it holds the connection for a minute).
/// Returns the base URL (`ws://127.0.0.1:port` or `wss://localhost:port`).
pub fn echo_server(tls: Option<Arc<rustls::ServerConfig>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let secure = tls.is_some();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let tls = tls.clone();
            std::thread::spawn(move || echo(stream, tls));
        }
    });
    if secure {
        format!("wss://localhost:{port}")
    } else {
        format!("ws://127.0.0.1:{port}")
    }
}

fn echo(tcp: TcpStream, tls: Option<Arc<rustls::ServerConfig>>) {
    let stream: Box<dyn Stream> = match tls {
        None => Box::new(tcp),
        Some(config) => {
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            Box::new(rustls::StreamOwned::new(conn, tcp))
        }
    };
    let Ok(mut ws) = tungstenite::accept(stream) else {
        return;
    };
    loop {
        match ws.read() {
            Ok(Message::Text(text)) => {
                if text.as_str() == "ping" {
                    if ws.send(Message::Ping(Default::default())).is_err()
                        || ws.send(Message::text("pinged")).is_err()
                    {
                        return;
                    }
                    continue;
                }
                if text.as_str() == "deaf" {
                    // Time itself: a stopped peer stays silent for longer than any close
                    // wait (reading would answer pings, so there is nothing to wait on).
                    std::thread::sleep(std::time::Duration::from_secs(60));
                    return;
                }
                if let Some(code) = text.as_str().strip_prefix("close:") {
                    let code: u16 = code.parse().unwrap();
                    let _ = ws.close(Some(CloseFrame {
                        code: CloseCode::from(code),
                        reason: "asked".into(),
                    }));
                    // Drive the close handshake to its end.
                    while ws.read().is_ok() {}
                    return;
                }
                if let Some(spec) = text.as_str().strip_prefix("flood:") {
                    // `flood:N:SIZE`: N binary messages of SIZE bytes, as fast as the peer
                    // takes them.
                    let (n, size) = spec.split_once(':').unwrap();
                    let (n, size): (u8, usize) = (n.parse().unwrap(), size.parse().unwrap());
                    for i in 0..n {
                        if ws.send(Message::Binary(vec![i; size].into())).is_err() {
                            return;
                        }
                    }
                    continue;
                }
                if ws.send(Message::Text(text)).is_err() {
                    return;
                }
            }
            Ok(Message::Binary(bytes)) => {
                if ws.send(Message::Binary(bytes)).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// Accepts one WebSocket connection; once the client sends anything, sends it one binary
/// message of `size` bytes (over the 1 MiB limit) and reports what came back: `Ok(code)` for
/// the client's close frame, `Err` when the connection failed first (a reset while writing or
/// reading).
pub fn oversize_server(size: usize) -> (String, std::sync::mpsc::Receiver<Result<u16, String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((tcp, _)) = listener.accept() else {
            return;
        };
        let report = (|| {
            let mut ws = tungstenite::accept(tcp).map_err(|e| e.to_string())?;
            ws.read().map_err(|e| e.to_string())?;
            ws.send(Message::Binary(vec![7u8; size].into()))
                .map_err(|e| format!("writing the big message: {e}"))?;
            loop {
                match ws.read() {
                    Ok(Message::Close(frame)) => {
                        return Ok(frame.map_or(1005, |f| u16::from(f.code)));
                    }
                    Ok(_) => {}
                    Err(e) => return Err(format!("reading the close: {e}")),
                }
            }
        })();
        let _ = tx.send(report);
    });
    (format!("ws://127.0.0.1:{port}"), rx)
}
