//! HTTPS for ureq through the client's own rustls configuration ([`Trust::client_config`]),
//! so plain HTTP requests trust exactly what the WebSocket trusts: the public roots, an extra
//! CA, and the certificate a join pins. ureq's own TLS takes a list of roots only; this is
//! its connector extension point (`ureq::unversioned::transport`) with our configuration.
//!
//! This module owns that connector and the agents built on it. It never loosens
//! verification: the configuration is [`Trust`]'s, whole.

use std::fmt;
use std::io::{Read as _, Write as _};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, TcpConnector,
    Transport, TransportAdapter,
};

use crate::tls::Trust;

/// A ureq agent with `config` whose HTTPS connections are made with `trust`'s rustls
/// configuration.
pub fn agent(config: ureq::config::Config, trust: &Trust) -> ureq::Agent {
    let connector = ().chain(TcpConnector::default()).chain(TrustConnector {
        config: trust.client_config(),
    });
    ureq::Agent::with_parts(config, connector, DefaultResolver::default())
}

/// Wraps a TCP transport in TLS for `https` URLs.
struct TrustConnector {
    config: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for TrustConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustConnector").finish_non_exhaustive()
    }
}

impl<In: Transport> Connector<In> for TrustConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details
            .uri
            .host()
            .ok_or(ureq::Error::Tls("the URL has no host"))?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(bare.to_owned())
            .map_err(|_| ureq::Error::Tls("the URL's host is not a TLS server name"))?;
        let mut conn = ClientConnection::new(self.config.clone(), name)?;
        let mut socket = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        socket.set_timeout(details.timeout);
        conn.complete_io(&mut socket)?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(TlsTransport {
            buffers,
            stream: StreamOwned::new(conn, socket),
        })))
    }
}

/// One TLS connection under ureq.
struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let read = self.stream.read(input)?;
        self.buffers.input_appended(read);
        Ok(read > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}
