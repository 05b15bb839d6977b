//! The bridge from inside a run's network namespace to its egress gate: a TCP listener on
//! the namespace's loopback ([`super::PROXY_PORT`]) whose every connection is joined to the
//! gate's Unix socket, which the daemon serves outside the namespace.
//!
//! And the other way, a service's port: a listener bound on the host's loopback before the
//! helper left the host's network, whose every connection is joined to the same port on the
//! run's own loopback ([`publish`]).
//!
//! This file owns that forwarding. It reads no byte it forwards and decides nothing: the gate
//! on the other side does.

use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// Serves `listener` on a thread of its own for as long as the process lives.
pub(crate) fn serve(listener: TcpListener, gate: PathBuf) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("outpost-gate-bridge".into())
        .spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let _ = client.set_nodelay(true);
                let gate = gate.clone();
                let _ = std::thread::Builder::new()
                    .name("outpost-gate-bridge-client".into())
                    .spawn(move || match UnixStream::connect(&gate) {
                        Ok(upstream) => crate::gate::splice(client, upstream),
                        Err(_) => {
                            use std::io::Write as _;
                            let mut client = client;
                            let _ = client.write_all(
                                b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                            );
                        }
                    });
            }
        })?;
    Ok(())
}

/// Relays `listener` (on the host's loopback) to `127.0.0.1:port` in this process's network
/// namespace, each connection on a thread of its own; returns only when the listener fails.
pub(crate) fn publish(listener: TcpListener, port: u16) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let _ = std::thread::Builder::new()
            .name("outpost-publish-client".into())
            .spawn(move || {
                if let Ok(service) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    let _ = (client.set_nodelay(true), service.set_nodelay(true));
                    crate::gate::splice(client, service);
                }
            });
    }
}
