//! A fake daemon for the idle benches: its own machine key, its own loopback source address
//! (127.X.Y.Z, so each node's per-address limits see one machine per address, as in a real
//! fleet), and what a real daemon does up to idle — register, connect ticket, WebSocket,
//! `welcome`, `hello`, then a `status` every `heartbeatSecs` — over raw HTTP/1.1 and a
//! WebSocket on tokio.
//!
//! It owns those exchanges and the tally of what the servers did. It never retries what a
//! server refused for good, and never measures anything: the benches read the servers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use futures_util::{SinkExt as _, StreamExt as _};
use outpost_adapters::clock::wall_now;
use outpost_adapters::http::{RegisterRequest, SignedClient};
use outpost_adapters::tls::{ServerUrl, Trust};
use outpost_core::httpsig::HttpRequest;
use outpost_core::wire::{DaemonFrame, Environment, PROTOCOL_VERSION};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};

/// Daemons setting up at once.
pub const IN_FLIGHT: usize = 64;
/// Attempts per request when the server asks to retry (429, 503) or the connection fails.
const ATTEMPTS: u32 = 6;
/// How long one HTTP exchange or handshake may take.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// The route a daemon registers on.
const REGISTER: &str = "/v1/execution-contexts";
/// The route a daemon asks for a ticket on.
const TICKET: &str = "/v1/execution-contexts/connect-ticket";

/// A daemon's WebSocket.
pub type Ws = async_tungstenite::WebSocketStream<async_tungstenite::tokio::TokioAdapter<TcpStream>>;

/// A server (a node) the daemons reach.
#[derive(Clone)]
pub struct Target {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its URL, which signed requests name (`@authority`).
    pub url: ServerUrl,
}

/// What the daemons share with the bench.
#[derive(Default)]
pub struct Tally {
    /// `status` frames sent.
    pub statuses: AtomicU64,
    /// Pongs received.
    pub pongs: AtomicU64,
    /// Told on each pong.
    pub pong: Notify,
    /// Daemons whose connection is open.
    pub open: AtomicUsize,
    /// Anything a server did other than succeed or stay quiet, by kind.
    events: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    /// Counts one `what`.
    pub fn note(&self, what: String) {
        *self
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(what)
            .or_default() += 1;
    }

    /// Everything counted so far, by kind.
    pub fn events(&self) -> BTreeMap<String, u64> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A fake daemon: its key and its source address.
pub struct Machine {
    /// Its number in the fleet (its name is `idle-<index>`).
    pub index: usize,
    /// Its own loopback source address.
    pub ip: Ipv4Addr,
    seed: [u8; 32],
    /// A signing client per node it has spoken to (a signature names the node's authority).
    clients: Mutex<Vec<(SocketAddr, Arc<SignedClient>)>>,
}

/// A loopback source address of its own for machine `index` (never 127.0.0.x).
pub fn source_ip(index: usize) -> Ipv4Addr {
    let a = 1 + index / (250 * 250);
    let b = 1 + (index / 250) % 250;
    let c = 1 + index % 250;
    Ipv4Addr::new(
        127,
        u8::try_from(a).expect("under 15 million machines"),
        u8::try_from(b).expect("b < 251"),
        u8::try_from(c).expect("c < 251"),
    )
}

/// A TCP connection to `server` from source address `ip`.
pub async fn connect_from(ip: Ipv4Addr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(ip), 0))?;
    socket.connect(server).await
}

/// An HTTP answer: status, `retry-after` seconds, body.
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// `retry-after`, in seconds.
    pub retry_after: Option<u64>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// One HTTP/1.1 request on a fresh connection from `ip` (`Connection: close`).
pub async fn http(
    ip: Ipv4Addr,
    server: SocketAddr,
    path: &str,
    req: &HttpRequest,
    bearer: Option<&str>,
) -> Result<Answer, String> {
    let exchange = async {
        let mut stream = connect_from(ip, server)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut head = format!(
            "{} {path} HTTP/1.1\r\nhost: {server}\r\nconnection: close\r\ncontent-length: {}\r\n",
            req.method,
            req.body.len()
        );
        for (name, value) in &req.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(token) = bearer {
            head.push_str(&format!("authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&req.body);
        stream
            .write_all(&bytes)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| format!("read: {e}"))?;
        parse_answer(&raw)
    };
    tokio::time::timeout(IO_TIMEOUT, exchange)
        .await
        .map_err(|_| "timed out".to_owned())?
}

fn parse_answer(raw: &[u8]) -> Result<Answer, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no header end in {} bytes", raw.len()))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("no status line")?;
    let mut retry_after = None;
    let mut chunked = false;
    for (name, value) in lines.filter_map(|l| l.split_once(':')) {
        let value = value.trim();
        if name.eq_ignore_ascii_case("retry-after") {
            retry_after = value.parse().ok();
        }
        if name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..end]).trim(), 16)
                .unwrap_or(0);
            if size == 0 || rest.len() < end + 2 + size {
                break;
            }
            out.extend_from_slice(&rest[end + 2..end + 2 + size]);
            rest = rest.get(end + 2 + size + 2..).unwrap_or_default();
        }
        body = out;
    }
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

/// Everything one set-up step needs besides its node.
pub struct Ctx {
    /// The join token (every node of a cluster takes it).
    pub token: String,
    /// The admin token.
    pub admin: String,
    /// What the daemons tell the bench.
    pub tally: Arc<Tally>,
}

impl Machine {
    /// Machine `index`, with a fresh key.
    pub fn new(index: usize) -> Machine {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("random bytes");
        Machine::with_seed(index, seed)
    }

    /// Machine `index`, whose key is made from `seed`.
    pub fn with_seed(index: usize, seed: [u8; 32]) -> Machine {
        Machine {
            index,
            ip: source_ip(index),
            seed,
            clients: Mutex::new(Vec::new()),
        }
    }

    /// Its machine key's id (`mk_…`) and public key, as a registration stores them.
    pub fn identity(&self) -> (String, [u8; 32]) {
        let public =
            outpost_core::sign::Ed25519Signer::from_seed("machine", self.seed).verifying_key();
        (
            outpost_core::join::machine_key_id(&public),
            public.to_bytes(),
        )
    }

    /// Its signing client for `target`, made on first use.
    pub fn client(&self, target: &Target) -> Arc<SignedClient> {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, client)) = clients.iter().find(|(addr, _)| *addr == target.addr) {
            return client.clone();
        }
        let client = Arc::new(SignedClient::new(
            target.url.clone(),
            self.seed,
            &Trust::public(),
        ));
        clients.push((target.addr, client.clone()));
        client
    }

    /// A signed request, retried while the server asks to (each refusal is tallied).
    async fn call(
        &self,
        ctx: &Ctx,
        target: &Target,
        path: &str,
        body: &[u8],
        bearer: bool,
    ) -> Answer {
        let route = if path == REGISTER {
            "register"
        } else {
            "ticket"
        };
        let client = self.client(target);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let req = client
                .sign("POST", path, body, wall_now())
                .expect("the request signs");
            let token = bearer.then_some(ctx.token.as_str());
            let wait = match http(self.ip, target.addr, path, &req, token).await {
                Ok(answer) if (200..300).contains(&answer.status) => return answer,
                Ok(answer) => {
                    ctx.tally.note(format!(
                        "{route}: HTTP {} {}",
                        answer.status,
                        error_code(&answer.body)
                    ));
                    if attempt >= ATTEMPTS || !matches!(answer.status, 429 | 503) {
                        return answer;
                    }
                    Duration::from_secs(answer.retry_after.unwrap_or(1).clamp(1, 10))
                }
                Err(e) => {
                    ctx.tally.note(format!("{route}: {e}"));
                    if attempt >= ATTEMPTS {
                        return Answer {
                            status: 0,
                            retry_after: None,
                            body: Vec::new(),
                        };
                    }
                    Duration::from_secs(1)
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Registers through `target` with the join token.
    pub async fn register(&self, ctx: &Ctx, target: &Target) -> bool {
        let client = self.client(target);
        let request = RegisterRequest {
            name: format!("idle-{}", self.index),
            public_key: client.public_key_b64(),
            max_concurrent: Some(2),
            environments: Some(vec![Environment::Shell]),
            daemon_version: Some(env!("CARGO_PKG_VERSION").into()),
        };
        let body = serde_json::to_vec(&request).expect("the request serialises");
        let answer = self.call(ctx, target, REGISTER, &body, true).await;
        (200..300).contains(&answer.status)
    }

    async fn ticket(&self, ctx: &Ctx, target: &Target) -> Option<String> {
        let answer = self.call(ctx, target, TICKET, b"", false).await;
        if !(200..300).contains(&answer.status) {
            return None;
        }
        let json: serde_json::Value = serde_json::from_slice(&answer.body).ok()?;
        json["ticket"].as_str().map(str::to_owned)
    }

    /// Ticket, WebSocket, `welcome`, `hello` at `target`: the socket and the heartbeat
    /// period; `None` (tallied) when any of it failed.
    pub async fn connect(&self, ctx: &Ctx, target: &Target) -> Option<(Ws, Duration)> {
        let ticket = self.ticket(ctx, target).await?;
        let url = target
            .url
            .ws_url(&format!("/v1/execution-contexts/connect?ticket={ticket}"));
        let opened = async {
            let stream = connect_from(self.ip, target.addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let (mut ws, _) = async_tungstenite::tokio::client_async(url.as_str(), stream)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            let welcome = loop {
                match ws.next().await {
                    Some(Ok(Message::Text(text))) => break text,
                    Some(Ok(Message::Close(frame))) => {
                        return Err(format!(
                            "closed before welcome: {:?}",
                            frame.map(|f| u16::from(f.code))
                        ));
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(format!("before welcome: {e}")),
                    None => return Err("ended before welcome".to_owned()),
                }
            };
            let welcome: serde_json::Value =
                serde_json::from_str(welcome.as_str()).map_err(|e| format!("welcome: {e}"))?;
            if welcome["type"] != "welcome" {
                return Err(format!("first frame is {}", welcome["type"]));
            }
            let heartbeat = welcome["heartbeatSecs"].as_u64().unwrap_or(15).max(1);
            let hello = DaemonFrame::Hello {
                protocol: PROTOCOL_VERSION,
                features: Vec::new(),
                max_concurrent: 2,
                held_runs: Vec::new(),
                pending_results: Vec::new(),
                environments: vec![Environment::Shell],
                paused: false,
            };
            ws.send(text_message(hello.to_json()))
                .await
                .map_err(|e| format!("hello: {e}"))?;
            Ok((ws, Duration::from_secs(heartbeat)))
        };
        match tokio::time::timeout(IO_TIMEOUT, opened).await {
            Ok(Ok(open)) => Some(open),
            Ok(Err(e)) => {
                ctx.tally.note(format!("connect: {e}"));
                None
            }
            Err(_) => {
                ctx.tally.note("connect: timed out".to_owned());
                None
            }
        }
    }
}

/// A text frame of `bytes` (frames are JSON).
pub fn text_message(bytes: Vec<u8>) -> Message {
    Message::Text(String::from_utf8(bytes).expect("frames are UTF-8").into())
}

/// The `error.code` of an error body, or nothing.
pub fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// An idle daemon until its socket closes: a `status` every heartbeat, and one more (then a
/// ping) on each beat of the bench; a pong is counted. [`Tally::open`] counts it down as it
/// returns.
pub async fn idle(
    mut ws: Ws,
    heartbeat: Duration,
    mut beat: watch::Receiver<u64>,
    tally: Arc<Tally>,
) {
    let status = DaemonFrame::Status {
        slots_used: 0,
        slots_total: 2,
        draining: false,
        paused: false,
    }
    .to_json();
    let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => {
                if let Err(e) = ws.send(text_message(status.clone())).await {
                    tally.note(format!("idle: send failed: {e}"));
                    break;
                }
                tally.statuses.fetch_add(1, Ordering::Relaxed);
            }
            changed = beat.changed() => {
                if changed.is_err() {
                    break;
                }
                timer.reset();
                let generation = *beat.borrow_and_update();
                let sent = async {
                    ws.feed(text_message(status.clone())).await?;
                    ws.send(Message::Ping(generation.to_be_bytes().to_vec().into())).await
                };
                if let Err(e) = sent.await {
                    tally.note(format!("idle: send failed: {e}"));
                    break;
                }
                tally.statuses.fetch_add(1, Ordering::Relaxed);
            }
            message = ws.next() => match message {
                Some(Ok(Message::Pong(_))) => {
                    tally.pongs.fetch_add(1, Ordering::Relaxed);
                    tally.pong.notify_one();
                }
                Some(Ok(Message::Close(frame))) => {
                    tally.note(format!("idle: server closed ({:?})", frame.map(|f| u16::from(f.code))));
                    break;
                }
                Some(Ok(Message::Text(text))) => {
                    let json: serde_json::Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                    tally.note(format!("idle: server sent {}", json["type"]));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tally.note(format!("idle: socket failed: {e}"));
                    break;
                }
                None => {
                    tally.note("idle: socket ended".to_owned());
                    break;
                }
            }
        }
    }
    tally.open.fetch_sub(1, Ordering::Relaxed);
}

/// Runs `step` over `items`, [`IN_FLIGHT`] at once, printing progress; keeps the `Some`s.
pub async fn in_flight<T, R, F, Fut>(items: Vec<T>, what: &str, step: F) -> Vec<R>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = Option<R>> + Send + 'static,
{
    let total = items.len();
    let what = what.to_owned();
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for item in items {
        let permit = gate
            .clone()
            .acquire_owned()
            .await
            .expect("the gate stays open");
        let fut = step(item);
        let done = done.clone();
        let what = what.clone();
        tasks.push(tokio::spawn(async move {
            let out = fut.await;
            drop(permit);
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(1000) {
                eprintln!(
                    "idle: {n}/{total} {what} after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
            }
            out
        }));
    }
    let mut out = Vec::with_capacity(total);
    for task in tasks {
        if let Some(r) = task.await.expect("a set-up task") {
            out.push(r);
        }
    }
    eprintln!(
        "idle: {}/{total} {what} in {:.1} s",
        out.len(),
        started.elapsed().as_secs_f64()
    );
    out
}

/// `outpost_connected_daemons` from `target`'s `/metrics`.
pub async fn connected(target: SocketAddr) -> Option<u64> {
    let req = HttpRequest {
        method: "GET".into(),
        url: String::new(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    let answer = http(Ipv4Addr::LOCALHOST, target, "/metrics", &req, None)
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("outpost_connected_daemons "))
        .and_then(|v| v.trim().parse().ok())
}
