//! Bundles are bounded: an upload streams to a file (nothing of it stays in the database),
//! uploads at once are few (503 `uploads_busy`), a slow one times out (408), each user has a
//! quota of stored bytes (413 `quota_exceeded`), and a bundle unused for the retention that
//! no execution not ended names is deleted; bundles an older version kept in the database
//! move to files (PROTOCOL §11.4).

mod common;

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Answer, Machine, TestServer, bearer, connect_from, http, parse_answer, temp_dir};
use outpost_core::b64;
use outpost_core::wire::{InlineFile, encode_bundle};
use outpost_server::Limits;
use serde_json::json;
use sha2::Digest as _;

const MANIFEST: &str = "name: big\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n";

/// A bundle whose data file holds `n` bytes of `fill`, and its digest.
fn bundle(fill: u8, n: usize) -> (Vec<u8>, String) {
    let files = [
        InlineFile {
            path: "run.sh".into(),
            content_b64: b64::encode(b"echo hi\n"),
        },
        InlineFile {
            path: "data.bin".into(),
            content_b64: b64::encode(&vec![fill; n]),
        },
    ];
    let bytes = encode_bundle(MANIFEST, &files);
    let sha = hex::encode(sha2::Sha256::digest(&bytes));
    (bytes, sha)
}

fn put(server: &TestServer, sha: &str, bytes: &[u8]) -> Answer {
    http(
        server.addr(),
        "PUT",
        &format!("/v1/bundles/{sha}"),
        &[("authorization", &bearer(&server.admin()))],
        bytes,
    )
}

fn execute_digest(server: &TestServer, sha: &str, size: usize, context: &str) -> Answer {
    let body = json!({"capability": {"kind": "digest", "sha256": sha, "size": size},
                      "context": context, "whenOffline": "queue"});
    http(
        server.addr(),
        "POST",
        "/v1/executions",
        &[("authorization", &bearer(&server.admin()))],
        body.to_string().as_bytes(),
    )
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Polls until `check` holds (or fails after 15 s).
fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 15 s");
        // The poll's pace: `check` is asked again.
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_upload_is_stored_as_a_file_and_fetched_as_it_was() {
    let state = temp_dir("bundle-file");
    let server = TestServer::start(&state);
    let (bytes, sha) = bundle(7, 300_000);
    assert_eq!(put(&server, &sha, &bytes).status, 201);
    assert_eq!(put(&server, &sha, &bytes).status, 200);
    let file = state.join("bundles").join(&sha);
    assert_eq!(std::fs::read(&file).expect("the bundle's file"), bytes);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!((mode(&file), mode(&state.join("bundles"))), (0o600, 0o700));
    assert!(files(&state.join("bundles"), ".upload-").is_empty());
    // The SQLite file keeps the row, not the bytes; PostgreSQL, which other nodes may share,
    // keeps the bytes too, for the nodes that have no file of it.
    let db = common::TestDb::open(&state);
    let held = db.text(&format!(
        "SELECT length(bytes) || '/' || size FROM bundles WHERE sha256 = '{sha}'"
    ));
    let in_row = if common::on_postgres() {
        bytes.len()
    } else {
        0
    };
    assert_eq!(held, format!("{in_row}/{}", bytes.len()));
    // A machine fetches it whole.
    let machine = Machine::new(51);
    assert_eq!(machine.register(&server, "fetcher").status, 201);
    let fetched = machine.send_with(
        server.addr(),
        "GET",
        &format!("/v1/execution-contexts/bundles/{sha}"),
        b"",
        &machine.nonce(),
        &[],
    );
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body, bytes);
    // A body that is not the bundle named leaves nothing behind.
    let (other, _) = bundle(8, 1000);
    let wrong = put(&server, &"0".repeat(64), &other);
    assert_eq!(
        (wrong.status, wrong.code().as_str()),
        (400, "digest_mismatch")
    );
    assert!(files(&state.join("bundles"), ".upload-").is_empty());
    server.stop();
}

#[test]
fn uploads_at_once_are_bounded_and_a_slow_one_times_out() {
    let state = temp_dir("bundle-busy");
    let limits = Limits {
        concurrent_uploads: 1,
        body_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let server = TestServer::start_limited(&state, limits);
    let addr = server.addr();
    let (bytes, sha) = bundle(1, 2000);
    // An upload that sent half of its body holds the one place.
    let mut slow = connect_from(Ipv4Addr::new(127, 0, 0, 7), addr);
    let head = format!(
        "PUT /v1/bundles/{sha} HTTP/1.1\r\nhost: {addr}\r\nauthorization: {}\r\ncontent-length: {}\r\n\r\n",
        bearer(&server.admin()),
        bytes.len()
    );
    slow.write_all(head.as_bytes()).expect("the head");
    slow.write_all(&bytes[..1000]).expect("half the body");
    let uploads = state.join("bundles");
    until("the upload's file fills", || {
        files(&uploads, ".upload-")
            .iter()
            .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == 1000))
    });
    let busy = put(&server, &sha, &bytes);
    assert_eq!((busy.status, busy.code().as_str()), (503, "uploads_busy"));
    assert_eq!(busy.header("retry-after"), Some("5"));
    // It never sends the rest: 408, and its file goes.
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    let mut raw = Vec::new();
    let _ = std::io::Read::read_to_end(&mut slow, &mut raw);
    let answer = parse_answer(&raw);
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (408, "request_timeout")
    );
    until("the unfinished upload is removed", || {
        files(&uploads, ".upload-").is_empty()
    });
    // The place is free again.
    assert_eq!(put(&server, &sha, &bytes).status, 201);
    server.stop();
}

#[test]
fn a_user_keeps_at_most_the_quota_and_unused_bundles_go_unless_an_execution_needs_them() {
    let state = temp_dir("bundle-quota");
    let (a, sha_a) = bundle(1, 20_000);
    let (b, sha_b) = bundle(2, 20_000);
    let (c, sha_c) = bundle(3, 20_000);
    let limits = Limits {
        bundle_quota: (a.len() + b.len() + 100) as u64,
        bundle_retention: Duration::from_secs(1),
        bundle_sweep: Duration::from_millis(100),
        ..Limits::default()
    };
    let server = TestServer::start_limited(&state, limits);
    assert_eq!(put(&server, &sha_a, &a).status, 201);
    assert_eq!(put(&server, &sha_b, &b).status, 201);
    let over = put(&server, &sha_c, &c);
    assert_eq!(
        (over.status, over.code().as_str()),
        (413, "quota_exceeded"),
        "{}",
        String::from_utf8_lossy(&over.body)
    );
    // An execution waiting for an offline machine needs B.
    assert_eq!(Machine::new(52).register(&server, "away").status, 201);
    let queued = execute_digest(&server, &sha_b, b.len(), "away");
    assert_eq!(
        queued.status,
        201,
        "{}",
        String::from_utf8_lossy(&queued.body)
    );
    let dir = state.join("bundles");
    until("the unused bundle is deleted", || {
        !dir.join(&sha_a).exists()
    });
    assert!(
        dir.join(&sha_b).exists(),
        "a bundle an execution needs went"
    );
    let gone = execute_digest(&server, &sha_a, a.len(), "away");
    assert_eq!((gone.status, gone.code().as_str()), (404, "bundle_unknown"));
    // Its bytes no longer count: C fits now.
    assert_eq!(put(&server, &sha_c, &c).status, 201);
    // Once the execution ended, B goes too.
    let id = queued.json()["executionId"]
        .as_str()
        .expect("an id")
        .to_owned();
    let cancelled = http(
        server.addr(),
        "POST",
        &format!("/v1/executions/{id}/cancel"),
        &[("authorization", &bearer(&server.admin()))],
        b"",
    );
    assert_eq!(cancelled.json()["status"], "cancelled");
    until("the bundle no execution needs is deleted", || {
        !dir.join(&sha_b).exists()
    });
    server.stop();
}

#[test]
fn bundles_an_older_version_kept_in_the_database_move_to_files() {
    // Only SQLite databases ever held bundles' bytes: PostgreSQL ones begin after that.
    let state = temp_dir("bundle-legacy");
    let server = TestServer::start_sqlite(&state);
    let state_dir = server.state.clone();
    server.stop();
    let (bytes, sha) = bundle(9, 5000);
    {
        let db = rusqlite::Connection::open(state_dir.join("outpost.db")).expect("the database");
        db.execute(
            "INSERT INTO bundles (sha256, bytes, user, created_at) VALUES (?1, ?2, 'admin', 1)",
            rusqlite::params![sha, bytes],
        )
        .expect("an old row");
    }
    // A stray file with no row, and an unfinished upload, from a crash.
    let dir = state_dir.join("bundles");
    std::fs::write(dir.join("f".repeat(64)), b"stray").expect("a stray file");
    std::fs::write(dir.join(".upload-crashed"), b"half").expect("an unfinished upload");
    let server = TestServer::start_sqlite(&state_dir);
    assert_eq!(std::fs::read(dir.join(&sha)).expect("moved"), bytes);
    assert!(!dir.join("f".repeat(64)).exists() && !dir.join(".upload-crashed").exists());
    assert_eq!(Machine::new(53).register(&server, "legacy").status, 201);
    let queued = execute_digest(&server, &sha, bytes.len(), "legacy");
    assert_eq!(
        queued.status,
        201,
        "{}",
        String::from_utf8_lossy(&queued.body)
    );
    let wrong_size = execute_digest(&server, &sha, bytes.len() + 1, "legacy");
    assert_eq!(wrong_size.code(), "digest_mismatch");
    server.stop();
}

#[test]
fn a_manifest_with_yaml_aliases_is_refused_at_its_line_inline_and_in_a_bundle() {
    let state = temp_dir("bundle-aliases");
    let server = TestServer::start(&state);
    // A small text that expands: each item an anchor over eight aliases of the one before.
    let mut manifest = String::from(MANIFEST);
    manifest.push_str("args:\n  - &a0 [\"lol\", \"lol\", \"lol\", \"lol\"]\n");
    for i in 1..24 {
        let p = i - 1;
        manifest.push_str(&format!(
            "  - &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let capability = json!({"kind": "inline", "manifest": manifest,
        "files": [{"path": "run.sh", "contentB64": b64::encode(b"echo hi\n")}]});
    let inline = http(
        server.addr(),
        "POST",
        "/v1/executions",
        &[("authorization", &bearer(&server.admin()))],
        json!({"capability": capability, "context": "cloud"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        (inline.status, inline.code().as_str()),
        (400, "invalid_manifest")
    );
    let message = inline.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.starts_with("line 6") && message.contains("anchor"),
        "{message}"
    );
    let bytes = encode_bundle(&manifest, &[]);
    let sha = hex::encode(sha2::Sha256::digest(&bytes));
    let bundled = put(&server, &sha, &bytes);
    assert_eq!(
        (bundled.status, bundled.code().as_str()),
        (400, "invalid_manifest")
    );
    assert!(!state.join("bundles").join(&sha).exists());
    server.stop();
}
