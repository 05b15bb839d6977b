//! The store's own tests, each run against both databases: a fresh SQLite file and a fresh
//! database on the tests' PostgreSQL cluster (`tests/common/postgres.rs`, started on first use).

#[path = "../../tests/common/postgres.rs"]
mod postgres;
#[path = "../../../adapters/tests/common/refusing_port.rs"]
mod refusing_port;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use super::db::{Sql as _, params};
use super::{Database, SessionsChange, Store};

/// A fresh store and its state folder (removed when dropped).
pub(crate) struct Fresh {
    pub(crate) store: Store,
    /// `sqlite` or `postgres`, for messages.
    pub(crate) kind: &'static str,
    pub(crate) database: Database,
    pub(crate) dir: PathBuf,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new state folder and a new PostgreSQL database, both named after `name`.
fn fresh_places(name: &str) -> (PathBuf, String) {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let unique = format!("{name}_{}_{n}", std::process::id()).replace('-', "_");
    let dir = std::env::temp_dir().join(format!("outpost-store-{unique}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a state folder");
    (dir, postgres::shared().database(&format!("s_{unique}")))
}

/// One fresh store of each kind.
pub(crate) fn stores(name: &str) -> Vec<Fresh> {
    let (sqlite_dir, _) = fresh_places(&format!("{name}_sqlite"));
    let (pg_dir, url) = fresh_places(&format!("{name}_pg"));
    [
        ("sqlite", Database::Sqlite, sqlite_dir),
        ("postgres", Database::Postgres(url), pg_dir),
    ]
    .into_iter()
    .map(|(kind, database, dir)| Fresh {
        store: Store::open_database(&database, &dir)
            .unwrap_or_else(|e| panic!("{kind}: the store opens: {e}")),
        kind,
        database,
        dir,
    })
    .collect()
}

#[test]
fn a_store_reopened_keeps_what_it_wrote_and_migrating_again_changes_nothing() {
    for fresh in stores("reopen") {
        let kind = fresh.kind;
        assert!(fresh.store.create_user("ana", &[7; 32], &[], 5).unwrap());
        assert!(
            !fresh.store.create_user("ana", &[8; 32], &[], 6).unwrap(),
            "{kind}"
        );
        let version = super::migrate(&fresh.database, &fresh.dir).unwrap();
        assert_eq!(version, super::schema::known_version(), "{kind}");
        let again = Store::open_database(&fresh.database, &fresh.dir).unwrap();
        assert!(again.has_users().unwrap(), "{kind}");
        assert_eq!(
            again.token(&[7; 32]).unwrap().unwrap().user,
            "ana",
            "{kind}"
        );
    }
}

#[test]
fn nodes_migrating_at_once_take_turns_and_one_schema_results() {
    let (dir, url) = fresh_places("migrate_race");
    let database = Database::Postgres(url);
    let versions: Vec<i64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| super::migrate(&database, &dir)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("no panic")
                    .expect("each migration succeeds")
            })
            .collect()
    });
    assert_eq!(versions, vec![super::schema::known_version(); 4]);
    let store = Store::open_database(&database, &dir).unwrap();
    let (rows, distinct): (i64, i64) = store
        .read()
        .query_row(
            "SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_version",
            params![],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(rows, distinct, "each version is applied once, by one node");
    assert_eq!(
        rows,
        super::schema::known_version() - 9,
        "the baseline (10) and each migration after it"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_database_newer_than_this_server_is_refused_not_altered() {
    for fresh in stores("newer") {
        let kind = fresh.kind;
        let newer = super::schema::known_version() + 1;
        fresh
            .store
            .lock()
            .execute(
                "INSERT INTO schema_version (version) VALUES (?1)",
                params![newer],
            )
            .unwrap();
        let err = Store::open_database(&fresh.database, &fresh.dir)
            .expect_err("a newer schema is refused")
            .to_string();
        assert!(
            err.contains(&format!("schema version {newer}")),
            "{kind}: {err}"
        );
        assert!(err.contains("upgrade outpost"), "{kind}: {err}");
    }
}

#[test]
fn postgres_that_may_lose_acknowledged_commits_is_refused() {
    let (dir, url) = fresh_places("async_commit");
    let db = url.rsplit('/').next().unwrap().to_owned();
    postgres::shared().sql(
        "postgres",
        &format!("ALTER DATABASE \"{db}\" SET synchronous_commit = off"),
    );
    let err = Store::open_database(&Database::Postgres(url), &dir)
        .expect_err("synchronous_commit = off is refused")
        .to_string();
    assert!(err.contains("synchronous_commit = on"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn text_with_a_nul_is_stored_on_both_and_never_fails_a_write() {
    for fresh in stores("nul") {
        let kind = fresh.kind;
        // A program's output may hold NUL bytes; the audit detail stands for any text column.
        fresh
            .store
            .audit(1, "probe", "ana", None, "before\0after")
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let events = fresh.store.audit_events(None, 10).unwrap();
        let kept = match fresh.database {
            Database::Sqlite => "before\0after",
            // PostgreSQL's text holds no NUL: it is stored as U+FFFD.
            Database::Postgres(_) => "before\u{FFFD}after",
        };
        assert_eq!(events[0].detail, kept, "{kind}");
    }
}

#[test]
fn a_bad_url_or_an_unreachable_database_is_an_error_that_says_so() {
    assert!(Database::from_flag(Some("mysql://x")).is_err());
    assert_eq!(
        Database::Sqlite.location(std::path::Path::new("/state")),
        "/state/outpost.db"
    );
    let shown = Database::from_flag(Some("postgres://ana:secret@db.example/outpost"))
        .unwrap()
        .location(std::path::Path::new("/state"));
    assert_eq!(
        shown, "postgres://ana:***@db.example/outpost",
        "no password shown"
    );
    let (dir, _) = fresh_places("unreachable");
    let (_held, port) = refusing_port::refusing_port();
    let err = Store::open_database(
        &Database::Postgres(format!("postgres://outpost@127.0.0.1:{port}/none")),
        &dir,
    )
    .expect_err("nothing listens")
    .to_string();
    assert!(err.contains("connecting to PostgreSQL"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Twenty seconds of silence for node `id`, by the database's clock: no longer live.
fn silence(store: &Store, id: &str) {
    store
        .lock()
        .execute(
            "UPDATE nodes SET heartbeat_at_ms = heartbeat_at_ms - 20000 WHERE id = ?1",
            params![id],
        )
        .unwrap();
}

/// How the other nodes reach node `id` in these tests: its own URL and a certificate pin.
pub(super) fn reach(id: &str) -> super::NodeReach {
    super::NodeReach {
        url: format!("https://{id}.internal:8440"),
        tls_sha256: Some(format!("{:0>64}", id.len())),
    }
}

#[test]
fn a_node_s_sessions_are_written_as_changes_and_read_by_machine_from_live_nodes_only() {
    for fresh in stores("node_sessions") {
        let kind = fresh.kind;
        let store = &fresh.store;
        let beat = |id: &str, change: Option<SessionsChange>| {
            store
                .node_heartbeat(id, "http://x", Some(&reach(id)), 1, change.as_ref())
                .unwrap()
        };
        let sessions = |rows: &[(&str, &str)]| -> BTreeMap<String, String> {
            rows.iter()
                .map(|(c, s)| ((*c).to_owned(), (*s).to_owned()))
                .collect()
        };
        let a1 = sessions(&[("ec_1", "a1"), ("ec_2", "a2"), ("ec_3", "a3")]);
        assert_eq!(
            beat("nd_a", SessionsChange::between(None, &a1)),
            3,
            "{kind}: rows now"
        );
        beat(
            "nd_b",
            SessionsChange::between(None, &sessions(&[("ec_9", "b9")])),
        );
        let wanted: Vec<String> = ["ec_1", "ec_3", "ec_9", "ec_none"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let read = |except: &str| store.sessions_of(&wanted, except, 15_000).unwrap();
        assert_eq!(
            read("nd_b"),
            [
                ("ec_1".to_owned(), "nd_a".to_owned(), "a1".to_owned()),
                ("ec_3".to_owned(), "nd_a".to_owned(), "a3".to_owned())
            ],
            "{kind}: b reads a's, never its own"
        );
        // A change: one updated, one gone, one new; the rest stays.
        let a2 = sessions(&[("ec_1", "a1'"), ("ec_2", "a2"), ("ec_4", "a4")]);
        beat("nd_a", SessionsChange::between(Some(&a1), &a2));
        let listed = store.live_nodes(15_000).unwrap();
        let a = listed.iter().find(|n| n.id == "nd_a").expect("a");
        assert_eq!(a.sessions, ["a1'", "a2", "a4"], "{kind}: in context order");
        // Rows another process of the node removed show in the count the next beat returns.
        store
            .lock()
            .execute(
                "DELETE FROM node_sessions WHERE context_id = 'ec_2'",
                params![],
            )
            .unwrap();
        assert_eq!(beat("nd_a", None), 2, "{kind}: one fewer than written");
        // A restart's first heartbeat replaces whatever its last run left.
        beat(
            "nd_a",
            SessionsChange::between(None, &sessions(&[("ec_5", "a5")])),
        );
        let listed = store.live_nodes(15_000).unwrap();
        let a = listed.iter().find(|n| n.id == "nd_a").expect("a");
        assert_eq!(a.sessions, ["a5"], "{kind}");
        // A node judged dead is read no more; one that stops takes its rows with it.
        silence(store, "nd_b");
        assert_eq!(read("nd_a"), [], "{kind}");
        store.forget_node("nd_b").unwrap();
        let rows: i64 = store
            .read()
            .query_row(
                "SELECT COUNT(*) FROM node_sessions WHERE node_id = 'nd_b'",
                params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(rows, 0, "{kind}");
        // More machines than one statement holds.
        let many: BTreeMap<String, String> = (0..700)
            .map(|i| (format!("ec_m{i:04}"), format!("s{i}")))
            .collect();
        beat("nd_a", SessionsChange::between(None, &many));
        let ids: Vec<String> = many.keys().cloned().collect();
        assert_eq!(
            store.sessions_of(&ids, "nd_c", 15_000).unwrap().len(),
            700,
            "{kind}"
        );
        let gone = SessionsChange::between(Some(&many), &BTreeMap::new()).expect("a change");
        beat("nd_a", Some(gone));
        assert_eq!(
            store.sessions_of(&ids, "nd_c", 15_000).unwrap().len(),
            0,
            "{kind}"
        );
    }
}

#[test]
fn a_node_is_live_while_its_heartbeat_is_recent_by_the_database_clock() {
    for fresh in stores("nodes") {
        let kind = fresh.kind;
        let store = &fresh.store;
        store
            .node_heartbeat(
                "nd_a",
                "http://a",
                Some(&reach("nd_a")),
                100,
                SessionsChange::between(None, &BTreeMap::new()).as_ref(),
            )
            .unwrap();
        store
            .node_heartbeat("nd_b", "http://b", Some(&reach("nd_b")), 50, None)
            .unwrap();
        let live = store.live_nodes(15_000).unwrap();
        let ids: Vec<&str> = live.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["nd_b", "nd_a"], "{kind}: oldest start first");
        assert_eq!(
            store.live_node_ids(15_000).unwrap(),
            ["nd_a", "nd_b"],
            "{kind}"
        );
        assert!(live.iter().all(|n| n.silent_ms < 15_000), "{kind}");
        // A heartbeat without sessions keeps the ones written before.
        store
            .node_heartbeat(
                "nd_a",
                "http://a",
                Some(&reach("nd_a")),
                100,
                Some(&SessionsChange {
                    put: vec![("ec_x".into(), "{\"name\":\"x\"}".into())],
                    ..SessionsChange::default()
                }),
            )
            .unwrap();
        store
            .node_heartbeat("nd_a", "http://a", Some(&reach("nd_a")), 100, None)
            .unwrap();
        let a = store.live_nodes(15_000).unwrap().remove(1);
        assert_eq!(a.sessions, ["{\"name\":\"x\"}"], "{kind}");
        assert_eq!(
            a.reach,
            Some(reach("nd_a")),
            "{kind}: how the others reach it"
        );
        assert_eq!(
            store.live_node_reach("nd_b", 15_000).unwrap(),
            Some(reach("nd_b")),
            "{kind}"
        );
        assert_eq!(
            store.live_node_reaches(15_000).unwrap(),
            [
                ("nd_a".to_owned(), Some(reach("nd_a"))),
                ("nd_b".to_owned(), Some(reach("nd_b")))
            ],
            "{kind}"
        );
        // Twenty seconds of silence, by the database's clock: no longer live.
        silence(store, "nd_b");
        assert_eq!(
            store.live_node_reach("nd_b", 15_000).unwrap(),
            None,
            "{kind}: a silent node is relayed to no more"
        );
        assert_eq!(store.live_node_reaches(15_000).unwrap().len(), 1, "{kind}");
        // A node of an earlier version wrote no address: nothing is relayed to it.
        store
            .lock()
            .execute(
                "UPDATE nodes SET node_url = NULL WHERE id = 'nd_a'",
                params![],
            )
            .unwrap();
        assert_eq!(
            store.live_node_reach("nd_a", 15_000).unwrap(),
            None,
            "{kind}"
        );
        assert_eq!(
            store.live_node_reaches(15_000).unwrap(),
            [("nd_a".to_owned(), None)],
            "{kind}: listed, with nothing to reach it at"
        );
        store
            .node_heartbeat("nd_a", "http://a", Some(&reach("nd_a")), 100, None)
            .unwrap();
        let ids: Vec<String> = store
            .live_nodes(15_000)
            .unwrap()
            .into_iter()
            .map(|n| n.id)
            .collect();
        assert_eq!(ids, ["nd_a"], "{kind}");
        assert_eq!(store.live_node_ids(15_000).unwrap(), ["nd_a"], "{kind}");
        // An hour of silence: the next heartbeat of any node forgets the row.
        store
            .lock()
            .execute(
                "UPDATE nodes SET heartbeat_at_ms = heartbeat_at_ms - 3600000 WHERE id = 'nd_b'",
                params![],
            )
            .unwrap();
        store
            .node_heartbeat("nd_a", "http://a", Some(&reach("nd_a")), 100, None)
            .unwrap();
        let rows: i64 = store
            .read()
            .query_row("SELECT COUNT(*) FROM nodes", params![], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1, "{kind}");
        store.forget_node("nd_a").unwrap();
        assert!(store.live_nodes(15_000).unwrap().is_empty(), "{kind}");
    }
}

#[test]
fn a_restarted_sqlite_node_forgets_its_earlier_start_and_postgres_keeps_other_nodes() {
    for fresh in stores("earlier_starts") {
        let store = &fresh.store;
        store
            .node_heartbeat("nd_old", "http://a", Some(&reach("nd_old")), 1, None)
            .unwrap();
        store
            .node_heartbeat("nd_new", "http://a", Some(&reach("nd_new")), 2, None)
            .unwrap();
        store.forget_earlier_starts("nd_new").unwrap();
        let ids: Vec<String> = store
            .live_nodes(15_000)
            .unwrap()
            .into_iter()
            .map(|n| n.id)
            .collect();
        let expected: &[&str] = match fresh.database {
            Database::Sqlite => &["nd_new"],
            Database::Postgres(_) => &["nd_old", "nd_new"],
        };
        assert_eq!(ids, expected, "{}", fresh.kind);
    }
}

#[test]
fn a_context_named_in_an_execute_is_found_through_an_index_in_order_not_a_scan() {
    for fresh in stores("plan") {
        let kind = fresh.kind;
        for (sql, params) in [
            (
                super::access::LIVE_CONTEXT_NAMED_BY,
                params!["alice", "laptop", false],
            ),
            (super::access::LIVE_CONTEXT_NAMED, params!["laptop", true]),
        ] {
            // Both databases take the statement; SQLite says how it runs it.
            let found: Vec<String> = fresh
                .store
                .read()
                .query_map(sql, params, |r| r.get(0))
                .unwrap_or_else(|e| panic!("{kind}: {sql}: {e}"));
            assert!(found.is_empty(), "{kind}: no context yet");
            if kind != "sqlite" {
                continue;
            }
            let plan: Vec<String> = fresh
                .store
                .read()
                .query_map(&format!("EXPLAIN QUERY PLAN {sql}"), params, |r| r.get(3))
                .unwrap();
            let plan = plan.join("; ");
            assert!(
                plan.contains("SEARCH contexts USING INDEX")
                    && !plan.contains("SCAN contexts")
                    && !plan.contains("TEMP B-TREE"),
                "{sql}: {plan}"
            );
        }
    }
}

#[test]
fn migrating_to_23_removes_the_ends_records_and_keeps_the_audit_numbered_in_order() {
    let (sqlite_dir, _) = fresh_places("ends_23_sqlite");
    let (pg_dir, url) = fresh_places("ends_23_pg");
    for (kind, database, dir) in [
        ("sqlite", Database::Sqlite, sqlite_dir),
        ("postgres", Database::Postgres(url), pg_dir),
    ] {
        {
            let (mut conn, _driver) = super::connected(&database, &dir).unwrap();
            super::schema::migrate_until(&mut conn, 22).unwrap();
            assert_eq!(super::schema::version(&conn).unwrap(), 22, "{kind}");
            for (record, key, seq) in [
                ("ended", "ex_1", 2),
                ("chain", "ana", 3),
                ("ended", "ex_2", 4),
            ] {
                conn.execute(
                    "INSERT INTO records (kind, key, seq, bytes) VALUES (?1, ?2, ?3, ?4)",
                    params![record, key, seq as i64, vec![0u8]],
                )
                .unwrap();
            }
            for detail in ["first", "second"] {
                conn.execute(
                    "INSERT INTO audit (at, kind, actor, detail) \
                     VALUES (1, 'run.finished', 'ana', ?1)",
                    params![detail],
                )
                .unwrap();
            }
        }
        let store = Store::open_database(&database, &dir).unwrap();
        let left: Vec<(String, String)> = store
            .read()
            .query_map(
                "SELECT kind, key FROM records ORDER BY seq",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(left, [("chain".to_owned(), "ana".to_owned())], "{kind}");
        store
            .write_batch(&super::records::Batch {
                audit: vec![super::runs::AuditRow {
                    at: 2,
                    kind: "run.finished".into(),
                    actor: "ana".into(),
                    context_id: None,
                    detail: "third".into(),
                }],
                ..Default::default()
            })
            .unwrap();
        let details: Vec<String> = store
            .audit_events(None, 10)
            .unwrap()
            .into_iter()
            .map(|e| e.detail)
            .collect();
        assert_eq!(
            details,
            ["third", "second", "first"],
            "{kind}: newest first"
        );
        let numbers: Vec<i64> = store
            .read()
            .query_map("SELECT seq FROM audit ORDER BY seq", params![], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(
            numbers,
            [1, 2, 3],
            "{kind}: numbered on from the migrated rows"
        );
        if kind == "sqlite" {
            let counted: i64 = store
                .read()
                .query_row(
                    "SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'audit'",
                    params![],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(counted, 0, "no AUTOINCREMENT counter is written any more");
        }
        // A node of an older version beside this one still writes ends' records: the next
        // start deletes them.
        store
            .lock()
            .execute(
                "INSERT INTO records (kind, key, seq, bytes) VALUES ('ended', 'ex_3', 9, ?1)",
                params![vec![0u8]],
            )
            .unwrap();
        drop(store);
        let again = Store::open_database(&database, &dir).unwrap();
        let ends: i64 = again
            .read()
            .query_row(
                "SELECT COUNT(*) FROM records WHERE kind = 'ended'",
                params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            ends, 0,
            "{kind}: an older node's end is gone at the next start"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
