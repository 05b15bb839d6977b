//! Every file in the server's state folder is private to its owner: the database with its
//! `-wal` and `-shm` too, which SQLite alone would make 0644 under the usual umask.

mod common;

use std::os::unix::fs::PermissionsExt as _;

use common::{TestServer, bearer, http, inline, temp_dir};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_database_and_its_wal_and_shm_are_0600_in_a_0700_folder() {
    let state = temp_dir("modes");
    let server = TestServer::start_sqlite(&state);
    // Something written, so the WAL holds a commit.
    let body = serde_json::json!({"capability": inline("echo hi"), "context": "nowhere"});
    let answer = http(
        server.addr(),
        "POST",
        "/v1/executions",
        &[("authorization", &bearer(&server.admin()))],
        body.to_string().as_bytes(),
    );
    assert_eq!(
        answer.status,
        404,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(mode(&state), 0o700);
    for name in [
        "outpost.db",
        "outpost.db-wal",
        "outpost.db-shm",
        "keys.json",
        "admin.token",
        "join",
    ] {
        assert_eq!(mode(&state.join(name)), 0o600, "{name}");
    }
    let state = server.state.clone();
    server.stop();
    // Files an older server left readable are tightened when the server starts again.
    std::fs::set_permissions(
        state.join("outpost.db"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    let server = TestServer::start_sqlite(&state);
    assert_eq!(mode(&state.join("outpost.db")), 0o600);
    server.stop();
}
