//! Ownership with fencing (docs/CLUSTER.md §2), each case on both databases: epochs taken and
//! claimed, writes refused by a stale fence with nothing written, the records a node restores
//! from split by owner, and recordings ended only for nodes no longer live.

use std::collections::HashSet;

use outpost_core::routing::{Chain, ExecuteTarget, RanOn, RanOnKind, Requester};
use outpost_core::server::{
    ChainRow, ContextRow, EndedRow, ExecutionOutcome, ExecutionRow, ExecutionStatus, PlaceRow,
    ServerChange, ServerRecord,
};
use outpost_core::wire::{
    CapabilitySource, CommandsGrant, Egress, Environment, Grant, GrantLimits,
};

use super::db::{Sql as _, params};
use super::owners::node_fence;
use super::tests::stores;
use super::{
    AuditRow, Batch, ContextEntry, ExecutionEntry, RecordingAppend, RecordingEntry, SharedTicket,
    Spend, Spent, Store, contexts_written,
};

/// How recent a heartbeat must be for its node to count as live, as the server judges.
const LIVE_MS: u64 = 15_000;

impl Store {
    /// Node `node_id` takes `context_id` as a daemon's WebSocket does: a ticket kept in one
    /// batch, spent with a take in the next. The epoch it holds now.
    fn take_context(&self, context_id: &str, node_id: &str) -> Result<i64, super::StoreError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ticket = ticket(&format!("t{n}"), context_id, "s");
        self.connect_batch(node_id, std::slice::from_ref(&ticket), &[], 1)?;
        let spent =
            self.connect_batch(node_id, &[], &[spend(&ticket.id, "s", context_id, true)], 1)?;
        match spent.as_slice() {
            [
                Spent::Opened {
                    epoch: Some(epoch), ..
                },
            ] => Ok(*epoch),
            other => panic!("a kept ticket opens its machine: {other:?}"),
        }
    }
}

fn ticket(id: &str, context_id: &str, secret_sha256: &str) -> SharedTicket {
    SharedTicket {
        id: id.to_owned(),
        context_id: context_id.to_owned(),
        secret_sha256: secret_sha256.to_owned(),
        session_id: "cs_1".to_owned(),
        expires_at: 1_000,
    }
}

fn spend(ticket_id: &str, secret_sha256: &str, context_id: &str, take: bool) -> Spend {
    Spend {
        ticket_id: ticket_id.to_owned(),
        secret_sha256: secret_sha256.to_owned(),
        context_id: context_id.to_owned(),
        take,
    }
}

#[test]
fn a_connect_batch_keeps_spends_once_and_takes_what_it_was_asked_to() {
    for fresh in stores("connect_batch") {
        let (store, kind) = (&fresh.store, fresh.kind);
        let kept = [
            ticket("a", "ec_1", "sa"),
            ticket("b", "ec_2", "sb"),
            ticket("c", "ec_3", "sc"),
        ];
        assert!(
            store
                .connect_batch("nd_a", &kept, &[], 10)
                .unwrap()
                .is_empty(),
            "{kind}"
        );
        let spends = [
            spend("a", "sa", "ec_1", true),
            // Shown another secret: refused, and spent all the same.
            spend("b", "wrong", "ec_2", true),
            // For another machine: refused.
            spend("c", "sc", "ec_9", true),
            // Never issued.
            spend("z", "sz", "ec_1", true),
        ];
        let spent = store.connect_batch("nd_b", &[], &spends, 10).unwrap();
        assert!(
            matches!(&spent[0], Spent::Opened { shared, epoch: Some(1) } if shared.session_id == "cs_1"),
            "{kind}: {spent:?}"
        );
        assert_eq!(
            spent[1..],
            [Spent::Refused, Spent::Refused, Spent::Refused],
            "{kind}"
        );
        assert_eq!(
            store.context_owner("ec_1").unwrap(),
            Some(("nd_b".into(), 1)),
            "{kind}"
        );
        assert_eq!(
            store.context_owner("ec_2").unwrap(),
            None,
            "{kind}: refused, not taken"
        );
        // Spent once: a second node finds nothing; `c` (refused) was spent too.
        let again = store
            .connect_batch(
                "nd_a",
                &[],
                &[
                    spend("a", "sa", "ec_1", true),
                    spend("b", "sb", "ec_2", true),
                ],
                10,
            )
            .unwrap();
        assert_eq!(again, [Spent::Refused, Spent::Refused], "{kind}");
        assert!(store.connect_ticket("c").unwrap().is_none(), "{kind}");
        // Opened without a take: the owner row stays.
        store
            .connect_batch("nd_a", &[ticket("d", "ec_1", "sd")], &[], 10)
            .unwrap();
        let spent = store
            .connect_batch("nd_a", &[], &[spend("d", "sd", "ec_1", false)], 10)
            .unwrap();
        assert!(
            matches!(&spent[0], Spent::Opened { epoch: None, .. }),
            "{kind}: {spent:?}"
        );
        assert_eq!(
            store.context_owner("ec_1").unwrap(),
            Some(("nd_b".into(), 1)),
            "{kind}"
        );
        // Keeping forgets the expired ones: `e` expires at 1,000.
        store
            .connect_batch("nd_a", &[ticket("e", "ec_1", "se")], &[], 10)
            .unwrap();
        store
            .connect_batch("nd_a", &[ticket("f", "ec_1", "sf")], &[], 1_000)
            .unwrap();
        assert!(store.connect_ticket("e").unwrap().is_none(), "{kind}");
        // Presented after its expiry: it opens and takes nothing.
        store
            .connect_batch("nd_a", &[ticket("g", "ec_5", "sg")], &[], 10)
            .unwrap();
        let late = store
            .connect_batch("nd_b", &[], &[spend("g", "sg", "ec_5", true)], 1_000)
            .unwrap();
        assert_eq!(late, [Spent::Refused], "{kind}");
        assert_eq!(store.context_owner("ec_5").unwrap(), None, "{kind}");
        // Results come back in the order given, whatever order the rows were taken in.
        let kept = [ticket("h", "ec_9", "sh"), ticket("i", "ec_0", "si")];
        store.connect_batch("nd_a", &kept, &[], 10).unwrap();
        let spent = store
            .connect_batch(
                "nd_b",
                &[],
                &[
                    spend("h", "sh", "ec_9", true),
                    spend("i", "si", "ec_0", false),
                ],
                10,
            )
            .unwrap();
        assert!(
            matches!(&spent[..], [Spent::Opened { shared: h, epoch: Some(1) }, Spent::Opened { shared: i, epoch: None }]
                if h.id == "h" && i.id == "i"),
            "{kind}: {spent:?}"
        );
    }
}

#[test]
fn a_connect_batch_that_fails_keeps_spends_and_takes_nothing() {
    for fresh in stores("connect_batch_fails") {
        let (store, kind) = (&fresh.store, fresh.kind);
        store
            .connect_batch("nd_a", &[ticket("a", "ec_1", "sa")], &[], 10)
            .unwrap();
        // Keeping `a` again breaks the transaction: nothing of it stays (`n` kept first).
        let failed = store.connect_batch(
            "nd_b",
            &[ticket("n", "ec_2", "sn"), ticket("a", "ec_1", "sa")],
            &[spend("a", "sa", "ec_1", true)],
            10,
        );
        assert!(failed.is_err(), "{kind}");
        assert!(
            store.connect_ticket("a").unwrap().is_some(),
            "{kind}: not spent"
        );
        assert!(
            store.connect_ticket("n").unwrap().is_none(),
            "{kind}: not kept"
        );
        assert_eq!(
            store.context_owner("ec_1").unwrap(),
            None,
            "{kind}: not taken"
        );
    }
}

fn context_row(id: &str) -> ContextRow {
    ContextRow {
        id: id.into(),
        name: format!("box-{id}"),
        operator: "ana".into(),
        operator_is_member: true,
        shared_with_all_members: false,
        opted_in: vec![],
        grant: Grant {
            fs: vec![],
            egress: Egress::None,
            commands: CommandsGrant { enabled: false },
            limits: GrantLimits { max_concurrent: 4 },
            environments: None,
        },
        grant_version: 1,
        revoked: false,
    }
}

fn context(id: &str, written_ms: u64) -> ServerRecord {
    ServerRecord {
        written_ms,
        change: ServerChange::Context(context_row(id)),
    }
}

fn chain(user: &str, written_ms: u64) -> ServerRecord {
    ServerRecord {
        written_ms,
        change: ServerChange::Chain(ChainRow {
            user_id: user.into(),
            chain: Chain::cloud_only(),
        }),
    }
}

fn execution(id: &str, place: PlaceRow, written_ms: u64) -> ServerRecord {
    ServerRecord {
        written_ms,
        change: ServerChange::Execution(Box::new(ExecutionRow {
            exec_id: id.into(),
            requester: Requester {
                user_id: "ana".into(),
            },
            target: ExecuteTarget::chain(),
            environment: Environment::Shell,
            capability: CapabilitySource::Inline {
                manifest: "name: t\nenvironment: shell\nentry: run.sh\n".into(),
                files: vec![],
            },
            timeout_ms: 60_000,
            route: None,
            hops: 1,
            place,
        })),
    }
}

fn offered(context_id: &str) -> PlaceRow {
    PlaceRow::Offered {
        context_id: context_id.into(),
        run_id: "x.1".into(),
    }
}

fn committed(context_id: &str) -> PlaceRow {
    PlaceRow::Committed {
        context_id: context_id.into(),
        run_id: "x.1".into(),
        committed_at_ms: 1_000,
        lost_at_ms: 90_000,
    }
}

fn queued(context_id: &str) -> PlaceRow {
    PlaceRow::Queued {
        context_id: context_id.into(),
        until_ms: 90_000,
    }
}

fn ran_on_context(id: &str) -> RanOn {
    RanOn {
        kind: RanOnKind::Context,
        id: id.into(),
        name: format!("box-{id}"),
        yours: true,
        attempts: vec![],
        fell_back_to_cloud: false,
    }
}

fn ended(id: &str, ran_on: Option<RanOn>, written_ms: u64) -> ServerRecord {
    ServerRecord {
        written_ms,
        change: ServerChange::ExecutionEnded(Box::new(EndedRow {
            exec_id: id.into(),
            outcome: ExecutionOutcome::Lost,
            ran_on,
            line: "lost".into(),
            held_on: None,
        })),
    }
}

/// The end of an execution held on `held_on` when it ended (queued there, say: it never ran).
fn ended_on(id: &str, held_on: &str, written_ms: u64) -> ServerRecord {
    let mut record = ended(id, None, written_ms);
    if let ServerChange::ExecutionEnded(row) = &mut record.change {
        row.held_on = Some(held_on.into());
    }
    record
}

/// Writes `records` as node `node_id`'s, unfenced.
fn write(store: &Store, node_id: Option<&str>, records: Vec<ServerRecord>) {
    store
        .write_batch(&Batch {
            records,
            node_id: node_id.map(str::to_owned),
            ..Batch::default()
        })
        .expect("an unfenced batch is written");
}

/// Node `node_id` starts: it claims what it may, and the epoch of its own fence is returned.
fn start_node(store: &Store, node_id: &str) -> i64 {
    store
        .claim_contexts(node_id, LIVE_MS)
        .unwrap()
        .into_iter()
        .find(|(id, _)| *id == node_fence(node_id))
        .expect("the node's own fence")
        .1
}

/// Writes `record` as node `node_id`'s under its own fence at `epoch` alone, expecting the
/// fence to refuse it; the refusal.
fn refused_under_own_fence(
    store: &Store,
    node_id: &str,
    epoch: i64,
    record: ServerRecord,
) -> crate::store::StoreError {
    store
        .write_batch(&Batch {
            records: vec![record],
            node_id: Some(node_id.into()),
            fence: vec![(node_fence(node_id), epoch)],
            ..Batch::default()
        })
        .expect_err("fenced out")
}

/// Registers context `id` in the server's table (what `claim_contexts` claims from).
fn register(store: &Store, id: &str) {
    let entry = ContextEntry {
        id: id.into(),
        name: format!("box-{id}"),
        operator: "ana".into(),
        key_id: format!("mk_{id}"),
        max_concurrent: 4,
        environments: vec!["shell".into()],
        daemon_version: "1.0.0".into(),
        registered_at: 1,
        grant_json: "{}".into(),
        grant_version: 1,
        revoked: false,
        shared_with_all_members: false,
        opted_in: vec![],
        operator_is_member: true,
    };
    store.insert_context(&entry, &[1; 32]).unwrap();
}

fn count(store: &Store, table: &str) -> i64 {
    store
        .lock()
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), params![], |r| {
            r.get(0)
        })
        .unwrap()
}

fn record_writers(store: &Store) -> Vec<(String, String, Option<String>)> {
    store
        .lock()
        .query_map(
            "SELECT kind, key, node_id FROM records ORDER BY kind, key",
            params![],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

fn ids<T>(rows: &[T], id: impl Fn(&T) -> &str) -> Vec<String> {
    rows.iter().map(|r| id(r).to_owned()).collect()
}

#[test]
fn taking_a_context_bumps_its_epoch_whoever_takes_it() {
    for fresh in stores("take_context") {
        let (store, kind) = (&fresh.store, fresh.kind);
        assert_eq!(store.take_context("ec_1", "nd_a").unwrap(), 1, "{kind}");
        assert_eq!(store.take_context("ec_1", "nd_a").unwrap(), 2, "{kind}");
        assert_eq!(store.take_context("ec_1", "nd_b").unwrap(), 3, "{kind}");
        assert_eq!(store.take_context("ec_2", "nd_a").unwrap(), 1, "{kind}");
        // Claimed only when no node owns it: never moved, never bumped.
        assert_eq!(
            store.claim_unowned_context("ec_3", "nd_c").unwrap(),
            Some(1),
            "{kind}"
        );
        for node in ["nd_c", "nd_d"] {
            assert_eq!(
                store.claim_unowned_context("ec_3", node).unwrap(),
                None,
                "{kind}"
            );
            assert_eq!(store.claim_unowned_context("ec_1", node).unwrap(), None);
        }
        assert_eq!(
            store.context_owners_not_of(&[]).unwrap(),
            [
                ("ec_1".to_owned(), "nd_b".to_owned(), 3),
                ("ec_2".to_owned(), "nd_a".to_owned(), 1),
                ("ec_3".to_owned(), "nd_c".to_owned(), 1)
            ],
            "{kind}: committed, seen by the reading connection"
        );
    }
}

#[test]
fn a_batch_behind_a_stale_fence_writes_nothing_and_names_the_context() {
    for fresh in stores("stale_fence") {
        let (store, kind) = (&fresh.store, fresh.kind);
        write(store, Some("nd_a"), vec![context("ec_1", 1_000)]);
        assert_eq!(store.take_context("ec_1", "nd_a").unwrap(), 1);
        assert_eq!(store.take_context("ec_1", "nd_b").unwrap(), 2);
        let (records, executions, audit) = (
            count(store, "records"),
            count(store, "executions"),
            count(store, "audit"),
        );
        let batch = |node: Option<&str>, fence: Vec<(String, i64)>| Batch {
            executions: vec![ExecutionEntry {
                id: "ex_1".into(),
                user: "ana".into(),
                status: ExecutionStatus::Pending,
                created_at: 5,
                ..ExecutionEntry::default()
            }],
            records: vec![
                execution("ex_1", committed("ec_1"), 2_000),
                chain("ana", 2_000),
            ],
            audit: vec![AuditRow {
                at: 5,
                kind: "probe".into(),
                actor: "ana".into(),
                context_id: Some("ec_1".into()),
                detail: String::new(),
            }],
            node_id: node.map(str::to_owned),
            fence,
            ..Batch::default()
        };
        let refused = [
            // nd_a held epoch 1; nd_b took the context since.
            (Some("nd_a"), vec![("ec_1".to_owned(), 1)], "ec_1", "nd_b"),
            // The epoch now, but another node's.
            (Some("nd_a"), vec![("ec_1".to_owned(), 2)], "ec_1", "nd_b"),
            // A newer epoch than the owner's.
            (Some("nd_b"), vec![("ec_1".to_owned(), 3)], "ec_1", "nd_b"),
            // One good context does not carry a stale one.
            (
                Some("nd_b"),
                vec![("ec_1".to_owned(), 2), ("ec_9".to_owned(), 1)],
                "ec_9",
                "has no owner",
            ),
            // A fence without a node id never holds.
            (None, vec![("ec_1".to_owned(), 2)], "ec_1", "nd_b"),
        ];
        for (node, fence, context_id, said) in refused {
            let err = store
                .write_batch(&batch(node, fence.clone()))
                .expect_err("a stale fence is refused");
            assert_eq!(err.fenced_context(), Some(context_id), "{kind}: {fence:?}");
            assert!(!err.is_unavailable(), "{kind}: a refusal, not an outage");
            let text = err.to_string();
            assert!(text.contains(said), "{kind}: {text}");
            assert!(text.contains("this node lost its fence"), "{kind}: {text}");
            assert_eq!(
                (
                    count(store, "records"),
                    count(store, "executions"),
                    count(store, "audit")
                ),
                (records, executions, audit),
                "{kind}: nothing of the batch is written"
            );
            assert!(store.execution("ex_1").unwrap().is_none(), "{kind}");
        }
        assert_eq!(
            store.context_owners_not_of(&[]).unwrap(),
            [("ec_1".to_owned(), "nd_b".to_owned(), 2)],
            "{kind}: the fence changes no owner"
        );
        // A refusal is not a database failure: other errors name no context.
        let other = store
            .lock()
            .query_row("SELECT no_such_column FROM records", params![], |r| {
                r.get::<i64>(0)
            })
            .map_err(|e| super::StoreError::new("probing", e))
            .expect_err("no such column");
        assert_eq!(other.fenced_context(), None, "{kind}");
    }
}

#[test]
fn a_batch_behind_the_current_fence_writes_and_names_its_node() {
    for fresh in stores("current_fence") {
        let (store, kind) = (&fresh.store, fresh.kind);
        store.take_context("ec_1", "nd_a").unwrap();
        let epoch = store.take_context("ec_1", "nd_b").unwrap();
        let records = vec![
            context("ec_1", 1_000),
            execution("ex_1", committed("ec_1"), 2_000),
            chain("ana", 2_000),
        ];
        let own = store
            .claim_unowned_context(&node_fence("nd_b"), "nd_b")
            .unwrap()
            .expect("nobody's yet");
        let fence: Vec<(String, i64)> = contexts_written(&records, "nd_b")
            .into_iter()
            .map(|id| {
                let held = if id == node_fence("nd_b") { own } else { epoch };
                (id, held)
            })
            .collect();
        assert_eq!(
            fence,
            [(node_fence("nd_b"), 1), ("ec_1".to_owned(), 2)],
            "{kind}"
        );
        store
            .write_batch(&Batch {
                executions: vec![ExecutionEntry {
                    id: "ex_1".into(),
                    user: "ana".into(),
                    status: ExecutionStatus::Pending,
                    created_at: 5,
                    ..ExecutionEntry::default()
                }],
                records,
                node_id: Some("nd_b".into()),
                fence,
                ..Batch::default()
            })
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let nd_b = Some("nd_b".to_owned());
        assert_eq!(
            record_writers(store),
            [
                ("chain".into(), "ana".into(), nd_b.clone()),
                ("context".into(), "ec_1".into(), nd_b.clone()),
                ("execution".into(), "ex_1".into(), nd_b.clone()),
            ],
            "{kind}"
        );
        let listed = store.execution("ex_1").unwrap().expect("its listing row");
        assert_eq!(listed.status, ExecutionStatus::Running, "{kind}");
        // A record written again names its latest writer.
        write(store, Some("nd_c"), vec![chain("ana", 3_000)]);
        write(store, None, vec![context("ec_1", 3_000)]);
        let writers = record_writers(store);
        assert_eq!(writers[0].2.as_deref(), Some("nd_c"), "{kind}");
        assert_eq!(writers[1].2, None, "{kind}");
        // A fence and a node id alone are nothing to write (and check nothing).
        let empty = Batch {
            node_id: Some("nd_a".into()),
            fence: vec![("ec_1".into(), 1)],
            ..Batch::default()
        };
        assert!(empty.is_empty(), "{kind}");
        store.write_batch(&empty).unwrap();
    }
}

#[test]
fn a_starting_node_claims_unowned_and_dead_nodes_contexts_not_a_live_nodes() {
    for fresh in stores("claim") {
        let (store, kind) = (&fresh.store, fresh.kind);
        for id in ["ec_a", "ec_b", "ec_c", "ec_d", "ec_e"] {
            register(store, id);
        }
        store
            .node_heartbeat(
                "nd_dead",
                "http://d",
                Some(&super::tests::reach("nd_dead")),
                1,
                None,
            )
            .unwrap();
        store
            .node_heartbeat(
                "nd_live",
                "http://l",
                Some(&super::tests::reach("nd_live")),
                2,
                None,
            )
            .unwrap();
        store
            .node_heartbeat(
                "nd_me",
                "http://m",
                Some(&super::tests::reach("nd_me")),
                3,
                None,
            )
            .unwrap();
        // ec_a has no owner row.
        assert_eq!(store.take_context("ec_b", "nd_dead").unwrap(), 1);
        assert_eq!(store.take_context("ec_c", "nd_live").unwrap(), 1);
        store.take_context("ec_c", "nd_live").unwrap();
        // A node with no row in `nodes` at all.
        store.take_context("ec_d", "nd_gone").unwrap();
        store.take_context("ec_d", "nd_gone").unwrap();
        store.take_context("ec_e", "nd_me").unwrap();
        // Twenty seconds of silence by the database's clock: nd_dead is not live.
        store
            .lock()
            .execute(
                "UPDATE nodes SET heartbeat_at_ms = heartbeat_at_ms - 20000 WHERE id = 'nd_dead'",
                params![],
            )
            .unwrap();
        let claimed = store.claim_contexts("nd_me", LIVE_MS).unwrap();
        // Its own executions' fence, made at its first start at the next owner-change number.
        let own = claimed[0].1;
        assert!(own > 1, "{kind}: {claimed:?}");
        assert_eq!(
            claimed,
            [
                (node_fence("nd_me"), own),
                ("ec_a".to_owned(), 1),
                ("ec_b".to_owned(), 2),
                ("ec_d".to_owned(), 3),
                ("ec_e".to_owned(), 2),
            ],
            "{kind}"
        );
        let owners = store.context_owners_not_of(&[]).unwrap();
        assert_eq!(
            owners[3],
            ("ec_c".to_owned(), "nd_live".to_owned(), 2),
            "{kind}: a live node's context is left alone"
        );
        assert_eq!(owners.len(), 6, "{kind}");
        // The live node claiming next takes nothing of nd_me's (live, its own fence included)
        // and keeps its own.
        let again = store.claim_contexts("nd_live", LIVE_MS).unwrap();
        let live_own = again[0].1;
        assert!(
            live_own > own,
            "{kind}: a later owner-change number: {again:?}"
        );
        assert_eq!(
            again,
            [(node_fence("nd_live"), live_own), ("ec_c".to_owned(), 3)],
            "{kind}"
        );
        let mine = store
            .context_owners_not_of(&[])
            .unwrap()
            .into_iter()
            .find(|(id, ..)| *id == node_fence("nd_me"));
        assert_eq!(
            mine,
            Some((node_fence("nd_me"), "nd_me".to_owned(), own)),
            "{kind}: another node's claim never moves a node's own fence"
        );
    }
}

#[test]
fn a_context_snapshot_holds_its_row_and_the_executions_placed_on_it_only() {
    for fresh in stores("context_snapshot") {
        let (store, kind) = (&fresh.store, fresh.kind);
        assert_eq!(store.context_snapshot("ec_1").unwrap(), None, "{kind}");
        write(
            store,
            Some("nd_a"),
            vec![
                context("ec_1", 1_000),
                context("ec_2", 5_000),
                chain("ana", 6_000),
                execution("ex_c", committed("ec_1"), 2_000),
                execution("ex_q", queued("ec_1"), 3_000),
                execution("ex_o", offered("ec_1"), 2_500),
                execution("ex_other", offered("ec_2"), 7_000),
                execution("ex_u", PlaceRow::Unplaced, 8_000),
                execution("ex_cloud", PlaceRow::Cloud, 8_000),
                execution("ex_gone", committed("ec_1"), 2_000),
                ended("ex_gone", Some(ran_on_context("ec_1")), 9_000),
            ],
        );
        let snapshot = store.context_snapshot("ec_1").unwrap().expect("its record");
        assert_eq!(ids(&snapshot.contexts, |r| &r.id), ["ec_1"], "{kind}");
        assert_eq!(
            ids(&snapshot.executions, |r| &r.exec_id),
            ["ex_c", "ex_o", "ex_q"],
            "{kind}"
        );
        assert!(snapshot.chains.is_empty(), "{kind}");
        assert_eq!(snapshot.written_ms, 3_000, "{kind}: its latest record");
        let other = store.context_snapshot("ec_2").unwrap().unwrap();
        assert_eq!(ids(&other.executions, |r| &r.exec_id), ["ex_other"]);
        assert_eq!(store.context_snapshot("ec_9").unwrap(), None, "{kind}");
        // Read together, each is what it is alone; a machine without a record has none.
        let ask: Vec<String> = ["ec_1", "ec_2", "ec_9"].map(String::from).to_vec();
        let together = store.context_snapshots(&ask).unwrap();
        assert_eq!(together.len(), 2, "{kind}");
        assert_eq!(together.get("ec_1"), Some(&snapshot), "{kind}");
        assert_eq!(together.get("ec_2"), Some(&other), "{kind}");
        // Each execution record carries its machine, which a take reads by.
        let placements = |store: &Store| -> Vec<(String, Option<String>)> {
            store
                .read()
                .query_map(
                    "SELECT key, placed_on FROM records WHERE kind = 'execution' ORDER BY key",
                    params![],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap()
        };
        let placed = placements(store);
        let expected: Vec<(String, Option<String>)> = [
            ("ex_c", "ec_1"),
            ("ex_cloud", ""),
            ("ex_o", "ec_1"),
            ("ex_other", "ec_2"),
            ("ex_q", "ec_1"),
            ("ex_u", ""),
        ]
        .iter()
        .map(|(k, p)| ((*k).to_owned(), Some((*p).to_owned())))
        .collect();
        assert_eq!(placed, expected, "{kind}");
        // Rows written before the column (NULL) are still found, and placed at the next open.
        store
            .lock()
            .execute("UPDATE records SET placed_on = NULL", params![])
            .unwrap();
        let again = store.context_snapshot("ec_1").unwrap().unwrap();
        assert_eq!(
            ids(&again.executions, |r| &r.exec_id),
            ["ex_c", "ex_o", "ex_q"]
        );
        assert_eq!(store.place_old_records().unwrap(), 6, "{kind}");
        assert_eq!(placements(store), expected, "{kind}");
        assert_eq!(store.place_old_records().unwrap(), 0, "{kind}: once");
    }
}

#[test]
fn a_node_restores_what_it_owns_and_keeps_the_other_contexts_rows_apart() {
    for fresh in stores("owned_snapshot") {
        let (store, kind) = (&fresh.store, fresh.kind);
        let owned: HashSet<String> = ["ec_1".to_owned()].into();
        let empty = store.load_owned_snapshot("nd_me", &owned).unwrap();
        assert_eq!((empty.mine, empty.elsewhere), (None, vec![]), "{kind}");
        write(
            store,
            Some("nd_me"),
            vec![
                context("ec_1", 1_000),
                execution("ex_mine", committed("ec_1"), 2_000),
                execution("ex_q", queued("ec_1"), 2_000),
                execution("ex_cloud_mine", PlaceRow::Cloud, 2_000),
            ],
        );
        write(
            store,
            Some("nd_other"),
            vec![
                context("ec_2", 1_500),
                chain("bo", 1_500),
                execution("ex_there", offered("ec_2"), 3_000),
                execution("ex_u_live", PlaceRow::Unplaced, 3_000),
                execution("ex_cloud_live", PlaceRow::Cloud, 3_000),
            ],
        );
        write(
            store,
            Some("nd_dead"),
            vec![
                context("ec_3", 1_200),
                execution("ex_u_dead", PlaceRow::Unplaced, 4_000),
                execution("ex_cloud_dead", PlaceRow::Cloud, 4_000),
                execution("ex_done", committed("ec_1"), 4_000),
                ended("ex_done", Some(ran_on_context("ec_1")), 9_500),
            ],
        );
        write(
            store,
            None,
            vec![
                chain("ana", 500),
                execution("ex_u_null", PlaceRow::Unplaced, 600),
            ],
        );
        let split = store.load_owned_snapshot("nd_me", &owned).unwrap();
        let mine = split.mine.expect("records");
        assert_eq!(ids(&mine.contexts, |r| &r.id), ["ec_1"], "{kind}");
        assert_eq!(
            ids(&mine.chains, |r| &r.user_id),
            ["ana", "bo"],
            "{kind}: every chain"
        );
        assert_eq!(
            ids(&mine.executions, |r| &r.exec_id),
            ["ex_cloud_mine", "ex_mine", "ex_q", "ex_u_null"],
            "{kind}: another node's unplaced and cloud rows, live or dead (its heartbeat's \
             take-over moves those, fencing it out), and those placed elsewhere, are left out"
        );
        assert_eq!(
            mine.written_ms, 4_000,
            "{kind}: the latest record read (an end keeps none)"
        );
        let ends: i64 = store
            .read()
            .query_row(
                "SELECT COUNT(*) FROM records WHERE kind = 'ended' OR key = 'ex_done'",
                params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(ends, 0, "{kind}: the ended execution left no record");
        assert_eq!(
            split.elsewhere,
            [context_row("ec_2"), context_row("ec_3")],
            "{kind}"
        );
        // The whole, for a node alone, is unchanged.
        let whole = store.load_snapshot().unwrap().unwrap();
        assert_eq!(whole.contexts.len(), 3, "{kind}");
        assert_eq!(whole.executions.len(), 9, "{kind}");
    }
}

#[test]
fn the_fences_a_batch_needs_are_its_contexts_and_the_nodes_own_for_every_execution() {
    let none: [&str; 0] = [];
    let written = |records: &[ServerRecord]| contexts_written(records, "nd_a");
    let own = [node_fence("nd_a")];
    assert_eq!(written(&[context("ec_1", 1)]), ["ec_1"]);
    assert_eq!(written(&[chain("ana", 1)]), none);
    // An execution's record: its machine's fence and the node's own.
    let own_and = |id: &str| [node_fence("nd_a"), id.to_owned()];
    for place in [offered("ec_2"), committed("ec_2"), queued("ec_2")] {
        assert_eq!(written(&[execution("x", place, 1)]), own_and("ec_2"));
    }
    let handed = PlaceRow::HandedOff {
        context_id: "ec_2".into(),
    };
    for place in [PlaceRow::Unplaced, PlaceRow::Cloud, handed] {
        assert_eq!(written(&[execution("x", place, 1)]), own);
    }
    // An end is fenced by the machine that held the execution, whether it ran there or
    // not (a queue that expired); where it ran does not decide.
    assert_eq!(written(&[ended_on("x", "ec_3", 1)]), own_and("ec_3"));
    assert_eq!(written(&[ended("x", Some(ran_on_context("ec_3")), 1)]), own);
    assert_eq!(written(&[ended("x", Some(RanOn::cloud()), 1)]), own);
    assert_eq!(written(&[ended("x", None, 1)]), own);
    // Sorted, each once.
    let batch = [
        execution("x1", committed("ec_b"), 1),
        context("ec_a", 1),
        ended_on("x2", "ec_b", 1),
        chain("ana", 1),
        execution("x3", queued("ec_a"), 1),
        execution("x4", PlaceRow::Unplaced, 1),
    ];
    assert_eq!(
        written(&batch),
        [node_fence("nd_a").as_str(), "ec_a", "ec_b"]
    );
}

#[test]
fn a_starting_node_ends_only_the_open_recordings_of_nodes_not_live() {
    for fresh in stores("recordings_by_node") {
        let (store, kind) = (&fresh.store, fresh.kind);
        let entry = |id: &str| RecordingEntry {
            exec_id: id.into(),
            context_id: "ec_1".into(),
            context_name: "box".into(),
            opened_by: "ana".into(),
            started_at: 1_000,
            ended_at: None,
            size: 0,
            records_input: false,
            truncated: false,
        };
        store
            .write_recordings_on(Some("nd_live"), &[entry("ex_live")], &[])
            .unwrap();
        store
            .write_recordings_on(Some("nd_dead"), &[entry("ex_dead")], &[])
            .unwrap();
        store.write_recordings(&[entry("ex_none")], &[]).unwrap();
        let nodes: Vec<(String, Option<String>)> = store
            .lock()
            .query_map(
                "SELECT exec_id, node_id FROM recordings ORDER BY exec_id",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            nodes,
            [
                ("ex_dead".to_owned(), Some("nd_dead".to_owned())),
                ("ex_live".to_owned(), Some("nd_live".to_owned())),
                ("ex_none".to_owned(), None),
            ],
            "{kind}"
        );
        // The live node's relay appends on.
        let append = RecordingAppend {
            exec_id: "ex_live".into(),
            text: "[1.0, \"o\", \"a\"]\n".into(),
            ..RecordingAppend::default()
        };
        store.write_recordings(&[], &[append]).unwrap();
        let live: HashSet<String> = ["nd_live".to_owned()].into();
        assert_eq!(store.end_cut_recordings_except(&live).unwrap(), 2, "{kind}");
        assert_eq!(store.recording("ex_live").unwrap().unwrap().ended_at, None);
        assert!(
            store
                .recording("ex_dead")
                .unwrap()
                .unwrap()
                .ended_at
                .is_some()
        );
        assert!(
            store
                .recording("ex_none")
                .unwrap()
                .unwrap()
                .ended_at
                .is_some()
        );
        assert_eq!(store.end_cut_recordings_except(&live).unwrap(), 0, "{kind}");
        // Alone, a node ends every open one.
        assert_eq!(store.end_cut_recordings().unwrap(), 1, "{kind}");
        assert_eq!(
            store.recording("ex_live").unwrap().unwrap().ended_at,
            Some(1_001),
            "{kind}"
        );
    }
}

#[test]
fn an_earlier_start_of_a_node_is_fenced_out_by_its_later_start_and_told_so() {
    for fresh in stores("own_fence_restarted") {
        let (store, kind) = (&fresh.store, fresh.kind);
        let earlier = start_node(store, "nd_a");
        let later = start_node(store, "nd_a");
        assert!(later > earlier, "{kind}: a start moves the node's fence on");
        let record = execution("ex_u", PlaceRow::Unplaced, 1_000);
        let refused = refused_under_own_fence(store, "nd_a", earlier, record);
        assert_eq!(refused.fenced_node(), Some("nd_a"), "{kind}");
        assert_eq!(refused.fenced_context(), None, "{kind}");
        let said = refused.to_string();
        assert!(said.contains("started again since"), "{kind}: {said}");
        assert_eq!(count(store, "records"), 0, "{kind}: nothing written");
    }
}

#[test]
fn a_dead_nodes_machines_and_own_executions_are_taken_once_and_fence_it_out() {
    for fresh in stores("take_from_the_dead") {
        let (store, kind) = (&fresh.store, fresh.kind);
        store.take_context("ec_1", "nd_dead").unwrap();
        let dead_fence = start_node(store, "nd_dead");
        write(
            store,
            Some("nd_dead"),
            vec![
                execution("ex_u", PlaceRow::Unplaced, 1_000),
                execution("ex_cloud", PlaceRow::Cloud, 1_000),
                execution("ex_q", queued("ec_1"), 1_000),
            ],
        );
        let epoch = store
            .context_owners_not_of(&[])
            .unwrap()
            .into_iter()
            .find(|(id, ..)| id == "ec_1")
            .unwrap()
            .2;
        // Two live nodes try at once: one wins each (a row judged at an old epoch moves not).
        let rows = |epoch: i64| {
            vec![
                ("ec_1".to_owned(), "nd_dead".to_owned(), epoch),
                ("ec_x".to_owned(), "nd_dead".to_owned(), 1),
            ]
        };
        // Judged dead, it wrote a heartbeat after all: nothing of it is taken.
        store
            .node_heartbeat("nd_dead", "http://d", None, 1, None)
            .unwrap();
        assert_eq!(
            store
                .take_contexts_from(&rows(epoch), "nd_a", LIVE_MS)
                .unwrap(),
            Vec::new(),
            "{kind}: a node live again keeps its machines"
        );
        assert_eq!(
            store
                .take_over_node("nd_dead", dead_fence, "nd_a", LIVE_MS)
                .unwrap(),
            None,
            "{kind}: and its executions"
        );
        store.forget_node("nd_dead").unwrap();
        let won = store
            .take_contexts_from(&rows(epoch), "nd_a", LIVE_MS)
            .unwrap();
        assert_eq!(won, vec![("ec_1".to_owned(), epoch + 1)], "{kind}");
        let lost = store
            .take_contexts_from(&rows(epoch), "nd_b", LIVE_MS)
            .unwrap();
        assert_eq!(lost, Vec::new(), "{kind}");
        assert_eq!(
            store.context_owner("ec_1").unwrap(),
            Some(("nd_a".to_owned(), epoch + 1)),
            "{kind}"
        );
        let taken = store
            .take_over_node("nd_dead", dead_fence, "nd_a", LIVE_MS)
            .unwrap()
            .expect("the first taker wins");
        let mut ids: Vec<&str> = taken.iter().map(|r| r.exec_id.as_str()).collect();
        ids.sort();
        assert_eq!(
            ids,
            ["ex_cloud", "ex_u"],
            "{kind}: only what no machine holds"
        );
        assert_eq!(
            store
                .take_over_node("nd_dead", dead_fence, "nd_b", LIVE_MS)
                .unwrap(),
            None,
            "{kind}: taken once"
        );
        let marked = store
            .lock()
            .query_map(
                "SELECT key FROM records WHERE kind = 'execution' AND node_id = 'nd_a' ORDER BY key",
                params![],
                |r| r.get::<String>(0),
            )
            .unwrap();
        assert_eq!(marked, ["ex_cloud", "ex_u"], "{kind}");
        // The dead node wakes up: its next write of its own executions fails its fence.
        let record = execution("ex_u", PlaceRow::Cloud, 9_000);
        let refused = refused_under_own_fence(store, "nd_dead", dead_fence, record);
        assert_eq!(refused.fenced_node(), Some("nd_dead"), "{kind}");
        assert_eq!(refused.fenced_context(), None, "{kind}: no machine's fence");
        assert!(
            refused.to_string().contains("judged it dead"),
            "{kind}: {refused}"
        );
        // Even one on a machine it owns again: an execution's record needs the node's own
        // fence as well as the machine's.
        let machine = store.take_context("ec_1", "nd_dead").unwrap();
        let records = vec![execution("ex_u", committed("ec_1"), 9_500)];
        let fence = contexts_written(&records, "nd_dead")
            .into_iter()
            .map(|id| {
                let epoch = if id == node_fence("nd_dead") {
                    dead_fence
                } else {
                    machine
                };
                (id, epoch)
            })
            .collect();
        let refused = store
            .write_batch(&Batch {
                records,
                node_id: Some("nd_dead".into()),
                fence,
                ..Batch::default()
            })
            .expect_err("fenced out");
        assert_eq!(
            refused.fenced_node(),
            Some("nd_dead"),
            "{kind}: on a machine it holds"
        );
        // A later start of the node makes its fence row again, at an epoch the paused start
        // never held: that start stays fenced out.
        let restarted = start_node(store, "nd_dead");
        assert!(
            restarted > dead_fence,
            "{kind}: {restarted} after {dead_fence}"
        );
        let record = execution("ex_w", PlaceRow::Unplaced, 9_600);
        let refused = refused_under_own_fence(store, "nd_dead", dead_fence, record);
        assert_eq!(refused.fenced_node(), Some("nd_dead"), "{kind}");
    }
}

#[test]
fn the_owners_changed_since_a_mark_are_read_and_the_dead_by_node() {
    for fresh in stores("owners_changed") {
        let (store, kind) = (&fresh.store, fresh.kind);
        let (all, start) = store.context_owners_changed_since(0).unwrap();
        assert!(all.is_empty(), "{kind}");
        assert_eq!(start, 0, "{kind}");
        store.take_context("ec_1", "nd_a").unwrap();
        store.take_context("ec_2", "nd_b").unwrap();
        let (rows, mark) = store.context_owners_changed_since(0).unwrap();
        assert_eq!(
            rows,
            [
                ("ec_1".to_owned(), "nd_a".to_owned(), 1),
                ("ec_2".to_owned(), "nd_b".to_owned(), 1)
            ],
            "{kind}"
        );
        // Nothing since: nothing read, the mark stays.
        assert_eq!(
            store.context_owners_changed_since(mark).unwrap(),
            (vec![], mark),
            "{kind}"
        );
        // A take, a claim and an adoption each change their row past the mark.
        store.take_context("ec_1", "nd_b").unwrap();
        assert_eq!(
            store.claim_unowned_context("ec_3", "nd_a").unwrap(),
            Some(1),
            "{kind}"
        );
        assert_eq!(
            store
                .take_contexts_from(
                    &[("ec_2".to_owned(), "nd_b".to_owned(), 1)],
                    "nd_c",
                    LIVE_MS
                )
                .unwrap(),
            [("ec_2".to_owned(), 2)],
            "{kind}"
        );
        let (rows, newer) = store.context_owners_changed_since(mark).unwrap();
        assert_eq!(
            rows,
            [
                ("ec_1".to_owned(), "nd_b".to_owned(), 2),
                ("ec_3".to_owned(), "nd_a".to_owned(), 1),
                ("ec_2".to_owned(), "nd_c".to_owned(), 2)
            ],
            "{kind}: in the order of their change"
        );
        assert!(newer > mark, "{kind}");
        // A claim that changes nothing (the row is someone's) moves no mark.
        assert_eq!(
            store.claim_unowned_context("ec_3", "nd_b").unwrap(),
            None,
            "{kind}"
        );
        assert_eq!(
            store.context_owners_changed_since(newer).unwrap().0,
            vec![],
            "{kind}"
        );
        // The rows of every node but the live ones.
        let live = ["nd_a".to_owned(), "nd_c".to_owned()];
        assert_eq!(
            store.context_owners_not_of(&live).unwrap(),
            [("ec_1".to_owned(), "nd_b".to_owned(), 2)],
            "{kind}"
        );
        assert_eq!(store.context_owners_not_of(&[]).unwrap().len(), 3, "{kind}");
        // A row written before change numbers were kept has number 0: a first learning
        // (from -1) reads it, a later one does not.
        store
            .lock()
            .execute(
                "INSERT INTO context_owner (context_id, node_id, epoch) VALUES ('ec_old', 'nd_a', 4)",
                params![],
            )
            .unwrap();
        let (first, _) = store.context_owners_changed_since(-1).unwrap();
        assert_eq!(first.len(), 4, "{kind}");
        assert_eq!(
            first[0],
            ("ec_old".to_owned(), "nd_a".to_owned(), 4),
            "{kind}"
        );
        assert!(
            store.context_owners_changed_since(0).unwrap().0.len() == 3,
            "{kind}"
        );
    }
}

#[test]
fn records_are_numbered_in_the_order_written_across_a_reopened_store() {
    for fresh in stores("record_numbers") {
        let kind = fresh.kind;
        write(
            &fresh.store,
            None,
            vec![context("ec_1", 1_000), chain("ana", 1_000)],
        );
        let again = Store::open_database(&fresh.database, &fresh.dir).unwrap();
        write(
            &again,
            None,
            vec![chain("bo", 2_000), context("ec_1", 2_000)],
        );
        let numbered: Vec<(String, i64)> = again
            .read()
            .query_map(
                "SELECT key, seq FROM records ORDER BY seq",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let keys: Vec<&str> = numbered.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["ana", "bo", "ec_1"],
            "{kind}: rewritten last, so restored last"
        );
        assert!(
            numbered.windows(2).all(|w| w[0].1 < w[1].1),
            "{kind}: each number once: {numbered:?}"
        );
    }
}
