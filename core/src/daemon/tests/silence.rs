//! A silent server is noticed: no frame and no ping for three heartbeats closes the
//! connection (1001) and schedules a reconnect.

use super::*;
use crate::daemon::SILENT_HEARTBEATS;

fn closes(outputs: &[Output]) -> Vec<u16> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Close { code, .. } => Some(*code),
            _ => None,
        })
        .collect()
}

#[test]
fn three_silent_heartbeats_close_the_connection_and_reconnect() {
    let mut s = Server::ready(2);
    assert_eq!(SILENT_HEARTBEATS, 3);
    // The daemon's own heartbeats go out; the server says nothing back.
    for _ in 0..2 {
        let out = s.advance(Duration::from_secs(15));
        assert_eq!(sent(&out), ["status"]);
        assert!(closes(&out).is_empty());
    }
    let out = s.advance(Duration::from_secs(14));
    assert!(closes(&out).is_empty(), "44 s is not yet three heartbeats");
    assert!(s.daemon.is_ready());
    let out = s.advance(Duration::from_secs(1));
    assert_eq!(closes(&out), [close_code::GOING_AWAY], "{out:?}");
    assert!(out.contains(&Output::Event(Event::ServerSilent {
        silent_for: Duration::from_secs(45)
    })));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Event(Event::Disconnected { .. }))),
        "a reconnect is scheduled: {out:?}"
    );
    assert!(!s.daemon.is_ready());
}

#[test]
fn a_ping_or_a_frame_restarts_the_silence() {
    let mut s = Server::ready(2);
    s.advance(Duration::from_secs(30));
    s.input(Input::ServerAlive);
    let out = s.advance(Duration::from_secs(44));
    assert!(closes(&out).is_empty(), "the ping at 30 s counts: {out:?}");
    s.send(ServerFrame::GrantUpdate {
        grant_version: 2,
        grant: grant(8),
    });
    let out = s.advance(Duration::from_secs(44));
    assert!(closes(&out).is_empty(), "so does a frame: {out:?}");
    let out = s.advance(Duration::from_secs(1));
    assert_eq!(closes(&out), [close_code::GOING_AWAY]);
}
