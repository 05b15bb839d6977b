//! `key-sets.json`.

use outpost_core::keyset::{FrameKey, KeySet, test_root};
use outpost_core::sign::Signer;
use outpost_core::time::UnixTime;

use super::{
    NOW, OTHER_ROOT_SECRET_HEX, VECTORS_ROOT_ID, VECTORS_ROOT_SECRET_HEX, public_hex, raw, signer,
};
use crate::model::{KeyEntry, KeySetCase, Lookup, RootEntry, VectorFile};

const DAY: u64 = 86_400;

fn entry(kid: &str, secret_hex: &str, not_before: u64, not_after: u64) -> KeyEntry {
    KeyEntry {
        kid: kid.into(),
        public_key_hex: public_hex(secret_hex),
        secret_key_hex: Some(secret_hex.into()),
        not_before,
        not_after,
    }
}

fn frame_key(e: &KeyEntry) -> FrameKey {
    let secret = e.secret_key_hex.as_deref().unwrap_or_default();
    FrameKey {
        kid: e.kid.clone(),
        public_key: signer(&e.kid, secret).verifying_key(),
        not_before: UnixTime(e.not_before),
        not_after: UnixTime(e.not_after),
    }
}

fn document(version: u64, keys: &[KeyEntry], root: &dyn Signer) -> Vec<u8> {
    let keys: Vec<FrameKey> = keys.iter().map(frame_key).collect();
    KeySet::sign_document(version, &keys, root).expect("in-memory signing cannot fail")
}

fn test_root_entry() -> RootEntry {
    RootEntry {
        id: test_root::ROOT_ID.into(),
        public_key_hex: public_hex(test_root::ROOT_SECRET_HEX),
    }
}

fn vectors_root_entry() -> RootEntry {
    RootEntry {
        id: VECTORS_ROOT_ID.into(),
        public_key_hex: public_hex(VECTORS_ROOT_SECRET_HEX),
    }
}

fn vectors_root() -> outpost_core::sign::Ed25519Signer {
    signer(VECTORS_ROOT_ID, VECTORS_ROOT_SECRET_HEX)
}

/// Signs arbitrary document text with the vectors root (for content the typed writer
/// cannot produce).
fn signed_raw(doc: &str) -> Vec<u8> {
    let value = outpost_core::json::parse_strict(doc.as_bytes()).expect("valid JSON");
    outpost_core::sign::sign_value(outpost_core::sign::KEY_SET_DOMAIN, value, &vectors_root())
        .expect("in-memory signing cannot fail")
        .to_canonical()
}

struct Case {
    name: &'static str,
    error: Option<&'static str>,
    pinned: Vec<RootEntry>,
    trust_test_root: bool,
    host: &'static str,
    root_secret: &'static str,
    doc: Vec<u8>,
    lookups: Vec<Lookup>,
    keys: Vec<KeyEntry>,
}

impl Case {
    fn new(name: &'static str, keys: Vec<KeyEntry>, lookups: Vec<Lookup>) -> Self {
        Case {
            name,
            error: None,
            pinned: vec![vectors_root_entry()],
            trust_test_root: false,
            host: "outpost.example",
            root_secret: VECTORS_ROOT_SECRET_HEX,
            doc: document(1, &keys, &vectors_root()),
            lookups,
            keys,
        }
    }

    fn into_case(self) -> KeySetCase {
        KeySetCase {
            name: self.name.into(),
            valid: self.error.is_none(),
            error: self.error.map(String::from),
            pinned_roots: self.pinned,
            trust_test_root: self.trust_test_root,
            server_host: self.host.into(),
            signing_root_secret_key_hex: self.root_secret.into(),
            document: raw(&self.doc).expect("key-set documents are JSON"),
            document_hex: hex::encode(&self.doc),
            lookups: self.lookups,
            expected_keys: self.error.is_none().then(|| {
                self.keys
                    .into_iter()
                    .map(|k| KeyEntry {
                        secret_key_hex: None,
                        ..k
                    })
                    .collect()
            }),
        }
    }
}

fn at(kid: &str, now: u64) -> Lookup {
    Lookup {
        kid: kid.into(),
        now,
    }
}

fn public_hex_b64(k: &KeyEntry) -> String {
    outpost_core::b64::encode(&hex::decode(&k.public_key_hex).expect("hex"))
}

pub(super) fn file() -> crate::model::VectorFile<KeySetCase> {
    let k1 = entry(
        test_root::FRAME_KID,
        test_root::FRAME_SECRET_HEX,
        NOW - DAY,
        NOW + 30 * DAY,
    );
    let k2 = entry(
        test_root::FRAME2_KID,
        test_root::FRAME2_SECRET_HEX,
        NOW + 20 * DAY,
        NOW + 60 * DAY,
    );
    let other_root = signer("root-other", OTHER_ROOT_SECRET_HEX);
    let impostor = signer(VECTORS_ROOT_ID, OTHER_ROOT_SECRET_HEX);
    let by_test_root =
        |name: &'static str, host: &'static str, trust: bool, error: Option<&'static str>| Case {
            pinned: vec![],
            trust_test_root: trust,
            host,
            error,
            root_secret: test_root::ROOT_SECRET_HEX,
            doc: document(1, std::slice::from_ref(&k1), &test_root::root_signer()),
            ..Case::new(
                name,
                vec![k1.clone()],
                if error.is_none() {
                    vec![at(&k1.kid, NOW)]
                } else {
                    vec![]
                },
            )
        };

    let mut cases = vec![
        Case::new("valid_set", vec![k1.clone()], vec![at(&k1.kid, NOW)]),
        Case::new(
            "rotation_overlap",
            vec![k1.clone(), k2.clone()],
            vec![at(&k1.kid, NOW + 25 * DAY), at(&k2.kid, NOW + 25 * DAY)],
        ),
        by_test_root("test_root_on_localhost", "localhost:8443", true, None),
        by_test_root(
            "test_root_on_localhost_upper_case_dot",
            "LOCALHOST.",
            true,
            None,
        ),
        by_test_root("test_root_on_ipv4_loopback", "127.0.0.2", true, None),
        by_test_root("test_root_on_ipv6_loopback", "[::1]:8443", true, None),
        by_test_root(
            "test_root_ignored_for_remote_host",
            "example.com",
            true,
            Some("unknown_root"),
        ),
        by_test_root(
            "test_root_ignored_for_lookalike_host",
            "localhost.example.com",
            true,
            Some("unknown_root"),
        ),
        by_test_root(
            "test_root_ignored_for_unspecified_address",
            "0.0.0.0",
            true,
            Some("unknown_root"),
        ),
        by_test_root(
            "test_root_without_the_switch",
            "localhost",
            false,
            Some("unknown_root"),
        ),
        Case {
            pinned: vec![test_root_entry()],
            ..by_test_root(
                "test_root_pinned_explicitly_is_ignored",
                "outpost.example",
                false,
                Some("unknown_root"),
            )
        },
    ];
    cases.push(Case {
        error: Some("key_expired"),
        ..Case::new(
            "expired_key",
            vec![k1.clone()],
            vec![at(&k1.kid, k1.not_after)],
        )
    });
    cases.push(Case {
        error: Some("key_not_yet_valid"),
        ..Case::new(
            "key_not_yet_valid",
            vec![k1.clone(), k2.clone()],
            vec![at(&k2.kid, NOW)],
        )
    });
    cases.push(Case {
        error: Some("unknown_kid"),
        ..Case::new(
            "unknown_kid",
            vec![k1.clone()],
            vec![at("frame-test-9", NOW)],
        )
    });
    cases.push(Case {
        error: Some("unknown_root"),
        root_secret: OTHER_ROOT_SECRET_HEX,
        doc: document(1, std::slice::from_ref(&k1), &other_root),
        ..Case::new("unknown_root", vec![k1.clone()], vec![])
    });
    cases.push(Case {
        error: Some("bad_root_signature"),
        root_secret: OTHER_ROOT_SECRET_HEX,
        doc: document(1, std::slice::from_ref(&k1), &impostor),
        ..Case::new("bad_root_signature", vec![k1.clone()], vec![])
    });
    let tampered = {
        let genuine = String::from_utf8(document(1, std::slice::from_ref(&k1), &vectors_root()))
            .expect("UTF-8");
        genuine
            .replacen(
                &format!("\"notAfter\":{}", k1.not_after),
                "\"notAfter\":9007199254740991",
                1,
            )
            .into_bytes()
    };
    cases.push(Case {
        error: Some("bad_root_signature"),
        doc: tampered,
        ..Case::new("tampered_window", vec![k1.clone()], vec![])
    });
    cases.push(Case {
        error: Some("duplicate_kid"),
        doc: document(1, &[k1.clone(), k1.clone()], &vectors_root()),
        ..Case::new("duplicate_kid", vec![k1.clone()], vec![])
    });
    let key_doc = |public_key: &str| {
        format!(
            r#"{{"type":"outpost.key-set","version":1,"root":"{VECTORS_ROOT_ID}","keys":[{{"kid":"frame-x","publicKey":"{public_key}","notBefore":{},"notAfter":{}}}]}}"#,
            NOW - DAY,
            NOW + DAY
        )
    };
    let mut identity = [0u8; 32];
    identity[0] = 1;
    cases.push(Case {
        error: Some("weak_key"),
        doc: signed_raw(&key_doc(&outpost_core::b64::encode(&identity))),
        ..Case::new("weak_key_small_order", vec![k1.clone()], vec![])
    });
    cases.push(Case {
        error: Some("invalid_key_set"),
        doc: signed_raw(&key_doc(&outpost_core::b64::encode(&[7u8; 31]))),
        ..Case::new("public_key_wrong_length", vec![k1.clone()], vec![])
    });
    let mut not_on_curve = [0u8; 32];
    not_on_curve[0] = 2; // y = 2 has no x on edwards25519
    cases.push(Case {
        error: Some("invalid_key_set"),
        doc: signed_raw(&key_doc(&outpost_core::b64::encode(&not_on_curve))),
        ..Case::new("public_key_not_a_point", vec![k1.clone()], vec![])
    });
    cases.push(Case {
        error: Some("invalid_key_set"),
        doc: signed_raw(&key_doc(&public_hex_b64(&k1)).replace("outpost.key-set", "outpost.frame")),
        ..Case::new("wrong_document_type", vec![k1.clone()], vec![])
    });

    VectorFile {
        kind: "key-sets".into(),
        description: "Server frame key sets. The daemon pins `pinned_roots` (never the test root \
            root-test-1, which is dropped from that list by id or key), plus the test root only \
            if `trust_test_root` is true and `server_host` is localhost or a loopback address. Read `document_hex`: its `root` must be pinned and its `sig` must \
            verify under that root over \"outpost key set v1\" 0x00 followed by the canonical JSON \
            of the document without `sig`. Then look up each of `lookups` (a key is valid over \
            [notBefore, notAfter)). A valid case yields `expected_keys` and every lookup succeeds; \
            an invalid one fails reading or at a lookup with `error`."
            .into(),
        cases: cases.into_iter().map(Case::into_case).collect(),
    }
}
