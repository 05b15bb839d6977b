//! Key-set versions only go up (PROTOCOL §7): a set older than the one in force is refused,
//! so a key only that older set listed never signs anything the daemon acts on.

use super::*;
use crate::keyset::{FrameKey, KeySet, PinnedRoots};
use crate::time::UnixTime;

fn frame_key(signer: &crate::sign::Ed25519Signer, kid: &str) -> FrameKey {
    FrameKey {
        kid: kid.into(),
        public_key: signer.verifying_key(),
        not_before: UnixTime(0),
        not_after: UnixTime(1 << 40),
    }
}

/// A set of `version` listing the test frame keys named, signed by the test root.
fn key_set(version: u64, second_key: bool) -> KeySet {
    let mut keys = vec![frame_key(&test_root::frame_signer(), test_root::FRAME_KID)];
    if second_key {
        keys.push(frame_key(
            &test_root::frame2_signer(),
            test_root::FRAME2_KID,
        ));
    }
    let doc = KeySet::sign_document(version, &keys, &test_root::root_signer()).unwrap();
    let roots = PinnedRoots::default().with_test_root_if_local("localhost", true);
    let set = KeySet::from_document(&doc, &roots).unwrap();
    assert_eq!(set.document().map(str::as_bytes), Some(&doc[..]));
    set
}

#[test]
fn a_lower_key_set_version_is_refused_and_its_retired_key_signs_nothing() {
    let mut s = Server::ready(2);
    // Version 2 retires frame-test-2; version 1 still listed it.
    assert!(s.input(Input::KeysUpdated(key_set(2, false))).is_empty());
    assert_eq!(s.daemon.key_set().version(), 2);
    let out = s.input(Input::KeysUpdated(key_set(1, true)));
    assert_eq!(
        out,
        [Output::Event(Event::KeySetRefused {
            held: 2,
            offered: 1
        })]
    );
    assert!(
        s.input(Input::KeysUpdated(key_set(1, true))).is_empty(),
        "the same refusal is reported once"
    );
    assert_eq!(s.daemon.key_set().version(), 2, "the set in force stays");
    // A genuine frame signed by the key only version 1 listed.
    s.key = test_root::frame2_signer();
    let out = s.request("r1");
    assert!(
        out.iter().any(|o| matches!(
            o,
            Output::Event(Event::ProtocolViolation {
                code: "unknown_kid",
                ..
            })
        )),
        "{out:?}"
    );
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Close {
            code: close_code::PROTOCOL_ERROR,
            ..
        }
    )));
    assert!(sent(&out).is_empty(), "nothing is accepted: {out:?}");
    assert_eq!(s.daemon.slots_used(), 0);
}

#[test]
fn a_higher_key_set_version_is_taken_at_once_by_the_live_connection() {
    let mut s = Server::ready(2);
    s.input(Input::KeysUpdated(key_set(3, true)));
    s.key = test_root::frame2_signer();
    assert_eq!(sent(&s.request("r1")), ["run.accept"]);
}
