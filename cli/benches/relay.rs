//! Interactive terminals through the running system (issue 13): a server and a daemon in this
//! process on loopback, the daemon running a login shell on a real pty (PROTOCOL §4.5),
//! viewers on the server's viewer WebSocket (§11.5). Each figure beside its baseline from the
//! same run:
//!
//! - `relay_100mb`: 100 MB written on the terminal (`head -c 100000000 /dev/zero`, typed into
//!   the shell after `stty raw -echo`) read by one viewer, timed from the keystrokes to the
//!   viewer's 100,000,000th NUL byte, against the same bytes from a program on a portable-pty
//!   master read directly (`exec-pty/benches/pty.rs`'s raw loop, spawn included). Target:
//!   relay ≥ 0.8× raw.
//! - `keystroke_echo`: one byte sent by the viewer until the kernel's echo of it (`stty raw`,
//!   echo on, `cat > /dev/null`) comes back through server and daemon, against a round trip
//!   of one byte to a plain WebSocket echo server on a std thread. Criterion benches the
//!   mean; p50 and p99 over 1,000 keystrokes each and their ratios are printed.
//! - `fanout_20mb`: ten viewers join one terminal, one of which reads its `ready` … `live`
//!   and then nothing; the other nine each read 20 MB (`head -c 20000000`), timed until the
//!   last of them has all of it, against nine viewers and none stalled. The stalled viewer
//!   must be dropped by the relay's bounded per-viewer queue (`slow_viewer`, §11.5) and not
//!   slow the others: target stalled ÷ none ≈ 1. How many stalled viewers were dropped is
//!   printed.
//!
//! Each group keeps one terminal open for all its iterations (starting a shell is not what
//! is measured). Joining the viewers and waiting for the shell (`echo ready-$((6*7))`) are
//! outside the timed part. Criterion's groups run one variant after the other and the
//! machine's load drifts between them, so the ratios printed at the end come from pairs run
//! back to back in alternating order.
//!
//! `keystroke_echo/timeline` (printed, measured last): 500 keystrokes stage by stage
//! (`common/timeline.rs`), the viewer's socket, the relay, the signed `pty.input`, the
//! daemon's host, driver and typing thread, the terminal's echo read, `pty.output` back:
//! where the time above the raw echo goes.
//!
//! Run with `cargo bench -p outpost --bench relay` (about three minutes).
#![allow(missing_docs)]

mod common;

use std::io::Read as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use common::timeline::Timeline;
use common::{Daemon, keystroke, temp_dir};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use outpost_core::executor::Registry;
use outpost_core::grant::{ConfinementPolicy, LocalPolicy};
use outpost_core::join::Join;
use outpost_daemon::HostKind;
use outpost_exec_pty::PtyExecutor;
use outpost_server::BlockingServer;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use serde_json::{Value, json};
use tungstenite::Message;
use tungstenite::stream::MaybeTlsStream;

type Socket = common::ViewerSocket;

/// What `relay_100mb` moves per iteration.
const BYTES: u64 = 100_000_000;
/// The raw baseline: raw mode first, so the terminal translates nothing; then the bytes.
const RAW_WRITER: &str = "stty raw -echo; exec head -c 100000000 /dev/zero";
/// Typed once into a terminal kept for a whole group: raw mode, no echo.
const RAW_MODE: &str = "stty raw -echo\r";
/// The bytes, typed into that terminal's shell.
const RELAY_WRITER: &str = "head -c 100000000 /dev/zero\r";
/// What each of `fanout_20mb`'s readers gets per iteration.
const FANOUT_BYTES: u64 = 20_000_000;
const FANOUT_WRITER: &str = "head -c 20000000 /dev/zero\r";
/// The viewers that read in `fanout_20mb` (the stalled one comes on top).
const READERS: usize = 9;
/// Raw mode with the kernel's echo on, and a program that reads the keys.
const ECHO_SETUP: &str = "stty raw; echo ready-$((6*7)); cat > /dev/null\r";
/// Keystrokes per variant for the percentiles.
const KEYSTROKES: usize = 1_000;
/// Back-to-back pairs for the throughput and fan-out ratios.
const PAIRS: usize = 4;
const BUF: usize = 64 * 1024;
/// A read that waits longer than this fails the bench instead of hanging it.
const READ_LIMIT: Duration = Duration::from_secs(60);

/// The figures printed at the end, in the order they were measured.
static SUMMARY: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn say(line: String) {
    println!("{line}");
    SUMMARY.lock().unwrap().push(line);
}

// ---- the system: a server and a daemon with the pty executor

struct World {
    daemon: Option<Daemon>,
    server: Option<BlockingServer>,
    url: String,
    admin: String,
    dir: PathBuf,
    agent: ureq::Agent,
}

impl World {
    /// A server and a daemon `box` on it, online.
    fn new(tag: &str) -> World {
        let dir = temp_dir(tag);
        let server = BlockingServer::start(
            common::serve_config(dir.join("server"), Vec::new()),
            Registry::new(),
            2,
        )
        .unwrap();
        let r = server.running();
        let join = Join::parse(&r.join).unwrap();
        let mut world = World {
            daemon: None,
            url: r.url.clone(),
            admin: r.admin_token.clone(),
            server: Some(server),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(30)))
                .build()
                .new_agent(),
            dir,
        };
        let mut registry = Registry::new();
        registry.register(Box::new(PtyExecutor::default()));
        let home = world.dir.join("home");
        // The operator's terminals run as the owner, unsandboxed (the owner's policy allows
        // it): what is measured is the relay, and the sandbox's helper is the `outpost`
        // binary, not this bench's.
        world.daemon = Some(Daemon::start_with_policy(
            HostKind::Tokio,
            home,
            "box",
            &join,
            4,
            registry,
            LocalPolicy {
                confinement: ConfinementPolicy::OperatorMayOptOut,
                ..LocalPolicy::default()
            },
        ));
        world.online("box");
        world
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let auth = format!("Bearer {}", self.admin);
        let response = if method == "GET" {
            self.agent.get(&url).header("authorization", &auth).call()
        } else {
            self.agent
                .post(&url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(body.unwrap_or(Value::Null).to_string().as_bytes())
        }
        .unwrap();
        let status = response.status().as_u16();
        let text = response.into_body().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Polls the context until its daemon is connected: nothing announces it.
    fn online(&self, name: &str) {
        for _ in 0..1000 {
            if self
                .call("GET", &format!("/v1/execution-contexts/{name}"), None)
                .1["online"]
                == true
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{name} never came online");
    }

    /// Opens a terminal on `box`: its id and the first viewer's ticket.
    fn open_terminal(&self) -> (String, String) {
        let (status, opened) = self.call(
            "POST",
            "/v1/execution-contexts/box/terminals",
            Some(json!({"cols": 80, "rows": 24})),
        );
        assert_eq!(status, 201, "{opened}");
        let field = |k: &str| opened[k].as_str().expect(k).to_owned();
        (field("terminalId"), field("ticket"))
    }

    /// Another ticket for `terminal`.
    fn ticket(&self, terminal: &str) -> String {
        let (status, issued) =
            self.call("POST", &format!("/v1/terminals/{terminal}/tickets"), None);
        assert_eq!(status, 201, "{issued}");
        issued["ticket"].as_str().expect("a ticket").to_owned()
    }

    /// A viewer joined to `terminal` with `ticket`, past its replay.
    fn viewer(&self, terminal: &str, ticket: &str) -> Viewer {
        let base = self.url.strip_prefix("http").expect("an http URL");
        let url = format!("ws{base}/v1/terminals/{terminal}/connect?ticket={ticket}");
        let mut viewer = Viewer::new(connect(&url));
        viewer.until_text("live");
        viewer
    }

    /// A terminal whose shell has answered, and its first viewer.
    fn terminal(&self) -> (String, Viewer) {
        let (terminal, ticket) = self.open_terminal();
        let mut viewer = self.viewer(&terminal, &ticket);
        viewer.sync();
        (terminal, viewer)
    }

    /// A terminal in raw mode with no echo, kept for a whole group, and its first viewer.
    fn raw_terminal(&self) -> (String, Viewer) {
        let (terminal, mut viewer) = self.terminal();
        viewer.type_keys(RAW_MODE);
        viewer.sync();
        (terminal, viewer)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        drop(self.daemon.take());
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn connect(url: &str) -> Socket {
    let (socket, _) = tungstenite::connect(url).expect("the socket opens");
    if let MaybeTlsStream::Plain(tcp) = socket.get_ref() {
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(READ_LIMIT)).unwrap();
    }
    socket
}

/// What a viewer reads next.
enum Shown {
    Bytes(tungstenite::Bytes),
    Text(Value),
    Closed(u16),
}

/// A viewer socket and what it has shown since the last match.
struct Viewer {
    socket: Socket,
    screen: Vec<u8>,
    texts: Vec<Value>,
}

impl Viewer {
    fn new(socket: Socket) -> Viewer {
        Viewer {
            socket,
            screen: Vec::new(),
            texts: Vec::new(),
        }
    }

    fn next(&mut self) -> Shown {
        loop {
            match self.socket.read() {
                Ok(Message::Binary(bytes)) => return Shown::Bytes(bytes),
                Ok(Message::Text(text)) => {
                    return Shown::Text(serde_json::from_str(&text).expect("a JSON text message"));
                }
                Ok(Message::Close(frame)) => {
                    return Shown::Closed(frame.map(|f| u16::from(f.code)).unwrap_or(1005));
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    panic!(
                        "nothing for {READ_LIMIT:?}; screen: {:?}; messages: {:?}",
                        String::from_utf8_lossy(&self.screen),
                        self.texts
                    )
                }
                Err(_) => return Shown::Closed(1006),
            }
        }
    }

    fn until_text(&mut self, kind: &str) -> Value {
        loop {
            match self.next() {
                Shown::Bytes(bytes) => self.screen.extend_from_slice(&bytes),
                Shown::Text(text) if text["type"] == kind => return text,
                Shown::Text(text) => self.texts.push(text),
                Shown::Closed(code) => panic!("closed ({code}) before {kind}: {:?}", self.texts),
            }
        }
    }

    /// Reads until the screen shows `needle`, and forgets the screen.
    fn until_shown(&mut self, needle: &[u8]) {
        while !self.screen.windows(needle.len()).any(|w| w == needle) {
            match self.next() {
                Shown::Bytes(bytes) => self.screen.extend_from_slice(&bytes),
                Shown::Text(text) => self.texts.push(text),
                Shown::Closed(code) => panic!(
                    "closed ({code}) before {:?}; screen: {:?}; messages: {:?}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&self.screen),
                    self.texts
                ),
            }
        }
        self.screen.clear();
    }

    /// Reads until `n` NUL bytes (the writer's output; nothing else on the screen is NUL).
    fn until_zeros(&mut self, n: u64) {
        let mut zeros = 0u64;
        while zeros < n {
            match self.next() {
                Shown::Bytes(bytes) => {
                    zeros += bytes.iter().fold(0u64, |z, &b| z + u64::from(b == 0));
                }
                Shown::Text(text) => self.texts.push(text),
                Shown::Closed(code) => panic!("closed ({code}) after {zeros} of {n} bytes"),
            }
        }
        assert_eq!(zeros, n, "more NUL bytes than written");
    }

    /// Reads to the socket's end; the texts and the close code.
    fn until_end(mut self) -> (Vec<Value>, u16) {
        loop {
            match self.next() {
                Shown::Bytes(_) => {}
                Shown::Text(text) => self.texts.push(text),
                Shown::Closed(code) => return (self.texts, code),
            }
        }
    }

    /// Closes the socket (the viewer leaves; the terminal goes on) and reads to its end.
    fn leave(mut self) {
        let _ = self.socket.close(None);
        let _ = self.until_end();
    }

    /// Reads what a stalled viewer was sent: `true` when the relay dropped it as a slow
    /// viewer (4002 after `slow_viewer`), `false` when it was sent all `n` bytes.
    fn dropped_before(mut self, n: u64) -> bool {
        let mut zeros = 0u64;
        loop {
            match self.next() {
                Shown::Bytes(bytes) => {
                    zeros += bytes.iter().fold(0u64, |z, &b| z + u64::from(b == 0));
                    if zeros >= n {
                        return false;
                    }
                }
                Shown::Text(text) => self.texts.push(text),
                Shown::Closed(code) => {
                    return code == 4002
                        && self
                            .texts
                            .iter()
                            .any(|t| t["type"] == "closed" && t["reason"] == "slow_viewer");
                }
            }
        }
    }

    /// Waits for the shell's answer to a command typed now: what was shown before is read
    /// and forgotten (the answer, `ready-42`, is not in the command's echo).
    fn sync(&mut self) {
        self.type_keys("echo ready-$((6*7))\r");
        self.until_shown(b"ready-42");
    }

    fn type_keys(&mut self, keys: &str) {
        self.socket
            .send(Message::Binary(keys.as_bytes().to_vec().into()))
            .expect("keys sent");
    }
}

/// A WebSocket echo server on std threads.
fn echo_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let Ok(mut ws) = tungstenite::accept(stream) else {
                    return;
                };
                while let Ok(m) = ws.read() {
                    if (m.is_text() || m.is_binary()) && ws.send(m).is_err() {
                        break;
                    }
                }
            });
        }
    });
    format!("ws://{addr}/echo")
}

/// The CPU time this process's live threads (server, daemon, viewers) have used: the first
/// field of each `/proc/self/task/*/schedstat`, in nanoseconds.
fn cpu_time() -> Duration {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

fn rate(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / took.as_secs_f64() / 1e6
}

// ---- relay_100mb

/// The baseline: the writer on a portable-pty master, read directly.
fn raw_once() -> Duration {
    let start = Instant::now();
    let pair = native_pty_system()
        .openpty(PtySize::default())
        .expect("a pty");
    let mut command = CommandBuilder::new("/bin/sh");
    command.args(["-c", RAW_WRITER]);
    let mut child = pair.slave.spawn_command(command).expect("spawn");
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().expect("reader");
    let mut buf = vec![0u8; BUF];
    let mut total = 0u64;
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    child.wait().expect("wait");
    let took = start.elapsed();
    assert_eq!(total, BYTES);
    took
}

/// The writer typed into the terminal's shell, read by its viewer: from the keystrokes to the
/// last byte.
fn relay_once(viewer: &mut Viewer) -> Duration {
    viewer.sync();
    let start = Instant::now();
    viewer.type_keys(RELAY_WRITER);
    viewer.until_zeros(BYTES);
    start.elapsed()
}

/// With `OUTPOST_LOG` set (`debug`, `outpost_server=debug`, …), the server's and the
/// daemon's logs go to stderr.
fn log() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("OUTPOST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
}

fn throughput(c: &mut Criterion) {
    log();
    let world = World::new("rtp");
    let (_, mut viewer) = world.raw_terminal();
    let mut group = c.benchmark_group("relay_100mb");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(BYTES));
    group.bench_function("raw_portable_pty_master", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| raw_once()).sum())
    });
    group.bench_function("relay_one_viewer", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| relay_once(&mut viewer)).sum())
    });
    group.finish();
    let (mut raw, mut relay, mut relay_cpu) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut relay_measured = |viewer: &mut Viewer| {
        let cpu = cpu_time();
        relay += relay_once(viewer);
        relay_cpu += cpu_time().saturating_sub(cpu);
    };
    for pair in 0..PAIRS {
        if pair % 2 == 0 {
            raw += raw_once();
            relay_measured(&mut viewer);
        } else {
            relay_measured(&mut viewer);
            raw += raw_once();
        }
    }
    let bytes = BYTES * PAIRS as u64;
    let cores = relay_cpu.as_secs_f64() / relay.as_secs_f64();
    let (raw, relay) = (rate(bytes, raw), rate(bytes, relay));
    say(format!(
        "relay_100mb ({PAIRS} interleaved pairs): raw pty master {raw:.0} MB/s, relay to one \
         viewer {relay:.0} MB/s, relay/raw = {:.3} (target >= 0.8); server + daemon + viewer \
         threads kept {cores:.2} cores busy while relaying",
        relay / raw
    ));
}

// ---- keystroke_echo

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |p: usize| samples[(samples.len() * p / 100).min(samples.len() - 1)];
    (at(50), at(99))
}

fn keystrokes(c: &mut Criterion) {
    let mut raw = connect(&echo_server());
    let world = World::new("rks");
    let (terminal, mut viewer) = world.terminal();
    viewer.type_keys(ECHO_SETUP);
    viewer.until_shown(b"ready-42");
    let mut group = c.benchmark_group("keystroke_echo");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("raw_websocket", |b| b.iter(|| keystroke(&mut raw)));
    group.bench_function("relay_server_daemon", |b| {
        b.iter(|| keystroke(&mut viewer.socket))
    });
    group.finish();
    // Blocks of each in turn, so drift in the machine's load falls on both.
    let (mut raw_samples, mut relay_samples) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        raw_samples.extend((0..KEYSTROKES / 10).map(|_| keystroke(&mut raw)));
        relay_samples.extend((0..KEYSTROKES / 10).map(|_| keystroke(&mut viewer.socket)));
    }
    let (raw50, raw99) = percentiles(raw_samples);
    let (relay50, relay99) = percentiles(relay_samples);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    say(format!(
        "keystroke_echo ({KEYSTROKES} each): raw websocket p50 {:.0} us p99 {:.0} us; relay \
         p50 {:.0} us p99 {:.0} us; relay/raw p50 {:.1}x p99 {:.1}x",
        us(raw50),
        us(raw99),
        us(relay50),
        us(relay99),
        us(relay50) / us(raw50),
        us(relay99) / us(raw99)
    ));
    // Where a keystroke's time goes, stage by stage (after every timed figure: collecting
    // costs time itself, and the collector stays installed for the rest of the process).
    if let Some(mut timeline) = Timeline::install("viewer.read") {
        for _ in 0..50 {
            keystroke(&mut viewer.socket);
        }
        for _ in 0..KEYSTROKES / 2 {
            timeline.record(|| {
                keystroke(&mut viewer.socket);
            });
        }
        say(timeline.report("keystroke_echo/timeline"));
    }
    viewer
        .socket
        .send(Message::Text(json!({"type": "close"}).to_string().into()))
        .expect("close sent");
    let (texts, code) = viewer.until_end();
    assert_eq!(code, 1000, "terminal {terminal} closed: {texts:?}");
}

// ---- fanout_20mb

/// How many stalled viewers the relay dropped as `slow_viewer`, of how many.
static STALLS: Mutex<(u32, u32)> = Mutex::new((0, 0));

/// Nine viewers (and, when `stalled`, a tenth that never reads past `live`) join `terminal`:
/// from the keystrokes until the last of the nine has all the bytes. The viewers leave after.
fn fanout_once(world: &World, terminal: &str, stalled: bool) -> Duration {
    let mut readers: Vec<Viewer> = (0..READERS)
        .map(|_| world.viewer(terminal, &world.ticket(terminal)))
        .collect();
    let stalled = stalled.then(|| world.viewer(terminal, &world.ticket(terminal)));
    readers[0].sync();
    let go = Arc::new(Barrier::new(READERS + 1));
    let threads: Vec<_> = readers
        .into_iter()
        .enumerate()
        .map(|(i, mut viewer)| {
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                let start = (i == 0).then(|| {
                    let start = Instant::now();
                    viewer.type_keys(FANOUT_WRITER);
                    start
                });
                viewer.until_zeros(FANOUT_BYTES);
                let done = Instant::now();
                viewer.leave();
                (start, done)
            })
        })
        .collect();
    go.wait();
    let ends: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let start = ends[0].0.expect("the first viewer typed");
    let done = ends.iter().map(|e| e.1).max().unwrap();
    if let Some(viewer) = stalled {
        let dropped = viewer.dropped_before(FANOUT_BYTES);
        let mut stalls = STALLS.lock().unwrap();
        stalls.0 += u32::from(dropped);
        stalls.1 += 1;
    }
    done - start
}

fn fanout(c: &mut Criterion) {
    let world = World::new("rfo");
    let (terminal, first) = world.raw_terminal();
    first.leave();
    let mut group = c.benchmark_group("fanout_20mb");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(FANOUT_BYTES * READERS as u64));
    group.bench_function("9_viewers", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| fanout_once(&world, &terminal, false))
                .sum()
        })
    });
    group.bench_function("9_viewers_1_stalled", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| fanout_once(&world, &terminal, true))
                .sum()
        })
    });
    group.finish();
    let (mut none, mut one) = (Duration::ZERO, Duration::ZERO);
    for pair in 0..PAIRS {
        if pair % 2 == 0 {
            none += fanout_once(&world, &terminal, false);
            one += fanout_once(&world, &terminal, true);
        } else {
            one += fanout_once(&world, &terminal, true);
            none += fanout_once(&world, &terminal, false);
        }
    }
    let per = |d: Duration| d.as_secs_f64() * 1e3 / PAIRS as f64;
    let (dropped, stalled) = *STALLS.lock().unwrap();
    say(format!(
        "fanout_20mb ({PAIRS} interleaved pairs): 9 viewers {:.0} ms, 9 viewers + 1 stalled \
         {:.0} ms, stalled/none = {:.3} (target ~1); the stalled viewer was dropped as \
         slow_viewer in {dropped} of {stalled} runs",
        per(none),
        per(one),
        one.as_secs_f64() / none.as_secs_f64()
    ));
}

fn summary(_: &mut Criterion) {
    println!("\nrelay bench summary:");
    for line in SUMMARY.lock().unwrap().iter() {
        println!("  {line}");
    }
}

criterion_group!(benches, throughput, fanout, keystrokes, summary);
criterion_main!(benches);
