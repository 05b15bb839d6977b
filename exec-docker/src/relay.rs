//! The port of a persistent service: a TCP relay from the host's loopback to the container.
//!
//! outpost publishes a service's port itself, on `127.0.0.1:<port>` only, so that only this
//! machine can reach it, and so that publishing needs no network for the container:
//!
//! - a container **without network** (the default) keeps only `lo`. The relay opens each
//!   connection from inside the container's network namespace: one thread joins it
//!   (`setns`, which needs root) and connects to the service's `127.0.0.1:<port>` there. The
//!   container can still reach nothing, the host included;
//! - a container on the engine's bridge (its grant allows egress) is reached at its address.
//!
//! The relay stops with the container.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, mpsc};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Binds the host side, before the container exists, so a taken port refuses the launch.
pub(crate) async fn bind(port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await
}

/// Where the relay's connections go.
pub(crate) enum Target {
    /// The container's address on a network the host can reach.
    Address(SocketAddr),
    /// `127.0.0.1:<port>` inside the container's own network namespace.
    Namespace(Connector),
}

impl Target {
    async fn connect(&self) -> std::io::Result<TcpStream> {
        match self {
            Target::Address(address) => TcpStream::connect(address).await,
            Target::Namespace(connector) => connector.connect().await,
        }
    }
}

/// A request for one connection, answered by the thread inside the namespace.
type Request = oneshot::Sender<std::io::Result<std::net::TcpStream>>;

/// A thread that lives in a container's network namespace and opens connections there.
pub(crate) struct Connector {
    requests: mpsc::Sender<Request>,
}

impl Connector {
    /// Joins `namespace` (from [`open_namespace`]) on a thread of its own, for connections
    /// to `127.0.0.1:port` there. Fails (typically `EPERM`) when this process may not join it.
    pub(crate) fn enter(namespace: std::fs::File, port: u16) -> std::io::Result<Self> {
        let (ready, entered) = mpsc::channel();
        let (requests, incoming) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("outpost-netns".into())
            .spawn(move || {
                let joined = nix::sched::setns(&namespace, nix::sched::CloneFlags::CLONE_NEWNET);
                drop(namespace);
                let ok = joined.is_ok();
                let _ = ready.send(joined.map_err(std::io::Error::from));
                if !ok {
                    return;
                }
                // Ends when the relay, holding the sender, is gone.
                for reply in incoming {
                    let _ = reply.send(std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)));
                }
            })?;
        entered
            .recv()
            .map_err(|_| std::io::Error::other("the namespace thread ended before joining"))??;
        Ok(Self { requests })
    }

    async fn connect(&self) -> std::io::Result<TcpStream> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(reply)
            .map_err(|_| std::io::Error::other("the namespace thread is gone"))?;
        let stream = answer
            .await
            .map_err(|_| std::io::Error::other("the namespace thread is gone"))??;
        stream.set_nonblocking(true)?;
        TcpStream::from_std(stream)
    }
}

/// Opens the network namespace of process `pid`. Refuses this process's own namespace: the
/// relay would connect to its own listener.
pub(crate) fn open_namespace(pid: i64) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    let (theirs, ours) = (
        namespace.metadata()?,
        std::fs::metadata("/proc/self/ns/net")?,
    );
    if (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino()) {
        return Err(std::io::Error::other(format!(
            "process {pid} shares this process's network namespace"
        )));
    }
    Ok(namespace)
}

/// Relays every connection accepted on `listener` to `target` until aborted; aborting it ends
/// the connections it relays too.
pub(crate) fn spawn(listener: TcpListener, target: Target) -> JoinHandle<()> {
    let target = Arc::new(target);
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            connections.spawn(async move {
                if let Ok(mut outbound) = target.connect().await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
            // Forget the finished ones as new ones come.
            while connections.try_join_next().is_some() {}
        }
    })
}

/// The container's address on `network`, from the engine's inspect answer.
pub(crate) fn container_address(
    inspect: &bollard::models::ContainerInspectResponse,
    network: &str,
    port: u16,
) -> Option<SocketAddr> {
    let networks = inspect.network_settings.as_ref()?.networks.as_ref()?;
    let ip: IpAddr = networks
        .get(network)?
        .ip_address
        .as_deref()
        .filter(|ip| !ip.is_empty())?
        .parse()
        .ok()?;
    Some(SocketAddr::new(ip, port))
}

/// The container's init process, from the engine's inspect answer.
pub(crate) fn container_pid(inspect: &bollard::models::ContainerInspectResponse) -> Option<i64> {
    inspect.state.as_ref()?.pid.filter(|pid| *pid > 0)
}
