//! Idle daemons over three nodes of a cluster (docs/CLUSTER.md §9): each node's memory per
//! connection, and, after one node is killed with SIGKILL, the time until every one of its
//! daemons is served again by the two left, with the `NOTIFY` traffic that took.
//!
//! One PostgreSQL database (a throwaway cluster the bench starts with `initdb`), three
//! `outpost serve` processes over it (this binary re-executed; the second and third given
//! only the first's `keys.json`), and `OUTPOST_CLUSTER_DAEMONS` fake daemons (30,000 by
//! default) multiplexed on tokio, each from a loopback address of its own. The daemons of
//! each home node live in a fleet process of their own (this binary re-executed with
//! `OUTPOST_CLUSTER_FLEET`), because one process may hold only so many sockets (`ulimit -n`;
//! 20,000 on the machine this was written on), and they talk to the bench over their stdin
//! and stdout. The registrations are seeded through SQL — the rows one registration through the
//! first node wrote, copied with each machine's own id, name and key, each owned by its home
//! node (machine i's home is node i mod 3) — so the bench spends its time on what it
//! measures. Then:
//!
//! 1. memory: each node's RSS once it knows every machine, and once its daemons are
//!    connected; per connection as the difference over its daemons;
//! 2. idle: each node's CPU over one heartbeat period (every daemon sends its `status`);
//! 3. the kill: the third node is killed; its daemons see their sockets close and come back
//!    as the daemon does (its backoff: 250–500 ms, then doubling, equal jitter) through a
//!    load balancer that has taken the dead node out (half to each live node). Measured: the
//!    time until the live nodes' `/metrics` count every daemon connected again, each
//!    daemon's own time from the kill to its `welcome`, the live nodes' CPU over that time,
//!    and the notifications the database carried (a `LISTEN` on every channel the nodes
//!    use, counted by channel).
//!
//! The nodes, the daemons and PostgreSQL share this machine's cores: the figures are an
//! upper bound on what the nodes cost on machines of their own. Nothing here changes a
//! node's limits: the source addresses keep every daemon under the per-address ones.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use outpost_core::httpsig::HttpRequest;
use outpost_core::rng::SplitMix64;
use outpost_core::server::{ServerChange, ServerRecord};

#[path = "idle/daemon.rs"]
mod daemon;
#[path = "idle/fleet.rs"]
mod fleet;
#[path = "idle/node.rs"]
mod node;
#[path = "../../server/tests/common/postgres.rs"]
mod postgres;

use daemon::{Ctx, Machine, Tally, Target};
use node::{Memory, Server, kib, per};

/// Set in a fleet process: its spec ([`fleet::spec`]).
const FLEET_ENV: &str = "OUTPOST_CLUSTER_FLEET";
/// The number of daemons (30,000 by default; rounded down to a multiple of 3).
const COUNT_ENV: &str = "OUTPOST_CLUSTER_DAEMONS";
/// Nodes in the cluster.
const NODES: usize = 3;
/// The node killed.
const KILLED: usize = NODES - 1;
/// Rows per seeding statement.
const SEED_BATCH: usize = 1_000;
/// The channels the nodes notify each other on.
const CHANNELS: [&str; 4] = [
    "outpost_handoffs",
    "outpost_cancels",
    "outpost_ends",
    "outpost_owners",
];

fn main() {
    if node::serve_if_asked() {
        return;
    }
    if let Ok(spec) = std::env::var(FLEET_ENV) {
        fleet::run(&spec);
        return;
    }
    // `cargo bench` passes `--bench`; this bench has no filters.
    let count: usize = std::env::var(COUNT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000)
        .max(NODES)
        / NODES
        * NODES;
    run(count);
}

/// Machine `index`'s key seed in the run numbered `run` (the bench and the fleets derive the
/// same keys: the bench seeds their registrations, the fleets sign with them).
fn seed_of(run: u64, index: usize) -> [u8; 32] {
    let mut rng = SplitMix64::new(run ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut seed = [0u8; 32];
    for chunk in seed.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    seed
}

/// Notifications heard, by channel.
#[derive(Default)]
struct Heard {
    counts: Mutex<BTreeMap<String, u64>>,
}

impl Heard {
    fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A fleet process seen from the bench: its stdin, and the lines it prints.
struct Fleet {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Fleet {
    /// Starts the fleet of the daemons whose home is node `home`.
    fn start(home: usize, run: u64, count: usize, targets: &[Target]) -> Fleet {
        let exe = std::env::current_exe().expect("the bench binary's path");
        let mut child = std::process::Command::new(exe)
            .env(FLEET_ENV, fleet::spec(home, run, count, targets))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("a fleet process starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Fleet {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the fleet's stdin is open");
        writeln!(stdin, "{line}").expect("the fleet hears");
        stdin.flush().expect("the fleet hears");
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(900))
            .expect("the fleet answers")
    }

    /// How many daemons it connected, once it has.
    fn connected(&self) -> usize {
        let line = self.next_line();
        line.strip_prefix("connected ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("expected `connected N`, got {line:?}"))
    }

    /// Node `node` is killed: the fleet stops sending daemons there (answered once it has).
    fn dead(&mut self, node: usize) {
        self.tell(&format!("dead {node}"));
        assert_eq!(self.next_line(), "ok");
    }

    /// Each daemon's time back since the kill, the failed attempts, and the events.
    fn report(&mut self, back: &mut Vec<Duration>, events: &mut BTreeMap<String, u64>) -> usize {
        self.tell("report");
        let mut failed = 0;
        loop {
            let line = self.next_line();
            if line == "end" {
                return failed;
            }
            if let Some(secs) = line.strip_prefix("back ") {
                back.push(Duration::from_secs_f64(secs.parse().expect("seconds")));
            } else if let Some(n) = line.strip_prefix("failed ") {
                failed = n.parse().expect("a count");
            } else if let Some(rest) = line.strip_prefix("event ") {
                let (n, what) = rest.split_once(' ').expect("event N WHAT");
                *events.entry(what.to_owned()).or_default() += n.parse::<u64>().expect("N");
            }
        }
    }

    fn stop(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Listens on every channel the nodes use, counting what it hears.
async fn listen(url: String, heard: Arc<Heard>) -> tokio::task::JoinHandle<()> {
    let (client, mut connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("a listening connection to the bench's database");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message
                && tx.send(n.channel().to_owned()).is_err()
            {
                return;
            }
        }
    });
    let listens: Vec<String> = CHANNELS.iter().map(|c| format!("LISTEN {c};")).collect();
    client
        .batch_execute(&listens.concat())
        .await
        .expect("LISTEN on the nodes' channels");
    tokio::spawn(async move {
        let _client = client;
        let _driver = driver;
        while let Some(channel) = rx.recv().await {
            *heard
                .counts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(channel)
                .or_default() += 1;
        }
    })
}

/// The rows of machines `machines`, copied from the one registration `template` wrote, each
/// owned by its home node `owners[i % NODES]`, in batches of [`SEED_BATCH`].
async fn seed(url: &str, template: &str, machines: &[Machine], owners: &[String]) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("a seeding connection to the bench's database");
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT bytes FROM records WHERE kind = 'context' AND key = $1",
            &[&template],
        )
        .await
        .expect("the template machine's record");
    let template_record =
        ServerRecord::decode(row.get::<_, &[u8]>(0)).expect("the template's record decodes");
    for (batch, chunk) in machines.chunks(SEED_BATCH).enumerate() {
        let mut ids = Vec::with_capacity(chunk.len());
        let mut names = Vec::with_capacity(chunk.len());
        let mut key_ids = Vec::with_capacity(chunk.len());
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(chunk.len());
        let mut records: Vec<Vec<u8>> = Vec::with_capacity(chunk.len());
        let mut nodes = Vec::with_capacity(chunk.len());
        for machine in chunk {
            let mut raw = [0u8; 16];
            getrandom::fill(&mut raw).expect("random bytes");
            let id = format!("ec_{}", outpost_core::b64::encode(&raw));
            let name = format!("idle-{}", machine.index);
            let (key_id, public) = machine.identity();
            let mut record = template_record.clone();
            if let ServerChange::Context(row) = &mut record.change {
                row.id = id.as_str().into();
                row.name = name.clone();
            }
            key_ids.push(key_id);
            keys.push(public.to_vec());
            records.push(record.encode());
            nodes.push(owners[machine.index % NODES].clone());
            ids.push(id);
            names.push(name);
        }
        let statements = [
            "INSERT INTO contexts (id, name, operator, key_id, max_concurrent, environments,
                 daemon_version, registered_at, grant_json, grant_version, revoked,
                 shared_with_all_members, opted_in, operator_is_member, join_token)
             SELECT u.id, u.name, t.operator, u.key_id, t.max_concurrent, t.environments,
                 t.daemon_version, t.registered_at, t.grant_json, t.grant_version, t.revoked,
                 t.shared_with_all_members, t.opted_in, t.operator_is_member, t.join_token
             FROM contexts t, unnest($1::text[], $2::text[], $3::text[]) AS u(id, name, key_id)
             WHERE t.id = $4",
            "INSERT INTO machine_keys (key_id, context_id, public_key)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])",
            "INSERT INTO records (kind, key, seq, bytes, node_id, placed_on)
             SELECT 'context', u.id, nextval('records_seq'), u.bytes, u.node, NULL
             FROM unnest($1::text[], $2::bytea[], $3::text[]) AS u(id, bytes, node)",
            "INSERT INTO context_owner (context_id, node_id, epoch, changed)
             SELECT u.id, u.node, 1, nextval('context_owner_changes')
             FROM unnest($1::text[], $2::text[]) AS u(id, node)",
        ];
        let template = template.to_owned();
        client
            .execute(statements[0], &[&ids, &names, &key_ids, &template])
            .await
            .expect("seeding contexts");
        client
            .execute(statements[1], &[&key_ids, &ids, &keys])
            .await
            .expect("seeding machine keys");
        client
            .execute(statements[2], &[&ids, &records, &nodes])
            .await
            .expect("seeding records");
        client
            .execute(statements[3], &[&ids, &nodes])
            .await
            .expect("seeding owners");
        if (batch + 1) % 10 == 0 {
            eprintln!("idle_cluster: {} machines seeded", (batch + 1) * SEED_BATCH);
        }
    }
}

/// A node's own id, from its `GET /v1/nodes` (the entry marked `this`).
async fn node_id(server: &Server) -> String {
    let req = HttpRequest {
        method: "GET".into(),
        url: String::new(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    let answer = daemon::http(
        std::net::Ipv4Addr::LOCALHOST,
        server.addr,
        "/v1/nodes",
        &req,
        Some(&server.admin),
    )
    .await
    .expect("GET /v1/nodes");
    let nodes: outpost_core::api::Nodes =
        serde_json::from_slice(&answer.body).expect("the nodes' list");
    nodes
        .nodes
        .into_iter()
        .find(|n| n.this)
        .expect("the answering node lists itself")
        .node_id
}

/// The daemons the nodes at `addrs` count connected, summed (a node that does not answer
/// counts none).
async fn connected_sum(addrs: &[SocketAddr]) -> u64 {
    let mut sum = 0;
    for addr in addrs {
        sum += daemon::connected(*addr).await.unwrap_or(0);
    }
    sum
}

/// Polls the nodes at `addrs` until they count `count` daemons connected, at most `bound`;
/// how long it took, `None` when it did not happen.
async fn await_connected(addrs: &[SocketAddr], count: u64, bound: Duration) -> Option<Duration> {
    let started = Instant::now();
    loop {
        if connected_sum(addrs).await == count {
            return Some(started.elapsed());
        }
        if started.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at].as_secs_f64()
}

fn run(count: usize) {
    let run_id = u64::from(std::process::id()) << 20 ^ wall_secs();
    let base = std::env::temp_dir().join(format!("outpost-idle-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let started = Instant::now();
    let url = postgres::shared().database(&format!("idle_cluster_{}", std::process::id()));
    let states: Vec<_> = (0..NODES).map(|n| base.join(format!("node{n}"))).collect();
    let first = Server::start(&states[0], Some(&url));
    for state in &states[1..] {
        std::fs::create_dir_all(state).expect("a node's state folder");
        std::fs::copy(states[0].join("keys.json"), state.join("keys.json"))
            .expect("the root key copied to another node");
    }
    let mut servers = vec![first];
    for state in &states[1..] {
        servers.push(Server::start(state, Some(&url)));
    }
    let targets: Vec<Target> = servers
        .iter()
        .map(|s| Target {
            addr: s.addr,
            url: s.url.clone(),
        })
        .collect();
    let addrs: Vec<SocketAddr> = targets.iter().map(|t| t.addr).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let ctx = Ctx {
        token: servers[0].join.token.clone(),
        admin: servers[0].admin.clone(),
        tally: Arc::new(Tally::default()),
    };
    let heard = Arc::new(Heard::default());
    let _listener = rt.block_on(listen(url.clone(), heard.clone()));

    // One registration through the first node: the rows every seeded machine copies.
    let template = Machine::new(count);
    assert!(
        rt.block_on(template.register(&ctx, &targets[0])),
        "the template machine registers: {:?}",
        ctx.tally.events()
    );
    let owners: Vec<String> = rt.block_on(async {
        let mut ids = Vec::new();
        for server in &servers {
            ids.push(node_id(server).await);
        }
        ids
    });
    let template_id = postgres::psql(
        &url,
        &format!("SELECT id FROM contexts WHERE name = 'idle-{count}'"),
    );
    let machines: Vec<Machine> = (0..count)
        .map(|i| Machine::with_seed(i, seed_of(run_id, i)))
        .collect();
    let seeding = Instant::now();
    rt.block_on(seed(&url, template_id.trim(), &machines, &owners));
    drop(machines);
    eprintln!(
        "idle_cluster: {count} machines seeded through SQL in {:.1} s, owned by {owners:?}",
        seeding.elapsed().as_secs_f64()
    );
    // Each node learns every machine from the owners' table at its heartbeats (every 2 s):
    // its memory is read once that has had time to happen.
    std::thread::sleep(Duration::from_secs(10));
    let registered: Vec<Memory> = servers.iter().map(Server::memory).collect();

    // Every daemon connects to its home node, each node's from a fleet process of its own.
    let connecting = Instant::now();
    let mut fleets: Vec<Fleet> = (0..NODES)
        .map(|home| Fleet::start(home, run_id, count, &targets))
        .collect();
    let connected: usize = fleets.iter().map(Fleet::connected).sum();
    let connect_time = connecting.elapsed();
    let counted = rt.block_on(await_connected(
        &addrs,
        count as u64,
        Duration::from_secs(60),
    ));
    let connected_memory: Vec<Memory> = servers.iter().map(Server::memory).collect();
    eprintln!(
        "idle_cluster: {connected} of {count} connected in {:.1} s ({:.0} per second over \
         {NODES} nodes); the nodes count them all after {counted:?}",
        connect_time.as_secs_f64(),
        connected as f64 / connect_time.as_secs_f64()
    );
    let per_node = count / NODES;

    // One heartbeat period, idle.
    let heartbeat = Duration::from_secs(15);
    let cpu_before: Vec<Duration> = servers.iter().map(Server::cpu).collect();
    std::thread::sleep(heartbeat);
    let idle_cpu: Vec<Duration> = servers
        .iter()
        .zip(&cpu_before)
        .map(|(s, before)| s.cpu() - *before)
        .collect();

    // The kill.
    let heard_before = heard.snapshot();
    for fleet in &mut fleets {
        fleet.dead(KILLED);
    }
    let killed = servers.remove(KILLED);
    let live_addrs: Vec<SocketAddr> = (0..NODES)
        .filter(|n| *n != KILLED)
        .map(|n| addrs[n])
        .collect();
    let cpu_before: Vec<Duration> = servers.iter().map(Server::cpu).collect();
    let memory_before: Vec<Memory> = servers.iter().map(Server::memory).collect();
    let killed_at = Instant::now();
    killed.kill();
    let served = rt.block_on(await_connected(
        &live_addrs,
        count as u64,
        Duration::from_secs(600),
    ));
    let storm_time = killed_at.elapsed();
    let heard_after = heard.snapshot();
    let storm_cpu: Vec<Duration> = servers
        .iter()
        .zip(&cpu_before)
        .map(|(s, before)| s.cpu() - *before)
        .collect();
    let storm_memory: Vec<Memory> = servers.iter().map(Server::memory).collect();
    let mut back = Vec::new();
    let mut events = BTreeMap::new();
    let failed: usize = fleets
        .iter_mut()
        .map(|f| f.report(&mut back, &mut events))
        .sum();
    back.sort();

    eprintln!("idle_cluster: ---- summary ----");
    for (n, (before, after)) in registered.iter().zip(&connected_memory).enumerate() {
        eprintln!(
            "idle_cluster: node {n}: RSS {} KiB knowing {count} machines, {} KiB with {per_node} \
             connected: {:.1} KiB per connection (anon {:.1}); idle, one heartbeat period: \
             CPU {:.3} s, {:.1} µs per daemon",
            before.rss,
            after.rss,
            kib(after.rss, before.rss, per_node),
            kib(after.anon, before.anon, per_node),
            idle_cpu[n].as_secs_f64(),
            per(idle_cpu[n], per_node as u64),
        );
    }
    eprintln!(
        "idle_cluster: node {KILLED} killed with {per_node} daemons: every daemon served again \
         after {:.2} s ({}; {} daemons back, from the kill to their welcome: p50 {:.2} s, \
         p99 {:.2} s, max {:.2} s; {failed} connect attempts failed)",
        storm_time.as_secs_f64(),
        if served.is_some() {
            "counted by the live nodes' /metrics"
        } else {
            "NOT all: gave up after 600 s"
        },
        back.len(),
        quantile(&back, 0.5),
        quantile(&back, 0.99),
        quantile(&back, 1.0),
    );
    let taken_in = per_node / (NODES - 1);
    for (n, server_cpu) in storm_cpu.iter().enumerate() {
        eprintln!(
            "idle_cluster: live node {n}: CPU {:.2} s until served ({:.0} µs per daemon taken \
             in, about {taken_in}); RSS {} → {} KiB ({:.1} KiB per daemon taken in)",
            server_cpu.as_secs_f64(),
            per(*server_cpu, taken_in as u64),
            memory_before[n].rss,
            storm_memory[n].rss,
            kib(storm_memory[n].rss, memory_before[n].rss, taken_in),
        );
    }
    let mut notices = 0;
    for channel in CHANNELS {
        let before = heard_before.get(channel).copied().unwrap_or(0);
        let during = heard_after.get(channel).copied().unwrap_or(0) - before;
        notices += during;
        eprintln!(
            "idle_cluster: NOTIFY {channel}: {during} until served ({before} before the kill)"
        );
    }
    eprintln!(
        "idle_cluster: {notices} notifications in {:.1} s: {:.0} per second",
        storm_time.as_secs_f64(),
        notices as f64 / storm_time.as_secs_f64().max(0.001)
    );
    for (what, count) in ctx.tally.events().into_iter().chain(events) {
        eprintln!("idle_cluster: {count} × {what}");
    }
    eprintln!(
        "idle_cluster: whole run {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for fleet in fleets {
        fleet.stop();
    }
    for server in servers {
        server.stop();
    }
    rt.shutdown_timeout(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&base);
}

fn wall_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
