//! Putting a server together: the state folder and its secrets (created on first start,
//! read back after), the store, the dispatcher restored from its records (and access records
//! brought in line with removed users), the used nonces reloaded, the socket bound, the join
//! string rewritten with the URL served.

use std::sync::Arc;
use std::time::Duration;

use outpost_core::executor::Registry;
use outpost_core::join::Join;
use outpost_core::replay::{ReplayGuard, ReplayPolicy};
use outpost_core::server::Server;
use outpost_core::session::SessionConfig;
use outpost_core::time::UnixTime;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::clock::{Clock, wall_now};
use crate::dispatch::terminals::TermMsg;
use crate::dispatch::{Cloud, Dispatcher, Ends, Pending, Shared};
use crate::metrics::Metrics;
use crate::state::{self, StateError};
use crate::store::Store;
use crate::{Running, ServeConfig, ServeError, sealed, secrets, serve};

/// Messages the dispatcher may have waiting.
const DISPATCH_QUEUE: usize = 1024;

/// The admin user's name.
const ADMIN_USER: &str = "admin";

/// How long a stopping server waits for open terminals' recordings to be stored.
const RECORDINGS_GRACE: Duration = Duration::from_secs(5);

/// The admin token and the join's registration token: created with the admin user on first
/// start (and sealed into the database for the other nodes of a cluster), read back from their
/// files after — or, on a node that has none yet, from the database.
fn tokens(
    config: &ServeConfig,
    store: &Store,
    seal: &Sealer,
) -> Result<(String, String), ServeError> {
    let dir = &config.state_dir;
    let admin_path = dir.join("admin.token");
    let join_path = dir.join("join");
    let corrupt = |path: &std::path::Path, reason: &str| {
        ServeError::State(StateError::Corrupt {
            path: path.to_path_buf(),
            reason: reason.to_owned(),
        })
    };
    if store.has_users()? {
        let admin = state::read_optional(&admin_path)?;
        let join = state::read_optional(&join_path)?;
        if let (Some(admin), Some(join)) = (admin, join) {
            let token =
                join_token(&join).ok_or_else(|| corrupt(&join_path, "not a join string"))?;
            let admin = admin.trim().to_owned();
            // A database from before the tokens were shared gets them now.
            if store.sealed(sealed::TOKENS)?.is_none() {
                seal.put_tokens(store, &admin, &token)?;
            }
            return Ok((admin, token));
        }
        return match seal.tokens(store)? {
            Some((admin, token)) => {
                state::write_secret(&admin_path, format!("{admin}\n").as_bytes())?;
                state::write_secret(&join_path, format!("{token}\n").as_bytes())?;
                Ok((admin, token))
            }
            None => Err(corrupt(
                &admin_path,
                "missing, and the database, which has users, does not share it: copy admin.token and join from the state folder of the node that made them",
            )),
        };
    }
    let admin = secrets::new_token()?;
    let join = secrets::new_token()?;
    // The files first: a crash before the database commit leaves no users, and the next
    // start makes new tokens and overwrites them.
    state::write_secret(&admin_path, format!("{admin}\n").as_bytes())?;
    state::write_secret(&join_path, format!("{join}\n").as_bytes())?;
    let now = wall_now().0;
    let all: Vec<String> = crate::http::all_scopes();
    if !store.create_user(ADMIN_USER, &secrets::hash(&admin), &all, now)? {
        // Another node made this database's first user between our look and our write: its
        // tokens are sealed into the database right after, and are this node's too.
        for _ in 0..50 {
            if let Some((admin, token)) = seal.tokens(store)? {
                state::write_secret(&admin_path, format!("{admin}\n").as_bytes())?;
                state::write_secret(&join_path, format!("{token}\n").as_bytes())?;
                return Ok((admin, token));
            }
            // The other node's next statement: there is no event to wait on across nodes.
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_file(&admin_path);
        let _ = std::fs::remove_file(&join_path);
        return Err(corrupt(
            &admin_path,
            "another node started first on this database and made its admin token, and has not shared it within 5 s: start this node again",
        ));
    }
    store.add_token(
        ADMIN_USER,
        &secrets::hash(&join),
        &["execution_context:create".to_owned()],
        None,
        now,
    )?;
    seal.put_tokens(store, &admin, &join)?;
    Ok((admin, join))
}

/// What seals this server's shared secrets: its root key.
struct Sealer {
    root_id: String,
    seed: [u8; 32],
}

impl Sealer {
    /// The admin and join tokens the database shares, if it does.
    fn tokens(&self, store: &Store) -> Result<Option<(String, String)>, ServeError> {
        let Some((version, bytes)) = store.sealed(sealed::TOKENS)? else {
            return Ok(None);
        };
        let plain = sealed::open(&self.root_id, &self.seed, sealed::TOKENS, version, &bytes)
            .map_err(|e| wrong_root(&e))?;
        let tokens: SharedTokens = serde_json::from_slice(&plain)
            .map_err(|e| ServeError::Runtime(format!("the database's tokens do not read: {e}")))?;
        Ok(Some((tokens.admin, tokens.join)))
    }

    /// Shares the admin and join tokens (once: a row there already stays).
    fn put_tokens(&self, store: &Store, admin: &str, join: &str) -> Result<(), ServeError> {
        let plain = serde_json::to_vec(&SharedTokens {
            admin: admin.to_owned(),
            join: join.to_owned(),
        })
        .map_err(|e| ServeError::Runtime(e.to_string()))?;
        let bytes = sealed::seal(&self.root_id, &self.seed, sealed::TOKENS, 1, &plain)?;
        store.put_sealed(sealed::TOKENS, 1, &bytes, None)?;
        Ok(())
    }
}

/// The tokens as sealed into the database.
#[derive(serde::Serialize, serde::Deserialize)]
struct SharedTokens {
    admin: String,
    join: String,
}

/// A node whose `keys.json` is not this database's.
fn wrong_root(e: &sealed::WrongRoot) -> ServeError {
    ServeError::Runtime(format!(
        "{e}: this node's keys.json is not the one this database is served with; copy keys.json from the state folder of a node that serves it (the root key is never kept in the database)"
    ))
}

/// The server's keys over its database: `keys.json`'s root key, and the frame keys the nodes
/// of a cluster share sealed in the database, so that every node publishes one key set and
/// signs with its keys, and a rotation by one node is every node's (whichever node starts
/// first in the window rotates; the others take its set, one compare-and-set deciding).
fn shared_keys(
    dir: &std::path::Path,
    store: &Store,
    now: UnixTime,
) -> Result<(state::Keys, Sealer), ServeError> {
    let mut shared = store.sealed(sealed::FRAME_KEYS)?;
    let on_disk = state::read_key_file(dir)?;
    let mut file = match (&on_disk, &shared) {
        (Some(file), _) => file.clone(),
        (None, Some(_)) => {
            return Err(ServeError::State(StateError::Corrupt {
                path: dir.join("keys.json"),
                reason: "missing, and this database is served already: copy keys.json from the state folder of a node that serves it (its root key is never kept in the database)".to_owned(),
            }));
        }
        (None, None) => state::new_key_file(now)?,
    };
    let seal = Sealer {
        root_id: file.root_id().to_owned(),
        seed: file.root_seed(dir)?,
    };
    for _ in 0..4 {
        if let Some((version, bytes)) = &shared {
            let plain = sealed::open(
                &seal.root_id,
                &seal.seed,
                sealed::FRAME_KEYS,
                *version,
                bytes,
            )
            .map_err(|e| wrong_root(&e))?;
            if *version >= file.version() {
                file.set_frames(*version, &plain, dir)?;
            }
        }
        let mut next = file.clone();
        let rotated = state::rotate_if_due(&mut next, now)?;
        let current = shared.as_ref().map(|(version, _)| *version);
        if !rotated && current == Some(next.version()) {
            file = next;
            break;
        }
        // This node's set is newer (it rotated, or the database has none or an older one).
        let bytes = sealed::seal(
            &seal.root_id,
            &seal.seed,
            sealed::FRAME_KEYS,
            next.version(),
            &next.frames_json(),
        )?;
        if store.put_sealed(sealed::FRAME_KEYS, next.version(), &bytes, current)? {
            file = next;
            break;
        }
        // Another node wrote first: its set is the one, read it again.
        shared = store.sealed(sealed::FRAME_KEYS)?;
    }
    if on_disk.as_ref() != Some(&file) {
        state::write_key_file(dir, &file)?;
    }
    Ok((state::keys_of(dir, &file, now)?, seal))
}

/// The token inside a join file (or a bare token, as a crash during first start leaves it).
fn join_token(text: &str) -> Option<String> {
    let text = text.trim();
    if secrets::looks_like_token(text) {
        return Some(text.to_owned());
    }
    let body = text.strip_prefix(outpost_core::join::JOIN_PREFIX)?;
    let bytes = outpost_core::b64::decode(body).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.get("token")?.as_str().map(str::to_owned)
}

fn replay_guard(store: &Store, now: UnixTime) -> Result<ReplayGuard, ServeError> {
    let mut guard = ReplayGuard::new(ReplayPolicy::default());
    for (key_id, nonce, created, expires) in store.live_nonces(now.0)? {
        // Entries still fresh are remembered again; the others are past replaying anyway.
        let _ = guard.check(
            &key_id,
            &nonce,
            UnixTime(created),
            expires.map(UnixTime),
            now,
        );
    }
    Ok(guard)
}

pub(crate) async fn start(config: ServeConfig, cloud: Registry) -> Result<Running, ServeError> {
    let dir = config.state_dir.clone();
    state::prepare_dir(&dir)?;
    let tls = match &config.tls {
        Some(files) => Some(serve::tls_acceptor(&files.cert, &files.key)?),
        None => None,
    };
    let store = Arc::new(Store::open_database(&config.database, &dir)?);
    let node_id = state::node_id(&dir)?;
    // The other nodes serving this database now (none for the SQLite file): what they own,
    // run and record is theirs, not this start's to restore or end.
    let live_ms = crate::http::nodes::LIVE.as_millis() as u64;
    let live_elsewhere: std::collections::HashSet<String> = store
        .live_node_ids(live_ms)?
        .into_iter()
        .filter(|id| *id != node_id)
        .collect();
    // Sessions a killed server left open have no relay any more: their recordings end here.
    let ended = store.end_cut_recordings_except(&live_elsewhere)?;
    if ended > 0 {
        tracing::info!(
            ended,
            "ended the recordings of terminal sessions the last stop cut short"
        );
    }
    let clock = Clock::start()?;
    let (keys, seal) = shared_keys(&dir, &store, wall_now())?;
    let (admin_token, join_token) = tokens(&config, &store, &seal)?;

    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: config.listen,
        source,
    })?;
    let url = crate::public_url::base_url(&config, bound)?;
    let reach = crate::public_url::node_url(&config, bound).map(|url| crate::store::NodeReach {
        url,
        tls_sha256: tls.as_ref().map(|(_, pin)| pin.clone()),
    });
    if let (Some(given), Some(reach)) = (&config.node_url, &reach)
        && let Err(e) = outpost_adapters::tls::ServerUrl::parse(&reach.url)
    {
        return Err(ServeError::Runtime(format!(
            "--node-url {given}: {e}; give this node's own https:// URL (or http:// on loopback)"
        )));
    }
    // The first start's join token is `jt_first` among the join tokens (listed, revocable).
    store.adopt_join_token(
        "jt_first",
        &secrets::hash(&join_token),
        ADMIN_USER,
        wall_now().0,
    )?;
    let join_template = Join {
        url: url.clone(),
        root: keys.root.clone(),
        token: join_token,
        tls_sha256: tls.as_ref().map(|(_, pin)| pin.clone()),
        alternates: Vec::new(),
        other_pins: Vec::new(),
    };
    // The join file lists the nodes live now (a node started later is in the joins that
    // `POST /v1/join-tokens` makes from then on).
    let live = store.live_node_urls(crate::store::NODE_LIVE.as_millis() as u64)?;
    let join = join_template.listing(&live).encode();
    state::write_secret(&dir.join("join"), format!("{join}\n").as_bytes())?;

    let (terminals, terminals_rx) = crate::dispatch::terminals::Terminals::channel();
    let app_terminals = terminals.clone();
    let shared = Arc::new(Shared {
        store: store.clone(),
        clock: clock.clone(),
        metrics: Metrics::default(),
        ends: Ends::default(),
        outputs: Default::default(),
        terminals,
        limits: config.limits.clone(),
        inflight: crate::inflight::Inflight::new(config.limits.clone()),
        cut_off: tokio::sync::watch::Sender::new(false),
    });
    let signer = Arc::new(keys.signer);
    let heartbeat_secs = u32::try_from(config.heartbeat.as_secs().max(1)).unwrap_or(u32::MAX);
    let template = SessionConfig {
        heartbeat_secs,
        silence_limit: Duration::from_secs(u64::from(heartbeat_secs) * 3),
        ..SessionConfig::new("")
    };
    let now = clock.now();
    // This node is live before it claims anything (another node starting now must not count
    // it dead); then it owns what it owned before its restart, what no node owns and what
    // dead nodes owned: each such machine's epoch moves on, fencing out any earlier holder.
    // Nothing is connected yet: the sessions an earlier start left are removed with it.
    let no_sessions = crate::store::SessionsChange {
        replace: true,
        ..Default::default()
    };
    store.node_heartbeat(
        &node_id,
        &url,
        reach.as_ref(),
        wall_now().0,
        Some(&no_sessions),
    )?;
    let owned = store.claim_contexts(&node_id, live_ms)?;
    let owned_ids: std::collections::HashSet<String> =
        owned.iter().map(|(id, _)| id.clone()).collect();
    let snapshot = store.load_owned_snapshot(&node_id, &owned_ids)?;
    let pending = Pending::new(config.limits.clone(), snapshot.mine.as_ref());
    // Machines other live nodes own are known by their rows: passed over, never restored.
    let server = match &snapshot.mine {
        Some(mine) => {
            Server::restore_with_elsewhere(signer, template, mine, &snapshot.elsewhere, now)
        }
        None => {
            let mut server = Server::new(signer, template, now);
            for row in &snapshot.elsewhere {
                let input = outpost_core::server::Input::Elsewhere(Box::new(row.clone()));
                server.handle_input(now, input).map_err(|e| {
                    ServeError::Runtime(format!("restoring machines owned elsewhere: {e}"))
                })?;
            }
            server
        }
    };
    let fences = crate::dispatch::Fences::new(node_id.clone(), owned);
    let cloud = Cloud::new(cloud, &config.cloud, dir.join("cloud-runs"), store.clone());
    let mut dispatcher = Dispatcher::new(server, shared.clone(), cloud, pending, fences);
    dispatcher.settle()?;
    let (tx, rx) = mpsc::channel(DISPATCH_QUEUE);
    // A dispatcher that stops on its own (the store refused a record) stops the server: a
    // restart restores from the records, which is the one safe way on.
    let (failed_tx, failed) = watch::channel(false);
    let dispatch_task = tokio::spawn(async move {
        if dispatcher.run(rx).await {
            let _ = failed_tx.send(true);
        }
    });
    let terminals = crate::dispatch::terminals::Actor::new(
        clock,
        store.clone(),
        tx.clone(),
        config.terminal_idle,
        crate::dispatch::terminals::RecordingConfig {
            node_id: Some(node_id.clone()),
            ..crate::dispatch::terminals::RecordingConfig::from_limits(&config.limits)
        },
    );
    tokio::spawn(terminals.run(terminals_rx));

    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let replay = replay_guard(&store, wall_now())?;
    let app = crate::http::App::new(
        shared,
        tx.clone(),
        keys.key_set,
        replay,
        crate::http::AppSettings {
            scheme,
            releases: crate::releases::releases_dir(&dir),
            limits: config.rate_limits,
            ping_every: Duration::from_secs(u64::from(heartbeat_secs)),
            join: join_template,
            xterm_dir: config.xterm_dir.clone(),
            node_id: node_id.clone(),
            reach,
        },
    );
    // A user removal a crash cut short is finished before anything is served.
    for record in crate::http::stale_records(&store)? {
        match app
            .call(outpost_core::server::Input::UpdateAccess(record))
            .await
        {
            Ok(()) => {}
            // Another node owns that machine: it is that node's to finish.
            Err(e) if e.code == "context_owned_elsewhere" => {}
            Err(e) => {
                return Err(ServeError::Runtime(format!(
                    "restoring access records: {e:?}"
                )));
            }
        }
    }
    let (stop, stop_rx) = watch::channel(false);
    let heartbeat = tokio::spawn(crate::http::nodes::heartbeat(app.clone(), stop_rx.clone()));
    if let crate::Database::Postgres(url) = &config.database {
        tokio::spawn(crate::notices::listen(
            url.clone(),
            tx.clone(),
            app.shared.clone(),
            stop_rx.clone(),
        ));
    }
    let serving = serve::Serving {
        inflight: app.shared.inflight.clone(),
        limits: config.limits.clone(),
        router: crate::http::router(app),
    };
    tokio::spawn(crate::sweep::bundles(
        store.clone(),
        config.limits.bundle_sweep,
        config.limits.bundle_retention,
        stop_rx.clone(),
    ));
    tokio::spawn(crate::sweep::recordings(
        store.clone(),
        config.limits.bundle_sweep,
        config.limits.recording_retention,
        stop_rx.clone(),
    ));
    // The change streams end when the server stops, so none holds the stop up.
    let changes_store = store.clone();
    let mut changes_stop = stop_rx.clone();
    tokio::spawn(async move {
        while !*changes_stop.borrow() {
            if changes_stop.changed().await.is_err() {
                break;
            }
        }
        changes_store.changes().close();
    });
    let terminals_handle = app_terminals;
    let task = tokio::spawn(async move {
        serve::accept_loop(
            listener,
            tls.map(|(acceptor, _)| acceptor),
            serving,
            stop_rx,
        )
        .await;
        let _ = tx.send(crate::dispatch::Msg::Shutdown).await;
        let _ = dispatch_task.await;
        // This node's row goes before the process does (unless the database does not answer
        // soon: it then ages out of the lists).
        let _ = tokio::time::timeout(RECORDINGS_GRACE, heartbeat).await;
        // Open terminals' recordings end and are stored before the server is gone.
        let ended = terminals_handle.ask(|done| TermMsg::Shutdown { done });
        if tokio::time::timeout(RECORDINGS_GRACE, ended).await.is_err() {
            tracing::warn!("the terminal recordings were not all stored before stopping");
        }
    });
    tracing::info!(%url, "outpost server listening");
    Ok(Running {
        url,
        join,
        admin_token,
        state_dir: dir,
        stop,
        failed,
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 24 * 3600;

    fn keys_json(dir: &std::path::Path) -> Vec<u8> {
        std::fs::read(dir.join("keys.json")).expect("keys.json")
    }

    #[test]
    fn the_nodes_of_a_database_publish_one_key_set_and_one_rotation_is_everyones() {
        for fresh in crate::store::tests::stores("shared-keys") {
            let (store, kind) = (&fresh.store, fresh.kind);
            let (a, b) = (fresh.dir.join("a"), fresh.dir.join("b"));
            for dir in [&a, &b] {
                state::prepare_dir(dir).unwrap();
            }
            let now = UnixTime(1_800_000_000);
            let (first, _) = shared_keys(&a, store, now).unwrap();
            assert_eq!(
                store.sealed(sealed::FRAME_KEYS).unwrap().unwrap().0,
                1,
                "{kind}"
            );
            // b has a's root key only.
            std::fs::copy(a.join("keys.json"), b.join("keys.json")).unwrap();
            let (second, _) = shared_keys(&b, store, now).unwrap();
            assert_eq!(first.key_set, second.key_set, "{kind}: one set");
            // 61 days on, the newest key has 29 days left: the first node to start rotates
            // (set 2); the next takes set 2 from the database and makes no key of its own.
            let later = UnixTime(now.0 + 61 * DAY);
            let (rotated, _) = shared_keys(&b, store, later).unwrap();
            assert_eq!(
                store.sealed(sealed::FRAME_KEYS).unwrap().unwrap().0,
                2,
                "{kind}"
            );
            let (taken, _) = shared_keys(&a, store, later).unwrap();
            assert_eq!(
                rotated.key_set, taken.key_set,
                "{kind}: the rotation is a's too"
            );
            assert_eq!(keys_json(&a), keys_json(&b), "{kind}");
            assert_ne!(first.key_set, taken.key_set, "{kind}");
            // Starting again changes nothing.
            let (again, _) = shared_keys(&a, store, later).unwrap();
            assert_eq!(again.key_set, taken.key_set, "{kind}");
            assert_eq!(
                store.sealed(sealed::FRAME_KEYS).unwrap().unwrap().0,
                2,
                "{kind}"
            );
            // A node whose keys.json is not this database's is refused, its file untouched.
            let c = fresh.dir.join("c");
            state::prepare_dir(&c).unwrap();
            state::write_key_file(&c, &state::new_key_file(later).unwrap()).unwrap();
            let before = keys_json(&c);
            let err = shared_keys(&c, store, later).err().expect("another root");
            assert!(err.to_string().contains("copy keys.json"), "{kind}: {err}");
            assert_eq!(keys_json(&c), before, "{kind}");
        }
    }
}
