//! TLS: with `--tls-cert` / `--tls-key` the server speaks HTTPS (rustls on ring), and its
//! join carries the `https://` URL.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;

use common::temp_dir;
use outpost_core::executor::Registry;
use outpost_server::{ServeConfig, TlsFiles, start};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

#[test]
fn the_server_serves_https_with_the_given_certificate() {
    let dir = temp_dir("tls");
    std::fs::create_dir_all(&dir).expect("dir");
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a certificate");
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    std::fs::write(&cert_path, certified.cert.pem()).expect("cert");
    std::fs::write(&key_path, certified.signing_key.serialize_pem()).expect("key");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        state_dir: dir.join("state"),
        tls: Some(TlsFiles {
            cert: cert_path.clone(),
            key: key_path,
        }),
        cloud: Vec::new(),
        public_url: None,
        node_url: None,
        rate_limits: Default::default(),
        terminal_idle: ServeConfig::DEFAULT_TERMINAL_IDLE,
        heartbeat: ServeConfig::DEFAULT_HEARTBEAT,
        limits: Default::default(),
        xterm_dir: None,
        database: outpost_server::Database::Sqlite,
    };
    let running = rt.block_on(start(config, Registry::new())).expect("starts");
    assert!(
        running.url.starts_with("https://127.0.0.1:"),
        "{}",
        running.url
    );
    let addr: std::net::SocketAddr = running
        .url
        .trim_start_matches("https://")
        .parse()
        .expect("addr");

    let mut roots = rustls::RootCertStore::empty();
    let cert = CertificateDer::from_pem_file(&cert_path).expect("pem");
    roots.add(cert).expect("a root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(client), name).expect("client");
    let tcp = TcpStream::connect(addr).expect("connect");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .expect("write");
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains(r#"{"ok":true}"#), "{text}");

    // Plain HTTP to the TLS port gets no answer.
    let mut plain = TcpStream::connect(addr).expect("connect");
    plain
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok();
    let _ = plain.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n");
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(!String::from_utf8_lossy(&got).contains("200 OK"));
    rt.block_on(running.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}
