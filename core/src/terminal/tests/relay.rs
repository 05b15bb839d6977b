//! The relay by example: joining, replay, roles, resize, endings and their audit.

use std::time::Duration;

use crate::executor::TerminalSize;
use crate::sim::now_at;
use crate::terminal::{
    Audit, Input, Left, Output, Reason, Relay, RelayConfig, Role, RunnerMessage, ViewerId,
    ViewerMessage, viewer_close,
};

/// A relay and the time it is at.
pub(super) struct T {
    pub(super) relay: Relay,
    pub(super) at: Duration,
}

impl T {
    /// A relay whose runner holds the run.
    pub(super) fn new(config: RelayConfig) -> Self {
        let mut t = Self::starting(config);
        assert!(t.feed(Input::RunnerStarted).is_empty());
        t
    }

    /// A relay whose run no runner holds yet.
    pub(super) fn starting(config: RelayConfig) -> Self {
        Self {
            relay: Relay::new(
                config,
                "run_1",
                TerminalSize::DEFAULT,
                now_at(Duration::ZERO),
            ),
            at: Duration::ZERO,
        }
    }

    /// Feeds `input` and drains every output up to the `Wait`, which is checked to be last.
    pub(super) fn feed(&mut self, input: Input) -> Vec<Output> {
        self.relay
            .handle_input(now_at(self.at), input)
            .expect("input");
        let mut out = Vec::new();
        loop {
            match self.relay.poll_output() {
                Output::Wait { .. } => return out,
                o => out.push(o),
            }
        }
    }

    pub(super) fn advance(&mut self, d: Duration) -> Vec<Output> {
        self.at += d;
        self.feed(Input::Timeout)
    }

    pub(super) fn join(&mut self, viewer: ViewerId, role: Role) -> Vec<Output> {
        self.feed(Input::ViewerJoined {
            viewer,
            user: format!("u{viewer}"),
            role,
        })
    }
}

pub(super) fn to_viewer(out: &[Output], id: ViewerId) -> Vec<ViewerMessage> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToViewer { viewer, message } if *viewer == id => Some(message.clone()),
            _ => None,
        })
        .collect()
}

pub(super) fn to_runner(out: &[Output]) -> Vec<RunnerMessage> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToRunner(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

pub(super) fn audits(out: &[Output]) -> Vec<Audit> {
    out.iter()
        .filter_map(|o| match o {
            Output::Audit(a) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

fn bytes(m: &[ViewerMessage]) -> Vec<u8> {
    m.iter()
        .filter_map(|m| match m {
            ViewerMessage::Bytes(b) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn a_late_viewer_gets_ready_then_the_replay_without_queries_then_live_output() {
    let mut t = T::new(RelayConfig::default());
    t.feed(Input::Output(b"$ ls\r\n\x1b[6na b\r\n".to_vec()));
    let out = t.join(1, Role::Operator);
    let msgs = to_viewer(&out, 1);
    assert_eq!(
        msgs,
        vec![
            ViewerMessage::Ready {
                terminal_id: "run_1".into(),
                role: Role::Operator,
                cols: 80,
                rows: 24
            },
            ViewerMessage::Replay { bytes: 11 },
            ViewerMessage::Bytes(b"$ ls\r\na b\r\n"[..].into()),
            ViewerMessage::Live,
        ]
    );
    assert!(matches!(
        &audits(&out)[..],
        [Audit::SessionStarted { viewer: 1, user, role: Role::Operator, .. }] if user == "u1"
    ));
    // Live bytes are relayed untouched, queries included.
    let out = t.feed(Input::Output(b"\x1b[6n".to_vec()));
    assert_eq!(bytes(&to_viewer(&out, 1)), b"\x1b[6n");
}

#[test]
fn an_empty_ring_still_says_replay_0_then_live() {
    let mut t = T::new(RelayConfig::default());
    let msgs = to_viewer(&t.join(7, Role::Watcher), 7);
    assert_eq!(
        msgs[1..],
        [ViewerMessage::Replay { bytes: 0 }, ViewerMessage::Live]
    );
}

#[test]
fn watchers_are_read_only_and_operators_reach_the_runner() {
    let mut t = T::new(RelayConfig::default());
    t.join(1, Role::Operator);
    t.join(2, Role::Watcher);
    let out = t.feed(Input::ViewerInput {
        viewer: 2,
        bytes: b"rm -rf /\r".to_vec(),
    });
    assert!(to_runner(&out).is_empty());
    assert!(matches!(
        &to_viewer(&out, 2)[..],
        [ViewerMessage::Error {
            code: "read_only_viewer",
            ..
        }]
    ));
    for input in [
        Input::ViewerResize {
            viewer: 2,
            cols: 10,
            rows: 10,
        },
        Input::ViewerClose { viewer: 2 },
    ] {
        let out = t.feed(input);
        assert!(to_runner(&out).is_empty(), "{out:?}");
    }
    assert_eq!(t.relay.ended(), None);
    let out = t.feed(Input::ViewerInput {
        viewer: 1,
        bytes: b"ls\r".to_vec(),
    });
    assert_eq!(
        to_runner(&out),
        vec![RunnerMessage::Input(b"ls\r".to_vec())]
    );
    // An unknown viewer's input goes nowhere and says nothing.
    assert!(
        t.feed(Input::ViewerInput {
            viewer: 9,
            bytes: b"x".to_vec()
        })
        .is_empty()
    );
}

#[test]
fn the_size_is_the_last_operator_resize_and_every_viewer_hears_of_it() {
    let mut t = T::new(RelayConfig::default());
    t.join(1, Role::Operator);
    t.join(2, Role::Watcher);
    let out = t.feed(Input::ViewerResize {
        viewer: 1,
        cols: 0,
        rows: 5000,
    });
    let size = TerminalSize {
        cols: 1,
        rows: 1000,
    };
    assert_eq!(to_runner(&out), vec![RunnerMessage::Resize(size)]);
    for id in [1, 2] {
        assert_eq!(
            to_viewer(&out, id),
            vec![ViewerMessage::Resized {
                cols: 1,
                rows: 1000
            }]
        );
    }
    assert_eq!(t.relay.size(), size);
    // The same size again changes nothing.
    assert!(
        t.feed(Input::ViewerResize {
            viewer: 1,
            cols: 1,
            rows: 1000
        })
        .is_empty()
    );
    // A viewer joining later is told the current size.
    let msgs = to_viewer(&t.join(3, Role::Watcher), 3);
    assert!(matches!(
        msgs[0],
        ViewerMessage::Ready {
            cols: 1,
            rows: 1000,
            ..
        }
    ));
}

#[test]
fn a_dropped_connection_is_audited_as_dropped() {
    let mut t = T::new(RelayConfig::default());
    t.join(1, Role::Operator);
    t.join(2, Role::Watcher);
    t.at += Duration::from_secs(5);
    let out = t.feed(Input::ViewerLeft {
        viewer: 2,
        why: Left::Dropped,
    });
    assert!(matches!(
        &audits(&out)[..],
        [Audit::SessionEnded { viewer: 2, why: Reason::Dropped, role: Role::Watcher, started_at, at, .. }]
            if at.as_secs() == started_at.as_secs() + 5
    ));
    let out = t.feed(Input::ViewerLeft {
        viewer: 1,
        why: Left::Closed,
    });
    assert!(matches!(
        &audits(&out)[..],
        [Audit::SessionEnded {
            viewer: 1,
            why: Reason::Closed,
            ..
        }]
    ));
    // Leaving twice audits once.
    assert!(
        t.feed(Input::ViewerLeft {
            viewer: 1,
            why: Left::Closed
        })
        .is_empty()
    );
}

#[test]
fn exit_tells_every_viewer_then_closes_them_normally() {
    let mut t = T::new(RelayConfig::default());
    t.join(1, Role::Operator);
    t.join(2, Role::Watcher);
    let out = t.feed(Input::Exited { exit_code: Some(3) });
    for id in [1, 2] {
        assert_eq!(
            to_viewer(&out, id),
            vec![ViewerMessage::Exit { exit_code: Some(3) }]
        );
        assert!(out.contains(&Output::DropViewer {
            viewer: id,
            reason: Reason::Exited,
            close_code: viewer_close::NORMAL
        }));
    }
    let a = audits(&out);
    assert_eq!(a.len(), 3);
    assert!(matches!(
        a[2],
        Audit::TerminalClosed {
            reason: Reason::Exited,
            exit_code: Some(3),
            ..
        }
    ));
    assert_eq!(t.relay.ended(), Some(Reason::Exited));
    // A viewer joining after the end is turned away, and output is still credited.
    let out = t.join(3, Role::Operator);
    assert_eq!(
        to_viewer(&out, 3),
        vec![ViewerMessage::Closed {
            reason: Reason::Exited
        }]
    );
    let out = t.feed(Input::Output(vec![0; 10]));
    assert_eq!(to_runner(&out), vec![RunnerMessage::Credit(10)]);
}

#[test]
fn an_operator_closing_ends_the_terminal_for_everyone() {
    let mut t = T::new(RelayConfig::default());
    t.join(1, Role::Operator);
    t.join(2, Role::Watcher);
    let out = t.feed(Input::ViewerClose { viewer: 1 });
    assert_eq!(to_runner(&out), vec![RunnerMessage::Close]);
    assert!(out.contains(&Output::DropViewer {
        viewer: 1,
        reason: Reason::Closed,
        close_code: 1000
    }));
    assert!(out.contains(&Output::DropViewer {
        viewer: 2,
        reason: Reason::Closed,
        close_code: 4003
    }));
    assert_eq!(audits(&out).len(), 3);
}

#[test]
fn revoked_closes_viewers_with_4003_and_the_reason() {
    let mut t = T::new(RelayConfig::default());
    t.join(1, Role::Operator);
    let out = t.feed(Input::Ended {
        reason: Reason::Revoked,
    });
    assert_eq!(
        to_viewer(&out, 1),
        vec![ViewerMessage::Closed {
            reason: Reason::Revoked
        }]
    );
    assert!(out.contains(&Output::DropViewer {
        viewer: 1,
        reason: Reason::Revoked,
        close_code: 4003
    }));
    assert!(
        to_runner(&out)
            .iter()
            .all(|m| !matches!(m, RunnerMessage::Close))
    );
}

#[test]
fn the_terminal_closes_after_the_idle_limit_with_no_viewer() {
    let config = RelayConfig {
        idle_limit: Duration::from_secs(600),
        ..RelayConfig::default()
    };
    let mut t = T::new(config);
    assert_eq!(t.relay.poll_timeout().map(|(_, why)| why), Some("idle"));
    // A viewer stops the clock; leaving restarts it from the leaving.
    t.at = Duration::from_secs(500);
    t.join(1, Role::Operator);
    assert_eq!(t.relay.poll_timeout(), None);
    assert!(t.advance(Duration::from_secs(500)).is_empty());
    t.feed(Input::ViewerLeft {
        viewer: 1,
        why: Left::Dropped,
    });
    assert!(t.advance(Duration::from_secs(599)).is_empty());
    let out = t.advance(Duration::from_secs(1));
    assert_eq!(to_runner(&out), vec![RunnerMessage::Close]);
    assert!(matches!(
        &audits(&out)[..],
        [Audit::TerminalClosed {
            reason: Reason::Idle,
            ..
        }]
    ));
    assert_eq!(t.relay.ended(), Some(Reason::Idle));
    assert_eq!(t.relay.poll_timeout(), None);
}

#[test]
fn host_misuse_is_an_error_not_a_panic() {
    let mut t = T::new(RelayConfig::default());
    t.join(1, Role::Operator);
    let err = t
        .relay
        .handle_input(
            now_at(t.at),
            Input::ViewerJoined {
                viewer: 1,
                user: "x".into(),
                role: Role::Watcher,
            },
        )
        .unwrap_err();
    assert_eq!(err.code(), "duplicate_viewer");
    t.at = Duration::from_secs(10);
    t.feed(Input::Timeout);
    let err = t
        .relay
        .handle_input(now_at(Duration::from_secs(9)), Input::Timeout)
        .unwrap_err();
    assert_eq!(err.code(), "time_went_backwards");
}

#[test]
fn keys_sizes_and_a_close_sent_while_the_terminal_starts_reach_the_runner_once_it_holds_it() {
    let mut t = T::starting(RelayConfig::default());
    t.join(1, Role::Operator);
    let mut early = t.feed(Input::ViewerInput {
        viewer: 1,
        bytes: b"echo $((6*7))\n".to_vec(),
    });
    // Sizes held one after another: only the last goes out.
    for cols in [90, 100] {
        early.extend(t.feed(Input::ViewerResize {
            viewer: 1,
            cols,
            rows: 30,
        }));
    }
    early.extend(t.feed(Input::ViewerInput {
        viewer: 1,
        bytes: b"exit 5\n".to_vec(),
    }));
    assert_eq!(
        to_runner(&early),
        vec![],
        "nothing goes out before a runner holds the run"
    );
    assert!(!t.relay.runner_started());
    let started = t.feed(Input::RunnerStarted);
    assert_eq!(
        to_runner(&started),
        vec![
            RunnerMessage::Input(b"echo $((6*7))\n".to_vec()),
            RunnerMessage::Resize(TerminalSize {
                cols: 100,
                rows: 30
            }),
            RunnerMessage::Input(b"exit 5\n".to_vec()),
        ],
        "held in the order typed"
    );
    assert!(t.relay.runner_started());
    assert_eq!(
        to_runner(&t.feed(Input::RunnerStarted)),
        vec![],
        "sent once"
    );
    let live = t.feed(Input::ViewerInput {
        viewer: 1,
        bytes: b"x".to_vec(),
    });
    assert_eq!(to_runner(&live), vec![RunnerMessage::Input(b"x".to_vec())]);

    // A close (or the idle limit) before the start ends the terminal at once and still hangs
    // the program up when it comes.
    let mut t = T::starting(RelayConfig::default());
    t.join(1, Role::Operator);
    let closed = t.feed(Input::ViewerClose { viewer: 1 });
    assert_eq!(t.relay.ended(), Some(Reason::Closed));
    assert_eq!(to_runner(&closed), vec![]);
    assert_eq!(
        to_runner(&t.feed(Input::RunnerStarted)),
        vec![RunnerMessage::Close]
    );
}

#[test]
fn keys_past_the_pending_limit_are_refused_with_terminal_starting() {
    use crate::terminal::PENDING_KEYS_LIMIT;
    let mut t = T::starting(RelayConfig::default());
    t.join(1, Role::Operator);
    let half = vec![b'a'; PENDING_KEYS_LIMIT / 2];
    for _ in 0..2 {
        let out = t.feed(Input::ViewerInput {
            viewer: 1,
            bytes: half.clone(),
        });
        assert_eq!(to_viewer(&out, 1), vec![]);
    }
    let refused = t.feed(Input::ViewerInput {
        viewer: 1,
        bytes: b"b".to_vec(),
    });
    assert!(
        matches!(
            to_viewer(&refused, 1).as_slice(),
            [ViewerMessage::Error {
                code: "terminal_starting",
                ..
            }]
        ),
        "{refused:?}"
    );
    let started = to_runner(&t.feed(Input::RunnerStarted));
    assert_eq!(
        started.len(),
        2,
        "the keys that fitted, and nothing refused"
    );
    assert!(
        started
            .iter()
            .all(|m| *m == RunnerMessage::Input(half.clone()))
    );
}
