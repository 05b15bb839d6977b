use super::*;

#[test]
fn daemon_frames_round_trip() {
    let frames = vec![
        DaemonFrame::Hello {
            protocol: PROTOCOL_VERSION,
            features: vec!["fs".into()],
            max_concurrent: 2,
            held_runs: vec!["r1".into()],
            pending_results: vec![],
            environments: vec![Environment::Shell],
            paused: false,
        },
        DaemonFrame::RunReject {
            run_id: "r2".into(),
            code: "busy".into(),
            message: "every slot is taken".into(),
        },
        DaemonFrame::RunResult {
            run_id: "r1".into(),
            result: RunResult {
                status: RunStatus::Exited,
                exit_code: Some(3),
                signal: None,
                stdout: "hi\n".into(),
                stderr: String::new(),
                truncated: false,
                timing: Timing {
                    queue_ms: 1,
                    setup_ms: 2,
                    execute_ms: 3,
                    daemon_ms: 6,
                    ..Timing::default()
                },
                error: None,
                egress_denied: Vec::new(),
            },
        },
    ];
    for f in frames {
        let json = f.to_json();
        assert_eq!(DaemonFrame::from_json(&json).unwrap(), f);
    }
}

#[test]
fn field_names_are_camel_case_and_typed() {
    let json = DaemonFrame::Status {
        slots_used: 1,
        slots_total: 2,
        draining: false,
        paused: false,
    }
    .to_json();
    assert_eq!(
        std::str::from_utf8(&json).unwrap(),
        r#"{"type":"status","slotsUsed":1,"slotsTotal":2,"draining":false}"#
    );
}

#[test]
fn unknown_fields_are_ignored() {
    let f = DaemonFrame::from_json(br#"{"type":"run.accept","runId":"r1","future":{"x":[1]}}"#)
        .unwrap();
    assert_eq!(
        f,
        DaemonFrame::RunAccept {
            run_id: "r1".into()
        }
    );
}

#[test]
fn bad_frames_get_precise_errors() {
    let code = |b: &[u8]| DaemonFrame::from_json(b).unwrap_err().code();
    assert_eq!(
        code(br#"{"type":"run.explode","runId":"r1"}"#),
        "unknown_frame_type"
    );
    assert_eq!(code(br#"{"runId":"r1"}"#), "missing_frame_type");
    assert_eq!(code(br#"{"type":"run.accept"}"#), "invalid_frame");
    assert_eq!(code(br#"{"type":"run.accept","runId":7}"#), "invalid_frame");
    assert_eq!(code(br#"{"type":"run.accept""#), "truncated");
    assert_eq!(code(b"\xff\xfe"), "malformed_json");
    assert_eq!(code(b"[]"), "invalid_frame");
}

#[test]
fn server_frames_read_from_strict_values() {
    let v = crate::json::parse_strict(
        br#"{"type":"grant.update","grantVersion":4,"grant":{"fs":[{"path":"/srv","mode":"ro"}],"egress":{"mode":"allowlist","hosts":["*.example.org:443"]},"commands":{"enabled":false},"limits":{"maxConcurrent":2}},"sid":"s","seq":2,"kid":"k"}"#,
    )
    .unwrap();
    let f = server_frame_from_value(&v).unwrap();
    match f {
        ServerFrame::GrantUpdate {
            grant_version,
            grant,
        } => {
            assert_eq!(grant_version, 4);
            assert_eq!(grant.fs[0].mode, FolderMode::Ro);
            assert_eq!(
                grant.egress,
                Egress::Allowlist {
                    hosts: vec!["*.example.org:443".into()]
                }
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    let unknown = crate::json::parse_strict(br#"{"type":"hello","protocol":1}"#).unwrap();
    assert_eq!(
        server_frame_from_value(&unknown).unwrap_err(),
        WireError::UnknownFrameType("hello".into())
    );
}

#[test]
fn type_name_lists_match_the_enums() {
    assert_eq!(SERVER_FRAME_TYPES.len(), 15);
    assert_eq!(DAEMON_FRAME_TYPES.len(), 14);
    let f = ServerFrame::ControlRequest {
        control_id: "c".into(),
        action: "pause".into(),
        lines: 0,
    };
    assert!(SERVER_FRAME_TYPES.contains(&f.type_name()));
    let f = DaemonFrame::ControlResult {
        control_id: "c".into(),
        action: "pause".into(),
        outcome: super::ControlOutcome::Done,
        code: String::new(),
        message: "m".into(),
        lines: Vec::new(),
    };
    assert!(DAEMON_FRAME_TYPES.contains(&f.type_name()));
    let f = ServerFrame::Revoked { reason: "x".into() };
    assert!(SERVER_FRAME_TYPES.contains(&f.type_name()));
    let f = ServerFrame::WaitAck {
        wait_id: "w".into(),
    };
    assert!(SERVER_FRAME_TYPES.contains(&f.type_name()));
    let f = DaemonFrame::WaitFailed {
        wait_id: "w".into(),
        checks: 0,
        reason: "expired".into(),
        at_ms: 1,
        last_error: None,
    };
    assert!(DAEMON_FRAME_TYPES.contains(&f.type_name()));
}

#[test]
fn a_wait_s_ending_reads_back_with_its_error_and_ignores_members_it_does_not_know() {
    let f = DaemonFrame::from_json(
        br#"{"type":"wait.matched","waitId":"w1","checks":3,"resumeText":"up","payload":"{\"a\":1}","evidence":"[]","continuationId":"w1.then","matchedAtMs":5,"lastError":{"code":"fetch_failed","message":"refused","atMs":4,"later":true},"future":1}"#,
    )
    .unwrap();
    match &f {
        DaemonFrame::WaitMatched {
            payload,
            last_error: Some(e),
            continuation_id,
            ..
        } => {
            assert_eq!(payload.as_deref(), Some(r#"{"a":1}"#));
            assert_eq!(e.code, "fetch_failed");
            assert_eq!(continuation_id, "w1.then");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(DaemonFrame::from_json(&f.to_json()).unwrap(), f);
    let code = |b: &[u8]| DaemonFrame::from_json(b).unwrap_err().code();
    assert_eq!(
        code(br#"{"type":"wait.failed","waitId":"w1","checks":1,"atMs":2}"#),
        "invalid_frame",
        "a wait.failed without its reason"
    );
}

#[test]
fn a_run_result_s_members_sit_next_to_its_run_id() {
    let frame = DaemonFrame::RunResult {
        run_id: "r1".into(),
        result: RunResult {
            status: RunStatus::Failed,
            exit_code: None,
            signal: Some(9),
            stdout: "hi\n".into(),
            stderr: String::new(),
            truncated: true,
            timing: Timing {
                daemon_ms: 6,
                ..Timing::default()
            },
            error: Some(ErrorBody {
                code: "digest_mismatch".into(),
                message: "m".into(),
            }),
            egress_denied: Vec::new(),
        },
    };
    let json = String::from_utf8(frame.to_json()).unwrap();
    assert_eq!(
        json,
        r#"{"type":"run.result","runId":"r1","status":"failed","signal":9,"stdout":"hi\n","stderr":"","truncated":true,"timing":{"queueMs":0,"setupMs":0,"executeMs":0,"daemonMs":6},"error":{"code":"digest_mismatch","message":"m"}}"#
    );
    // The gate's refusals ride along only when there are some.
    let DaemonFrame::RunResult { result, .. } = &frame else {
        unreachable!()
    };
    let mut denied = result.clone();
    denied.egress_denied = vec!["example.com:443".into()];
    let denied_json = serde_json::to_string(&denied).unwrap();
    assert!(
        denied_json.ends_with(r#","egressDenied":["example.com:443"]}"#),
        "{denied_json}"
    );
    let back: RunResult = serde_json::from_str(&denied_json).unwrap();
    assert_eq!(back, denied);
    assert_eq!(DaemonFrame::from_json(json.as_bytes()).unwrap(), frame);
    let missing_status = br#"{"type":"run.result","runId":"r1","stdout":"","stderr":"","truncated":false,"timing":{"queueMs":0,"setupMs":0,"executeMs":0,"daemonMs":0}}"#;
    assert_eq!(
        DaemonFrame::from_json(missing_status).unwrap_err().code(),
        "invalid_frame"
    );
}

#[test]
fn run_output_reads_its_stream_offset_and_text() {
    let frame = DaemonFrame::from_json(
        br#"{"type":"run.output","runId":"r1","stream":"stdout","offset":12,"text":"h\u00e9\n"}"#,
    )
    .unwrap();
    assert_eq!(
        frame,
        DaemonFrame::RunOutput {
            run_id: "r1".into(),
            stream: crate::wire::OutputStream::Stdout,
            offset: 12,
            text: "hé\n".into(),
        }
    );
    let bad = DaemonFrame::from_json(
        br#"{"type":"run.output","runId":"r1","stream":"stdin","offset":0,"text":"x"}"#,
    );
    assert_eq!(bad.unwrap_err().code(), "invalid_frame");
}
