//! The capabilities in `examples/` are fixtures: each manifest must parse. A folder without a
//! manifest is a worked example that uses them (a condition wait) and must say so in its
//! README.

use outpost_core::manifest::{Lifecycle, MANIFEST_FILE, Manifest};

#[test]
fn every_example_manifest_parses() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join(MANIFEST_FILE).exists() {
            assert!(
                dir.join("README.md").is_file(),
                "{}: neither a capability nor a worked example",
                dir.display()
            );
            continue;
        }
        let text = std::fs::read_to_string(dir.join(MANIFEST_FILE)).unwrap();
        let manifest = Manifest::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        assert!(
            dir.join(&manifest.entry).is_file(),
            "{}: entry missing",
            dir.display()
        );
        seen.push((manifest.name, manifest.lifecycle));
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        vec![
            ("daily-report".to_string(), Lifecycle::Oneshot),
            ("health-check".to_string(), Lifecycle::Persistent),
        ]
    );
}
