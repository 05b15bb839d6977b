//! Flow control: credit follows the fastest viewer, a stalled one is dropped and told why,
//! memory stays bounded.

use super::relay::{T, audits, to_runner, to_viewer};
use crate::terminal::{
    Audit, Input, Output, Reason, RelayConfig, Role, RunnerMessage, ViewerMessage, viewer_close,
};

const KIB: u64 = 1024;

fn credits(out: &[Output]) -> u64 {
    to_runner(out)
        .iter()
        .map(|m| match m {
            RunnerMessage::Credit(n) => *n,
            _ => 0,
        })
        .sum()
}

fn live_bytes(out: &[Output], id: u64) -> u64 {
    to_viewer(out, id)
        .iter()
        .map(|m| match m {
            ViewerMessage::Bytes(b) => b.len() as u64,
            _ => 0,
        })
        .sum()
}

#[test]
fn with_no_viewer_the_ring_takes_everything_and_credit_comes_back_at_once() {
    let batch = RelayConfig::default().credit_batch;
    let mut t = T::new(RelayConfig::default());
    let mut credited = 0;
    for _ in 0..100 {
        credited += credits(&t.feed(Input::Output(vec![b'x'; 16 * 1024])));
        // Batched, but never more than a batch behind.
        assert!(t.relay.uncredited() < batch);
    }
    assert_eq!(credited + t.relay.uncredited(), 100 * 16 * KIB);
}

#[test]
fn credit_follows_the_fastest_viewer_and_a_stalled_one_is_dropped_as_slow() {
    let config = RelayConfig::default();
    let window = config.window;
    let limit = config.viewer_queue_limit;
    let mut t = T::new(config);
    t.join(1, Role::Operator); // fast: writes everything it is given
    t.join(2, Role::Watcher); // stalled: never writes
    let chunk = 8 * KIB;
    let mut sent = 0u64;
    let mut credited = 0u64;
    let mut fast_got = 0u64;
    let mut dropped = None;
    // The runner sends while its window has room, as the daemon does.
    while sent < 4 * limit {
        assert!(sent - credited <= window, "runner past its window");
        if sent - credited + chunk > window {
            panic!("credit stopped at {sent} bytes: the stalled viewer held the terminal back");
        }
        let out = t.feed(Input::Output(vec![b'y'; chunk as usize]));
        sent += chunk;
        credited += credits(&out);
        let got = live_bytes(&out, 1);
        fast_got += got;
        if let Some(o) = out.iter().find(|o| matches!(o, Output::DropViewer { .. })) {
            assert!(dropped.is_none());
            dropped = Some((sent, o.clone(), to_viewer(&out, 2), audits(&out)));
        }
        credited += credits(&t.feed(Input::ViewerWritten {
            viewer: 1,
            bytes: got,
        }));
    }
    assert_eq!(fast_got, sent, "the fast viewer got every byte");
    let (at, drop, told, audit) = dropped.expect("the stalled viewer was dropped");
    // Dropped as soon as it passed its limit, not before.
    assert!(at > limit && at <= limit + chunk, "dropped at {at}");
    assert_eq!(
        drop,
        Output::DropViewer {
            viewer: 2,
            reason: Reason::SlowViewer,
            close_code: viewer_close::SLOW_VIEWER
        }
    );
    assert_eq!(
        told.last(),
        Some(&ViewerMessage::Closed {
            reason: Reason::SlowViewer
        })
    );
    assert!(matches!(
        &audit[..],
        [Audit::SessionEnded {
            viewer: 2,
            why: Reason::SlowViewer,
            role: Role::Watcher,
            ..
        }]
    ));
    assert_eq!(t.relay.viewer_count(), 1);
}

#[test]
fn when_every_viewer_stalls_the_runner_waits_at_its_window() {
    let config = RelayConfig::default();
    let window = config.window;
    let mut t = T::new(config);
    t.join(1, Role::Operator);
    t.join(2, Role::Operator);
    let mut sent = 0;
    let mut credited = 0;
    while sent - credited + 4 * KIB <= window {
        credited += credits(&t.feed(Input::Output(vec![b'z'; 4096])));
        sent += 4 * KIB;
    }
    assert_eq!(credited, 0, "nobody drained anything");
    assert_eq!(t.relay.uncredited(), window);
    // Neither is dropped: a window is far below the queue limit.
    assert_eq!(t.relay.viewer_count(), 2);
    // The slower one writing a little gives that much back once it is a batch or the window
    // is full (it is).
    let out = t.feed(Input::ViewerWritten {
        viewer: 2,
        bytes: 1000,
    });
    assert_eq!(credits(&out), 1000);
    // The other one writing more gives back the difference only, once it makes a batch.
    let out = t.feed(Input::ViewerWritten {
        viewer: 1,
        bytes: 5000,
    });
    assert_eq!(credits(&out), 0);
    let out = t.feed(Input::ViewerWritten {
        viewer: 1,
        bytes: 70_000,
    });
    assert_eq!(credits(&out), 74_000);
}

#[test]
fn replay_bytes_are_written_before_live_ones_and_do_not_earn_credit() {
    let mut t = T::new(RelayConfig {
        credit_batch: 1,
        ..RelayConfig::default()
    });
    t.feed(Input::Output(vec![b'a'; 1000]));
    t.join(1, Role::Operator);
    t.feed(Input::Output(vec![b'b'; 500]));
    assert_eq!(t.relay.unwritten(1), Some(1500));
    // Writing the replay frees nothing the runner sent after the join.
    let out = t.feed(Input::ViewerWritten {
        viewer: 1,
        bytes: 1000,
    });
    assert_eq!(credits(&out), 0);
    assert_eq!(t.relay.uncredited(), 500);
    let out = t.feed(Input::ViewerWritten {
        viewer: 1,
        bytes: 500,
    });
    assert_eq!(credits(&out), 500);
    assert_eq!(t.relay.uncredited(), 0);
}

#[test]
fn the_last_viewer_leaving_frees_all_credit() {
    let mut t = T::new(RelayConfig::default());
    t.join(1, Role::Operator);
    t.feed(Input::Output(vec![0; 100_000]));
    assert_eq!(t.relay.uncredited(), 100_000);
    let out = t.feed(Input::ViewerLeft {
        viewer: 1,
        why: crate::terminal::Left::Dropped,
    });
    assert_eq!(credits(&out), 100_000);
}
