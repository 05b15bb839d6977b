//! Daemon start to `ready` — the process starts, unwraps its machine key, fetches the key set,
//! takes a ticket, opens the WebSocket and verifies `welcome` — against a bare start of the
//! same binary (`outpost version`), measured in the same run:
//!
//! - `bare_process/outpost_version`: spawn and wait for exit (the baseline);
//! - `daemon_ready/file_key`: a joined home sealed with the 0600 file key;
//! - `daemon_ready/passphrase`: a home sealed under an Argon2id passphrase key.
//!
//! Each daemon is killed once ready; the next start takes its home again. The server runs in
//! this process (the blocking host), with its connect rate limits raised so that no restart
//! waits out a 429. At the end it prints the medians of every start it timed (warm-up
//! included) and the ratio ready ÷ bare start for each wrapper.
//!
//! Then a whole `outpost execute` against ssh (issue 35: ≤ 0.2× ssh), with a daemon of the
//! file-key home kept running:
//!
//! - `cold_execute/outpost_execute`: `outpost execute` of a shell capability whose script is
//!   `exit 0`, the whole client process from exec to exit (the run in the daemon's sandbox,
//!   as the owner's default policy has it);
//! - `cold_execute/ssh_controlmaster_auto`: `ssh -o ControlMaster=auto 127.0.0.1 true` to an
//!   `sshd` this bench starts on a free loopback port with keys of its own (no master left
//!   behind between runs: each is a connection, a key exchange and a login, as a script's
//!   one-off `ssh host true` is). Without `/usr/sbin/sshd` (`openssh-server`) it says so and
//!   measures only the execute.
//!
//! The two alternate 100 times after criterion's figures and the medians' ratio is printed.
//!
//! Last, `idle_daemon` (printed): a daemon started again and left connected and idle for
//! three heartbeats (45 s at the server's default 15 s): its resident memory (target ≤ 8 MiB;
//! read every 100 ms over the last heartbeat, its mean, least and most, as an idle daemon
//! drops its code after each heartbeat and maps some again in the next), how often its
//! threads woke (context switches, from `/proc`), against what the heartbeat needs (a
//! `status` sent and a ping answered per heartbeat), and its threads' CPU per heartbeat.
//! Run with `cargo bench -p outpost --bench daemon_start`.
#![allow(missing_docs)]

use std::cell::RefCell;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use outpost_core::executor::Registry;
use outpost_server::{BlockingServer, RateLimits, ServeConfig};

const PASSPHRASE: &str = "a bench passphrase";

/// The `outpost` this bench starts: this build's, or the one `OUTPOST_BENCH_BINARY` names
/// (to alternate two builds in one session).
fn binary() -> PathBuf {
    std::env::var_os("OUTPOST_BENCH_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_outpost")),
        PathBuf::from,
    )
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-bench-start-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts `outpost daemon` on `home` and returns it once it logged `connected` (ready).
fn ready(home: &Path, join: Option<&str>, passphrase: Option<&str>) -> Child {
    let mut command = Command::new(binary());
    command
        .args(["daemon", "--home"])
        .arg(home)
        .env("OUTPOST_LOG", "info")
        .env("OUTPOST_KEYRING", "off")
        .env("OUTPOST_DAEMON_AUTO_UPDATE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(join) = join {
        // Each home is its own machine, named after its folder.
        let name = home.file_name().and_then(|n| n.to_str()).unwrap_or("box");
        command.args(["--join", join, "--name", name]);
    }
    match passphrase {
        Some(p) => command.env("OUTPOST_KEY_PASSPHRASE", p),
        None => command.env_remove("OUTPOST_KEY_PASSPHRASE"),
    };
    let mut child = command.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut said = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if line.contains(" connected session=") {
            return child;
        }
        said.push(line);
    }
    let status = child.wait();
    panic!(
        "the daemon exited before it was ready: {status:?}\n{}",
        said.join("\n")
    );
}

/// The median of `times`, in milliseconds (NaN when there are none).
fn median_ms(mut times: Vec<Duration>) -> f64 {
    times.sort();
    times
        .get(times.len() / 2)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn start(c: &mut Criterion) {
    let dir = temp_dir();
    let server = BlockingServer::start(
        ServeConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            state_dir: dir.join("server"),
            tls: None,
            cloud: Vec::new(),
            public_url: None,
            node_url: None,
            // A restart loop from one address is this bench's whole job: limits high enough
            // that no start waits on a 429, so the figure is the start's own cost.
            rate_limits: RateLimits::new(10_000.0, 10_000.0),
            terminal_idle: ServeConfig::DEFAULT_TERMINAL_IDLE,
            heartbeat: ServeConfig::DEFAULT_HEARTBEAT,
            limits: Default::default(),
            xterm_dir: None,
            database: outpost_server::Database::Sqlite,
        },
        Registry::new(),
        2,
    )
    .unwrap();
    let join = server.running().join.clone();
    let file_home = dir.join("file");
    let pass_home = dir.join("pass");
    stop(ready(&file_home, Some(&join), None));
    stop(ready(&pass_home, Some(&join), Some(PASSPHRASE)));

    let mut group = c.benchmark_group("daemon_start");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    // Every single start, by what was started, for the ratio printed at the end.
    let starts: RefCell<[Vec<Duration>; 3]> = RefCell::default();
    group.bench_function("bare_process/outpost_version", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let started = Instant::now();
                let status = Command::new(binary())
                    .arg("version")
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                let took = started.elapsed();
                assert!(status.success());
                starts.borrow_mut()[0].push(took);
                total += took;
            }
            total
        })
    });
    // Only start to ready is timed; killing the daemon afterwards is not.
    let timed = |home: &Path, passphrase: Option<&str>, iters: u64, slot: usize| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let started = Instant::now();
            let child = ready(home, None, passphrase);
            let took = started.elapsed();
            starts.borrow_mut()[slot].push(took);
            total += took;
            stop(child);
        }
        total
    };
    group.bench_function("daemon_ready/file_key", |b| {
        b.iter_custom(|iters| timed(&file_home, None, iters, 1))
    });
    group.bench_function("daemon_ready/passphrase", |b| {
        b.iter_custom(|iters| timed(&pass_home, Some(PASSPHRASE), iters, 2))
    });
    group.finish();
    let [bare, file, pass] = starts.into_inner().map(median_ms);
    println!(
        "daemon_start medians: bare start {bare:.2} ms; ready with the file key {file:.2} ms = {:.1}x bare; ready with the passphrase {pass:.2} ms = {:.1}x bare",
        file / bare,
        pass / bare
    );
    execute_against_ssh(c, &dir, &file_home, &server);
    idle_daemon(&file_home);
    server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `outpost execute` of a trivial shell capability against `ssh host true` (module docs).
fn execute_against_ssh(c: &mut Criterion, dir: &Path, home: &Path, server: &BlockingServer) {
    let daemon = ready(home, None, None);
    let cap = dir.join("nop");
    std::fs::create_dir_all(&cap).unwrap();
    std::fs::write(
        cap.join("manifest.yaml"),
        "name: nop\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
    )
    .unwrap();
    std::fs::write(cap.join("run.sh"), "exit 0\n").unwrap();
    let running = server.running();
    let context = home
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap()
        .to_owned();
    let execute = || {
        let mut command = Command::new(binary());
        command
            .arg("execute")
            .arg(&cap)
            .args(["--context", &context, "--server", &running.url])
            .env("OUTPOST_TOKEN", &running.admin_token);
        timed(command)
    };
    let sshd = Sshd::start(&dir.join("ssh"));
    let mut group = c.benchmark_group("cold_execute");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("outpost_execute", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| execute()).sum())
    });
    if let Some(sshd) = &sshd {
        group.bench_function("ssh_controlmaster_auto", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| sshd.true_once()).sum())
        });
    }
    group.finish();
    const ROUNDS: usize = 100;
    let (mut executes, mut sshs) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            executes.push(execute());
        }
        if let Some(sshd) = &sshd {
            sshs.push(sshd.true_once());
        }
        if round % 2 == 1 {
            executes.push(execute());
        }
    }
    let executed = median_ms(executes);
    match sshd {
        Some(_) => {
            let ssh = median_ms(sshs);
            println!(
                "cold_execute medians over {ROUNDS} alternated runs: outpost execute {executed:.2} ms, ssh -o ControlMaster=auto true {ssh:.2} ms: {:.3}x ssh",
                executed / ssh
            );
        }
        None => println!(
            "cold_execute median over {ROUNDS} runs: outpost execute {executed:.2} ms; no sshd here (/usr/sbin/sshd, Debian's openssh-server), so no ssh baseline"
        ),
    }
    stop(daemon);
}

/// `command` run to its end with no input, timed from exec to exit; it must succeed (else
/// its stderr says why).
fn timed(mut command: Command) -> Duration {
    let started = Instant::now();
    let out = command.stdin(Stdio::null()).output().unwrap();
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// The value of `name` (`VmRSS:`, `Name:` …) in a `/proc/<pid>/status` text, trimmed.
fn status_field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map_or("", str::trim)
}

/// Each thread of `pid` by name with its voluntary context switches so far (each one a
/// sleep that ended: a wake-up; a preemption is not counted).
fn switches(pid: u32) -> Vec<(String, u64)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        threads.push((
            format!(
                "{}/{}",
                status_field(&status, "Name:"),
                task.file_name().to_string_lossy()
            ),
            status_field(&status, "voluntary_ctxt_switches:")
                .parse()
                .unwrap_or(0),
        ));
    }
    threads
}

/// A connected daemon left idle for three heartbeats: its memory and its wake-ups (module
/// docs).
fn idle_daemon(home: &Path) {
    const HEARTBEATS: u64 = 3;
    const SAMPLE_EVERY: Duration = Duration::from_millis(100);
    let heartbeat = ServeConfig::DEFAULT_HEARTBEAT;
    let daemon = ready(home, None, None);
    let pid = daemon.id();
    // What starting left to do (the first status, the key set's save) is over by then.
    std::thread::sleep(Duration::from_secs(2));
    let before = switches(pid);
    let cpu_before = cpu_ns(pid);
    std::thread::sleep(heartbeat * (HEARTBEATS - 1) as u32);
    // The last heartbeat's whole period, its resident memory read every 100 ms: what the
    // daemon holds between heartbeats and while one is handled.
    let mut resident = Vec::new();
    let end = Instant::now() + heartbeat;
    while Instant::now() < end {
        resident.push(kib(pid, "VmRSS:"));
        std::thread::sleep(SAMPLE_EVERY);
    }
    let after = switches(pid);
    let cpu = cpu_ns(pid).saturating_sub(cpu_before);
    let mut woke = Vec::new();
    let mut total = 0;
    for (thread, count) in &after {
        let was = before
            .iter()
            .find(|(t, _)| t == thread)
            .map_or(0, |(_, c)| *c);
        if count > &was {
            woke.push(format!("{thread} {}", count - was));
            total += count - was;
        }
    }
    let mib = |k: u64| k as f64 / 1024.0;
    let mean = resident.iter().sum::<u64>() as f64 / resident.len().max(1) as f64 / 1024.0;
    println!(
        "idle_daemon over {} s ({HEARTBEATS} heartbeats of {} s): RSS {:.1} MiB at the end; over the last heartbeat (read every {} ms, {} reads) mean {mean:.1} MiB, least {:.1} MiB, most {:.1} MiB; peak since start {:.1} MiB; {} threads, {total} wake-ups = {:.1} per heartbeat ({}); CPU {:.2} ms per heartbeat",
        heartbeat.as_secs() * HEARTBEATS,
        heartbeat.as_secs(),
        mib(kib(pid, "VmRSS:")),
        SAMPLE_EVERY.as_millis(),
        resident.len(),
        mib(resident.iter().copied().min().unwrap_or(0)),
        mib(resident.iter().copied().max().unwrap_or(0)),
        mib(kib(pid, "VmHWM:")),
        after.len(),
        total as f64 / HEARTBEATS as f64,
        woke.join(", "),
        cpu as f64 / 1e6 / HEARTBEATS as f64
    );
    stop(daemon);
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS:`, `VmHWM:`) of the running daemon.
fn kib(pid: u32, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status_field(&status, name)
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// The time the threads of `pid` now running have spent on a CPU, in nanoseconds (the first
/// field of each `/proc/<pid>/task/*/schedstat`).
fn cpu_ns(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// An `sshd` on a free loopback port that takes one key of this bench's own, with a client
/// set up to use it; killed when dropped.
struct Sshd {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Sshd {
    /// Starts it in `dir`, or None when this machine has no `sshd`.
    fn start(dir: &Path) -> Option<Sshd> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() {
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        // Privilege separation needs its empty folder (root's to make; sshd says so if it
        // is missing).
        let _ = std::fs::create_dir_all("/run/sshd");
        for key in ["host", "client"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key))
                .status()
                .unwrap();
            assert!(made.success(), "ssh-keygen failed");
        }
        std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host\nAuthorizedKeysFile {dir}/authorized_keys\nPidFile {dir}/sshd.pid\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        let mut child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Up once it says it listens; what it logs after that is drained on a thread.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut said = Vec::new();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("Server listening on") => break,
                Some(Ok(line)) => said.push(line),
                _ => panic!("sshd stopped before it listened:\n{}", said.join("\n")),
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        let sshd = Sshd {
            child,
            port,
            dir: dir.to_owned(),
        };
        Some(sshd)
    }

    fn command(&self) -> Command {
        let mut command = Command::new("ssh");
        // No user's config, agent keys or lingering master: one connection, one login.
        command
            .args(["-F", "/dev/null", "-o", "ControlMaster=auto"])
            .args(["-o", "ControlPersist=no", "-o", "IdentitiesOnly=yes"])
            .arg("-o")
            .arg(format!("ControlPath={}/cm-%C", self.dir.display()))
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"])
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}/known_hosts",
                self.dir.display()
            ))
            .arg("-i")
            .arg(self.dir.join("client"))
            .args(["-p", &self.port.to_string(), "127.0.0.1", "true"])
            .stdout(Stdio::null());
        command
    }

    /// One `ssh … true`, timed from exec to exit.
    fn true_once(&self) -> Duration {
        timed(self.command())
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

criterion_group!(benches, start);
criterion_main!(benches);
