use super::*;
use crate::sign::Ed25519Signer;

fn frame_key(signer: &Ed25519Signer, kid: &str, nb: u64, na: u64) -> FrameKey {
    FrameKey {
        kid: kid.into(),
        public_key: signer.verifying_key(),
        not_before: UnixTime(nb),
        not_after: UnixTime(na),
    }
}

fn test_roots() -> PinnedRoots {
    PinnedRoots::default().with_test_root_if_local("localhost", true)
}

#[test]
fn a_signed_set_verifies_and_keys_obey_their_windows() {
    let doc = test_root::key_set_document(1, UnixTime(100), UnixTime(200));
    let set = KeySet::from_document(&doc, &test_roots()).unwrap();
    assert_eq!(set.version(), 1);
    assert_eq!(set.root(), test_root::ROOT_ID);
    assert!(set.key_for(test_root::FRAME_KID, UnixTime(100)).is_ok());
    assert!(set.key_for(test_root::FRAME_KID, UnixTime(199)).is_ok());
    assert_eq!(
        set.key_for(test_root::FRAME_KID, UnixTime(200))
            .unwrap_err()
            .code(),
        "key_expired"
    );
    assert_eq!(
        set.key_for(test_root::FRAME_KID, UnixTime(99))
            .unwrap_err()
            .code(),
        "key_not_yet_valid"
    );
    assert_eq!(
        set.key_for("nope", UnixTime(150)).unwrap_err().code(),
        "unknown_kid"
    );
}

#[test]
fn rotation_overlap_keeps_both_keys_valid() {
    let k1 = test_root::frame_signer();
    let k2 = test_root::frame2_signer();
    let doc = KeySet::sign_document(
        2,
        &[
            frame_key(&k1, "frame-test-1", 0, 150),
            frame_key(&k2, "frame-test-2", 100, 300),
        ],
        &test_root::root_signer(),
    )
    .unwrap();
    let set = KeySet::from_document(&doc, &test_roots()).unwrap();
    assert!(set.key_for("frame-test-1", UnixTime(120)).is_ok());
    assert!(set.key_for("frame-test-2", UnixTime(120)).is_ok());
    assert!(set.key_for("frame-test-1", UnixTime(160)).is_err());
    assert!(set.key_for("frame-test-2", UnixTime(160)).is_ok());
}

#[test]
fn roots_decide() {
    let doc = test_root::key_set_document(1, UnixTime(0), UnixTime(10));
    let err = KeySet::from_document(&doc, &PinnedRoots::default()).unwrap_err();
    assert_eq!(err.code(), "unknown_root");
    // The switch alone does not make example.com trust the test root.
    let roots = PinnedRoots::default().with_test_root_if_local("example.com", true);
    assert_eq!(
        KeySet::from_document(&doc, &roots).unwrap_err().code(),
        "unknown_root"
    );
    let roots = PinnedRoots::default().with_test_root_if_local("localhost", true);
    assert!(KeySet::from_document(&doc, &roots).is_ok());
    // Another key claiming the test root's id does not verify.
    let impostor = Ed25519Signer::from_seed(test_root::ROOT_ID, [9; 32]);
    let forged = KeySet::sign_document(
        1,
        &[frame_key(&test_root::frame_signer(), "frame-test-1", 0, 10)],
        &impostor,
    )
    .unwrap();
    assert_eq!(
        KeySet::from_document(&forged, &test_roots())
            .unwrap_err()
            .code(),
        "bad_root_signature"
    );
}

#[test]
fn tampering_breaks_the_root_signature() {
    let doc = test_root::key_set_document(1, UnixTime(0), UnixTime(10));
    let text = String::from_utf8(doc)
        .unwrap()
        .replace("\"notAfter\":10", "\"notAfter\":99999");
    assert_eq!(
        KeySet::from_document(text.as_bytes(), &test_roots())
            .unwrap_err()
            .code(),
        "bad_root_signature"
    );
}

#[test]
fn bad_content_is_refused_after_the_signature() {
    let root = test_root::root_signer();
    let k = test_root::frame_signer();
    let dup = KeySet::sign_document(
        1,
        &[frame_key(&k, "a", 0, 1), frame_key(&k, "a", 0, 1)],
        &root,
    )
    .unwrap();
    assert_eq!(
        KeySet::from_document(&dup, &test_roots())
            .unwrap_err()
            .code(),
        "duplicate_kid"
    );
    let empty_window = KeySet::sign_document(1, &[frame_key(&k, "a", 5, 5)], &root).unwrap();
    assert_eq!(
        KeySet::from_document(&empty_window, &test_roots())
            .unwrap_err()
            .code(),
        "invalid_key_set"
    );
    assert_eq!(
        KeySet::from_document(b"{\"type\":\"outpost.key-set\"", &test_roots())
            .unwrap_err()
            .code(),
        "truncated"
    );
}

/// Signs an arbitrary document with the test root, for content the typed writer cannot
/// produce.
fn signed_raw(doc: &str) -> Vec<u8> {
    let value = crate::json::parse_strict(doc.as_bytes()).unwrap();
    crate::sign::sign_value(KEY_SET_DOMAIN, value, &test_root::root_signer())
        .unwrap()
        .to_canonical()
}

#[test]
fn wrong_length_and_weak_keys_are_named() {
    let short = crate::b64::encode(&[1u8; 31]);
    let doc = signed_raw(&format!(
        r#"{{"type":"outpost.key-set","version":1,"root":"root-test-1","keys":[{{"kid":"a","publicKey":"{short}","notBefore":0,"notAfter":9}}]}}"#
    ));
    match KeySet::from_document(&doc, &test_roots()).unwrap_err() {
        KeySetError::InvalidField { field, reason } => {
            assert_eq!(field, "keys[0].publicKey");
            assert!(reason.contains("32"), "{reason}");
        }
        other => panic!("expected an invalid field, got {other:?}"),
    }
    // The identity point: a public key of small order.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let weak = crate::b64::encode(&identity);
    let doc = signed_raw(&format!(
        r#"{{"type":"outpost.key-set","version":1,"root":"root-test-1","keys":[{{"kid":"a","publicKey":"{weak}","notBefore":0,"notAfter":9}}]}}"#
    ));
    assert_eq!(
        KeySet::from_document(&doc, &test_roots()).unwrap_err(),
        KeySetError::WeakKey("a".into())
    );
    let not_a_set =
        signed_raw(r#"{"type":"something-else","version":1,"root":"root-test-1","keys":[]}"#);
    assert_eq!(
        KeySet::from_document(&not_a_set, &test_roots())
            .unwrap_err()
            .code(),
        "invalid_key_set"
    );
}

#[test]
fn signers_never_print_their_secret() {
    let shown = format!("{:?}", test_root::root_signer());
    assert!(!shown.contains(test_root::ROOT_SECRET_HEX));
    assert!(shown.contains(test_root::ROOT_ID));
}
