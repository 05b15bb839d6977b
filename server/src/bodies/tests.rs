//! The body decoders against hand-written bodies: what each accepts and the code of each refusal.

use super::*;

#[test]
fn a_share_body_is_all_members_and_nothing_else() {
    assert!(decode_share(br#"{"allMembers":true}"#).unwrap().all_members);
    assert!(
        !decode_share(br#"{"allMembers":false}"#)
            .unwrap()
            .all_members
    );
    for bad in [
        &br#"{}"#[..],
        br#"{"allMembers":"on"}"#,
        br#"{"allMembers":true,"other":1}"#,
        br#"{"allMembers":true,"allMembers":false}"#,
        br#"[true]"#,
    ] {
        let e = decode_share(bad).expect_err("refused");
        assert!(
            matches!(e.code(), "invalid_body" | "duplicate_key"),
            "{e} for {}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn an_array_where_a_structure_is_expected_is_refused() {
    let grant = br#"{"egress":{"mode":"none"},"limits":[1]}"#;
    let e = decode_grant(grant).expect_err("limits is an array");
    assert_eq!(e.code(), "invalid_body");
    assert!(e.message().contains("limits"), "{e}");
    let ok = decode_grant(br#"{"egress":{"mode":"none"},"limits":{"maxConcurrent":1}}"#)
        .expect("a grant");
    assert_eq!(ok.limits.max_concurrent, 1);
    assert_eq!(
        decode_chain(b"[[\"cloud\"]]").expect_err("an array").code(),
        "invalid_body"
    );
}

#[test]
fn strict_json_codes_come_through() {
    let cases: [(&[u8], &str); 5] = [
        (b"{", "truncated"),
        (b"{\"chain\":[],\"chain\":[]}", "duplicate_key"),
        (b"{\"chain\":[],\"x\":1.5}", "float_not_allowed"),
        (b"", "invalid_body"),
        (b"7", "invalid_body"),
    ];
    for (bytes, code) in cases {
        assert_eq!(
            decode_chain(bytes).expect_err("refused").code(),
            code,
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[test]
fn names_scopes_and_ranges_are_checked() {
    assert_eq!(
        decode_user(br#"{"name":"Ada"}"#).expect_err("bad").code(),
        "invalid_name"
    );
    assert_eq!(
        decode_user(br#"{"name":"ada","scopes":["root"]}"#)
            .expect_err("bad")
            .code(),
        "unknown_scope"
    );
    assert_eq!(decode_user(br#"{"name":"ada"}"#).expect("ok").scopes, None);
    let key = b64::encode(
        outpost_core::sign::Ed25519Signer::from_seed("k", [7; 32])
            .verifying_key()
            .as_bytes(),
    );
    let body = format!(r#"{{"name":"box","publicKey":"{key}","maxConcurrent":9}}"#);
    assert_eq!(
        decode_registration(body.as_bytes())
            .expect_err("too many slots")
            .code(),
        "invalid_body"
    );
    let body = format!(r#"{{"name":"box","publicKey":"{key}"}}"#);
    let reg = decode_registration(body.as_bytes()).expect("a registration");
    assert_eq!(reg.max_concurrent, DEFAULT_SLOTS);
    let weak = b64::encode(&[0u8; 32]);
    let body = format!(r#"{{"name":"box","publicKey":"{weak}"}}"#);
    assert_eq!(
        decode_registration(body.as_bytes())
            .expect_err("a weak key")
            .code(),
        "invalid_body"
    );
}

#[test]
fn an_execution_request_is_checked_before_anything_is_stored() {
    let manifest = "name: hi\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n";
    let body = |extra: &str| {
        format!(
            r#"{{"capability":{{"kind":"inline","manifest":{manifest:?},"files":[{{"path":"run.sh","contentB64":"ZWNobyBoaQ"}}]}}{extra}}}"#
        )
    };
    let ok = decode_execution_request(body("").as_bytes()).expect("a request");
    assert_eq!(ok.wait_secs, DEFAULT_WAIT_SECS);
    assert!(!ok.wait);
    let cases = [
        (",\"waitSecs\":301", "invalid_body"),
        (
            ",\"whenOffline\":\"queue\",\"queueMinutes\":0",
            "queue_minutes_out_of_range",
        ),
        (",\"whenOffline\":\"later\"", "invalid_body"),
    ];
    for (extra, code) in cases {
        assert_eq!(
            decode_execution_request(body(extra).as_bytes())
                .expect_err("refused")
                .code(),
            code,
            "{extra}"
        );
    }
    let bad_path = body("").replace("run.sh\",\"contentB64", "../x\",\"contentB64");
    assert_eq!(
        decode_execution_request(bad_path.as_bytes())
            .expect_err("an unsafe path")
            .code(),
        "invalid_body"
    );
}

#[test]
fn a_job_hop_names_its_run_an_op_and_a_job_and_nothing_else() {
    let job = decode_job_authorize(br#"{"runId":"run_1","op":"kill","jobId":3}"#).unwrap();
    assert_eq!(
        job,
        JobAuthorize {
            run_id: "run_1".into(),
            op: JobOp::Kill,
            job_id: 3
        }
    );
    for bad in [
        &br#"{"runId":"run_1","op":"poll"}"#[..],
        br#"{"runId":"run_1","op":"start","jobId":1}"#,
        br#"{"runId":"run_1","op":"poll","jobId":-1}"#,
        br#"{"runId":"run_1","op":"poll","jobId":1,"command":"x"}"#,
        br#"{"runId":"run_1","op":"poll","jobId":1,"jobId":2}"#,
    ] {
        let e = decode_job_authorize(bad).expect_err("refused");
        assert!(
            matches!(e.code(), "invalid_body" | "duplicate_key"),
            "{e} for {}",
            String::from_utf8_lossy(bad)
        );
    }
}
