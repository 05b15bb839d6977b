use super::*;
use crate::keyset::{PinnedRoots, test_root};
use crate::sign::{FrameSigner, Signer};

const NOW: UnixTime = UnixTime(1_000);

fn keys() -> KeySet {
    let doc = test_root::key_set_document(1, UnixTime(0), UnixTime(2_000));
    KeySet::from_document(
        &doc,
        &PinnedRoots::default().with_test_root_if_local("localhost", true),
    )
    .unwrap()
}

fn cancel(run: &str) -> ServerFrame {
    ServerFrame::RunCancel {
        run_id: run.into(),
        reason: "requested".into(),
    }
}

fn signed(signer: &mut FrameSigner, frame: &ServerFrame) -> Vec<u8> {
    signer.sign(frame, &test_root::frame_signer()).unwrap()
}

#[test]
fn frames_verify_in_order() {
    let mut s = FrameSigner::new("sess-1");
    let mut v = FrameVerifier::new(keys(), "sess-1");
    for i in 1..=3 {
        let f = cancel(&format!("r{i}"));
        let got = v.verify(&signed(&mut s, &f), NOW).unwrap();
        assert_eq!(got.seq, i);
        assert_eq!(got.kid, test_root::FRAME_KID);
        assert_eq!(got.frame, f);
    }
    assert_eq!(v.last_seq(), 3);
}

#[test]
fn refusals_leave_state_intact() {
    let mut s = FrameSigner::new("sess-1");
    let mut v = FrameVerifier::new(keys(), "sess-1");
    let first = signed(&mut s, &cancel("r1"));
    let second = signed(&mut s, &cancel("r2"));
    v.verify(&second, NOW).unwrap();
    assert_eq!(
        v.verify(&second, NOW).unwrap_err().code(),
        "sequence_replayed"
    );
    assert_eq!(
        v.verify(&first, NOW).unwrap_err().code(),
        "sequence_out_of_order"
    );
    let tampered = String::from_utf8(signed(&mut s, &cancel("r3")))
        .unwrap()
        .replace("\"r3\"", "\"r4\"");
    assert_eq!(
        v.verify(tampered.as_bytes(), NOW).unwrap_err().code(),
        "bad_signature"
    );
    assert_eq!(v.last_seq(), 2, "refused frames never advance the sequence");
    // The next genuine frame (seq 4; 3 was tampered) still verifies.
    assert_eq!(
        v.verify(&signed(&mut s, &cancel("r5")), NOW).unwrap().seq,
        4
    );
}

#[test]
fn another_session_or_key_is_refused() {
    let mut other = FrameSigner::new("sess-2");
    let mut v = FrameVerifier::new(keys(), "sess-1");
    assert_eq!(
        v.verify(&signed(&mut other, &cancel("r1")), NOW)
            .unwrap_err()
            .code(),
        "session_mismatch"
    );
    let mut s = FrameSigner::new("sess-1");
    let by_unknown = s.sign(&cancel("r1"), &test_root::frame2_signer()).unwrap();
    assert_eq!(
        v.verify(&by_unknown, NOW).unwrap_err().code(),
        "unknown_kid"
    );
    let f = signed(&mut s, &cancel("r1"));
    assert_eq!(
        v.verify(&f, UnixTime(2_000)).unwrap_err().code(),
        "key_expired"
    );
}

#[test]
fn strict_json_rules_apply_to_signed_frames() {
    let mut v = FrameVerifier::new(keys(), "sess-1");
    let dup = br#"{"type":"revoked","reason":"a","reason":"b","sid":"sess-1","seq":1,"kid":"frame-test-1","sig":"x"}"#;
    assert_eq!(v.verify(dup, NOW).unwrap_err().code(), "duplicate_key");
    let float = br#"{"type":"revoked","reason":"a","n":1.0,"sid":"sess-1","seq":1,"kid":"frame-test-1","sig":"x"}"#;
    assert_eq!(
        v.verify(float, NOW).unwrap_err().code(),
        "float_not_allowed"
    );
    let short_sig = br#"{"type":"revoked","reason":"a","sid":"sess-1","seq":1,"kid":"frame-test-1","sig":"AAAA"}"#;
    assert_eq!(
        v.verify(short_sig, NOW).unwrap_err().code(),
        "bad_signature_encoding"
    );
    let no_seq =
        br#"{"type":"revoked","reason":"a","sid":"sess-1","kid":"frame-test-1","sig":"AAAA"}"#;
    assert_eq!(
        v.verify(no_seq, NOW).unwrap_err().code(),
        "bad_signature_encoding"
    );
}

#[test]
fn a_signed_unknown_type_is_a_protocol_error() {
    let signer = test_root::frame_signer();
    let value = json::parse_strict(
        br#"{"type":"run.explode","sid":"sess-1","seq":1,"kid":"frame-test-1"}"#,
    )
    .unwrap();
    let signed = crate::sign::sign_value(FRAME_DOMAIN, value, &signer).unwrap();
    let mut v = FrameVerifier::new(keys(), "sess-1");
    assert_eq!(
        v.verify(&signed.to_canonical(), NOW).unwrap_err().code(),
        "unknown_frame_type"
    );
    assert_eq!(v.last_seq(), 0);
    assert_eq!(signer.key_id(), "frame-test-1");
}

#[test]
fn batch_matches_one_by_one() {
    let mut s = FrameSigner::new("sess-1");
    let mut frames: Vec<Vec<u8>> = (0..20)
        .map(|i| signed(&mut s, &cancel(&format!("r{i}"))))
        .collect();
    // Break frame 7's signature and replay frame 3 at the end.
    frames[7] = String::from_utf8(frames[7].clone())
        .unwrap()
        .replace("\"r7\"", "\"rX\"")
        .into_bytes();
    frames.push(frames[3].clone());
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();

    let mut one = FrameVerifier::new(keys(), "sess-1");
    let expected: Vec<Result<VerifiedFrame, FrameError>> =
        refs.iter().map(|f| one.verify(f, NOW)).collect();
    let mut batch = FrameVerifier::new(keys(), "sess-1");
    let got = batch.verify_batch(&refs, NOW);
    assert_eq!(got, expected);
    assert_eq!(got[7].as_ref().unwrap_err().code(), "bad_signature");
    assert_eq!(
        got[20].as_ref().unwrap_err().code(),
        "sequence_out_of_order"
    );
    assert_eq!(batch.last_seq(), one.last_seq());

    // A clean batch takes the fast path.
    let clean: Vec<Vec<u8>> = (0..8)
        .map(|i| signed(&mut s, &cancel(&format!("c{i}"))))
        .collect();
    let refs: Vec<&[u8]> = clean.iter().map(|f| f.as_slice()).collect();
    assert!(batch.verify_batch(&refs, NOW).iter().all(Result::is_ok));
}

#[test]
fn small_order_r_is_refused_before_batching() {
    let mut identity = [0u8; 64];
    identity[0] = 1; // R = the identity point (0, 1)
    assert!(!r_is_strict(&Signature::from_bytes(&identity)));
    let mut neg_zero = identity;
    neg_zero[31] = 0x80; // (0, 1) with the sign bit set: non-canonical too
    assert!(!r_is_strict(&Signature::from_bytes(&neg_zero)));
    let mut big_y = [0xffu8; 64];
    big_y[31] = 0x7f; // y = 2^255 - 1 >= p
    assert!(!r_is_strict(&Signature::from_bytes(&big_y)));
    let genuine = test_root::frame_signer().sign(b"m").unwrap();
    assert!(r_is_strict(&Signature::from_bytes(&genuine)));
}
