//! [`Runtime`] on tokio: tasks on a runtime handle, TLS by tokio-rustls, streams adapted to
//! the `futures` I/O traits for async-tungstenite.

use std::time::Duration;

use async_tungstenite::tokio::TokioAdapter;
use rustls::pki_types::ServerName;

use super::{BoxFuture, IoBox, Runtime, Target};

/// A [`Runtime`] on a tokio runtime's handle.
#[derive(Debug, Clone)]
pub struct TokioRuntime {
    handle: tokio::runtime::Handle,
}

impl TokioRuntime {
    /// A runtime spawning on `handle`.
    pub fn new(handle: tokio::runtime::Handle) -> Self {
        Self { handle }
    }

    /// The handle of the tokio runtime this thread is in, if any.
    pub fn current() -> Option<Self> {
        tokio::runtime::Handle::try_current().ok().map(Self::new)
    }
}

impl Runtime for TokioRuntime {
    fn spawn(&self, future: BoxFuture<()>) {
        drop(self.handle.spawn(future));
    }

    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>) {
        drop(self.handle.spawn_blocking(work));
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(duration))
    }

    fn connect(&self, target: Target) -> BoxFuture<std::io::Result<IoBox>> {
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await?;
            tcp.set_nodelay(true)?;
            match target.tls {
                None => Ok(Box::new(TokioAdapter::new(tcp)) as IoBox),
                Some(config) => {
                    let name = ServerName::try_from(target.host.clone())
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                    let tls = tokio_rustls::TlsConnector::from(config)
                        .connect(name, tcp)
                        .await?;
                    Ok(Box::new(TokioAdapter::new(tls)) as IoBox)
                }
            }
        })
    }
}
