//! TLS to PostgreSQL: a database that accepts TCP connections over TLS only, with a
//! certificate of the test's own CA. A server whose URL asks for `sslmode=verify-full` with
//! that CA (`sslrootcert`) starts and keeps every connection on TLS; plain text, another CA
//! and `sslmode=prefer` are refused at start with a message saying what to do.

mod common;

use common::postgres::Postgres;
use common::{Machine, TestServer, temp_dir};
use outpost_core::executor::Registry;
use outpost_server::{Database, Limits};

/// A CA, a certificate it signed for `localhost` and 127.0.0.1 with its key, and another CA.
fn certificates() -> (String, String, String, String) {
    let ca = |name: &str| {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("a CA");
        (cert.pem(), rcgen::Issuer::new(params, key))
    };
    let (ca_pem, issuer) = ca("outpost test database CA");
    let (other_pem, _) = ca("another CA");
    let key = rcgen::KeyPair::generate().expect("a key");
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("params");
    let cert = params
        .signed_by(&key, &issuer)
        .expect("a server certificate");
    (ca_pem, cert.pem(), key.serialize_pem(), other_pem)
}

fn try_start(state: &std::path::Path, url: String) -> Result<TestServer, String> {
    TestServer::try_start_on(
        state,
        Registry::new(),
        Vec::new(),
        Limits::default(),
        Database::Postgres(url),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn a_server_reaches_postgres_over_verified_tls_and_refuses_anything_less() {
    let mut pg = Postgres::start();
    let (ca, cert, key, other_ca) = certificates();
    pg.require_tls(&cert, &key);
    let url = pg.database("tls");
    let dir = temp_dir("postgres-tls");
    std::fs::create_dir_all(&dir).expect("a folder");
    let (ca_path, other_path) = (dir.join("ca.pem"), dir.join("other.pem"));
    std::fs::write(&ca_path, ca).expect("the CA");
    std::fs::write(&other_path, other_ca).expect("the other CA");
    let with = |mode: &str, root: &std::path::Path| {
        format!(
            "{url}?application_name=outpost-tls&sslmode={mode}&sslrootcert={}",
            root.display()
        )
    };

    // Verified TLS: the server starts, works, and every connection it holds is on TLS.
    let server = try_start(&dir.join("a"), with("verify-full", &ca_path)).expect("it starts");
    let machine = Machine::new(61);
    assert_eq!(machine.register(&server, "box").status, 201);
    let count = |ssl: bool| {
        pg.sql(
            "tls",
            &format!(
                "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
                 WHERE application_name = 'outpost-tls' AND ssl = {ssl}"
            ),
        )
        .trim()
        .parse::<u32>()
        .expect("a count")
    };
    // The writer, the reader and the connection that listens to the other nodes.
    assert!(count(true) >= 3, "{} on TLS", count(true));
    assert_eq!(count(false), 0, "none in plain text");
    server.stop();

    // Plain text: the database refuses it, and the server does not start.
    let err = try_start(&dir.join("b"), url.clone())
        .err()
        .expect("refused");
    assert!(
        err.contains("PostgreSQL") || err.contains("database"),
        "{err}"
    );
    // A certificate of another CA: refused by the server's verification.
    let err = try_start(&dir.join("c"), with("verify-full", &other_path))
        .err()
        .expect("refused");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // `prefer` would fall back to plain text: refused before any connection.
    let err = try_start(&dir.join("d"), with("prefer", &ca_path))
        .err()
        .expect("refused");
    assert!(err.contains("verify-full"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
