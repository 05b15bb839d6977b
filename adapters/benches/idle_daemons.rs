//! Idle connected daemons: the server's memory per connection and its CPU per heartbeat.
//!
//! The server runs in a process of its own (this binary re-executed with
//! `OUTPOST_IDLE_SERVER=<state folder>`), so its memory (`VmRSS`, `RssAnon` of
//! `/proc/<pid>/status`) and CPU time (`utime + stime` of `/proc/<pid>/stat`) are its alone.
//! The bench process holds the fake daemons: each has its own machine key and does what a
//! real daemon does up to idle (register, connect ticket, WebSocket, `welcome`, `hello`,
//! then a `status` every `heartbeatSecs`), over its own loopback source address (127.X.Y.Z)
//! so the per-address rate limits see one machine per address, as in a real fleet.
//!
//! Measured in one run, with 0, 1,000 and 10,000 daemons connected (`OUTPOST_IDLE_DAEMONS`
//! sets the larger count, 10,000 by default; the smaller is a tenth of it):
//!
//! - memory: RSS after start, after registering, after connecting; per connection as
//!   `(RSS(10k) − RSS(0)) / 10k` and `(RSS(10k) − RSS(1k)) / 9k` (printed: criterion times,
//!   it does not weigh bytes);
//! - heartbeat CPU over two natural heartbeat periods: server CPU divided by the `status`
//!   frames sent in the window (printed);
//! - heartbeat CPU in criterion (`idle_daemons/heartbeat_batch/N`): one iteration is one
//!   `status` from every daemon; the time is the server's CPU time, read after every daemon
//!   saw a pong sent after its `status` and a request through the dispatcher's queue (an
//!   empty `PUT /v1/chain`, its cost printed apart) was answered behind them, so a batch
//!   also carries one ping per daemon and that one request. The throughput is heartbeats
//!   per server CPU second.
//!
//! With `OUTPOST_IDLE_DATABASE=postgres` the server keeps its records in a PostgreSQL
//! database of a throwaway cluster the bench starts (`initdb` in a temporary folder), as a
//! node of a cluster does: the same figures, for one node over PostgreSQL.
//!
//! The kernel counts CPU time in clock ticks (10 ms at `CLK_TCK` 100): the windows are long
//! enough (tenths of a second of server CPU and more) for that to matter little. The bench
//! never changes the server's limits: the source addresses keep it under them.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use futures_util::{SinkExt as _, StreamExt as _};
use outpost_adapters::clock::wall_now;
use outpost_adapters::http::{RegisterRequest, SignedClient};
use outpost_adapters::tls::{ServerUrl, Trust};
use outpost_core::executor::Registry;
use outpost_core::httpsig::HttpRequest;
use outpost_core::join::Join;
use outpost_core::wire::{DaemonFrame, Environment, PROTOCOL_VERSION};
use outpost_server::{BlockingServer, ServeConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};

/// Set in the server's process: the state folder it serves.
const SERVER_ENV: &str = "OUTPOST_IDLE_SERVER";
/// `postgres`: the server keeps its records in a PostgreSQL database the bench starts.
const DATABASE_ENV: &str = "OUTPOST_IDLE_DATABASE";
/// Set in the server's process: the PostgreSQL database's URL, when there is one.
const DATABASE_URL_ENV: &str = "OUTPOST_IDLE_DATABASE_URL";
/// The larger daemon count (default 10,000).
const COUNT_ENV: &str = "OUTPOST_IDLE_DAEMONS";
/// Daemons setting up at once.
const IN_FLIGHT: usize = 64;
/// Attempts per request when the server asks to retry (429, 503) or the connection fails.
const ATTEMPTS: u32 = 6;
/// How long one HTTP exchange or handshake may take.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// The route a daemon registers on.
const REGISTER: &str = "/v1/execution-contexts";
/// The route a daemon asks for a ticket on.
const TICKET: &str = "/v1/execution-contexts/connect-ticket";

#[path = "../../server/tests/common/postgres.rs"]
mod postgres;

type Ws = async_tungstenite::WebSocketStream<async_tungstenite::tokio::TokioAdapter<TcpStream>>;

fn main() {
    if let Some(state) = std::env::var_os(SERVER_ENV) {
        serve(PathBuf::from(state));
        return;
    }
    let large: usize = std::env::var(COUNT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
        .max(10);
    let small = large / 10;
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    run(&mut criterion, small, large);
    criterion.final_summary();
}

/// The server's process: starts, tells the bench where it is, serves until stdin closes.
fn serve(state_dir: PathBuf) {
    let config = ServeConfig {
        listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        state_dir,
        tls: None,
        cloud: Vec::new(),
        public_url: None,
        rate_limits: Default::default(),
        terminal_idle: ServeConfig::DEFAULT_TERMINAL_IDLE,
        heartbeat: ServeConfig::DEFAULT_HEARTBEAT,
        limits: Default::default(),
        xterm_dir: None,
        database: match std::env::var(DATABASE_URL_ENV) {
            Ok(url) => outpost_server::Database::Postgres(url),
            Err(_) => outpost_server::Database::Sqlite,
        },
    };
    let server = BlockingServer::start(config, Registry::new(), 2).expect("the server starts");
    {
        let running = server.running();
        let mut out = std::io::stdout().lock();
        writeln!(out, "url {}", running.url).expect("stdout");
        writeln!(out, "join {}", running.join).expect("stdout");
        writeln!(out, "admin {}", running.admin_token).expect("stdout");
        out.flush().expect("stdout");
    }
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    server.shutdown();
}

/// The server's process, seen from the bench.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    addr: SocketAddr,
    url: ServerUrl,
    join: Join,
    admin: String,
    clock_ticks: u64,
}

/// The server's resident memory, in KiB.
#[derive(Debug, Clone, Copy)]
struct Memory {
    rss: u64,
    anon: u64,
}

impl Server {
    fn start(state: &std::path::Path) -> Server {
        let exe = std::env::current_exe().expect("the bench binary's path");
        let mut command = Command::new(exe);
        if std::env::var(DATABASE_ENV).as_deref() == Ok("postgres") {
            let name = format!("idle_{}", std::process::id());
            command.env(DATABASE_URL_ENV, postgres::shared().database(&name));
        }
        let mut child = command
            .env(SERVER_ENV, state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the server's process starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut field = |name: &str| -> String {
            let line = lines
                .next()
                .expect("the server prints its address")
                .expect("stdout");
            line.strip_prefix(name)
                .and_then(|v| v.strip_prefix(' '))
                .unwrap_or_else(|| panic!("expected {name}, got {line:?}"))
                .to_owned()
        };
        let url = field("url");
        let join = Join::parse(&field("join")).expect("the join parses");
        let admin = field("admin");
        let addr = url
            .trim_start_matches("http://")
            .parse()
            .expect("the URL is http://ip:port");
        let clock_ticks = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100);
        Server {
            pid: child.id(),
            stdin: child.stdin.take(),
            child,
            addr,
            url: ServerUrl::parse(&url).expect("the server's URL"),
            join,
            admin,
            clock_ticks,
        }
    }

    fn memory(&self) -> Memory {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("the server's /proc status");
        let kib = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Memory {
            rss: kib("VmRSS:"),
            anon: kib("RssAnon:"),
        }
    }

    /// The CPU time the server's process has used (user + system, threads that ended too).
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .expect("the server's /proc stat");
        // Fields after the command name, which ends with the last ')': state is field 3,
        // utime 14 and stime 15.
        let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
        Duration::from_nanos(ticks * 1_000_000_000 / self.clock_ticks)
    }

    fn stop(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("idle_daemons: the server did not stop within 30 s; killing it");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the daemons share with the bench.
#[derive(Default)]
struct Tally {
    /// `status` frames sent.
    statuses: AtomicU64,
    /// Pongs received.
    pongs: AtomicU64,
    pong: Notify,
    /// Daemons whose connection is open.
    open: AtomicUsize,
    /// Anything the server did other than succeed or stay quiet, by kind.
    events: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn note(&self, what: String) {
        *self
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(what)
            .or_default() += 1;
    }

    fn events(&self) -> BTreeMap<String, u64> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A fake daemon before it connects.
struct Machine {
    index: usize,
    ip: Ipv4Addr,
    client: SignedClient,
}

/// A loopback source address of its own for machine `index` (never 127.0.0.x).
fn source_ip(index: usize) -> Ipv4Addr {
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

async fn connect_from(ip: Ipv4Addr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(ip), 0))?;
    socket.connect(server).await
}

/// An HTTP answer: status, `retry-after` seconds, body.
struct Answer {
    status: u16,
    retry_after: Option<u64>,
    body: Vec<u8>,
}

/// One HTTP/1.1 request on a fresh connection from `ip` (`Connection: close`).
async fn http(
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

/// Everything one set-up step needs.
struct Ctx {
    server: SocketAddr,
    url: ServerUrl,
    token: String,
    admin: String,
    tally: Arc<Tally>,
}

impl Machine {
    fn new(index: usize, url: &ServerUrl) -> Machine {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("random bytes");
        Machine {
            index,
            ip: source_ip(index),
            client: SignedClient::new(url.clone(), seed, &Trust::public()),
        }
    }

    /// A signed request, retried while the server asks to (each refusal is tallied).
    async fn call(&self, ctx: &Ctx, path: &str, body: &[u8], bearer: bool) -> Answer {
        let route = if path == REGISTER {
            "register"
        } else {
            "ticket"
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let req = self
                .client
                .sign("POST", path, body, wall_now())
                .expect("the request signs");
            let token = bearer.then_some(ctx.token.as_str());
            let wait = match http(self.ip, ctx.server, path, &req, token).await {
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

    async fn register(&self, ctx: &Ctx) -> bool {
        let request = RegisterRequest {
            name: format!("idle-{}", self.index),
            public_key: self.client.public_key_b64(),
            max_concurrent: Some(2),
            environments: Some(vec![outpost_core::wire::Environment::Shell]),
            daemon_version: Some(env!("CARGO_PKG_VERSION").into()),
        };
        let body = serde_json::to_vec(&request).expect("the request serialises");
        let answer = self.call(ctx, REGISTER, &body, true).await;
        (200..300).contains(&answer.status)
    }

    async fn ticket(&self, ctx: &Ctx) -> Option<String> {
        let answer = self.call(ctx, TICKET, b"", false).await;
        if !(200..300).contains(&answer.status) {
            return None;
        }
        let json: serde_json::Value = serde_json::from_slice(&answer.body).ok()?;
        json["ticket"].as_str().map(str::to_owned)
    }

    /// Ticket, WebSocket, `welcome`, `hello`: the socket and the heartbeat period.
    async fn connect(&self, ctx: &Ctx) -> Option<(Ws, Duration)> {
        let ticket = self.ticket(ctx).await?;
        let url = ctx
            .url
            .ws_url(&format!("/v1/execution-contexts/connect?ticket={ticket}"));
        let opened = async {
            let stream = connect_from(self.ip, ctx.server)
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

fn text_message(bytes: Vec<u8>) -> Message {
    Message::Text(String::from_utf8(bytes).expect("frames are UTF-8").into())
}

fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// An idle daemon: a `status` every heartbeat, and one more (then a ping) on each beat of the
/// bench; a pong is counted.
async fn idle(mut ws: Ws, heartbeat: Duration, mut beat: watch::Receiver<u64>, tally: Arc<Tally>) {
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

/// What one [`Fleet::grow`] did.
struct Grown {
    registered: usize,
    registering: Duration,
    /// The server's memory once they were registered, before they connected.
    registered_memory: Memory,
    connected: usize,
    connecting: Duration,
}

/// The fake daemons and the runtime they run on.
struct Fleet {
    rt: tokio::runtime::Runtime,
    ctx: Arc<Ctx>,
    beat: watch::Sender<u64>,
    next_index: usize,
    heartbeat: Duration,
}

impl Fleet {
    fn new(server: &Server) -> Fleet {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let ctx = Arc::new(Ctx {
            server: server.addr,
            url: server.url.clone(),
            token: server.join.token.clone(),
            admin: server.admin.clone(),
            tally: Arc::new(Tally::default()),
        });
        let (beat, _) = watch::channel(0);
        Fleet {
            rt,
            ctx,
            beat,
            next_index: 0,
            heartbeat: Duration::from_secs(15),
        }
    }

    fn tally(&self) -> &Tally {
        &self.ctx.tally
    }

    /// Registers `count` more machines, then connects them.
    fn grow(&mut self, count: usize, server: &Server) -> Grown {
        let machines: Vec<Arc<Machine>> = (self.next_index..self.next_index + count)
            .map(|i| Arc::new(Machine::new(i, &self.ctx.url)))
            .collect();
        self.next_index += count;
        let ctx = self.ctx.clone();
        let started = Instant::now();
        let registered: Vec<Arc<Machine>> =
            self.rt.block_on(in_flight(machines, "registered", |m| {
                let ctx = ctx.clone();
                async move { m.register(&ctx).await.then_some(m) }
            }));
        let registering = started.elapsed();
        let mem = server.memory();
        eprintln!(
            "idle_daemons: {} registered in {:.1} s; server RSS {} KiB (anon {} KiB)",
            registered.len(),
            registering.as_secs_f64(),
            mem.rss,
            mem.anon
        );
        let started = Instant::now();
        let beat = self.beat.clone();
        let periods: Vec<Duration> =
            self.rt
                .block_on(in_flight(registered.clone(), "connected", |m| {
                    let ctx = ctx.clone();
                    let beat = beat.subscribe();
                    async move {
                        let (ws, heartbeat) = m.connect(&ctx).await?;
                        ctx.tally.open.fetch_add(1, Ordering::Relaxed);
                        tokio::spawn(idle(ws, heartbeat, beat, ctx.tally.clone()));
                        Some(heartbeat)
                    }
                }));
        if let Some(max) = periods.iter().max() {
            self.heartbeat = *max;
        }
        Grown {
            registered: registered.len(),
            registering,
            registered_memory: mem,
            connected: periods.len(),
            connecting: started.elapsed(),
        }
    }

    /// `outpost_connected_daemons` from `/metrics`.
    fn connected(&self) -> Option<u64> {
        let ctx = self.ctx.clone();
        self.rt.block_on(async move {
            let req = HttpRequest {
                method: "GET".into(),
                url: String::new(),
                headers: Vec::new(),
                body: Vec::new(),
            };
            let answer = http(Ipv4Addr::LOCALHOST, ctx.server, "/metrics", &req, None)
                .await
                .ok()?;
            let text = String::from_utf8_lossy(&answer.body).into_owned();
            text.lines()
                .find_map(|l| l.strip_prefix("outpost_connected_daemons "))
                .and_then(|v| v.trim().parse().ok())
        })
    }

    /// Waits until the server counts `count` daemons connected (at most 60 s).
    fn await_connected(&self, count: usize) -> Option<u64> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let seen = self.connected();
            if seen == Some(count as u64) || Instant::now() > deadline {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// An empty `PUT /v1/chain`: answered once the dispatcher took it, so after every frame
    /// queued before it.
    async fn barrier(ctx: &Ctx) {
        let req = HttpRequest {
            method: "PUT".into(),
            url: String::new(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: br#"{"chain":[]}"#.to_vec(),
        };
        match http(
            Ipv4Addr::LOCALHOST,
            ctx.server,
            "/v1/chain",
            &req,
            Some(&ctx.admin),
        )
        .await
        {
            Ok(answer) if answer.status == 200 => {}
            Ok(answer) => ctx.tally.note(format!(
                "barrier: HTTP {} {}",
                answer.status,
                error_code(&answer.body)
            )),
            Err(e) => ctx.tally.note(format!("barrier: {e}")),
        }
    }

    /// The server's CPU per [`Fleet::barrier`], over `count` of them.
    fn barrier_cost(&self, server: &Server, count: u32) -> Duration {
        let cpu = server.cpu();
        self.rt.block_on(async {
            for _ in 0..count {
                Self::barrier(&self.ctx).await;
            }
        });
        (server.cpu() - cpu) / count
    }

    /// One `status` from every open daemon, then waits until each saw its pong and a request
    /// went through the dispatcher's queue behind the frames.
    fn batch(&mut self) {
        let open = self.tally().open.load(Ordering::Relaxed) as u64;
        let target = self.tally().pongs.load(Ordering::Relaxed) + open;
        self.beat.send_modify(|g| *g += 1);
        let tally = self.ctx.tally.clone();
        let ctx = self.ctx.clone();
        self.rt.block_on(async move {
            let deadline = tokio::time::Instant::now() + IO_TIMEOUT;
            while tally.pongs.load(Ordering::Relaxed) < target {
                if tokio::time::timeout_at(deadline, tally.pong.notified())
                    .await
                    .is_err()
                {
                    tally.note("batch: pongs missing after 60 s".to_owned());
                    break;
                }
            }
            Self::barrier(&ctx).await;
        });
    }
}

/// Runs `step` over `items`, [`IN_FLIGHT`] at once, printing progress; keeps the `Some`s.
async fn in_flight<T, R, F, Fut>(items: Vec<T>, what: &str, step: F) -> Vec<R>
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
                    "idle_daemons: {n}/{total} {what} after {:.1} s",
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
        "idle_daemons: {}/{total} {what} in {:.1} s",
        out.len(),
        started.elapsed().as_secs_f64()
    );
    out
}

/// Server CPU per `status` over `periods` natural heartbeat periods.
fn natural_heartbeats(fleet: &Fleet, server: &Server, periods: u32) -> (Duration, u64) {
    let sent = fleet.tally().statuses.load(Ordering::Relaxed);
    let cpu = server.cpu();
    std::thread::sleep(fleet.heartbeat * periods);
    let cpu = server.cpu() - cpu;
    let sent = fleet.tally().statuses.load(Ordering::Relaxed) - sent;
    (cpu, sent)
}

/// KiB per item from `before` to `after`.
fn kib(after: u64, before: u64, items: usize) -> f64 {
    (after as f64 - before as f64) / items.max(1) as f64
}

fn per(cpu: Duration, count: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / count.max(1) as f64
}

/// Criterion: server CPU per batch of one `status` from every daemon, normalised to the
/// frames actually sent (a natural heartbeat can fall in the window). The CPU clock counts
/// in ticks (10 ms); a batch measured as zero counts as 1 ns so criterion can analyse a
/// small fleet.
fn bench_batches(criterion: &mut Criterion, fleet: &mut Fleet, server: &Server, open: usize) {
    let mut group = criterion.benchmark_group("idle_daemons");
    // Room for 10 batches at about 100 µs of server CPU per heartbeat.
    let room = Duration::from_micros(1_000 * open as u64).max(Duration::from_secs(4));
    group
        .sample_size(10)
        .measurement_time(room)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(open as u64));
    group.bench_function(BenchmarkId::new("heartbeat_batch", open), |b| {
        b.iter_custom(|iters| {
            let sent = fleet.tally().statuses.load(Ordering::Relaxed);
            let cpu = server.cpu();
            for _ in 0..iters {
                fleet.batch();
            }
            let cpu = server.cpu() - cpu;
            let sent = fleet.tally().statuses.load(Ordering::Relaxed) - sent;
            let nominal = iters * open as u64;
            cpu.mul_f64(nominal as f64 / sent.max(1) as f64)
                .max(Duration::from_nanos(1))
        })
    });
    group.finish();
}

fn run(criterion: &mut Criterion, small: usize, large: usize) {
    let state = std::env::temp_dir().join(format!("outpost-idle-daemons-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let started = Instant::now();
    let server = Server::start(&state);
    let mut fleet = Fleet::new(&server);
    let base = server.memory();
    eprintln!(
        "idle_daemons: server pid {} at {}; RSS with 0 daemons {} KiB (anon {} KiB)",
        server.pid, server.addr, base.rss, base.anon
    );
    let (idle_cpu, _) = natural_heartbeats(&fleet, &server, 1);
    eprintln!(
        "idle_daemons: server CPU with 0 daemons over {} s: {:.3} s",
        fleet.heartbeat.as_secs(),
        idle_cpu.as_secs_f64()
    );

    let mut figures = Vec::new();
    let mut memory = Vec::new();
    let mut grown = 0;
    for target in [small, large] {
        let setup = Instant::now();
        let before = memory.last().copied().unwrap_or((0, base));
        let step = fleet.grow(target - grown, &server);
        grown = target;
        let open = fleet.tally().open.load(Ordering::Relaxed);
        let seen = fleet.await_connected(open);
        let mem = server.memory();
        eprintln!(
            "idle_daemons: {target} daemons: {} registered ({:.1} s), {} connected \
             ({:.1} s); {open} open here, server counts {seen:?}; set-up {:.1} s; \
             server RSS {} KiB (anon {} KiB)",
            step.registered,
            step.registering.as_secs_f64(),
            step.connected,
            step.connecting.as_secs_f64(),
            setup.elapsed().as_secs_f64(),
            mem.rss,
            mem.anon,
        );
        let reg = step.registered_memory;
        eprintln!(
            "idle_daemons: from {} to {open}: registering {:.1} KiB per context (anon {:.1}), \
             connecting {:.1} KiB per connection (anon {:.1})",
            before.0,
            kib(reg.rss, before.1.rss, step.registered),
            kib(reg.anon, before.1.anon, step.registered),
            kib(mem.rss, reg.rss, step.connected),
            kib(mem.anon, reg.anon, step.connected),
        );
        memory.push((open, mem));
        let (cpu, sent) = natural_heartbeats(&fleet, &server, 2);
        eprintln!(
            "idle_daemons: {open} idle daemons, 2 heartbeat periods ({} s): server CPU {:.3} s \
             for {sent} status frames = {:.1} µs per heartbeat",
            (fleet.heartbeat * 2).as_secs(),
            cpu.as_secs_f64(),
            per(cpu, sent)
        );
        let barrier = fleet.barrier_cost(&server, 50);
        eprintln!(
            "idle_daemons: {open} idle daemons: one barrier request costs the server {:.1} µs \
             of CPU",
            barrier.as_secs_f64() * 1e6
        );
        let before = (server.cpu(), fleet.tally().statuses.load(Ordering::Relaxed));
        bench_batches(criterion, &mut fleet, &server, open);
        let burst_cpu = server.cpu() - before.0;
        let burst_sent = fleet.tally().statuses.load(Ordering::Relaxed) - before.1;
        figures.push((open, per(cpu, sent), per(burst_cpu, burst_sent)));
    }

    let still = fleet.connected();
    let total = started.elapsed();
    let [(n0, m1), (n1, m2)] = [memory[0], memory[1]];
    eprintln!("idle_daemons: ---- summary ----");
    eprintln!(
        "idle_daemons: RSS 0: {} KiB, {n0}: {} KiB, {n1}: {} KiB (anon {} / {} / {} KiB)",
        base.rss, m1.rss, m2.rss, base.anon, m1.anon, m2.anon
    );
    eprintln!(
        "idle_daemons: per connection (RSS({n1}) - RSS(0)) / {n1} = {:.1} KiB (anon {:.1} KiB)",
        kib(m2.rss, base.rss, n1),
        kib(m2.anon, base.anon, n1)
    );
    eprintln!(
        "idle_daemons: per connection (RSS({n1}) - RSS({n0})) / {} = {:.1} KiB (anon {:.1} KiB)",
        n1 - n0,
        kib(m2.rss, m1.rss, n1 - n0),
        kib(m2.anon, m1.anon, n1 - n0)
    );
    let [(a, natural_a, burst_a), (b, natural_b, burst_b)] = [figures[0], figures[1]];
    eprintln!(
        "idle_daemons: CPU per heartbeat, natural: {a}: {natural_a:.1} µs, {b}: {natural_b:.1} µs, \
         ratio {:.2}",
        natural_b / natural_a
    );
    eprintln!(
        "idle_daemons: CPU per heartbeat, batches: {a}: {burst_a:.1} µs, {b}: {burst_b:.1} µs, \
         ratio {:.2}",
        burst_b / burst_a
    );
    eprintln!(
        "idle_daemons: at the end {} open here, server counts {still:?}; whole run {:.1} s",
        fleet.tally().open.load(Ordering::Relaxed),
        total.as_secs_f64()
    );
    let events = fleet.tally().events();
    if events.is_empty() {
        eprintln!("idle_daemons: the server refused nothing and closed nothing");
    }
    for (what, count) in events {
        eprintln!("idle_daemons: {count} × {what}");
    }
    let Fleet { rt, beat, .. } = fleet;
    drop(beat);
    rt.shutdown_timeout(Duration::from_secs(5));
    server.stop();
    let _ = std::fs::remove_dir_all(&state);
}
