//! Large inline capabilities wait and run from disk: an execute whose inline capability is
//! over 64 KiB is stored as a bundle in the server's state folder and offered by digest, so
//! the daemon fetches it (and the server's own executor reads it) — the run sees the same
//! files either way.

mod common;

use common::{Daemon, Server, shell_capability, temp_dir};
use serde_json::json;

/// A shell capability with a 300 KiB file beside its script, which prints the file's size.
fn large() -> serde_json::Value {
    use base64::Engine as _;
    let mut capability = shell_capability("large", "wc -c < data.bin\n");
    let data = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(vec![b'x'; 300 * 1024]);
    capability["files"]
        .as_array_mut()
        .expect("files")
        .push(json!({"path": "data.bin", "contentB64": data}));
    capability
}

fn bundle_files(server: &Server) -> usize {
    std::fs::read_dir(server.state.join("bundles"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().len() == 64)
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_large_inline_capability_is_parked_as_a_bundle_and_runs_the_same_on_a_machine_and_the_cloud() {
    let dir = temp_dir("parking");
    let server = Server::start(&dir.join("server"), 0);
    let daemon = Daemon::start(&dir.join("home"), "box", Some(&server.join), "tokio");
    server.wait_context("box", "the daemon to come online", |c| c["online"] == true);
    assert_eq!(bundle_files(&server), 0);
    for context in ["box", "cloud"] {
        let (status, e) = server.api(
            "POST",
            "/v1/executions",
            Some(json!({"capability": large(), "context": context, "wait": true, "waitSecs": 60})),
        );
        assert_eq!(status, 201, "{e}");
        assert_eq!(
            e["status"],
            "exited",
            "{context}: {e}\n{}",
            daemon.log_tail(20)
        );
        assert_eq!(
            e["stdout"].as_str().map(str::trim),
            Some("307200"),
            "{context}: {e}"
        );
    }
    // Both executions named the same content: one bundle on disk.
    assert_eq!(bundle_files(&server), 1);
    assert!(
        daemon.log_text().contains("run started"),
        "{}",
        daemon.log_tail(20)
    );
    // A small capability stays inline: no new bundle.
    let (_, e) = server.api(
        "POST",
        "/v1/executions",
        Some(
            json!({"capability": shell_capability("small", "echo small\n"), "context": "box",
                    "wait": true, "waitSecs": 60}),
        ),
    );
    assert_eq!(e["stdout"], "small\n", "{e}");
    assert_eq!(bundle_files(&server), 1);
}
