//! The examples in `docs/RECORDS.md` are records this build reads and writes byte for byte,
//! so the document cannot drift from the code.

use crate::daemon::{DaemonRecord, DaemonSnapshot};
use crate::server::{ServerRecord, ServerSnapshot};

const DOC: &str = include_str!("../../../docs/RECORDS.md");

#[test]
fn every_example_in_the_records_document_reads_and_writes_back_the_same_bytes() {
    let examples: Vec<&str> = DOC.lines().filter(|l| l.starts_with("{\"v\":")).collect();
    assert!(examples.len() >= 10, "one example of each kind at least");
    for line in examples {
        let bytes = line.as_bytes();
        let again = if line.contains("\"type\":\"server.record\"") {
            ServerRecord::decode(bytes).map(|r| r.encode())
        } else if line.contains("\"type\":\"server.snapshot\"") {
            ServerSnapshot::decode(bytes).map(|s| s.encode())
        } else if line.contains("\"type\":\"daemon.record\"") {
            DaemonRecord::decode(bytes).map(|r| r.encode())
        } else {
            DaemonSnapshot::decode(bytes).map(|s| s.encode())
        };
        let again = again.unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(
            String::from_utf8_lossy(&again),
            line,
            "written back differently"
        );
    }
}
