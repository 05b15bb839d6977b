//! The schedule by example, through a store that keeps only what was saved (encoded and read
//! back) and restarts that rebuild the schedule from it; then arbitrary operations with
//! crashes, checked against the promises.

use crate::ids::WaitId;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::time::{Now, UnixTime};

const WALL0: u64 = 1_767_225_600;

/// A schedule, the rows it saved, what the server was sent, and the time.
struct H {
    schedule: Schedule,
    config: ScheduleConfig,
    /// The wall clock, in ms since `WALL0`.
    wall_ms: u64,
    /// Where this process's monotonic clock started, in wall ms since `WALL0`.
    origin_ms: u64,
    store: BTreeMap<WaitId, Vec<u8>>,
    /// Reports the server was sent, in order.
    sent: Vec<Report>,
    /// Checks started: (wait, check number).
    checks: Vec<(WaitId, u64)>,
    stops: Vec<(WaitId, u64)>,
}

impl H {
    fn new(max_running: usize) -> Self {
        let config = ScheduleConfig { max_running };
        let mut h = Self {
            schedule: Schedule::new(config.clone(), Self::now_of(0, 0)),
            config,
            wall_ms: 0,
            origin_ms: 0,
            store: BTreeMap::new(),
            sent: Vec::new(),
            checks: Vec::new(),
            stops: Vec::new(),
        };
        h.feed(Input::Connected);
        h
    }

    fn now_of(wall_ms: u64, origin_ms: u64) -> Now {
        Now {
            instant: crate::time::Instant::from_origin(Duration::from_millis(wall_ms - origin_ms)),
            wall: UnixTime(WALL0 + wall_ms / 1000),
        }
    }

    fn now(&self) -> Now {
        Self::now_of(self.wall_ms, self.origin_ms)
    }

    fn feed(&mut self, input: Input) -> Vec<Output> {
        let now = self.now();
        self.schedule.handle_input(now, input).expect("input");
        let mut out = Vec::new();
        let mut saved_since_send = BTreeSet::new();
        loop {
            let o = self.schedule.poll_output();
            match &o {
                Output::Wait { .. } => return out,
                Output::Save(row) => {
                    let written = WALL0 * 1000 + self.wall_ms;
                    let bytes = row.encode(written);
                    self.store.insert(row.spec.wait_id.clone(), bytes);
                    saved_since_send.insert(row.spec.wait_id.clone());
                }
                Output::Forget { wait_id } => {
                    self.store.remove(wait_id);
                }
                Output::Check { wait_id, check, .. } => {
                    assert!(
                        self.store.contains_key(wait_id),
                        "a wait is saved before its first check"
                    );
                    self.checks.push((wait_id.clone(), *check));
                }
                Output::Stop { wait_id, check } => self.stops.push((wait_id.clone(), *check)),
                Output::Send(report) => {
                    match self.store.get(&report.wait_id) {
                        Some(bytes) => {
                            let (_, row) = WaitRow::decode(bytes).expect("row");
                            assert_eq!(
                                row.ending.as_ref(),
                                Some(&report.ending),
                                "the ending is saved before it is sent"
                            );
                        }
                        // Only the answer to a cancel of a wait the daemon does not hold.
                        None => assert!(matches!(
                            report.ending,
                            Ending::Failed {
                                reason: FailReason::Cancelled,
                                ..
                            }
                        )),
                    }
                    self.sent.push(report.clone());
                }
            }
            out.push(o);
        }
    }

    fn advance(&mut self, ms: u64) -> Vec<Output> {
        self.wall_ms += ms;
        self.feed(Input::Timeout)
    }

    fn register(&mut self, id: &str, interval_ms: u64, expires_in_ms: Option<u64>) {
        let expires_at_ms = expires_in_ms.map(|ms| WALL0 * 1000 + self.wall_ms + ms);
        self.feed(Input::Register(spec(id, interval_ms, expires_at_ms)));
    }

    fn checked(&mut self, id: &str, outcome: CheckOutcome) -> Vec<Output> {
        let check = self
            .checks
            .iter()
            .rev()
            .find(|(w, _)| w == id)
            .map(|(_, c)| *c)
            .expect("a check of the wait ran");
        self.feed(Input::Checked {
            wait_id: id.into(),
            check,
            outcome,
        })
    }

    /// A crash: everything not saved is gone; a new process reads the store back.
    fn restart(&mut self) {
        self.origin_ms = self.wall_ms;
        let rows = self
            .store
            .values()
            .map(|b| WaitRow::decode(b).expect("a row"));
        self.schedule = Schedule::restore(self.config.clone(), self.now(), rows);
        self.feed(Input::Connected);
    }

    fn checks_of(&self, id: &str) -> usize {
        self.checks.iter().filter(|(w, _)| w == id).count()
    }
}

fn spec(id: &str, interval_ms: u64, expires_at_ms: Option<u64>) -> WaitSpec {
    WaitSpec {
        wait_id: id.into(),
        requester: "ann".into(),
        source: "async ({ ctx }) => false".into(),
        interval_ms,
        expires_at_ms,
        operator: false,
    }
}

fn matched(text: &str) -> CheckOutcome {
    CheckOutcome::Matched {
        resume_text: text.into(),
        payload: Some("{\"n\":1}".into()),
        evidence: "[]".into(),
    }
}

fn failed(code: &str) -> CheckOutcome {
    CheckOutcome::Failed(CheckError {
        code: code.into(),
        message: format!("{code} happened"),
        at_ms: 0,
    })
}

#[test]
fn a_wait_is_checked_at_once_then_after_its_interval_and_a_match_ends_it_for_good() {
    let mut h = H::new(8);
    h.register("w1", 5_000, None);
    assert_eq!(
        h.checks,
        vec![(WaitId::new("w1"), 1)],
        "checks begin at registration"
    );
    h.advance(1_000);
    h.checked("w1", CheckOutcome::NotYet);
    assert_eq!(
        h.advance(4_999),
        vec![],
        "not before the interval has passed"
    );
    h.advance(1);
    assert_eq!(h.checks_of("w1"), 2);
    h.checked("w1", matched("ready"));
    let [report] = h.sent.as_slice() else {
        panic!("one report: {:?}", h.sent)
    };
    assert!(
        matches!(&report.ending, Ending::Matched { resume_text, continuation_id: c, .. }
            if resume_text == "ready" && *c == continuation_id("w1")),
        "{report:?}"
    );
    assert_eq!(report.checks, 2);
    h.advance(60_000);
    assert_eq!(h.checks_of("w1"), 2, "a match is never checked again");
    assert_eq!(h.schedule.view("w1").expect("held").state, "matched");

    // Not acknowledged: sent again on the next connection, the same continuation.
    h.feed(Input::Disconnected);
    h.feed(Input::Connected);
    assert_eq!(h.sent.len(), 2);
    assert_eq!(h.sent[0], h.sent[1]);
    h.feed(Input::Acked {
        wait_id: "w1".into(),
    });
    assert!(h.store.is_empty(), "acknowledged: the row goes");
    assert!(h.schedule.is_empty());
    h.feed(Input::Connected);
    assert_eq!(h.sent.len(), 2, "nothing more to send");
}

#[test]
fn five_failed_checks_in_a_row_fail_the_wait_and_a_success_resets_the_count() {
    let mut h = H::new(8);
    h.register("w", 1_000, None);
    for _ in 0..4 {
        h.checked("w", failed("condition_threw"));
        h.advance(1_000);
    }
    assert_eq!(h.schedule.view("w").expect("held").consecutive_errors, 4);
    h.checked("w", CheckOutcome::NotYet);
    let view = h.schedule.view("w").expect("held");
    assert_eq!(view.consecutive_errors, 0, "a success resets the count");
    assert_eq!(
        view.last_error.map(|e| e.code),
        Some("condition_threw".into()),
        "show keeps the last error"
    );
    for i in 0..5 {
        h.advance(1_000);
        h.checked("w", failed("check_deadline"));
        assert_eq!(h.sent.is_empty(), i < 4);
    }
    let [report] = h.sent.as_slice() else {
        panic!("{:?}", h.sent)
    };
    assert!(matches!(
        report.ending,
        Ending::Failed {
            reason: FailReason::CheckErrors,
            ..
        }
    ));
    assert_eq!(report.checks, 10);
    assert_eq!(
        report.last_error.as_ref().map(|e| e.code.as_str()),
        Some("check_deadline")
    );
    h.advance(10_000);
    assert_eq!(h.checks_of("w"), 10, "a failed wait is not checked again");
}

#[test]
fn an_expired_wait_never_matches_even_from_the_check_running_when_it_expired() {
    let mut h = H::new(8);
    h.register("idle", 10_000, Some(3_000));
    h.checked("idle", CheckOutcome::NotYet);
    h.register("busy", 1_000, Some(3_000));
    h.advance(3_000);
    assert!(
        h.sent.iter().any(|r| r.wait_id == "idle"
            && matches!(
                r.ending,
                Ending::Failed {
                    reason: FailReason::Expired,
                    ..
                }
            )),
        "{:?}",
        h.sent
    );
    assert_eq!(
        h.stops,
        vec![(WaitId::new("busy"), 1)],
        "the running check is stopped"
    );
    assert!(
        !h.sent.iter().any(|r| r.wait_id == "busy"),
        "not ended before its check stopped"
    );
    h.checked("busy", matched("too late"));
    let busy: Vec<&Report> = h.sent.iter().filter(|r| r.wait_id == "busy").collect();
    assert!(
        matches!(
            busy.as_slice(),
            [Report {
                ending: Ending::Failed {
                    reason: FailReason::Expired,
                    ..
                },
                ..
            }]
        ),
        "{busy:?}"
    );

    // Registered already expired: it ends at once, saved first, never checked.
    h.register("late", 1_000, Some(0));
    assert_eq!(h.checks_of("late"), 0);
    assert!(h.sent.iter().any(|r| r.wait_id == "late"));
}

#[test]
fn cancel_stops_a_running_check_and_reports_only_once_it_stopped() {
    let mut h = H::new(8);
    h.register("w", 1_000, None);
    h.feed(Input::Cancel {
        wait_id: "w".into(),
    });
    assert_eq!(h.stops, vec![(WaitId::new("w"), 1)]);
    assert!(
        h.sent.is_empty(),
        "the cancel completes after the check's cleanup"
    );
    h.checked("w", CheckOutcome::Stopped);
    assert!(matches!(
        h.sent.as_slice(),
        [Report {
            checks: 0,
            ending: Ending::Failed {
                reason: FailReason::Cancelled,
                ..
            },
            ..
        }]
    ));
    // A crash between the cancel and the check's stop: the wait comes back cancelled,
    // never checked again.
    h.register("c", 1_000, None);
    h.feed(Input::Cancel {
        wait_id: "c".into(),
    });
    h.restart();
    h.advance(5_000);
    assert_eq!(h.checks_of("c"), 1);
    assert!(h.sent.iter().any(|r| r.wait_id == "c"
        && matches!(
            r.ending,
            Ending::Failed {
                reason: FailReason::Cancelled,
                ..
            }
        )));
    // A cancel of a wait the daemon does not hold still gets its answer.
    h.feed(Input::Cancel {
        wait_id: "never".into(),
    });
    assert_eq!(h.sent.last().map(|r| r.wait_id.as_str()), Some("never"));
    assert!(!h.store.contains_key("never"));
}

#[test]
fn checks_run_at_most_max_running_at_once_earliest_due_first() {
    let mut h = H::new(3);
    for i in 0..10 {
        h.register(&format!("w{i}"), 1_000, None);
        h.advance(1);
    }
    assert_eq!(h.schedule.running(), 3);
    assert_eq!(h.checks.len(), 3);
    h.checked("w1", CheckOutcome::NotYet);
    assert_eq!(
        h.checks.last(),
        Some(&(WaitId::new("w3"), 1)),
        "the next due starts"
    );
    assert_eq!(h.schedule.running(), 3);
    // A stale or unknown check report changes nothing.
    h.feed(Input::Checked {
        wait_id: "w0".into(),
        check: 9,
        outcome: matched("stale"),
    });
    assert_eq!(h.schedule.running(), 3);
    assert!(h.sent.is_empty());
}

#[test]
fn after_a_crash_active_waits_resume_on_their_schedule_and_endings_are_sent_again() {
    let mut h = H::new(8);
    h.register("slow", 60_000, None);
    h.checked("slow", CheckOutcome::NotYet);
    h.register("done", 1_000, None);
    h.checked("done", matched("yes"));
    h.register("running", 1_000, Some(100_000));
    h.checked("running", failed("condition_threw"));
    h.advance(1_000);
    assert_eq!(h.checks_of("running"), 2);
    let sent_before = h.sent.len();

    h.advance(10_000);
    h.restart();
    assert_eq!(
        h.sent.len(),
        sent_before + 1,
        "the unacknowledged match again"
    );
    assert_eq!(h.sent.last(), h.sent.first());
    // The check that ran at the crash runs again at once; its error count survived.
    assert_eq!(h.checks_of("running"), 3);
    assert_eq!(
        h.schedule.view("running").expect("held").consecutive_errors,
        1
    );
    assert_eq!(h.checks_of("slow"), 1, "not before its interval");
    h.advance(48_999);
    assert_eq!(h.checks_of("slow"), 1);
    h.advance(1_000);
    assert_eq!(
        h.checks_of("slow"),
        2,
        "its interval is kept across the restart"
    );
    assert_eq!(h.checks_of("done"), 1, "a match is never checked again");
    // The expiry survived too.
    h.checked("running", CheckOutcome::NotYet);
    h.advance(100_000);
    assert!(h.sent.iter().any(|r| r.wait_id == "running"));
}

#[test]
fn a_repeated_registration_is_the_same_wait_and_intervals_have_a_floor() {
    let mut h = H::new(8);
    h.register("w", 10, None);
    h.register("w", 10, None);
    assert_eq!(h.checks_of("w"), 1);
    h.checked("w", CheckOutcome::NotYet);
    h.advance(999);
    assert_eq!(h.checks_of("w"), 1, "at least MIN_INTERVAL between checks");
    h.advance(1);
    assert_eq!(h.checks_of("w"), 2);
    assert_eq!(spec("x", 0, None).interval(), MIN_INTERVAL);
    assert_eq!(DEFAULT_INTERVAL, Duration::from_secs(30));
}

#[test]
fn rows_refuse_bytes_that_are_not_a_row() {
    let row = WaitRow {
        spec: spec("w", 1_000, Some(5)),
        checks: 3,
        consecutive_errors: 1,
        last_error: None,
        next_check_ms: Some(7),
        stopping: None,
        ending: None,
    };
    let bytes = row.encode(42);
    assert_eq!(WaitRow::decode(&bytes).expect("its own row"), (42, row));
    assert!(WaitRow::decode(&bytes[..bytes.len() - 2]).is_err());
    let foreign = br#"{"v":1,"type":"daemon.record","writtenMs":1,"body":{}}"#;
    assert_eq!(
        WaitRow::decode(foreign).map_err(|e| e.code()),
        Err("record_wrong_type")
    );
}

#[derive(Debug, Clone)]
enum Op {
    Register {
        wait: u8,
        interval: u16,
        expires: Option<u16>,
    },
    Cancel {
        wait: u8,
    },
    Finish {
        pick: u8,
        outcome: u8,
    },
    Ack {
        wait: u8,
    },
    Advance {
        ms: u16,
    },
    Reconnect,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6, 0u16..5_000, proptest::option::of(0u16..20_000)).prop_map(
            |(wait, interval, expires)| Op::Register {
                wait,
                interval,
                expires
            }
        ),
        (0u8..6).prop_map(|wait| Op::Cancel { wait }),
        (any::<u8>(), 0u8..4).prop_map(|(pick, outcome)| Op::Finish { pick, outcome }),
        (0u8..6).prop_map(|wait| Op::Ack { wait }),
        (0u16..3_000).prop_map(|ms| Op::Advance { ms }),
        Just(Op::Reconnect),
        Just(Op::Crash),
    ]
}

proptest! {
    /// The server's view across crashes: every wait's ending is recorded at most once, a
    /// cancelled or expired wait never matches, nothing is checked after its ending, checks
    /// never exceed the bound or overlap for one wait, and an ended wait's report keeps
    /// coming until it is acknowledged.
    #[test]
    fn across_crashes_every_ending_is_recorded_once_and_nothing_runs_after_it(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        let mut h = H::new(2);
        // What the server recorded per wait id: the first ending it received.
        let mut recorded: BTreeMap<WaitId, Ending> = BTreeMap::new();
        // Registrations the server made (a registered id is never reused after its ack).
        let mut acked: BTreeSet<WaitId> = BTreeSet::new();
        let mut cancelled: BTreeSet<WaitId> = BTreeSet::new();
        // Checks running in this process.
        let mut running: Vec<(WaitId, u64)> = Vec::new();
        let mut seen_sent = 0;
        for op in ops {
            let before_checks = h.checks.len();
            match op {
                Op::Register { wait, interval, expires } => {
                    let id = WaitId::new(format!("w{wait}"));
                    // The server never registers an id again once it cancelled or
                    // acknowledged it.
                    if acked.contains(&id) || cancelled.contains(&id) {
                        continue;
                    }
                    h.register(&id, u64::from(interval), expires.map(u64::from));
                }
                Op::Cancel { wait } => {
                    let id = WaitId::new(format!("w{wait}"));
                    // The server never cancels a wait whose ending it recorded.
                    if recorded.contains_key(&id) {
                        continue;
                    }
                    cancelled.insert(id.clone());
                    h.feed(Input::Cancel { wait_id: id });
                }
                Op::Finish { pick, outcome } => {
                    if running.is_empty() {
                        continue;
                    }
                    let (id, check) = running.remove(usize::from(pick) % running.len());
                    let outcome = match outcome {
                        0 => CheckOutcome::NotYet,
                        1 => matched("m"),
                        2 => failed("condition_threw"),
                        _ => CheckOutcome::Stopped,
                    };
                    h.feed(Input::Checked { wait_id: id, check, outcome });
                }
                Op::Ack { wait } => {
                    let id = WaitId::new(format!("w{wait}"));
                    if recorded.contains_key(&id) {
                        acked.insert(id.clone());
                        h.feed(Input::Acked { wait_id: id });
                    }
                }
                Op::Advance { ms } => {
                    h.advance(u64::from(ms));
                }
                Op::Reconnect => {
                    h.feed(Input::Disconnected);
                    h.feed(Input::Connected);
                }
                Op::Crash => {
                    running.clear();
                    h.restart();
                }
            }
            for (id, check) in h.checks[before_checks..].iter().cloned() {
                prop_assert!(
                    !recorded.contains_key(&id),
                    "{id} checked after its ending"
                );
                prop_assert!(
                    !running.iter().any(|(w, _)| *w == id),
                    "two checks of {id} at once"
                );
                running.push((id, check));
            }
            prop_assert!(running.len() <= 2, "more checks than the bound");
            for report in h.sent[seen_sent..].iter().cloned() {
                if let Some(first) = recorded.get(&report.wait_id) {
                    match (first, &report.ending) {
                        // A cancel of a wait no longer held is answered afresh each time.
                        (
                            Ending::Failed { reason: a, .. },
                            Ending::Failed { reason: b, .. },
                        ) => prop_assert_eq!(a, b, "an ending changed"),
                        (a, b) => prop_assert_eq!(a, b, "an ending changed"),
                    }
                    continue;
                }
                if let Ending::Matched { .. } = report.ending {
                    prop_assert!(
                        !cancelled.contains(&report.wait_id),
                        "a cancelled wait matched"
                    );
                }
                recorded.insert(report.wait_id.clone(), report.ending.clone());
            }
            seen_sent = h.sent.len();
        }
        // Every ending not acknowledged is still held and comes again on a connection.
        h.feed(Input::Disconnected);
        let before = h.sent.len();
        h.feed(Input::Connected);
        let resent: BTreeSet<WaitId> =
            h.sent[before..].iter().map(|r| r.wait_id.clone()).collect();
        for id in recorded.keys().filter(|id| !acked.contains(*id)) {
            if h.store.contains_key(id) {
                prop_assert!(resent.contains(id), "{id}'s ending was not sent again");
            }
        }
    }
}
