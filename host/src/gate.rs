//! The egress gate: the proxy a run's allowlist egress goes through. It reads each client's
//! request ([`outpost_core::gate::Handshake`]), decides with the grant's egress
//! ([`outpost_core::grant::check_egress`]), resolves names itself and refuses a name that
//! resolves into the machine's own or its network's addresses ([`outpost_core::gate::is_internal`])
//! unless the allowlist names that address literally, then connects and moves bytes both
//! ways. Every refusal names the destination, the egress mode and the owner's fix, to the
//! client and to the gate's report ([`GateEvent`]).
//!
//! It owns sockets and threads (one per client, at most [`MAX_CLIENTS`] at once); it never
//! decides what the grant is, and it never reads or alters the bytes of a tunnel.

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs as _};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use outpost_core::gate::{Form, GateError, Handshake, Progress, Request, is_internal};
use outpost_core::grant::{EgressDenied, check_egress};
use outpost_core::wire::Egress;

/// The most clients one gate serves at once; one more is answered `503` and closed.
pub const MAX_CLIENTS: usize = 256;

/// How long a client may take to send its request, and a destination to accept.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a gate lets through.
#[derive(Debug, Clone)]
pub struct GatePolicy {
    /// The grant's egress (the gate serves `allowlist`; `none` refuses everything, `all`
    /// lets everything but internal addresses through names).
    pub egress: Egress,
    /// The context's name, for the owner's fix in refusals.
    pub context: String,
}

/// What the gate reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateEvent {
    /// A destination was refused (`egress_denied`): by the grant, or because its name
    /// resolves into an internal address.
    Refused {
        /// `host:port` as the client asked.
        destination: String,
        /// The whole refusal, as the client was told it.
        message: String,
    },
    /// A destination was allowed and connected.
    Connected {
        /// `host:port` as the client asked.
        destination: String,
    },
}

/// A running gate.
#[derive(Debug)]
pub struct Gate {
    at: Endpoint,
    stop: Arc<AtomicBool>,
}

/// Where a gate's clients reach it.
#[derive(Debug, Clone)]
enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// A byte stream a gate serves or tunnels to: TCP, or the Unix socket a sandboxed run's
/// network namespace is bridged to.
pub(crate) trait Duplex: Read + Write + AsFd + Send + Sized + 'static {
    /// Half-closes or closes it.
    fn shut(&self, how: Shutdown);
    /// A second handle on the same stream.
    fn twin(&self) -> std::io::Result<Self>;
    /// Bounds each read (`None`: no bound).
    fn read_timeout(&self, timeout: Option<Duration>);
}

/// Both stream types answer the same calls under the same names.
macro_rules! duplex {
    ($($stream:ty),*) => {$(
        impl Duplex for $stream {
            fn shut(&self, how: Shutdown) {
                let _ = self.shutdown(how);
            }
            fn twin(&self) -> std::io::Result<Self> {
                self.try_clone()
            }
            fn read_timeout(&self, timeout: Option<Duration>) {
                let _ = self.set_read_timeout(timeout);
            }
        }
    )*};
}

duplex!(TcpStream, UnixStream);

impl Gate {
    /// Serves clients on `listener` under `policy`, reporting to `report`, on a thread of its
    /// own until [`Gate::stop`] (or drop).
    pub fn start(
        listener: TcpListener,
        policy: GatePolicy,
        report: Arc<dyn Fn(GateEvent) + Send + Sync>,
    ) -> std::io::Result<Gate> {
        let at = Endpoint::Tcp(listener.local_addr()?);
        let incoming = std::iter::from_fn(move || {
            Some(listener.accept().map(|(client, _)| {
                let _ = client.set_nodelay(true);
                client
            }))
        });
        Self::serve_all(at, incoming, policy, report)
    }

    /// As [`Gate::start`], on a Unix socket: what a sandboxed run's network namespace is
    /// bridged to (its proxy port inside forwards each connection here).
    pub fn start_unix(
        listener: UnixListener,
        policy: GatePolicy,
        report: Arc<dyn Fn(GateEvent) + Send + Sync>,
    ) -> std::io::Result<Gate> {
        let path = listener
            .local_addr()?
            .as_pathname()
            .map(PathBuf::from)
            .ok_or_else(|| std::io::Error::other("the gate's Unix socket has no path"))?;
        Self::serve_all(
            Endpoint::Unix(path),
            std::iter::from_fn(move || Some(listener.accept().map(|(client, _)| client))),
            policy,
            report,
        )
    }

    fn serve_all<C: Duplex>(
        at: Endpoint,
        incoming: impl Iterator<Item = std::io::Result<C>> + Send + 'static,
        policy: GatePolicy,
        report: Arc<dyn Fn(GateEvent) + Send + Sync>,
    ) -> std::io::Result<Gate> {
        let stop = Arc::new(AtomicBool::new(false));
        let serving = stop.clone();
        let policy = Arc::new(policy);
        let clients = Arc::new(AtomicUsize::new(0));
        std::thread::Builder::new()
            .name("outpost-gate".into())
            .spawn(move || {
                for client in incoming {
                    if serving.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(mut client) = client else { continue };
                    if clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
                        clients.fetch_sub(1, Ordering::SeqCst);
                        let _ = client.write_all(&busy());
                        continue;
                    }
                    let (policy, report, count) = (policy.clone(), report.clone(), clients.clone());
                    let spawned = std::thread::Builder::new()
                        .name("outpost-gate-client".into())
                        .spawn(move || {
                            serve(client, &policy, report.as_ref());
                            count.fetch_sub(1, Ordering::SeqCst);
                        });
                    if spawned.is_err() {
                        clients.fetch_sub(1, Ordering::SeqCst);
                    }
                }
            })?;
        Ok(Gate { at, stop })
    }

    /// Where TCP clients reach it (for a gate on a Unix socket: `0.0.0.0:0`).
    pub fn addr(&self) -> SocketAddr {
        match &self.at {
            Endpoint::Tcp(addr) => *addr,
            Endpoint::Unix(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        }
    }

    /// Stops taking clients (those connected finish).
    pub fn stop(&self) {
        if !self.stop.swap(true, Ordering::SeqCst) {
            // Wake the accepting thread.
            match &self.at {
                Endpoint::Tcp(addr) => {
                    let _ = TcpStream::connect_timeout(addr, Duration::from_secs(1));
                }
                Endpoint::Unix(path) => {
                    let _ = UnixStream::connect(path);
                }
            }
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.stop();
    }
}

fn busy() -> Vec<u8> {
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
}

/// One client, start to end.
fn serve<C: Duplex>(
    mut client: C,
    policy: &GatePolicy,
    report: &(dyn Fn(GateEvent) + Send + Sync),
) {
    client.read_timeout(Some(HANDSHAKE_TIMEOUT));
    let mut handshake = Handshake::new();
    let request = match read_request(&mut client, &mut handshake) {
        Ok(request) => request,
        Err(Some(e)) => {
            let _ = client.write_all(&e.answer(handshake.is_socks()));
            return;
        }
        Err(None) => return,
    };
    let destination = request.destination();
    let upstream = match decide(&request, policy) {
        Ok(addrs) => connect(&addrs),
        Err(message) => {
            let summary = format!("egress denied: {destination} ({})", mode(&policy.egress));
            let _ = client.write_all(&request.refused(&summary, &message, false));
            report(GateEvent::Refused {
                destination,
                message,
            });
            return;
        }
    };
    let upstream = match upstream {
        Ok(stream) => stream,
        Err(e) => {
            let message = format!("`{destination}` is allowed but could not be reached: {e}");
            let summary = format!("unreachable: {destination}");
            let _ = client.write_all(&request.refused(&summary, &message, true));
            return;
        }
    };
    report(GateEvent::Connected {
        destination: destination.clone(),
    });
    client.read_timeout(None);
    let mut to_upstream = Vec::new();
    if let Form::Forward { head } = &request.form {
        to_upstream.extend_from_slice(head);
    }
    to_upstream.extend_from_slice(&request.early);
    if (&upstream).write_all(&to_upstream).is_err() || client.write_all(&request.granted()).is_err()
    {
        return;
    }
    splice(client, upstream);
}

/// Reads until the request is whole. `Err(None)`: the client went away or stalled.
fn read_request<C: Duplex>(
    client: &mut C,
    handshake: &mut Handshake,
) -> Result<Request, Option<GateError>> {
    let mut buf = [0u8; 4096];
    let mut fresh: &[u8] = &[];
    let mut owned;
    loop {
        match handshake.feed(fresh) {
            Ok(Progress::Ready(request)) => return Ok(request),
            Ok(Progress::Reply(bytes)) => {
                client.write_all(&bytes).map_err(|_| None)?;
                // The next message may be read already: feed again before reading.
                fresh = &[];
                match handshake.feed(fresh) {
                    Ok(Progress::Ready(request)) => return Ok(request),
                    Ok(_) => {}
                    Err(e) => return Err(Some(e)),
                }
            }
            Ok(Progress::NeedMore) => {}
            Err(e) => return Err(Some(e)),
        }
        let n = client.read(&mut buf).map_err(|_| None)?;
        if n == 0 {
            return Err(None);
        }
        owned = buf[..n].to_vec();
        fresh = &owned;
    }
}

/// The addresses to connect to, or the refusal.
fn decide(request: &Request, policy: &GatePolicy) -> Result<Vec<SocketAddr>, String> {
    let fix = |denied: &EgressDenied| {
        format!(
            "{denied}\nThe machine's owner changes it with: outpost context grant {} --egress {}",
            policy.context,
            suggested(&policy.egress, denied.destination())
        )
    };
    check_egress(&policy.egress, &request.host, request.port).map_err(|d| fix(&d))?;
    if let Ok(ip) = request.host.parse::<IpAddr>() {
        // Named literally, and allowed as such.
        return Ok(vec![SocketAddr::new(ip, request.port)]);
    }
    let addrs: Vec<SocketAddr> = (request.host.as_str(), request.port)
        .to_socket_addrs()
        .map_err(|e| format!("`{}` does not resolve: {e}", request.destination()))?
        .collect();
    if let Some(internal) = addrs.iter().find(|a| {
        is_internal(a.ip()) && check_egress(&policy.egress, &a.ip().to_string(), a.port()).is_err()
    }) {
        return Err(format!(
            "network access to `{}` was refused: it resolves to {}, an address of this machine or its network, which an allowlist reaches only when it names that address itself (egress mode `{}`)\nThe machine's owner changes it with: outpost context grant {} --egress {}",
            request.destination(),
            internal.ip(),
            mode(&policy.egress),
            policy.context,
            suggested(
                &policy.egress,
                &SocketAddr::new(internal.ip(), request.port).to_string()
            ),
        ));
    }
    Ok(addrs)
}

/// The egress mode's name.
fn mode(egress: &Egress) -> &'static str {
    match egress {
        Egress::None => "none",
        Egress::All => "all",
        Egress::Allowlist { .. } => "allowlist",
    }
}

/// The allowlist with `destination` added, as `--egress` takes it.
fn suggested(egress: &Egress, destination: &str) -> String {
    let mut hosts = match egress {
        Egress::Allowlist { hosts } => hosts.clone(),
        _ => Vec::new(),
    };
    hosts.push(destination.to_owned());
    hosts.join(",")
}

fn connect(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(addr, HANDSHAKE_TIMEOUT) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Moves bytes both ways until both sides are done.
pub(crate) fn splice<A: Duplex, B: Duplex>(client: A, upstream: B) {
    let (Ok(client2), Ok(upstream2)) = (client.twin(), upstream.twin()) else {
        return;
    };
    let up = std::thread::Builder::new()
        .name("outpost-gate-up".into())
        .spawn(move || copy_then_close(client2, upstream2));
    copy_then_close(upstream, client);
    if let Ok(up) = up {
        let _ = up.join();
    }
}

/// How much one move of a tunnel's bytes takes at most (`std::io::copy`'s 8 KiB buffer made a
/// bulk download through the gate several times slower than a direct one).
const COPY_BUFFER: usize = 1 << 20;

fn copy_then_close<A: Duplex, B: Duplex>(mut from: A, mut to: B) {
    if !spliced(&from, &to) {
        copied(&mut from, &mut to);
    }
    to.shut(Shutdown::Write);
    from.shut(Shutdown::Read);
}

/// Moves `from`'s bytes to `to` through a pipe with splice(2), in the kernel; false when the
/// kernel would not splice before a byte moved (then the caller copies).
fn spliced(from: &impl AsFd, to: &impl AsFd) -> bool {
    use nix::errno::Errno;
    use nix::fcntl::{FcntlArg, SpliceFFlags, fcntl, splice};
    let Ok((pipe_out, pipe_in)) = nix::unistd::pipe() else {
        return false;
    };
    // A larger pipe moves more per call; the default (64 KiB) still works.
    let _ = fcntl(&pipe_in, FcntlArg::F_SETPIPE_SZ(COPY_BUFFER as i32));
    // Not SPLICE_F_MORE: it corks the socket like MSG_MORE, holding small answers back.
    let flags = SpliceFFlags::SPLICE_F_MOVE;
    let mut moved_any = false;
    loop {
        let n = match splice(from, None, &pipe_in, None, COPY_BUFFER, flags) {
            Ok(0) => return true,
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(Errno::EINVAL | Errno::ENOSYS) if !moved_any => return false,
            Err(_) => return true,
        };
        moved_any = true;
        let mut left = n;
        while left > 0 {
            match splice(&pipe_out, None, to, None, left, flags) {
                Ok(0) => return true,
                Ok(m) => left -= m,
                Err(Errno::EINTR) => {}
                Err(_) => return true,
            }
        }
    }
}

/// Moves `from`'s bytes to `to` through a buffer of this process.
fn copied(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = vec![0u8; COPY_BUFFER];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}
