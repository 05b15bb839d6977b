//! The URL other machines reach this server by, as the join it prints carries it: the one
//! `--public-url` gives; else, for a server listening on one address, that address; for one
//! listening on every address (`0.0.0.0`, `::`), this machine's own address on its default
//! route (or, with no default route, its first address that is up and not loopback). A join
//! that points at loopback for a listener that takes other machines is never printed: with
//! no address to give, the server refuses to start and says to pass `--public-url`.
//!
//! This module owns that choice. It never listens and never resolves names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use crate::{ServeConfig, ServeError};

/// The base URL the join carries, without a trailing `/`.
pub(crate) fn base_url(config: &ServeConfig, bound: SocketAddr) -> Result<String, ServeError> {
    if let Some(url) = &config.public_url {
        return Ok(url.trim_end_matches('/').to_owned());
    }
    own_url(config, bound)
}

/// The URL the other nodes of a cluster reach this node at, without a trailing `/`:
/// `--node-url`; else the address listened on, as [`base_url`] finds it without
/// `--public-url` (a node behind a load balancer gives the balancer's as its public URL), when
/// the other nodes may use it: `https`, or plain `http` on a loopback address they share only
/// if they run on this machine. `None` otherwise (plain HTTP on every address, or on an
/// address of the network): requests are then never relayed to this node — a loopback
/// address on another machine would lead back to the node that relays.
pub(crate) fn node_url(config: &ServeConfig, bound: SocketAddr) -> Option<String> {
    if let Some(url) = &config.node_url {
        return Some(url.trim_end_matches('/').to_owned());
    }
    if config.tls.is_none() && !bound.ip().is_loopback() {
        return None;
    }
    own_url(config, bound).ok()
}

/// This node's own address as a URL: the one listened on, or for every address this
/// machine's routable one (which only TLS may serve to other machines).
fn own_url(config: &ServeConfig, bound: SocketAddr) -> Result<String, ServeError> {
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut addr = bound;
    if addr.ip().is_unspecified() {
        // Other machines' daemons refuse plain http to anything but loopback: a join for
        // them needs TLS (or a URL in front of this server that has it).
        if config.tls.is_none() {
            return Err(ServeError::PlainHttpForOthers { listen: bound });
        }
        let ip =
            routable_ip(addr.is_ipv6()).ok_or(ServeError::NoPublicAddress { listen: bound })?;
        addr.set_ip(ip);
    }
    Ok(format!("{scheme}://{addr}"))
}

/// This machine's address on its default route, else its first address that is up and not
/// loopback (of the family asked for).
pub(crate) fn routable_ip(v6: bool) -> Option<IpAddr> {
    on_default_route(v6).or_else(|| first_interface_address(v6))
}

/// The source address the kernel picks for a datagram to a documentation address (RFC 5737,
/// RFC 3849): connecting a UDP socket sends nothing.
fn on_default_route(v6: bool) -> Option<IpAddr> {
    let (local, far): (SocketAddr, SocketAddr) = if v6 {
        (
            (Ipv6Addr::UNSPECIFIED, 0).into(),
            (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), 9).into(),
        )
    } else {
        (
            (Ipv4Addr::UNSPECIFIED, 0).into(),
            (Ipv4Addr::new(203, 0, 113, 1), 9).into(),
        )
    };
    let socket = UdpSocket::bind(local).ok()?;
    socket.connect(far).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    usable(ip).then_some(ip)
}

fn first_interface_address(v6: bool) -> Option<IpAddr> {
    use nix::net::if_::InterfaceFlags;
    nix::ifaddrs::getifaddrs().ok()?.find_map(|ifa| {
        let up = ifa.flags.contains(InterfaceFlags::IFF_UP)
            && !ifa.flags.contains(InterfaceFlags::IFF_LOOPBACK);
        let address = ifa.address?;
        let ip: IpAddr = match (v6, address.as_sockaddr_in(), address.as_sockaddr_in6()) {
            (false, Some(v4), _) => IpAddr::V4(v4.ip()),
            (true, _, Some(v6)) => IpAddr::V6(v6.ip()),
            _ => return None,
        };
        (up && usable(ip)).then_some(ip)
    })
}

/// An address another machine could use: not loopback, not unspecified, not link-local.
fn usable(ip: IpAddr) -> bool {
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    };
    !ip.is_loopback() && !ip.is_unspecified() && !link_local
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_on_every_address_gets_a_routable_one_never_loopback() {
        let plain = base_url(&test_config(), "0.0.0.0:8440".parse().unwrap()).unwrap_err();
        assert!(
            plain.to_string().contains("--tls-cert"),
            "plain http for other machines is refused with what to do: {plain}"
        );
        let config = crate::ServeConfig {
            listen: "0.0.0.0:0".parse().unwrap(),
            tls: Some(crate::TlsFiles {
                cert: "cert.pem".into(),
                key: "key.pem".into(),
            }),
            ..test_config()
        };
        let url = base_url(&config, "0.0.0.0:8440".parse().unwrap()).unwrap();
        let host = url.trim_start_matches("https://");
        let addr: SocketAddr = host.parse().unwrap();
        assert!(usable(addr.ip()), "{url}");
        assert_eq!(addr.port(), 8440);
        let given = crate::ServeConfig {
            public_url: Some("https://outpost.example:8440/".into()),
            ..test_config()
        };
        assert_eq!(
            base_url(&given, "0.0.0.0:8440".parse().unwrap()).unwrap(),
            "https://outpost.example:8440"
        );
        let one = base_url(&test_config(), "127.0.0.1:9".parse().unwrap()).unwrap();
        assert_eq!(
            one, "http://127.0.0.1:9",
            "a loopback listener keeps its address"
        );
    }

    #[test]
    fn a_node_is_reached_at_its_own_address_not_at_the_public_url() {
        let behind = crate::ServeConfig {
            public_url: Some("https://balancer.example".into()),
            ..test_config()
        };
        let bound: SocketAddr = "127.0.0.1:8441".parse().unwrap();
        assert_eq!(
            node_url(&behind, bound).as_deref(),
            Some("http://127.0.0.1:8441")
        );
        let given = crate::ServeConfig {
            node_url: Some("https://node-b.internal:8440/".into()),
            ..behind.clone()
        };
        assert_eq!(
            node_url(&given, bound).as_deref(),
            Some("https://node-b.internal:8440")
        );
        for plain in ["0.0.0.0:8442", "[::]:8443", "10.0.0.5:8440"] {
            assert_eq!(
                node_url(&behind, plain.parse().unwrap()),
                None,
                "plain HTTP on {plain}: no address another node may use"
            );
        }
        let tls = crate::ServeConfig {
            tls: Some(crate::TlsFiles {
                cert: "cert.pem".into(),
                key: "key.pem".into(),
            }),
            ..behind
        };
        assert_eq!(
            node_url(&tls, "10.0.0.5:8440".parse().unwrap()).as_deref(),
            Some("https://10.0.0.5:8440")
        );
    }

    fn test_config() -> crate::ServeConfig {
        crate::ServeConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            state_dir: std::env::temp_dir(),
            tls: None,
            cloud: Vec::new(),
            public_url: None,
            node_url: None,
            rate_limits: Default::default(),
            terminal_idle: crate::ServeConfig::DEFAULT_TERMINAL_IDLE,
            heartbeat: crate::ServeConfig::DEFAULT_HEARTBEAT,
            limits: Default::default(),
            xterm_dir: None,
            database: crate::Database::Sqlite,
        }
    }
}
