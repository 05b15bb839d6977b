//! Arbitrary operations on a terminal relay and its ring: runner output (within its window),
//! viewers joining, leaving, typing, resizing, closing, writing, the program exiting, the
//! terminal ending, time passing. Nothing may panic; every viewer session is audited started
//! once and ended once; nothing reaches a viewer after it was dropped; a watcher never reaches
//! the runner; no viewer stays past its queue limit; credit never leaves the runner stuck;
//! the ring's replay does not depend on chunking and is its own replay.
#![no_main]

use std::collections::BTreeMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use outpost_core::executor::TerminalSize;
use outpost_core::sim::now_at;
use outpost_core::terminal::{
    Audit, Input, Left, Output, Reason, Relay, RelayConfig, Ring, Role, RunnerMessage,
};

#[derive(Arbitrary, Debug)]
enum Step {
    Output(Vec<u8>),
    Join { viewer: u8, watcher: bool },
    Leave { viewer: u8, dropped: bool },
    Type { viewer: u8, bytes: Vec<u8> },
    Resize { viewer: u8, cols: u16, rows: u16 },
    Close { viewer: u8 },
    Written { viewer: u8, bytes: u16 },
    Exited { code: Option<i32> },
    Ended { revoked: bool },
    Advance { secs: u16 },
}

const WINDOW: u64 = 4096;
const BATCH: u64 = 512;
const LIMIT: u64 = 16 * 1024;

fuzz_target!(|steps: Vec<Step>| {
    let config = RelayConfig {
        window: WINDOW,
        credit_batch: BATCH,
        viewer_queue_limit: LIMIT,
        idle_limit: Duration::from_secs(60),
    };
    let mut at = Duration::ZERO;
    let mut relay = Relay::new(config, "run_f", TerminalSize::DEFAULT, now_at(at));
    // The runner holds the run from the start, so what an operator types reaches it at once
    // (keys held while a terminal starts are the unit tests' part).
    relay.handle_input(now_at(at), Input::RunnerStarted).expect("started");
    assert!(matches!(relay.poll_output(), Output::Wait { .. }));
    // Joined viewers by id, with their role; sessions started minus ended per id.
    let mut joined: BTreeMap<u64, Role> = BTreeMap::new();
    let mut open_sessions: BTreeMap<u64, i32> = BTreeMap::new();
    let mut sent: u64 = 0;
    let mut credited: u64 = 0;
    let mut pushed: Vec<u8> = Vec::new();
    let mut ended = false;
    for step in steps.into_iter().take(300) {
        let mut typed_by = None;
        let input = match step {
            Step::Output(mut bytes) => {
                let room = (WINDOW - (sent - credited)) as usize;
                bytes.truncate(room);
                sent += bytes.len() as u64;
                pushed.extend(&bytes);
                Input::Output(bytes)
            }
            Step::Join { viewer, watcher } => {
                let viewer = u64::from(viewer % 8);
                if joined.contains_key(&viewer) {
                    continue;
                }
                let role = if watcher { Role::Watcher } else { Role::Operator };
                if !ended {
                    joined.insert(viewer, role);
                }
                Input::ViewerJoined { viewer, user: format!("u{viewer}"), role }
            }
            Step::Leave { viewer, dropped } => Input::ViewerLeft {
                viewer: u64::from(viewer % 8),
                why: if dropped { Left::Dropped } else { Left::Closed },
            },
            Step::Type { viewer, bytes } => {
                typed_by = Some(u64::from(viewer % 8));
                Input::ViewerInput { viewer: u64::from(viewer % 8), bytes }
            }
            Step::Resize { viewer, cols, rows } => {
                typed_by = Some(u64::from(viewer % 8));
                Input::ViewerResize { viewer: u64::from(viewer % 8), cols, rows }
            }
            Step::Close { viewer } => {
                typed_by = Some(u64::from(viewer % 8));
                Input::ViewerClose { viewer: u64::from(viewer % 8) }
            }
            Step::Written { viewer, bytes } => Input::ViewerWritten {
                viewer: u64::from(viewer % 8),
                bytes: u64::from(bytes),
            },
            Step::Exited { code } => Input::Exited { exit_code: code },
            Step::Ended { revoked } => Input::Ended {
                reason: if revoked { Reason::Revoked } else { Reason::Lost },
            },
            Step::Advance { secs } => {
                at += Duration::from_secs(u64::from(secs));
                Input::Timeout
            }
        };
        relay.handle_input(now_at(at), input).expect("no host misuse");
        let mut dropped: Vec<u64> = Vec::new();
        loop {
            match relay.poll_output() {
                Output::Wait { .. } => break,
                Output::ToViewer { viewer, .. } => {
                    assert!(!dropped.contains(&viewer), "message after drop");
                }
                Output::DropViewer { viewer, .. } => {
                    dropped.push(viewer);
                    joined.remove(&viewer);
                }
                Output::ToRunner(m) => match m {
                    RunnerMessage::Credit(n) => {
                        credited += n;
                        assert!(credited <= sent, "credit beyond what was sent");
                    }
                    RunnerMessage::Input(_) | RunnerMessage::Resize(_) => {
                        assert!(!ended, "runner told something after the end");
                        let by = typed_by.expect("only typing reaches the runner");
                        assert_eq!(joined.get(&by), Some(&Role::Operator), "not an operator");
                    }
                    RunnerMessage::Close => assert!(!ended, "closed twice"),
                },
                Output::Audit(a) => match a {
                    Audit::SessionStarted { viewer, .. } => {
                        let n = open_sessions.entry(viewer).or_default();
                        *n += 1;
                        assert_eq!(*n, 1, "started twice");
                    }
                    Audit::SessionEnded { viewer, .. } => {
                        let n = open_sessions.entry(viewer).or_default();
                        *n -= 1;
                        assert_eq!(*n, 0, "ended without a start, or twice");
                        joined.remove(&viewer);
                    }
                    Audit::TerminalClosed { .. } => {
                        assert!(!ended, "terminal closed twice");
                        ended = true;
                    }
                },
            }
        }
        assert_eq!(relay.ended().is_some(), ended);
        if ended {
            assert_eq!(relay.viewer_count(), 0);
            assert!(open_sessions.values().all(|&n| n == 0), "a session left open");
        }
        assert_eq!(relay.viewer_count(), joined.len());
        assert_eq!(relay.uncredited(), sent - credited);
        let drained = relay.viewer_count() == 0
            || relay.viewers().any(|(id, _, _)| relay.unwritten(id) == Some(0));
        if drained {
            assert!(relay.uncredited() < BATCH, "credit held back from a drained runner");
        }
        for (id, _, _) in relay.viewers() {
            assert!(relay.unwritten(id).unwrap_or(0) <= LIMIT, "slow viewer kept");
        }
    }
    // The ring saw everything pushed before the end: its replay does not depend on chunking.
    let mut one = Ring::new();
    for b in &pushed {
        one.push(std::slice::from_ref(b));
    }
    let mut whole = Ring::new();
    whole.push(&pushed);
    let replay = whole.replay();
    assert_eq!(one.replay(), replay);
    let mut again = Ring::new();
    again.push(&replay);
    assert_eq!(again.replay(), replay);
});
