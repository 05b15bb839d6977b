//! One node over PostgreSQL against one node over its SQLite file, in the same run, on this
//! machine (docs/CLUSTER.md, step 1):
//!
//! - `one_node/execute_wasm/{sqlite,postgres}`: `POST /v1/executions` with `wait` for a
//!   trivial wasm capability through the real server and a tokio daemon, the server's records
//!   in each database (target: PostgreSQL ≤ 1.5× SQLite on the same disk).
//! - `one_node/executions_8x8/{sqlite,postgres}`: 512 executions through one server and 8
//!   daemons × 8 slots, submitted by 64 clients at once (executions per second).
//! - `cluster/execute_wasm/{local,handoff}` (docs/CLUSTER.md §3): two nodes over one
//!   PostgreSQL database, the daemon connected to node B; the same round trip submitted to B
//!   (local) and to A (handed to B, its end waking A's waiting request; target: ≤ 1.5×).
//! - `cluster/executions_8x8/{one_node,three_nodes}` (docs/CLUSTER.md §7): 512 executions by
//!   64 clients through 8 daemons × 8 slots over one PostgreSQL database, served by one node,
//!   then by three (client `t` submits to node `t % 3`, `box{i}` is connected to node
//!   `i % 3`, so two in three executions are handed to another node). Printed with it: the CPU
//!   time per execution of each node's threads (named `outpost-node-N`), of the database
//!   drivers' threads and of the whole process. Every node, daemon and client shares this
//!   machine's cores, so three nodes cannot serve more than one here: the figures say what a
//!   node costs per execution, which is what more machines would divide.
//! - Printed: PostgreSQL's own floor on this machine, `pgbench` with one client committing
//!   one-row transactions for 5 s (`latency average`); a round trip's server makes three such
//!   commits (execution created, run committed, result recorded), so
//!   `execute_wasm/postgres − execute_wasm/sqlite` is set beside three of them.
//!
//! The PostgreSQL cluster is the tests' throwaway one (`initdb` in a temporary folder,
//! `synchronous_commit` on, `fsync` on). Run with `cargo bench -p outpost --bench postgres`.
#![allow(missing_docs)]

mod common;

#[path = "../../server/tests/common/postgres.rs"]
mod postgres;

use std::sync::Arc;
use std::time::Duration;

use common::{Daemon, World};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use outpost_daemon::HostKind;
use outpost_server::Database;
use serde_json::json;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The two databases, each a new one.
fn databases() -> [(&'static str, Database); 2] {
    [
        ("sqlite", Database::Sqlite),
        ("postgres", fresh_postgres("bench")),
    ]
}

/// A new PostgreSQL database on the tests' cluster, named after `tag`.
fn fresh_postgres(tag: &str) -> Database {
    Database::Postgres(postgres::shared().database(&format!(
        "{tag}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    )))
}

fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("one_node");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(10));
    let body = json!({"capability": common::hello_capability(), "context": "box", "wait": true});
    for (name, database) in databases() {
        let world = World::new_on(&format!("pg-rt-{name}"), database);
        let _daemon = Daemon::start(
            HostKind::Tokio,
            world.dir.join("home"),
            "box",
            &world.join,
            2,
            common::wasm_registry(),
        );
        world.online("box");
        group.bench_function(format!("execute_wasm/{name}"), |b| {
            b.iter(|| {
                let e = world.post(&body);
                assert_eq!(e["status"], "exited", "{e}");
            })
        });
    }
    group.finish();
    pgbench_floor();
}

fn hand_off(c: &mut Criterion) {
    let mut group = c.benchmark_group("cluster");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(10));
    let [_, (_, database)] = databases();
    let a = World::new_on("pg-cluster-a", database);
    let b = a.another_node("pg-cluster-b");
    let _daemon = Daemon::start(
        HostKind::Tokio,
        b.dir.join("home"),
        "box",
        &b.join,
        2,
        common::wasm_registry(),
    );
    b.online("box");
    let body = json!({"capability": common::hello_capability(), "context": "box", "wait": true});
    // Node A learns that box is B's with its next heartbeat.
    let mut handed = false;
    for _ in 0..200 {
        if a.post(&body)["status"] == "exited" {
            handed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(handed, "node A never handed box's runs to node B");
    for (name, node) in [("local", &b), ("handoff", &a)] {
        group.bench_function(format!("execute_wasm/{name}"), |bench| {
            bench.iter(|| {
                let e = node.post(&body);
                assert_eq!(e["status"], "exited", "{e}");
            })
        });
    }
    group.finish();
}

fn throughput(c: &mut Criterion) {
    const BATCH: usize = 512;
    const CLIENTS: usize = 64;
    let mut group = c.benchmark_group("one_node");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(BATCH as u64));
    for (name, database) in databases() {
        let world = Arc::new(World::new_on(&format!("pg-tp-{name}"), database));
        let _daemons = common::eight_daemons(&world);
        group.bench_function(format!("executions_8x8/{name}"), |b| {
            b.iter(|| {
                common::run_batch(&world, BATCH, CLIENTS);
            })
        });
    }
    group.finish();
}

/// CPU time used so far, in nanoseconds: by each node's threads (`outpost-node-N`), by the
/// database drivers' threads (`outpost-database`, every node's) and by the whole process.
struct NodeCpu {
    nodes: Vec<u64>,
    drivers: u64,
    process: u64,
}

impl NodeCpu {
    fn now(nodes: usize) -> NodeCpu {
        let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
            .expect("getrusage");
        let process_us: u64 = [usage.user_time(), usage.system_time()]
            .iter()
            .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64)
            .sum();
        let mut sample = NodeCpu {
            nodes: vec![0; nodes],
            drivers: 0,
            process: process_us * 1_000,
        };
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            // The first field of schedstat: time spent on a CPU, in nanoseconds.
            let ns = std::fs::read_to_string(task.path().join("schedstat"))
                .unwrap_or_default()
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            let comm = comm.trim_end();
            if let Some(n) = comm
                .strip_prefix("outpost-node-")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n < nodes)
            {
                sample.nodes[n] += ns;
            } else if comm.starts_with("outpost-databas") {
                sample.drivers += ns;
            }
        }
        sample
    }
}

/// CPU per execution over a bench's iterations.
struct CpuPerExecution {
    name: &'static str,
    used: NodeCpu,
    executions: u64,
}

impl CpuPerExecution {
    fn new(name: &'static str, nodes: usize) -> Self {
        CpuPerExecution {
            name,
            used: NodeCpu {
                nodes: vec![0; nodes],
                drivers: 0,
                process: 0,
            },
            executions: 0,
        }
    }

    fn add(&mut self, before: &NodeCpu, after: &NodeCpu, executions: usize) {
        for (n, used) in self.used.nodes.iter_mut().enumerate() {
            *used += after.nodes[n].saturating_sub(before.nodes[n]);
        }
        self.used.drivers += after.drivers.saturating_sub(before.drivers);
        self.used.process += after.process.saturating_sub(before.process);
        self.executions += executions as u64;
    }

    fn report(&self) {
        let per = |ns: u64| ns as f64 / self.executions.max(1) as f64 / 1e3;
        let nodes: Vec<String> = self
            .used
            .nodes
            .iter()
            .enumerate()
            .map(|(n, ns)| format!("node {n} {:.0} µs", per(*ns)))
            .collect();
        let total: u64 = self.used.nodes.iter().sum();
        println!(
            "cluster/cpu_per_execution/{}: {} (all nodes {:.0} µs), database drivers {:.0} µs, whole process {:.0} µs, over {} executions",
            self.name,
            nodes.join(", "),
            per(total),
            per(self.used.drivers),
            per(self.used.process),
            self.executions
        );
    }
}

/// Throughput through one node and through three over one PostgreSQL database, and what each
/// node spends per execution (see the module's docs).
fn three_nodes(c: &mut Criterion) {
    const BATCH: usize = 512;
    const CLIENTS: usize = 64;
    let mut group = c.benchmark_group("cluster");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(BATCH as u64));
    let mut reports = Vec::new();
    for (name, count) in [("one_node", 1), ("three_nodes", 3)] {
        let first = Arc::new(World::new_named(
            &format!("pg-{name}-0"),
            fresh_postgres(name),
            "outpost-node-0",
        ));
        let mut nodes = vec![first.clone()];
        for n in 1..count {
            nodes.push(Arc::new(first.another_node_named(
                &format!("pg-{name}-{n}"),
                &format!("outpost-node-{n}"),
            )));
        }
        let daemons = common::eight_daemons_across(&nodes);
        let mut cpu = CpuPerExecution::new(name, count);
        group.bench_function(format!("executions_8x8/{name}"), |b| {
            b.iter(|| {
                let before = NodeCpu::now(count);
                common::run_batch_across(&nodes, BATCH, CLIENTS);
                cpu.add(&before, &NodeCpu::now(count), BATCH);
            })
        });
        drop(daemons);
        reports.push(cpu);
    }
    group.finish();
    for report in &reports {
        report.report();
    }
}

/// PostgreSQL's commit latency on this machine, by `pgbench` (one client, one-row
/// transactions, 5 s), printed.
fn pgbench_floor() {
    let pg = postgres::shared();
    let db = format!("floor_{}", std::process::id());
    pg.database(&db);
    pg.sql(&db, "CREATE TABLE IF NOT EXISTS t (v BIGINT NOT NULL)");
    let script = std::env::temp_dir().join(format!("outpost-pgbench-{}.sql", std::process::id()));
    std::fs::write(&script, "INSERT INTO t (v) VALUES (1);\n").unwrap();
    let out = std::process::Command::new(postgres::bin_dir().join("pgbench"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &pg.port.to_string(),
            "-U",
            "outpost",
        ])
        .args(["-n", "-c", "1", "-T", "5", "-f"])
        .arg(&script)
        .arg(&db)
        .output()
        .expect("pgbench runs");
    let _ = std::fs::remove_file(&script);
    let text = String::from_utf8_lossy(&out.stdout);
    let latency = text
        .lines()
        .find_map(|l| l.strip_prefix("latency average = "))
        .unwrap_or("(pgbench printed no latency)");
    println!("one_node/pgbench_one_row_commit: latency average = {latency} (one client, 5 s)");
}

criterion_group!(benches, round_trip, hand_off, throughput, three_nodes);
criterion_main!(benches);
