//! Arbitrary inputs into the wait schedule, at arbitrary times. Nothing may panic, and the
//! schedule's promises hold after every drain: at most `max_running` checks run, no wait has
//! two checks at once, a stop names a running check, and an ended wait is never checked again.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use outpost_core::ids::WaitId;
use outpost_core::sim::now_at;
use outpost_core::wait::{
    CheckError, CheckOutcome, Input, Output, Schedule, ScheduleConfig, WaitSpec,
};

#[derive(Debug, Arbitrary)]
enum Op {
    Advance(u16),
    Register {
        wait: u8,
        interval_s: u8,
        expires_s: Option<u16>,
    },
    Cancel(u8),
    Checked {
        wait: u8,
        outcome: u8,
    },
    Acked(u8),
    Connected,
    Disconnected,
}

fuzz_target!(|ops: Vec<Op>| {
    let config = ScheduleConfig { max_running: 3 };
    let mut elapsed = Duration::from_secs(10);
    let mut schedule = Schedule::new(config.clone(), now_at(elapsed));
    let mut running: BTreeMap<WaitId, u64> = BTreeMap::new();
    let mut ended: BTreeSet<WaitId> = BTreeSet::new();
    for op in ops.into_iter().take(200) {
        let id = |n: u8| WaitId::from(format!("w{}", n % 6));
        let input = match op {
            Op::Advance(ms) => {
                elapsed += Duration::from_millis(u64::from(ms) * 10);
                Input::Timeout
            }
            Op::Register {
                wait,
                interval_s,
                expires_s,
            } => Input::Register(WaitSpec {
                wait_id: id(wait),
                requester: "ada".into(),
                source: "async () => false".into(),
                interval_ms: u64::from(interval_s) * 1000,
                expires_at_ms: expires_s
                    .map(|s| (outpost_core::sim::WALL_ORIGIN + u64::from(s)) * 1000),
                operator: false,
            }),
            Op::Cancel(w) => Input::Cancel { wait_id: id(w) },
            Op::Checked { wait, outcome } => {
                let wait_id = id(wait);
                let Some(check) = running.get(&wait_id).copied() else {
                    continue;
                };
                let outcome = match outcome % 4 {
                    0 => CheckOutcome::NotYet,
                    1 => CheckOutcome::Matched {
                        resume_text: "ok".into(),
                        payload: None,
                        evidence: "[]".into(),
                    },
                    2 => CheckOutcome::Failed(CheckError {
                        code: "check_threw".into(),
                        message: "no".into(),
                        at_ms: 0,
                    }),
                    _ => CheckOutcome::Stopped,
                };
                running.remove(&wait_id);
                Input::Checked {
                    wait_id,
                    check,
                    outcome,
                }
            }
            Op::Acked(w) => Input::Acked { wait_id: id(w) },
            Op::Connected => Input::Connected,
            Op::Disconnected => Input::Disconnected,
        };
        if let Input::Register(spec) = &input
            && !schedule.wait_ids().any(|w| w == spec.wait_id)
        {
            // A new registration of a forgotten id is a new wait.
            ended.remove(&spec.wait_id);
        }
        let _ = schedule.handle_input(now_at(elapsed), input);
        for _ in 0..1000 {
            match schedule.poll_output() {
                Output::Wait { .. } => break,
                Output::Check { wait_id, check, .. } => {
                    assert!(
                        !ended.contains(&wait_id),
                        "{wait_id} checked after it ended"
                    );
                    assert!(
                        running.insert(wait_id.clone(), check).is_none(),
                        "two checks of {wait_id} at once"
                    );
                    assert!(running.len() <= config.max_running, "{running:?}");
                }
                Output::Stop { wait_id, check } => {
                    assert_eq!(
                        running.get(&wait_id),
                        Some(&check),
                        "stop of no running check"
                    );
                }
                Output::Save(row) => {
                    if row.ending.is_some() {
                        ended.insert(row.spec.wait_id.clone());
                    }
                }
                Output::Forget { .. } | Output::Send(_) => {}
            }
        }
    }
});
