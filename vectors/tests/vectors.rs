//! The committed vectors are what the generator writes, and outpost-core passes all of them.

use std::path::PathBuf;

use outpost_vectors::{check, default_dir, generate};

#[test]
fn committed_files_match_the_generator_byte_for_byte() {
    for file in generate::all() {
        let path = default_dir().join(file.name);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == file.text,
            "{} is stale: run `cargo run -p outpost-vectors --features generate -- generate`",
            path.display()
        );
    }
}

#[test]
fn core_passes_every_case() {
    let report = check::check_dir(&default_dir()).unwrap();
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
    assert!(report.cases >= 80, "only {} cases", report.cases);
}

#[test]
fn the_issue_named_cases_are_present() {
    let text = |name: &str| std::fs::read_to_string(default_dir().join(name)).unwrap();
    let frames = text("signed-frames.json");
    for (case, code) in [
        ("tampered_body", "bad_signature"),
        ("wrong_kid_unknown_key", "unknown_kid"),
        ("wrong_session_id", "session_mismatch"),
        ("replayed_sequence", "sequence_replayed"),
        ("out_of_order_sequence", "sequence_out_of_order"),
        ("expired_key", "key_expired"),
        ("float_in_body", "float_not_allowed"),
        ("duplicate_key", "duplicate_key"),
    ] {
        assert!(frames.contains(&format!("\"name\": \"{case}\"")), "{case}");
        assert!(frames.contains(&format!("\"error\": \"{code}\"")), "{code}");
    }
    let sets = text("key-sets.json");
    for case in [
        "valid_set",
        "rotation_overlap",
        "expired_key",
        "unknown_root",
        "bad_root_signature",
    ] {
        assert!(sets.contains(&format!("\"name\": \"{case}\"")), "{case}");
    }
    let http = text("http-signatures.json");
    for case in [
        "rfc9421_b26_ed25519",
        "changed_path",
        "changed_body",
        "replayed_nonce",
        "stale_created",
    ] {
        assert!(http.contains(&format!("\"name\": \"{case}\"")), "{case}");
    }
    assert!(http.contains(
        "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw=="
    ));
}

/// The checker must be able to fail: corrupt copies of the files are caught.
#[test]
fn the_checker_catches_corruption() {
    let dir = scratch_dir("corrupt");
    for file in generate::all() {
        std::fs::write(dir.join(file.name), file.text).unwrap();
    }
    let edit = |name: &str, from: &str, to: &str| {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{from}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    };
    // A refusal expected with the wrong code.
    edit(
        "signed-frames.json",
        "\"error\": \"session_mismatch\"",
        "\"error\": \"bad_signature\"",
    );
    // A valid case whose signature base is off by one character.
    edit(
        "http-signatures.json",
        "\"@method\\\": POST",
        "\"@method\\\": PUT",
    );
    // A canonical form that is not canonical.
    edit(
        "canonical-json.json",
        "\"canonical_hex\": \"7b",
        "\"canonical_hex\": \"7c",
    );
    let report = check::check_dir(&dir).unwrap();
    assert_eq!(report.failures.len(), 3, "{:#?}", report.failures);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-vectors-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
