//! `outpost demo`, the README's first command: every step ends where the routing says, and
//! nothing is left behind.

use std::process::Command;

#[test]
fn the_demo_runs_every_step_and_cleans_up() {
    let tmp = std::env::temp_dir().join(format!("outpost-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("tmp");
    let out = Command::new(env!("CARGO_BIN_EXE_outpost"))
        .args(["demo", "--json"])
        .env("TMPDIR", &tmp)
        .output()
        .expect("outpost demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["ok"], true, "{report}");
    let steps = report["steps"].as_array().expect("steps");
    let find = |name: &str| {
        steps
            .iter()
            .find(|s| s["capability"] == name)
            .unwrap_or_else(|| panic!("{name} in {report}"))
            .clone()
    };
    for name in ["hello-shell", "hello-wasm"] {
        let s = find(name);
        assert_eq!(s["status"], "exited", "{s}");
        assert_eq!(s["ranOn"]["name"], "demo-box", "{s}");
    }
    assert!(
        find("hello-shell")["stdout"]
            .as_str()
            .unwrap_or("")
            .starts_with("hello from ")
    );
    assert_eq!(find("hello-wasm")["stdout"], "hello from a wasm module\n");
    let container = find("hello-container");
    assert!(
        container["status"] == "exited" || container["status"] == "skipped",
        "{container}"
    );
    if container["status"] == "skipped" {
        assert!(
            container["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{container}"
        );
    }
    let chain = find("hello-wasm (chain)");
    assert_eq!(chain["status"], "exited", "{chain}");
    assert_eq!(chain["ranOn"]["kind"], "cloud", "{chain}");
    assert_eq!(chain["ranOn"]["fellBackToCloud"], true, "{chain}");
    assert_eq!(chain["ranOn"]["attempts"][0]["name"], "demo-box", "{chain}");
    // The temporary folders are gone.
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .expect("tmp")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "the demo left {left:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}
