//! Arbitrary bytes through every durable-record reader (server and daemon, records and
//! snapshots). Nothing may panic; whatever decodes must encode to bytes that decode to the
//! same value, fold into a snapshot, and restore a machine without panicking.
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use outpost_core::daemon::{Daemon, DaemonConfig, DaemonRecord, DaemonSnapshot};
use outpost_core::keyset::test_root;
use outpost_core::server::{Server, ServerRecord, ServerSnapshot};
use outpost_core::session::SessionConfig;
use outpost_core::sim::{now_at, test_keys};

fuzz_target!(|data: &[u8]| {
    let now = now_at(Duration::from_secs(3600));
    if let Ok(record) = ServerRecord::decode(data) {
        assert_eq!(ServerRecord::decode(&record.encode()).as_ref(), Ok(&record));
        let mut snapshot = ServerSnapshot::default();
        snapshot.apply(&record);
        let signer = Arc::new(test_root::frame_signer());
        let _ = Server::restore(signer, SessionConfig::new("fuzz"), &snapshot, now);
    }
    if let Ok(snapshot) = ServerSnapshot::decode(data) {
        assert_eq!(ServerSnapshot::decode(&snapshot.encode()).as_ref(), Ok(&snapshot));
        let signer = Arc::new(test_root::frame_signer());
        let mut server = Server::restore(signer, SessionConfig::new("fuzz"), &snapshot, now);
        while !matches!(server.poll_output(), outpost_core::server::Output::Wait { .. }) {}
    }
    if let Ok(record) = DaemonRecord::decode(data) {
        assert_eq!(DaemonRecord::decode(&record.encode()).as_ref(), Ok(&record));
        let mut snapshot = DaemonSnapshot::default();
        snapshot.apply(&record);
        let _ = Daemon::restore(DaemonConfig::default(), test_keys(), &snapshot, now);
    }
    if let Ok(snapshot) = DaemonSnapshot::decode(data) {
        assert_eq!(DaemonSnapshot::decode(&snapshot.encode()).as_ref(), Ok(&snapshot));
        let mut daemon = Daemon::restore(DaemonConfig::default(), test_keys(), &snapshot, now);
        while !matches!(daemon.poll_output(), outpost_core::daemon::Output::Wait { .. }) {}
    }
});
