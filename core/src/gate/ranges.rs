//! Addresses a name may not resolve into unless the allowlist names them literally: what would
//! let an allowed name lead a run into the machine itself or its network (DNS rebinding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is the machine's or its network's own: loopback, private (RFC 1918, unique
/// local), link-local, shared (carrier-grade NAT), unspecified, broadcast, multicast, or the
/// documentation and benchmarking ranges — and an IPv4-mapped IPv6 address of any of these.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal_v4(v4),
            None => internal_v6(v6),
        },
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || first == 0x2001 && ip.segments()[1] == 0x0db8
        || ip
            .to_ipv4()
            .is_some_and(|v4| ip.segments()[..6] == [0; 6] && internal_v4(v4))
}
