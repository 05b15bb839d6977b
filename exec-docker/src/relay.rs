//! The port of a persistent service: a TCP relay from the host's loopback to the container.
//!
//! Publishing a port through the engine needs a network with a route out, which the grant's
//! egress may forbid. So outpost publishes the port itself: it listens on `127.0.0.1:<port>`
//! and relays each connection to the container's address on its network (the internal one
//! when the run has no egress). Only this machine can reach the service; the relay stops with
//! the container.

use std::net::{IpAddr, SocketAddr};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Binds the host side, before the container exists, so a taken port refuses the launch.
pub(crate) async fn bind(port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).await
}

/// Relays every connection accepted on `listener` to `target` until aborted.
pub(crate) fn spawn(listener: TcpListener, target: SocketAddr) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
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
