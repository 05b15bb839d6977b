//! What the server's tests share: a real server on a free port over a real state folder, a
//! small blocking HTTP/1.1 client, machine keys that sign requests as a daemon does, and the
//! WebSocket opened with the sync `tungstenite` client.
#![allow(dead_code)]

pub mod driver;
pub mod postgres;

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use outpost_core::b64;
use outpost_core::executor::Registry;
use outpost_core::httpsig::{
    DigestAlgorithm, HttpRequest, SignatureParams, content_digest, sign_request,
};
use outpost_core::join::{Join, machine_key_id};
use outpost_core::keyset::{KeySet, PinnedRoots};
use outpost_core::sign::Ed25519Signer;
use outpost_server::{Limits, Running, ServeConfig, start};
use serde_json::Value;

/// A fresh, empty folder under the system's temporary folder.
pub fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "outpost-server-{name}-{}-{n}-{nanos}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The database a test server over `state` keeps its records in ([`postgres::test_url`]).
pub fn test_database(state: &Path) -> outpost_server::Database {
    postgres::test_url(state).map_or(
        outpost_server::Database::Sqlite,
        outpost_server::Database::Postgres,
    )
}

/// Whether the tests run over PostgreSQL (`OUTPOST_TEST_DATABASE=postgres`).
pub fn on_postgres() -> bool {
    postgres::requested()
}

/// The database of a (stopped) test server over `state`, read and changed behind its back as
/// a crash or an older version would leave it. Values are written into the SQL (the tests'
/// own), which both databases read alike.
pub enum TestDb {
    Sqlite(rusqlite::Connection),
    Postgres(String),
}

impl TestDb {
    /// The database the test server over `state` uses.
    pub fn open(state: &Path) -> TestDb {
        match test_database(state) {
            outpost_server::Database::Sqlite => TestDb::Sqlite(
                rusqlite::Connection::open(state.join("outpost.db")).expect("the database"),
            ),
            outpost_server::Database::Postgres(url) => TestDb::Postgres(url),
        }
    }

    /// Runs `sql`; panics when the database refuses it.
    pub fn execute(&self, sql: &str) {
        match self {
            TestDb::Sqlite(db) => {
                db.execute_batch(sql)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            TestDb::Postgres(url) => {
                postgres::psql(url, sql);
            }
        }
    }

    /// The first column of the first row `sql` returns, as text (empty for NULL).
    pub fn text(&self, sql: &str) -> String {
        self.row(sql).into_iter().next().unwrap_or_default()
    }

    /// The first row `sql` returns, each column as text (empty for NULL).
    pub fn row(&self, sql: &str) -> Vec<String> {
        use rusqlite::types::ValueRef;
        match self {
            TestDb::Sqlite(db) => db
                .query_row(sql, [], |r| {
                    (0..r.as_ref().column_count())
                        .map(|i| {
                            Ok(match r.get_ref(i)? {
                                ValueRef::Null => String::new(),
                                ValueRef::Integer(n) => n.to_string(),
                                ValueRef::Real(f) => f.to_string(),
                                ValueRef::Text(t) | ValueRef::Blob(t) => {
                                    String::from_utf8_lossy(t).into_owned()
                                }
                            })
                        })
                        .collect()
                })
                .unwrap_or_else(|e| panic!("{sql}: {e}")),
            TestDb::Postgres(url) => {
                let out = postgres::psql(url, &sql.replace('\n', " "));
                let line = out.lines().next().unwrap_or("");
                line.split('\u{1f}').map(str::to_owned).collect()
            }
        }
    }
}

/// A running server and the runtime it runs on.
pub struct TestServer {
    pub rt: tokio::runtime::Runtime,
    pub running: Option<Running>,
    pub state: PathBuf,
}

impl TestServer {
    /// Starts a server on 127.0.0.1:0 over `state` (the folder need not exist).
    pub fn start(state: &Path) -> TestServer {
        Self::start_with(state, Registry::new(), Vec::new())
    }

    /// Starts a server with a cloud registry allowing `cloud`.
    pub fn start_with(
        state: &Path,
        registry: Registry,
        cloud: Vec<outpost_core::wire::Environment>,
    ) -> TestServer {
        Self::start_full(state, registry, cloud, Limits::default())
    }

    /// Starts a server (no cloud) with `limits`.
    pub fn start_limited(state: &Path, limits: Limits) -> TestServer {
        Self::start_full(state, Registry::new(), Vec::new(), limits)
    }

    /// Starts a server with a cloud registry allowing `cloud`, and `limits`.
    pub fn start_full(
        state: &Path,
        registry: Registry,
        cloud: Vec<outpost_core::wire::Environment>,
        limits: Limits,
    ) -> TestServer {
        Self::start_on(state, registry, cloud, limits, test_database(state))
    }

    /// Starts a server over the SQLite file whatever `OUTPOST_TEST_DATABASE` says (for the
    /// tests of that file itself).
    pub fn start_sqlite(state: &Path) -> TestServer {
        Self::start_on(
            state,
            Registry::new(),
            Vec::new(),
            Limits::default(),
            outpost_server::Database::Sqlite,
        )
    }

    /// Starts a server with everything given.
    pub fn start_on(
        state: &Path,
        registry: Registry,
        cloud: Vec<outpost_core::wire::Environment>,
        limits: Limits,
        database: outpost_server::Database,
    ) -> TestServer {
        Self::try_start_on(state, registry, cloud, limits, database).expect("the server starts")
    }

    /// As [`TestServer::start_on`], with the reason it did not start.
    pub fn try_start_on(
        state: &Path,
        registry: Registry,
        cloud: Vec<outpost_core::wire::Environment>,
        limits: Limits,
        database: outpost_server::Database,
    ) -> Result<TestServer, outpost_server::ServeError> {
        // RUST_LOG=… shows the server's log beside the test's output.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let config = ServeConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            state_dir: state.to_path_buf(),
            tls: None,
            cloud,
            public_url: None,
            node_url: None,
            rate_limits: Default::default(),
            terminal_idle: ServeConfig::DEFAULT_TERMINAL_IDLE,
            heartbeat: ServeConfig::DEFAULT_HEARTBEAT,
            limits,
            xterm_dir: None,
            database,
        };
        let running = rt.block_on(start(config, registry))?;
        Ok(TestServer {
            rt,
            running: Some(running),
            state: state.to_path_buf(),
        })
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().expect("running")
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        let url = &self.running().url;
        url.trim_start_matches("http://")
            .parse()
            .expect("the URL is http://ip:port")
    }

    pub fn admin(&self) -> String {
        self.running().admin_token.clone()
    }

    pub fn join(&self) -> Join {
        Join::parse(&self.running().join).expect("the join parses")
    }

    /// Stops gracefully.
    pub fn stop(mut self) {
        if let Some(running) = self.running.take() {
            self.rt.block_on(running.shutdown());
        }
    }

    /// Stops and starts again over the same state folder.
    pub fn restart(self) -> TestServer {
        let state = self.state.clone();
        self.stop();
        TestServer::start(&state)
    }

    /// The key set the server serves, verified against the join's root.
    pub fn keys(&self) -> KeySet {
        let answer = http(
            self.addr(),
            "GET",
            "/v1/execution-contexts/server-keys",
            &[],
            b"",
        );
        assert_eq!(answer.status, 200);
        let roots = PinnedRoots::new(vec![self.join().root]);
        KeySet::from_document(&answer.body, &roots)
            .expect("the key set verifies under the join's root")
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The error code of an error answer.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection (`Connection: close`).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let stream = TcpStream::connect(addr).expect("connect");
    exchange(stream, &request_bytes(addr, method, path, headers, body))
}

/// [`http`] from the loopback address `source` (each source address has its own rate
/// limit bucket).
pub fn http_from(
    source: Ipv4Addr,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    raw_from(
        source,
        addr,
        &request_bytes(addr, method, path, headers, body),
    )
}

/// Sends `request` as it is from the loopback address `source`, and reads the answer.
pub fn raw_from(source: Ipv4Addr, addr: SocketAddr, request: &[u8]) -> Answer {
    exchange(connect_from(source, addr), request)
}

/// A connection to `addr` from the loopback address `source`.
pub fn connect_from(source: Ipv4Addr, addr: SocketAddr) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("a runtime");
    let stream = rt
        .block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(source.into(), 0))?;
            socket.connect(addr).await
        })
        .expect("connect from a loopback source address");
    let stream = stream.into_std().expect("a std stream");
    stream.set_nonblocking(false).expect("blocking");
    drop(rt);
    stream
}

/// The bytes of a request with `Connection: close` and, for a body or a method that takes
/// one, `Content-Length`.
pub fn request_bytes(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" || method == "PUT" || method == "PATCH" {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

pub fn exchange(mut stream: TcpStream, request: &[u8]) -> Answer {
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
    // A server may answer (413) before reading all of a large body.
    let _ = stream.write_all(request);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_answer(&raw)
}

pub fn parse_answer(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..end]).trim(), 16)
                .unwrap_or(0);
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[end + 2..end + 2 + size]);
            rest = &rest[end + 2 + size + 2..];
        }
        body = out;
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// An inline capability that runs `script` with the shell (PROTOCOL §11.4).
pub fn inline(script: &str) -> Value {
    serde_json::json!({"kind": "inline",
           "manifest": "name: hi\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
           "files": [{"path": "run.sh", "contentB64": b64::encode(script.as_bytes())}]})
}

/// Bearer header value.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A machine key, as a daemon holds it.
pub struct Machine {
    pub signer: Ed25519Signer,
    pub key_id: String,
    pub public_b64: String,
    nonces: AtomicU64,
}

impl Machine {
    pub fn new(seed: u8) -> Machine {
        let signer = Ed25519Signer::from_seed("machine", [seed; 32]);
        let public = signer.verifying_key();
        Machine {
            key_id: machine_key_id(&public),
            public_b64: b64::encode(public.as_bytes()),
            signer,
            nonces: AtomicU64::new(0),
        }
    }

    /// A fresh nonce.
    pub fn nonce(&self) -> String {
        format!(
            "n-{}-{}-{}",
            self.key_id,
            now_secs(),
            self.nonces.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The headers of a request signed with `keyid` and `nonce`.
    pub fn sign_as(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
        keyid: &str,
        nonce: &str,
    ) -> Vec<(String, String)> {
        let mut req = HttpRequest {
            method: method.to_owned(),
            url: format!("http://{addr}{path}"),
            headers: vec![("host".into(), addr.to_string())],
            body: body.to_vec(),
        };
        let mut components: Vec<String> = ["@method", "@authority", "@path", "@query"]
            .map(String::from)
            .to_vec();
        if !body.is_empty() {
            req.set_header(
                "content-digest",
                content_digest(body, &[DigestAlgorithm::Sha256]),
            );
            components.push("content-digest".into());
        }
        let created = now_secs();
        let params = SignatureParams {
            components,
            created: Some(created),
            expires: Some(created + 60),
            nonce: Some(nonce.to_owned()),
            alg: Some("ed25519".into()),
            keyid: Some(keyid.to_owned()),
            tag: None,
        };
        sign_request(&mut req, "outpost", &params, &self.signer).expect("signs");
        req.headers
            .into_iter()
            .filter(|(n, _)| n != "host")
            .collect()
    }

    /// Sends a signed request with `nonce` and extra headers.
    pub fn send_with(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
        nonce: &str,
        extra: &[(&str, &str)],
    ) -> Answer {
        let request = self.signed_request(addr, method, path, body, nonce, extra);
        exchange(TcpStream::connect(addr).expect("connect"), &request)
    }

    /// [`Machine::send_with`] from the loopback address `source`.
    #[allow(clippy::too_many_arguments)]
    pub fn send_with_from(
        &self,
        source: Ipv4Addr,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
        nonce: &str,
        extra: &[(&str, &str)],
    ) -> Answer {
        let request = self.signed_request(addr, method, path, body, nonce, extra);
        raw_from(source, addr, &request)
    }

    /// The bytes of a request signed with `nonce`, with extra headers.
    pub fn signed_request(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
        nonce: &str,
        extra: &[(&str, &str)],
    ) -> Vec<u8> {
        let signed = self.sign_as(addr, method, path, body, &self.key_id, nonce);
        let mut headers: Vec<(&str, &str)> = signed
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        headers.push(("content-type", "application/json"));
        headers.extend_from_slice(extra);
        request_bytes(addr, method, path, &headers, body)
    }

    /// The register body for `name`.
    pub fn register_body(&self, name: &str) -> Vec<u8> {
        serde_json::json!({"name": name, "publicKey": self.public_b64, "maxConcurrent": 2,
                           "environments": ["shell"], "daemonVersion": "0.1.0"})
        .to_string()
        .into_bytes()
    }

    /// Registers as `name` with the join's token.
    pub fn register(&self, server: &TestServer, name: &str) -> Answer {
        let token = bearer(&server.join().token);
        self.send_with(
            server.addr(),
            "POST",
            "/v1/execution-contexts",
            &self.register_body(name),
            &self.nonce(),
            &[("authorization", &token)],
        )
    }

    /// Asks for a connect ticket: (ticket, session id).
    pub fn ticket(&self, server: &TestServer) -> (String, String) {
        self.ticket_at(server.addr())
    }

    /// Asks the server at `addr` for a connect ticket: (ticket, session id).
    pub fn ticket_at(&self, addr: SocketAddr) -> (String, String) {
        let answer = self.send_with(
            addr,
            "POST",
            "/v1/execution-contexts/connect-ticket",
            b"",
            &self.nonce(),
            &[],
        );
        assert_eq!(
            answer.status,
            200,
            "ticket: {}",
            String::from_utf8_lossy(&answer.body)
        );
        let json = answer.json();
        (
            json["ticket"].as_str().expect("ticket").to_owned(),
            json["sessionId"].as_str().expect("sessionId").to_owned(),
        )
    }
}

/// A WebSocket to the server, or the HTTP answer that refused it.
pub type Socket = tungstenite::WebSocket<TcpStream>;

/// Opens the daemon's WebSocket with `ticket`.
pub fn open_socket(addr: SocketAddr, ticket: &str) -> Result<Socket, (u16, Vec<u8>)> {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let url = format!("ws://{addr}/v1/execution-contexts/connect?ticket={ticket}");
    match tungstenite::client::client(url.as_str(), stream) {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            let status = response.status().as_u16();
            Err((status, response.into_body().unwrap_or_default()))
        }
        Err(e) => panic!("handshake failed: {e}"),
    }
}

/// The next text or binary message's bytes.
pub fn next_frame(socket: &mut Socket) -> Vec<u8> {
    loop {
        match socket.read().expect("a message") {
            tungstenite::Message::Text(t) => return t.as_bytes().to_vec(),
            tungstenite::Message::Binary(b) => return b.to_vec(),
            _ => continue,
        }
    }
}

/// The close code the server sends, reading past any other message; `None` when the socket
/// ends without one.
pub fn close_code(socket: &mut Socket) -> Option<u16> {
    loop {
        match socket.read() {
            Ok(tungstenite::Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

/// Speaks for a hand-written daemon on `socket`, whose `welcome` was read: a `hello` of
/// protocol 1 with no features, no runs held or results pending, two slots and the shell.
pub fn say_hello(socket: &mut Socket) {
    let hello = serde_json::json!({"type": "hello", "protocol": 1, "features": [],
        "maxConcurrent": 2, "heldRuns": [], "pendingResults": [], "environments": ["shell"]});
    socket
        .send(tungstenite::Message::text(hello.to_string()))
        .expect("hello");
}

/// The context `name` as the admin `auth` reads it, once it shows online (20 s at most).
pub fn online_context(addr: SocketAddr, auth: &[(&str, &str)], name: &str) -> Value {
    let path = format!("/v1/execution-contexts/{name}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let context = http(addr, "GET", &path, auth, b"").json();
        if context["online"] == true {
            return context;
        }
        assert!(Instant::now() < deadline, "never online: {context}");
        // The poll's pace: the context is read again.
        std::thread::sleep(Duration::from_millis(20));
    }
}
