//! TLS over a non-blocking socket for the blocking host's `poll(2)` loop.
//!
//! rustls's [`StreamOwned`] is made for blocking sockets. On a non-blocking one, its `write`
//! may answer `Ok(0)` once the socket stops taking bytes: its own buffer is full, the socket
//! would block, and it read something meanwhile, so it reports no error. tungstenite takes
//! `Ok(0)` for a reset ("Connection reset while sending") and the connection is lost.
//!
//! [`NonBlockingTls`] answers `WouldBlock` there, so the caller keeps what it wrote and waits
//! for `POLLOUT`. It uses rustls's own stream for the rest: the handshake (over a socket that
//! still blocks), reads, and flushes (which write every held record or say `WouldBlock`).
//! This module owns only that; it never reads or writes the socket outside the calls made
//! to it.

use std::io::{self, ErrorKind, Read, Write};
use std::ops::{Deref, DerefMut};

use rustls::{ConnectionCommon, SideData, StreamOwned};

/// A TLS connection and its socket, for a socket that may answer `WouldBlock`.
pub(crate) struct NonBlockingTls<C: Sized, T: Read + Write + Sized>(pub StreamOwned<C, T>);

impl<C, T, S> NonBlockingTls<C, T>
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    T: Read + Write,
    S: SideData,
{
    /// Writes the records rustls holds until none is left, or the socket's `WouldBlock`.
    fn send_held(&mut self) -> io::Result<()> {
        let StreamOwned { conn, sock } = &mut self.0;
        while conn.wants_write() {
            if conn.write_tls(sock)? == 0 {
                return Err(ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }
}

impl<C, T, S> Read for NonBlockingTls<C, T>
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    T: Read + Write,
    S: SideData,
{
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<C, T, S> Write for NonBlockingTls<C, T>
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    T: Read + Write,
    S: SideData,
{
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0.conn.is_handshaking() {
            return self.0.write(buf);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let mut taken = self.0.conn.writer().write(buf)?;
        if taken == 0 {
            // rustls's buffer is full: make room, or say the socket would block.
            self.send_held()?;
            taken = self.0.conn.writer().write(buf)?;
            if taken == 0 {
                // Nothing is held, and still nothing is taken: no room will come.
                return Err(ErrorKind::WriteZero.into());
            }
        }
        // As much as the socket takes now; the rest waits for `flush`, which also reports a
        // failure here (these bytes were taken, so this call must say so).
        let _ = self.send_held();
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::{ClientConnection, ServerConnection};

    use super::*;

    /// A socket whose writes can be made to answer `WouldBlock`, as a full one does.
    struct Gate {
        socket: UnixStream,
        full: Arc<AtomicBool>,
    }

    impl Read for Gate {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.socket.read(buf)
        }
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.full.load(Ordering::SeqCst) {
                return Err(ErrorKind::WouldBlock.into());
            }
            self.socket.write(buf)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    type Client = StreamOwned<ClientConnection, Gate>;
    type Server = StreamOwned<ServerConnection, UnixStream>;

    /// A client and a server that finished their handshake over a socket pair; the client's
    /// end no longer blocks, and its writes are refused while the flag returned is set.
    fn pair() -> (Client, Server, Arc<AtomicBool>) {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let der = CertificateDer::from(certified.cert.der().to_vec());
        let key = PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![der], PrivateKeyDer::Pkcs8(key))
            .unwrap();
        let trust = crate::tls::Trust::with_ca_pem(certified.cert.pem().as_bytes()).unwrap();
        let (near, far) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let conn = ServerConnection::new(Arc::new(config)).unwrap();
            let mut server = StreamOwned::new(conn, far);
            while server.conn.is_handshaking() {
                server.conn.complete_io(&mut server.sock).unwrap();
            }
            server
        });
        let name = ServerName::try_from("localhost").unwrap();
        let conn = ClientConnection::new(trust.client_config(), name).unwrap();
        let full = Arc::new(AtomicBool::new(false));
        let gate = Gate {
            socket: near,
            full: full.clone(),
        };
        let mut client = StreamOwned::new(conn, gate);
        while client.conn.is_handshaking() {
            client.conn.complete_io(&mut client.sock).unwrap();
        }
        let mut server = server.join().unwrap();
        // What the server sends after the handshake (its session tickets) is read now.
        server.write_all(b"ready").unwrap();
        let mut ready = [0u8; 5];
        client.read_exact(&mut ready).unwrap();
        client.sock.socket.set_nonblocking(true).unwrap();
        (client, server, full)
    }

    /// Waits until the client's socket takes bytes again (10 s at most).
    fn wait_for_room(tls: &NonBlockingTls<ClientConnection, Gate>) {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd as _;
        let mut fds = [PollFd::new(tls.0.sock.socket.as_fd(), PollFlags::POLLOUT)];
        let ready = poll(&mut fds, PollTimeout::from(10_000u16)).unwrap();
        assert_eq!(ready, 1, "no room within 10 s");
    }

    /// Reads the server's side until the client's close, checking every byte.
    fn read_all(mut server: Server) -> std::thread::JoinHandle<usize> {
        std::thread::spawn(move || {
            let mut got = 0usize;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match server.read(&mut buf) {
                    Ok(0) => return got,
                    Ok(n) => {
                        assert!(buf[..n].iter().all(|b| *b == 7));
                        got += n;
                    }
                    Err(e) => panic!("after {got} bytes: {e}"),
                }
            }
        })
    }

    #[test]
    fn a_full_socket_with_something_to_read_says_would_block() {
        let chunk = vec![7u8; 100 * 1024];
        // rustls's own stream, as the baseline: with the socket full, once something
        // arrives, its write answers Ok(0).
        let (mut raw, mut server, full) = pair();
        full.store(true, Ordering::SeqCst);
        assert!(raw.write(&chunk).unwrap() > 0, "its buffer takes the first");
        server.write_all(b"news").unwrap();
        assert_eq!(
            raw.write(&chunk).unwrap(),
            0,
            "rustls's stream answers Ok(0)"
        );

        // This stream: WouldBlock for both, then everything taken arrives once there is room.
        let (client, mut server, full) = pair();
        let mut tls = NonBlockingTls(client);
        full.store(true, Ordering::SeqCst);
        let mut taken = tls.write(&chunk).unwrap();
        assert!(taken > 0);
        server.write_all(b"news").unwrap();
        assert_eq!(tls.write(&chunk).unwrap_err().kind(), ErrorKind::WouldBlock);
        let mut news = [0u8; 4];
        tls.read_exact(&mut news).unwrap();
        assert_eq!(&news, b"news");
        server.write_all(b"more").unwrap();
        assert_eq!(tls.flush().unwrap_err().kind(), ErrorKind::WouldBlock);
        tls.read_exact(&mut news).unwrap();
        assert_eq!(&news, b"more");
        let reader = read_all(server);
        full.store(false, Ordering::SeqCst);
        while taken < 3 * chunk.len() {
            match tls.write(&chunk) {
                Ok(n) => taken += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait_for_room(&tls),
                Err(e) => panic!("{e}"),
            }
        }
        loop {
            match tls.flush() {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait_for_room(&tls),
                Err(e) => panic!("{e}"),
            }
        }
        assert!(!tls.0.conn.wants_write());
        tls.0.conn.send_close_notify();
        loop {
            match tls.flush() {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait_for_room(&tls),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(reader.join().unwrap(), taken);
    }
}
