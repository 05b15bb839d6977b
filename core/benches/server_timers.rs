//! The dispatcher's cost per heartbeat and per drain, with 1,000 and 100,000 connected
//! machines: one `status` frame from one machine, then `poll_output` until `Wait`. Both
//! must not grow with the number of machines (the 100k figure within 2x of the 1k one):
//! sessions' wake-ups live in a time-ordered table, not in a scan of every session.
//!
//! Run with `cargo bench -p outpost-core --bench server_timers`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use outpost_core::keyset::test_root;
use outpost_core::server::{ContextRecord, Input, Output, Server};
use outpost_core::session::SessionConfig;
use outpost_core::sim::now_at;
use outpost_core::time::Now;
use outpost_core::wire::{CommandsGrant, DaemonFrame, Egress, Environment, Grant, GrantLimits};

/// Visits every machine once per round in a scattered order (prime, so coprime with both counts).
const STRIDE: u64 = 7_919;

fn drain(server: &mut Server) -> usize {
    let mut n = 0;
    while !matches!(server.poll_output(), Output::Wait { .. }) {
        n += 1;
    }
    n
}

fn at(nanos: u64) -> Now {
    now_at(Duration::from_secs(1) + Duration::from_nanos(nanos))
}

/// A dispatcher with `machines` registered machines, each connected and past `hello`.
fn connected(machines: usize) -> Server {
    let grant = Grant {
        fs: Vec::new(),
        egress: Egress::None,
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits { max_concurrent: 2 },
        environments: None,
    };
    let hello = DaemonFrame::Hello {
        protocol: 1,
        features: Vec::new(),
        max_concurrent: 2,
        held_runs: Vec::new(),
        pending_results: Vec::new(),
        environments: vec![Environment::Shell],
        paused: false,
    }
    .to_json();
    let now = at(0);
    let mut server = Server::new(
        Arc::new(test_root::frame_signer()),
        SessionConfig::new("template"),
        now,
    );
    for i in 0..machines {
        let id = format!("ec_{i:06}");
        let record = ContextRecord {
            id: id.as_str().into(),
            name: id.clone(),
            operator: "u_operator".into(),
            operator_is_member: true,
            shared_with_all_members: false,
            opted_in: Vec::new(),
        };
        let register = Input::Register {
            record,
            grant: grant.clone(),
        };
        server.handle_input(now, register).expect("register");
        let mut random = [0u8; 48];
        random[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let ticket = server.issue_ticket(&id, random).expect("ticket");
        let conn = i as u64;
        let connect = Input::Connect {
            context_id: id.as_str().into(),
            conn,
            ticket: ticket.ticket.expose_secret(),
        };
        server.handle_input(now, connect).expect("connect");
        let frame = Input::Frame {
            conn,
            bytes: hello.clone(),
        };
        server.handle_input(now, frame).expect("hello");
        drain(&mut server);
        assert!(server.session(&id).is_some_and(|s| s.is_ready()));
    }
    server
}

fn server_timers(c: &mut Criterion) {
    let status = DaemonFrame::Status {
        slots_used: 0,
        slots_total: 2,
        draining: false,
        paused: false,
    }
    .to_json();
    let mut g = c.benchmark_group("server_timers");
    for machines in [1_000usize, 100_000] {
        let mut server = connected(machines);
        // Every heartbeat is a little later than the last, so the machine's silence timer
        // really moves; machines take turns, each once per round as periodic heartbeats do,
        // in an order unrelated to how they are stored (a prime stride coprime with the
        // count), so no heartbeat finds its machine in cache by registration order.
        let mut step = 0u64;
        let heartbeat = |server: &mut Server, step: &mut u64| {
            *step += 1;
            let conn = step.wrapping_mul(STRIDE) % machines as u64;
            let input = Input::Frame {
                conn,
                bytes: status.clone(),
            };
            server.handle_input(at(*step), input).expect("status");
        };
        // The input alone: the session is fed and its new wake-up goes into the table.
        g.bench_function(BenchmarkId::new("heartbeat", machines), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let started = std::time::Instant::now();
                    heartbeat(&mut server, &mut step);
                    spent += started.elapsed();
                    black_box(drain(&mut server));
                }
                spent
            })
        });
        // The drain alone, after a heartbeat: its outputs, then the next wake-up from the table.
        g.bench_function(BenchmarkId::new("drain", machines), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    heartbeat(&mut server, &mut step);
                    let started = std::time::Instant::now();
                    black_box(drain(&mut server));
                    spent += started.elapsed();
                }
                spent
            })
        });
        // Both, as a host's loop does them.
        g.bench_function(BenchmarkId::new("heartbeat_and_drain", machines), |b| {
            b.iter(|| {
                heartbeat(&mut server, &mut step);
                black_box(drain(&mut server));
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3));
    targets = server_timers
}
criterion_main!(benches);
