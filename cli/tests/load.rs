//! Load with crashes: 1,000 executions over 20 daemons (real processes) while daemons are
//! killed with SIGKILL and restarted at random. Counted at the end: runs started twice,
//! results that reached a daemon's outbox but never the server, results recorded twice,
//! executions that never ended — each must be 0.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{Daemon, Server, outbox, shell_capability, temp_dir, wait_for, wait_for_explained};

const DAEMONS: usize = 20;
const EXECUTIONS: usize = 1_000;
const KILLS: usize = 40;

/// A small deterministic generator (the test's own randomness, seeded).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

#[test]
fn a_thousand_executions_over_twenty_daemons_with_kills_lose_and_repeat_nothing() {
    let dir = temp_dir("load");
    let server = Server::start(&dir.join("server"), 0);
    let log = dir.join("log");
    let homes: Vec<_> = (0..DAEMONS).map(|i| dir.join(format!("home{i}"))).collect();
    let mut daemons: Vec<Daemon> = homes
        .iter()
        .enumerate()
        .map(|(i, home)| Daemon::start(home, &format!("box{i}"), Some(&server.join), "tokio"))
        .collect();
    for (i, daemon) in daemons.iter().enumerate() {
        let name = format!("box{i}");
        wait_for_explained(
            &format!("{name} online"),
            || {
                let (status, ctx) =
                    server.api("GET", &format!("/v1/execution-contexts/{name}"), None);
                (status == 200 && ctx["online"] == true).then_some(())
            },
            || format!("{name}'s log ends:\n{}", daemon.log_tail(20)),
        );
    }
    let started = Instant::now();
    let submit = {
        let (url, admin, log) = (server.url.clone(), server.admin.clone(), log.clone());
        std::thread::spawn(move || {
            (0..EXECUTIONS)
                .map(|n| {
                    let script = format!(
                        "echo start {n} >> {log}\nsleep 0.0{}\necho end {n} >> {log}\necho {n}\n",
                        n % 10,
                        log = log.display()
                    );
                    let body = serde_json::json!({
                        "capability": shell_capability(&format!("load-{n}"), &script),
                        "context": format!("box{}", n % DAEMONS),
                        "whenOffline": "queue",
                    });
                    let (status, e) =
                        common::api(&url, &admin, "POST", "/v1/executions", Some(body));
                    assert!(status == 201 || status == 202, "{status} {e}");
                    (n, e["executionId"].as_str().expect("id").to_owned())
                })
                .collect::<Vec<_>>()
        })
    };
    // Kill a random daemon with SIGKILL every 150 ms; restart it at once on the same home.
    // Pacing, time itself: the kills fall all through the submissions.
    let mut rng = Rng(0x5eed);
    let mut in_outbox_at_kill: BTreeSet<String> = BTreeSet::new();
    for _ in 0..KILLS {
        std::thread::sleep(Duration::from_millis(150));
        let i = rng.below(DAEMONS);
        daemons[i].kill();
        in_outbox_at_kill.extend(outbox(&homes[i]));
        daemons[i] = Daemon::start(&homes[i], &format!("box{i}"), None, "tokio");
    }
    let ids = submit.join().expect("submissions");
    // Every execution ends.
    let mut ends: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (_, id) in &ids {
        let e = wait_for(&format!("{id} to end"), || {
            let (_, e) = server.api("GET", &format!("/v1/executions/{id}?waitSecs=30"), None);
            (!matches!(e["status"].as_str(), Some("pending" | "running") | None)).then_some(e)
        });
        ends.insert(id.clone(), e);
    }
    let elapsed = started.elapsed();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let mut starts: BTreeMap<usize, usize> = BTreeMap::new();
    let mut finished: BTreeSet<usize> = BTreeSet::new();
    for line in text.lines() {
        let mut parts = line.split(' ');
        match (parts.next(), parts.next().and_then(|n| n.parse().ok())) {
            (Some("start"), Some(n)) => *starts.entry(n).or_default() += 1,
            (Some("end"), Some(n)) => {
                finished.insert(n);
            }
            _ => {}
        }
    }
    let reruns = starts.values().filter(|c| **c > 1).count();
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let mut bogus = 0;
    let mut lost_after_finish = 0;
    for (n, id) in &ids {
        let e = &ends[id];
        let status = e["status"].as_str().unwrap_or("?").to_owned();
        if status == "exited" && (e["stdout"] != format!("{n}\n") || !finished.contains(n)) {
            bogus += 1;
        }
        if status == "lost" && finished.contains(n) {
            lost_after_finish += 1;
        }
        *by_status.entry(status).or_default() += 1;
    }
    // A result that reached an outbox must reach the server.
    let outbox_lost: Vec<_> = in_outbox_at_kill
        .iter()
        .filter(|run_id| {
            let exec = run_id.rsplit_once('.').map_or(run_id.as_str(), |(e, _)| e);
            ends.get(exec).is_some_and(|e| e["status"] != "exited")
        })
        .collect();
    // Every daemon delivers what it holds.
    for (i, daemon) in daemons.iter_mut().enumerate() {
        daemon.kill();
        // (Killed now only to read the file; a live daemon's outbox is checked the same way.)
        let left = outbox(&homes[i]);
        assert!(
            left.iter().all(|r| {
                let exec = r.rsplit_once('.').map_or(r.as_str(), |(e, _)| e);
                ends.get(exec).is_some_and(|e| e["status"] == "exited")
            }),
            "box{i} holds results the server never recorded: {left:?}"
        );
    }
    let metrics = ureq::get(&format!("{}/metrics", server.url))
        .call()
        .ok()
        .and_then(|r| r.into_body().read_to_string().ok())
        .unwrap_or_default();
    let recorded: usize = metrics
        .lines()
        .filter(|l| l.starts_with("outpost_runs_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
        .sum();
    eprintln!(
        "load: {EXECUTIONS} executions, {DAEMONS} daemons, {KILLS} kills in {:.1} s; statuses {by_status:?}; \
         re-runs {reruns}; outbox results lost {}; results recorded {recorded}; \
         finished on a machine but lost with its daemon before the result was written {lost_after_finish}",
        elapsed.as_secs_f64(),
        outbox_lost.len()
    );
    assert_eq!(reruns, 0, "runs started twice");
    assert!(
        outbox_lost.is_empty(),
        "results in an outbox never delivered: {outbox_lost:?}"
    );
    assert_eq!(bogus, 0, "exited results that do not match their run");
    assert_eq!(
        recorded, EXECUTIONS,
        "each execution's result recorded exactly once: {metrics}"
    );
    assert_eq!(ends.len(), EXECUTIONS);
    let _ = std::fs::remove_dir_all(&dir);
}
