//! A loopback port nothing answers on, for the tests of every crate that need a refused
//! connection (`#[path]`-included by the server's and the CLI's tests too).

/// A loopback port that refuses connections for as long as the socket returned lives: bound
/// and never listening, so no other test (or process) can be given the port meanwhile, as it
/// could be one whose listener was closed.
pub fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, bind, getsockname, socket,
    };
    use std::os::fd::AsRawFd as _;
    let socket = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    bind(socket.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0)).unwrap();
    let port = getsockname::<SockaddrIn>(socket.as_raw_fd())
        .unwrap()
        .port();
    (socket, port)
}
