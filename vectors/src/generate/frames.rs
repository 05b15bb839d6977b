//! `signed-frames.json`.

use outpost_core::json::{Value, parse_strict};
use outpost_core::keyset::test_root;
use outpost_core::sign::{FRAME_DOMAIN, Signer, sign_value, signing_input};
use outpost_core::wire::{
    CapabilitySource, CommandsGrant, Egress, Environment, FolderGrant, FolderMode, Grant,
    GrantLimits, PROTOCOL_VERSION, ServerFrame,
};

use super::{NOW, public_hex, raw};
use crate::model::{KeyEntry, SignedFrameCase, VectorFile};

const SESSION: &str = "sess_vectors_1";
const DAY: u64 = 86_400;

fn key1() -> KeyEntry {
    KeyEntry {
        kid: test_root::FRAME_KID.into(),
        public_key_hex: public_hex(test_root::FRAME_SECRET_HEX),
        secret_key_hex: Some(test_root::FRAME_SECRET_HEX.into()),
        not_before: NOW - DAY,
        not_after: NOW + 365 * DAY,
    }
}

fn key2() -> KeyEntry {
    KeyEntry {
        kid: test_root::FRAME2_KID.into(),
        public_key_hex: public_hex(test_root::FRAME2_SECRET_HEX),
        secret_key_hex: Some(test_root::FRAME2_SECRET_HEX.into()),
        not_before: NOW - DAY,
        not_after: NOW + 365 * DAY,
    }
}

fn grant() -> Grant {
    Grant {
        fs: vec![FolderGrant {
            path: "/home/ada/projects".into(),
            mode: FolderMode::Rw,
        }],
        egress: Egress::Allowlist {
            hosts: vec!["*.crates.io:443".into(), "github.com".into()],
        },
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits { max_concurrent: 2 },
        environments: None,
    }
}

/// The frame's body (typed) with the envelope members, unsigned.
fn envelope(frame: &ServerFrame, sid: &str, seq: u64, kid: &str) -> Value {
    let text = serde_json::to_vec(frame).expect("frames serialize");
    let mut value = parse_strict(&text).expect("frames are strict JSON");
    if let Value::Object(members) = &mut value {
        members.push(("sid".into(), Value::String(sid.into())));
        members.push(("seq".into(), Value::Int(seq as i64)));
        members.push(("kid".into(), Value::String(kid.into())));
    }
    value
}

fn sign(value: Value, signer: &dyn Signer) -> Value {
    sign_value(FRAME_DOMAIN, value, signer).expect("in-memory signing cannot fail")
}

/// Writes members in reverse order with spaces and `\u` escapes for non-ASCII: the same
/// object as the canonical form, sent differently.
fn scrambled(value: &Value) -> String {
    match value {
        Value::Object(members) => {
            let parts: Vec<String> = members
                .iter()
                .rev()
                .map(|(k, v)| {
                    format!(
                        "{} : {}",
                        scrambled(&Value::String(k.clone())),
                        scrambled(v)
                    )
                })
                .collect();
            format!("{{ {} }}", parts.join(" , "))
        }
        Value::Array(items) => {
            format!(
                "[ {} ]",
                items.iter().map(scrambled).collect::<Vec<_>>().join(", ")
            )
        }
        Value::String(s) => {
            let canonical =
                String::from_utf8(value.to_canonical()).expect("canonical JSON is UTF-8");
            if s.is_ascii() {
                canonical
            } else {
                canonical
                    .chars()
                    .map(|c| {
                        if c.is_ascii() {
                            c.to_string()
                        } else {
                            escape_utf16(c)
                        }
                    })
                    .collect()
            }
        }
        other => String::from_utf8(other.to_canonical()).expect("canonical JSON is UTF-8"),
    }
}

fn escape_utf16(c: char) -> String {
    let mut buf = [0u16; 2];
    c.encode_utf16(&mut buf)
        .iter()
        .map(|u| format!("\\u{u:04x}"))
        .collect()
}

struct Case {
    name: &'static str,
    error: Option<&'static str>,
    keys: Vec<KeyEntry>,
    signer: KeyEntry,
    previous_seq: u64,
    now: u64,
    bytes: Vec<u8>,
}

impl Case {
    fn ok(name: &'static str, bytes: Vec<u8>) -> Self {
        Case {
            name,
            error: None,
            keys: vec![key1()],
            signer: key1(),
            previous_seq: 0,
            now: NOW,
            bytes,
        }
    }

    fn bad(name: &'static str, error: &'static str, bytes: Vec<u8>) -> Self {
        Case {
            error: Some(error),
            ..Case::ok(name, bytes)
        }
    }

    fn into_case(self) -> SignedFrameCase {
        let signing_input_hex = self.error.is_none().then(|| {
            let mut v = parse_strict(&self.bytes).expect("valid cases parse");
            v.remove("sig");
            hex::encode(signing_input(FRAME_DOMAIN, &v))
        });
        SignedFrameCase {
            name: self.name.into(),
            valid: self.error.is_none(),
            error: self.error.map(String::from),
            keys: self.keys,
            public_key_hex: self.signer.public_key_hex,
            secret_key_hex: self.signer.secret_key_hex.unwrap_or_default(),
            session_id: SESSION.into(),
            previous_seq: self.previous_seq,
            now: self.now,
            frame: raw(&self.bytes),
            frame_hex: hex::encode(&self.bytes),
            signing_input_hex,
        }
    }
}

fn text(frame: &ServerFrame, seq: u64) -> Vec<u8> {
    sign(
        envelope(frame, SESSION, seq, test_root::FRAME_KID),
        &test_root::frame_signer(),
    )
    .to_canonical()
}

fn replace(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let s = String::from_utf8(bytes.to_vec()).expect("frames are UTF-8");
    assert!(s.contains(from), "{from} not in {s}");
    s.replacen(from, to, 1).into_bytes()
}

pub(super) fn file() -> VectorFile<SignedFrameCase> {
    let welcome = ServerFrame::Welcome {
        context_id: "ec_vectors".into(),
        protocol: PROTOCOL_VERSION,
        grant_version: 7,
        grant: grant(),
        heartbeat_secs: 15,
        features: Vec::new(),
    };
    let request = ServerFrame::RunRequest {
        run_id: "run_1".into(),
        environment: Environment::Shell,
        capability: CapabilitySource::Inline {
            manifest: "name: hello\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n".into(),
            files: vec![outpost_core::wire::InlineFile {
                path: "run.sh".into(),
                content_b64: outpost_core::b64::encode(b"echo \"h\xc3\xa9llo\"\n"),
            }],
        },
        timeout_ms: 90_000,
        shared_run: false,
        requester: "user_ada".into(),
    };
    let commit = ServerFrame::RunCommit {
        run_id: "run_1".into(),
    };
    let cancel = ServerFrame::RunCancel {
        run_id: "run_1".into(),
        reason: "requested".into(),
    };
    let update = ServerFrame::GrantUpdate {
        grant_version: 8,
        grant: Grant {
            egress: Egress::None,
            ..grant()
        },
    };
    let revoked = ServerFrame::Revoked {
        reason: "Révoqué par l'opérateur \u{1F512}\n\t\"quoted\"".into(),
    };

    let pty_input = ServerFrame::PtyInput {
        pty_id: "run_2".into(),
        data: outpost_core::b64::encode(b"echo $((6*7))\r\x03\x1b[A"),
    };
    let pty_resize = ServerFrame::PtyResize {
        pty_id: "run_2".into(),
        cols: 120,
        rows: 40,
    };
    let pty_credit = ServerFrame::PtyCredit {
        pty_id: "run_2".into(),
        bytes: 32_768,
    };
    let pty_close = ServerFrame::PtyClose {
        pty_id: "run_2".into(),
    };

    let wait_register = ServerFrame::WaitRegister {
        wait_id: "wait_1".into(),
        requester: "ada".into(),
        source: "async ({ ctx }) => (await ctx.fetch(\"http://127.0.0.1:8080/health\")).status === 200\n  && { resumeText: \"healthy \u{2714}\" }".into(),
        interval_ms: 30_000,
        expires_at_ms: Some(1_767_225_600_000),
        operator: true,
    };
    let wait_cancel = ServerFrame::WaitCancel {
        wait_id: "wait_1".into(),
    };
    let wait_ack = ServerFrame::WaitAck {
        wait_id: "wait_1".into(),
    };
    let control = ServerFrame::ControlRequest {
        control_id: "ctl_1".into(),
        action: "logs".into(),
        lines: 50,
    };

    let welcome_text = text(&welcome, 1);
    let commit_text = text(&commit, 3);
    let mut cases = vec![
        Case::ok("welcome", welcome_text.clone()),
        Case {
            previous_seq: 1,
            ..Case::ok("run_request_inline", text(&request, 2))
        },
        Case {
            previous_seq: 2,
            ..Case::ok("run_commit", commit_text.clone())
        },
        Case {
            previous_seq: 3,
            ..Case::ok("run_cancel", text(&cancel, 4))
        },
        Case {
            previous_seq: 4,
            ..Case::ok("grant_update", text(&update, 5))
        },
        Case {
            previous_seq: 5,
            ..Case::ok("revoked_with_escapes_and_non_ascii", text(&revoked, 6))
        },
        Case {
            previous_seq: 6,
            ..Case::ok("pty_input_keystrokes", text(&pty_input, 7))
        },
        Case {
            previous_seq: 7,
            ..Case::ok("pty_resize", text(&pty_resize, 8))
        },
        Case {
            previous_seq: 8,
            ..Case::ok("pty_credit", text(&pty_credit, 9))
        },
        Case {
            previous_seq: 9,
            ..Case::ok("pty_close", text(&pty_close, 10))
        },
        Case {
            previous_seq: 10,
            ..Case::ok("wait_register", text(&wait_register, 11))
        },
        Case {
            previous_seq: 11,
            ..Case::ok("wait_cancel", text(&wait_cancel, 12))
        },
        Case {
            previous_seq: 12,
            ..Case::ok("wait_ack", text(&wait_ack, 13))
        },
        Case {
            previous_seq: 13,
            ..Case::ok("control_request", text(&control, 14))
        },
        Case {
            previous_seq: 1,
            ..Case::ok(
                "sent_in_non_canonical_form",
                scrambled(&sign(
                    envelope(&revoked, SESSION, 9, test_root::FRAME_KID),
                    &test_root::frame_signer(),
                ))
                .into_bytes(),
            )
        },
        Case {
            keys: vec![key1(), key2()],
            signer: key2(),
            ..Case::ok(
                "rotation_second_key",
                sign(
                    envelope(&commit, SESSION, 1, test_root::FRAME2_KID),
                    &test_root::frame2_signer(),
                )
                .to_canonical(),
            )
        },
    ];

    // Refusals, one fault each.
    cases.push(Case::bad(
        "tampered_body",
        "bad_signature",
        replace(&commit_text, "run_1", "run_2"),
    ));
    cases.push(Case::bad(
        "tampered_seq",
        "bad_signature",
        replace(&commit_text, "\"seq\":3", "\"seq\":4"),
    ));
    cases.push(Case {
        signer: key2(),
        ..Case::bad(
            "wrong_kid_unknown_key",
            "unknown_kid",
            sign(
                envelope(&commit, SESSION, 1, test_root::FRAME2_KID),
                &test_root::frame2_signer(),
            )
            .to_canonical(),
        )
    });
    cases.push(Case {
        keys: vec![key1(), key2()],
        signer: key2(),
        ..Case::bad(
            "kid_of_another_key",
            "bad_signature",
            sign(
                envelope(&commit, SESSION, 1, test_root::FRAME_KID),
                &test_root::frame2_signer(),
            )
            .to_canonical(),
        )
    });
    cases.push(Case::bad(
        "wrong_session_id",
        "session_mismatch",
        sign(
            envelope(&commit, "sess_other", 1, test_root::FRAME_KID),
            &test_root::frame_signer(),
        )
        .to_canonical(),
    ));
    cases.push(Case {
        previous_seq: 3,
        ..Case::bad(
            "replayed_sequence",
            "sequence_replayed",
            commit_text.clone(),
        )
    });
    cases.push(Case {
        previous_seq: 5,
        ..Case::bad(
            "out_of_order_sequence",
            "sequence_out_of_order",
            commit_text.clone(),
        )
    });
    cases.push(Case {
        now: key1().not_after,
        ..Case::bad("expired_key", "key_expired", commit_text.clone())
    });
    cases.push(Case {
        now: key1().not_before - 1,
        ..Case::bad(
            "key_not_yet_valid",
            "key_not_yet_valid",
            commit_text.clone(),
        )
    });
    cases.push(Case::bad(
        "float_in_body",
        "float_not_allowed",
        replace(
            &welcome_text,
            "\"heartbeatSecs\":15",
            "\"heartbeatSecs\":15.0",
        ),
    ));
    cases.push(Case::bad(
        "exponent_in_body",
        "float_not_allowed",
        replace(
            &welcome_text,
            "\"heartbeatSecs\":15",
            "\"heartbeatSecs\":1e1",
        ),
    ));
    cases.push(Case::bad(
        "integer_beyond_2_53",
        "integer_out_of_range",
        replace(
            &welcome_text,
            "\"grantVersion\":7",
            "\"grantVersion\":9007199254740993",
        ),
    ));
    cases.push(Case::bad(
        "duplicate_key",
        "duplicate_key",
        replace(
            &commit_text,
            "\"runId\":\"run_1\"",
            "\"runId\":\"run_1\",\"runId\":\"run_9\"",
        ),
    ));
    cases.push(Case::bad(
        "lone_surrogate",
        "lone_surrogate",
        replace(&commit_text, "\"run_1\"", "\"run_\\ud800\""),
    ));
    let sig = {
        let v = parse_strict(&commit_text).expect("valid");
        v.get("sig")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    cases.push(Case::bad(
        "padded_signature_base64",
        "bad_signature_encoding",
        replace(&commit_text, &sig, &format!("{sig}==")),
    ));
    cases.push(Case::bad(
        "short_signature",
        "bad_signature_encoding",
        replace(&commit_text, &sig, &sig[..80]),
    ));
    cases.push(Case::bad(
        "missing_signature",
        "invalid_envelope",
        replace(&commit_text, &format!(",\"sig\":\"{sig}\""), ""),
    ));
    // Valid signatures over bodies that are not frames of this protocol.
    let signed_body = |body: &[u8]| {
        let mut v = parse_strict(body).expect("valid");
        if let Value::Object(m) = &mut v {
            m.push(("sid".into(), Value::String(SESSION.into())));
            m.push(("seq".into(), Value::Int(1)));
            m.push(("kid".into(), Value::String(test_root::FRAME_KID.into())));
        }
        sign(v, &test_root::frame_signer()).to_canonical()
    };
    cases.push(Case::bad(
        "signed_unknown_frame_type",
        "unknown_frame_type",
        signed_body(br#"{"type":"run.explode","runId":"run_1"}"#),
    ));
    cases.push(Case::bad(
        "signed_frame_missing_field",
        "invalid_frame",
        signed_body(br#"{"type":"run.commit"}"#),
    ));
    cases.push(Case::bad(
        "signed_frame_without_type",
        "missing_frame_type",
        signed_body(br#"{"runId":"run_1"}"#),
    ));
    // Signatures verify_strict refuses.
    let sig_bytes = outpost_core::b64::decode(&sig).expect("canonical");
    let mut small_r = sig_bytes.clone();
    small_r[..32].copy_from_slice(&{
        let mut identity = [0u8; 32];
        identity[0] = 1;
        identity
    });
    cases.push(Case::bad(
        "small_order_r",
        "bad_signature",
        replace(&commit_text, &sig, &outpost_core::b64::encode(&small_r)),
    ));
    let mut big_s = sig_bytes.clone();
    big_s[32..].copy_from_slice(&[0xff; 32]);
    cases.push(Case::bad(
        "s_not_below_group_order",
        "bad_signature",
        replace(&commit_text, &sig, &outpost_core::b64::encode(&big_s)),
    ));
    // Non-canonical base64url: non-zero trailing bits, and the standard alphabet.
    let mut trailing = sig.clone().into_bytes();
    let last = trailing.len() - 1;
    trailing[last] += 1;
    cases.push(Case::bad(
        "signature_base64_trailing_bits",
        "bad_signature_encoding",
        replace(
            &commit_text,
            &sig,
            std::str::from_utf8(&trailing).expect("ASCII"),
        ),
    ));
    cases.push(Case::bad(
        "signature_standard_base64_alphabet",
        "bad_signature_encoding",
        replace(&commit_text, &sig, &format!("+{}", &sig[1..])),
    ));
    let deep = format!(
        "{{\"type\":\"revoked\",\"reason\":\"x\",\"extra\":{}{}}}",
        "[".repeat(40),
        "]".repeat(40)
    );
    cases.push(Case::bad("nesting_too_deep", "too_deep", deep.into_bytes()));

    VectorFile {
        kind: "signed-frames".into(),
        description: "Signed server frames. Trust `keys` (each valid over [not_before, not_after)), \
            expect session `session_id`, treat `previous_seq` as the last accepted sequence number, \
            and verify the bytes `frame_hex` at wall time `now`. Valid cases: the signed bytes are \
            `signing_input_hex` (\"outpost server frame v1\" 0x00, then the RFC 8785 canonical JSON of \
            the frame without `sig`) and Ed25519 over them with `secret_key_hex` gives `sig`. Invalid \
            cases must be refused with `error`."
            .into(),
        cases: cases.into_iter().map(Case::into_case).collect(),
    }
}
