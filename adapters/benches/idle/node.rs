//! A server (one node) in a process of its own, for the idle benches: the bench binary
//! re-executed with `OUTPOST_IDLE_SERVER=<state folder>` (and the database's URL in
//! `OUTPOST_IDLE_DATABASE_URL` when it keeps its records in PostgreSQL), so its memory
//! (`VmRSS`, `RssAnon` of `/proc/<pid>/status`) and its CPU time (`utime + stime` of
//! `/proc/<pid>/stat`) are its alone.
//!
//! It owns starting, reading, stopping and killing that process. It never holds a daemon
//! and never changes the server's limits: the fake daemons' source addresses keep them
//! under the per-address limits, as a real fleet's do.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use outpost_adapters::tls::ServerUrl;
use outpost_core::executor::Registry;
use outpost_core::join::Join;
use outpost_server::{BlockingServer, ServeConfig};

/// Set in the server's process: the state folder it serves.
pub const SERVER_ENV: &str = "OUTPOST_IDLE_SERVER";
/// Set in the server's process: the PostgreSQL database's URL, when there is one.
const DATABASE_URL_ENV: &str = "OUTPOST_IDLE_DATABASE_URL";

/// Runs the server's side when this process is one (`OUTPOST_IDLE_SERVER` is set): returns
/// `true` once it has served, `false` in the bench's own process.
pub fn serve_if_asked() -> bool {
    match std::env::var_os(SERVER_ENV) {
        Some(state) => {
            serve(PathBuf::from(state));
            true
        }
        None => false,
    }
}

/// The server's process: starts, tells the bench where it is, serves until stdin closes.
fn serve(state_dir: PathBuf) {
    let config = ServeConfig {
        listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        state_dir,
        tls: None,
        cloud: Vec::new(),
        public_url: None,
        node_url: None,
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
pub struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its process id.
    pub pid: u32,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its URL (`http://ip:port`).
    pub url: ServerUrl,
    /// Its join string (the join token is shared by every node of a cluster).
    pub join: Join,
    /// Its admin token.
    pub admin: String,
    clock_ticks: u64,
}

/// A process's resident memory, in KiB.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `VmRSS`.
    pub rss: u64,
    /// `RssAnon`: the heap and stacks, without mapped files.
    pub anon: u64,
}

impl Server {
    /// Starts a server over `state`, keeping its records in the PostgreSQL database at
    /// `database` when given (its SQLite file otherwise); returns once it listens.
    pub fn start(state: &Path, database: Option<&str>) -> Server {
        let exe = std::env::current_exe().expect("the bench binary's path");
        let mut command = Command::new(exe);
        if let Some(url) = database {
            command.env(DATABASE_URL_ENV, url);
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

    /// Its resident memory now.
    pub fn memory(&self) -> Memory {
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
    pub fn cpu(&self) -> Duration {
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

    /// Kills it with SIGKILL (no shutdown: its sockets close as the kernel reaps it).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it as an operator does (stdin closes: it shuts down), killing it after 30 s.
    pub fn stop(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("idle: the server did not stop within 30 s; killing it");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// KiB per item from `before` to `after`.
pub fn kib(after: u64, before: u64, items: usize) -> f64 {
    (after as f64 - before as f64) / items.max(1) as f64
}

/// Microseconds of `cpu` per one of `count`.
pub fn per(cpu: Duration, count: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / count.max(1) as f64
}
