//! [`Runtime`] on smol: tasks on smol's global executor, blocking work on its thread pool
//! (`unblock`), TLS by futures-rustls.

use std::time::Duration;

use rustls::pki_types::ServerName;

use super::{BoxFuture, IoBox, Runtime, Target};

/// A [`Runtime`] on smol's global executor.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmolRuntime;

impl Runtime for SmolRuntime {
    fn spawn(&self, future: BoxFuture<()>) {
        smol::spawn(future).detach();
    }

    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>) {
        smol::unblock(work).detach();
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<()> {
        Box::pin(async move {
            smol::Timer::after(duration).await;
        })
    }

    fn connect(&self, target: Target) -> BoxFuture<std::io::Result<IoBox>> {
        Box::pin(async move {
            let tcp = smol::net::TcpStream::connect((target.host.as_str(), target.port)).await?;
            tcp.set_nodelay(true)?;
            match target.tls {
                None => Ok(Box::new(tcp) as IoBox),
                Some(config) => {
                    let name = ServerName::try_from(target.host.clone())
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                    let tls = futures_rustls::TlsConnector::from(config)
                        .connect(name, tcp)
                        .await?;
                    Ok(Box::new(tls) as IoBox)
                }
            }
        })
    }
}
