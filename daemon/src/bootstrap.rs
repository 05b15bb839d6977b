//! A daemon's start, before its loop: the machine key, the server (joined now, or as
//! `server.json` recorded it), the server's key set checked against the pinned root, the
//! registration of a first start, then the outbox and the condition waits restored into the
//! core's [`Daemon`].
//!
//! Last, [`services`] makes what the loop drives: the host commands, the owner's policy and
//! its watcher, the condition checks, the runner and the standing file.
//!
//! This module owns that order: nothing is registered before the key set verified, and a
//! restarted daemon never takes a key set older than the one it stored. It never connects the
//! WebSocket (the driver's loop does) and never starts a run.

use std::sync::Arc;
use std::sync::mpsc::Sender;

use outpost_core::daemon::{Daemon, DaemonConfig};
use outpost_core::executor::Registry;
use outpost_core::join::check_server_url;
use outpost_core::keyset::{KeySet, PinnedRoots, RootKey};
use outpost_core::wire::Environment;

use crate::bridge::CommandsShared;
use crate::checks::Checks;
use crate::ctx::{CtxShared, Seen};
use crate::home::{Home, SERVER_FILE, ServerFile};
use crate::patience::{Patience, Unreachable, patiently};
use crate::policy::PolicySource;
use crate::runner::Runner;
use crate::standing::Standing;
use crate::store::DaemonStore;
use crate::{DaemonError, DaemonOptions, ServerChoice, StopSignal};
use crate::{Event, update, watch};
use outpost_adapters::clock::Clock;
use outpost_adapters::http::{RegisterRequest, SignedClient};
use outpost_adapters::runtime::Host;
use outpost_adapters::tls::{ServerUrl, Trust};

/// A daemon that knows its server: what the loop talks to it with.
pub(crate) struct Joined {
    /// The server's base URL.
    pub url: String,
    /// The signed HTTP client, under the machine key.
    pub client: Arc<SignedClient>,
    /// The root key this home pinned.
    pub roots: Arc<PinnedRoots>,
    /// The TLS trust for the server's certificate.
    pub trust: Trust,
    /// The key set fetched now (verified against `roots`).
    pub keys: KeySet,
    /// The environments the registry can run here.
    pub environments: Vec<Environment>,
    /// It joined just now: no key set an earlier server signed binds it.
    pub new_join: bool,
}

/// The core's daemon as the store left it.
pub(crate) struct Restored {
    /// The store the snapshot was read from, left open for the loop's records.
    pub store: DaemonStore,
    /// The core, with the outbox's results, the interrupted runs and the waits.
    pub daemon: Daemon,
    /// The key set's version it holds.
    pub keys_version: u64,
    /// The seed of the daemon's jitter (reconnects, update checks).
    pub seed: u64,
}

/// Reads the machine key, finds the server, fetches and checks its key set, and registers on
/// a first start. `None`: stopped while waiting for the server.
pub(crate) fn join(
    options: &DaemonOptions,
    home: &Home,
    registry: &Registry,
    stop: &StopSignal,
) -> Result<Option<Joined>, DaemonError> {
    let seed = crate::key::machine_seed(&home.folders.config, options.passphrase.as_deref())?;
    let saved = home.server()?;
    let Reach {
        url,
        root,
        token,
        alternates,
        pin,
        other_pins,
    } = reach(
        &options.server,
        saved.as_ref(),
        &home.folders.config.join(SERVER_FILE),
    )?;
    let trust = Trust::from_option(options.ca_file.as_deref())?
        .pinning(pin.as_deref())
        .pinning_all(other_pins.iter().map(String::as_str));
    let server = ServerUrl::parse(&url)?;
    let alternate_urls = alternates
        .iter()
        .filter_map(|u| match ServerUrl::parse(u) {
            Ok(parsed) => Some(parsed),
            Err(e) => {
                tracing::warn!(url = %u, "a URL the join listed is left out: {e}");
                None
            }
        })
        .collect();
    let client = Arc::new(SignedClient::new(server, seed, &trust).with_alternates(alternate_urls));
    let roots = Arc::new(PinnedRoots::new(vec![root.clone()]));
    let unreachable = if saved.is_some() {
        Unreachable::Waits
    } else {
        Unreachable::Fails
    };
    let keys = match patiently("fetching the server's key set", unreachable, stop, || {
        client.server_keys(&roots)
    }) {
        Ok(Patience::Done(keys)) => keys,
        Ok(Patience::Stopped) => return Ok(None),
        Err(source) => {
            return Err(DaemonError::Keys {
                server: url.clone(),
                source,
            });
        }
    };
    if let Some(saved) = &saved
        && (saved.url != url
            || saved.urls != alternates
            || saved.tls_sha256 != pin
            || saved.tls_pins != other_pins)
    {
        // The same server (the key set verified against the saved root), given again: its
        // URL and lists replace the saved ones.
        home.save_server(&ServerFile {
            url: url.clone(),
            tls_sha256: pin.clone(),
            urls: alternates.clone(),
            tls_pins: other_pins.clone(),
            ..saved.clone()
        })?;
    }
    let environments = registry.available();
    if saved.is_none() {
        let token = token.ok_or(DaemonError::NotJoined)?;
        let request = RegisterRequest {
            name: options.name.clone(),
            public_key: client.public_key_b64(),
            max_concurrent: Some(options.max_concurrent),
            environments: Some(environments.clone()),
            daemon_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        };
        let registered = match patiently("registering", Unreachable::Fails, stop, || {
            client.register(&token, &request)
        }) {
            Ok(Patience::Done(registered)) => registered,
            Ok(Patience::Stopped) => return Ok(None),
            Err(source) => {
                return Err(DaemonError::Register {
                    server: url.clone(),
                    source,
                });
            }
        };
        save_registration(
            home,
            &ServerFile {
                url: url.clone(),
                root_id: root.id.clone(),
                root_public_key: outpost_core::b64::encode(root.public_key.as_bytes()),
                context_id: registered.context_id.to_string(),
                name: registered.name.clone(),
                key_id: registered.key_id.clone(),
                tls_sha256: pin.clone(),
                urls: alternates,
                tls_pins: other_pins,
            },
        )?;
    }
    Ok(Some(Joined {
        url,
        client,
        roots,
        trust,
        keys,
        environments,
        new_join: saved.is_none(),
    }))
}

/// Opens the outbox and restores the core from it: the key set it keeps (never older than
/// the stored one), undelivered results, interrupted runs and the condition waits.
/// `keys` is the set fetched now, `roots` the pinned root, `new_join` whether this start
/// joined (see [`Joined`]).
pub(crate) fn restore(
    options: &DaemonOptions,
    home: &Home,
    keys: KeySet,
    roots: &PinnedRoots,
    new_join: bool,
    environments: &[Environment],
    clock: &Clock,
) -> Result<Restored, DaemonError> {
    let (mut store, snapshot) = DaemonStore::open(&home.store_path())?;
    if new_join {
        // A new join pins a new root: no key set of an earlier server binds this one.
        store.save_key_set(None)?;
    }
    let keys = keys_at_start(keys, store.key_set()?, roots);
    if let Some(document) = keys.document()
        && store.key_set()?.map(|(v, _)| v) != Some(keys.version())
    {
        store.save_key_set(Some((keys.version(), document)))?;
    }
    if !snapshot.outbox.is_empty() || !snapshot.started.is_empty() {
        tracing::info!(
            results = snapshot.outbox.len(),
            interrupted = snapshot.started.len(),
            "restored the outbox: undelivered results are sent again, runs a crash interrupted are reaped"
        );
    }
    let seed = if options.seed == 0 {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| DaemonError::Random(e.to_string()))?;
        u64::from_le_bytes(bytes)
    } else {
        options.seed
    };
    let config = DaemonConfig {
        max_concurrent: options.max_concurrent,
        features: options.features.clone(),
        environments: environments.to_vec(),
        seed,
        ..DaemonConfig::default()
    };
    let keys_version = keys.version();
    let mut daemon = Daemon::restore(config, keys, &snapshot, clock.now());
    let waits = store.waits()?;
    if !waits.is_empty() {
        tracing::info!(
            waits = waits.len(),
            "restored the condition waits: active ones are checked again, ended ones reported until the server has them"
        );
    }
    daemon.restore_waits(waits);
    Ok(Restored {
        store,
        daemon,
        keys_version,
        seed,
    })
}

fn save_registration(home: &Home, server: &ServerFile) -> Result<(), DaemonError> {
    home.save_server(server)?;
    tracing::info!(context = %server.context_id, name = %server.name, key = %server.key_id, "registered");
    Ok(())
}

/// Where this start reaches its server, and what it trusts there.
struct Reach {
    /// The URL tried first.
    url: String,
    /// The root key pinned.
    root: RootKey,
    /// The token a first start registers with (`None`: started from `server.json`).
    token: Option<String>,
    /// The other URLs of the same server, in the order to try them.
    alternates: Vec<String>,
    /// The certificate pinned at `url` (and the others).
    pin: Option<String>,
    /// The other nodes' certificates pinned.
    other_pins: Vec<String>,
}

/// Where `choice` (with the registration `saved`, if any) says the server is.
///
/// A join is the server's own word: its URLs and certificates replace the saved ones. A
/// `--server URL` keeps the saved lists, with the saved URL among the others. With a
/// registration saved, what is given must name the same server — the same root, id and key,
/// at one of the saved URLs — else `joined_elsewhere`: a root's id is public, so a join
/// that borrowed it with another key must not move a machine to another server.
/// `saved_path` is where `saved` was read, for the error when it names no usable root.
fn reach(
    choice: &ServerChoice,
    saved: Option<&ServerFile>,
    saved_path: &std::path::Path,
) -> Result<Reach, DaemonError> {
    let saved_root = saved
        .map(|s| {
            s.root().map_err(|reason| DaemonError::BadServerFile {
                path: saved_path.to_path_buf(),
                reason,
            })
        })
        .transpose()?;
    let given = match choice {
        ServerChoice::Saved => {
            let (Some(saved), Some(root)) = (saved, saved_root) else {
                return Err(DaemonError::NotJoined);
            };
            return Ok(Reach {
                url: saved.url.clone(),
                root,
                token: None,
                alternates: saved.urls.clone(),
                pin: saved.tls_sha256.clone(),
                other_pins: saved.tls_pins.clone(),
            });
        }
        ServerChoice::Join(join) => Reach {
            url: join.url.clone(),
            root: join.root.clone(),
            token: Some(join.token.clone()),
            alternates: join.alternates.clone(),
            pin: join.tls_sha256.clone(),
            other_pins: join.other_pins.clone(),
        },
        ServerChoice::Explicit { url, root, token } => {
            check_server_url(url)?;
            let url = url.trim_end_matches('/').to_owned();
            let (alternates, pin, other_pins) = match saved {
                Some(saved) => (
                    std::iter::once(&saved.url)
                        .chain(&saved.urls)
                        .filter(|u| **u != url)
                        .cloned()
                        .collect(),
                    saved.tls_sha256.clone(),
                    saved.tls_pins.clone(),
                ),
                None => (Vec::new(), None, Vec::new()),
            };
            Reach {
                url,
                root: root.clone(),
                token: Some(token.clone()),
                alternates,
                pin,
                other_pins,
            }
        }
    };
    if let (Some(saved), Some(saved_root)) = (saved, saved_root) {
        let saved_urls: Vec<&String> = std::iter::once(&saved.url).chain(&saved.urls).collect();
        let same_place = std::iter::once(&given.url)
            .chain(&given.alternates)
            .any(|u| saved_urls.contains(&u));
        if saved_root != given.root || !same_place {
            return Err(DaemonError::OtherServer {
                saved: saved.url.clone(),
                given: given.url,
            });
        }
    }
    Ok(given)
}

/// The key set a starting daemon takes: the one it fetched, unless the set it stored (checked
/// against the pinned root again) has a higher version — a server cannot roll a restarted
/// daemon back to a set that may list a retired key.
fn keys_at_start(fetched: KeySet, stored: Option<(u64, String)>, roots: &PinnedRoots) -> KeySet {
    let Some((version, document)) = stored else {
        return fetched;
    };
    if version <= fetched.version() {
        return fetched;
    }
    match KeySet::from_document(document.as_bytes(), roots) {
        Ok(kept) => {
            tracing::warn!(
                held = kept.version(),
                offered = fetched.version(),
                "the server offered key set version {}, older than version {} this daemon holds: keeping {} (a key set never goes back)",
                fetched.version(),
                kept.version(),
                kept.version()
            );
            kept
        }
        Err(e) => {
            tracing::warn!(
                code = e.code(),
                "the stored key set does not verify any more ({e}); taking the server's"
            );
            fetched
        }
    }
}

/// What [`services`] makes them from: the daemon's start so far, and the loop's event channel.
pub(crate) struct Wiring<'a> {
    /// The daemon's options (the owner's local policy among them).
    pub options: &'a DaemonOptions,
    /// The daemon's home folders.
    pub home: &'a Home,
    /// The runtime the runner's runs and the links use.
    pub host: &'a Arc<dyn Host>,
    /// The suspend-aware clock the runner times runs with.
    pub clock: &'a Arc<Clock>,
    /// The signed HTTP client the host commands' bridge reports through.
    pub client: &'a Arc<SignedClient>,
    /// The server's base URL, for the standing file.
    pub url: &'a str,
    /// Raised to stop the daemon: it becomes an [`Event::Stop`] on `events`.
    pub stop: &'a StopSignal,
    /// The loop's event channel, which every service reports on.
    pub events: &'a Sender<Event>,
}

/// The services the loop drives, made by [`services`].
pub(crate) struct Services {
    /// The daemon's host commands, for its whole life (every run's bridge shares them).
    pub commands: Arc<outpost_host::HostCommands>,
    /// The owner's local policy as it is now.
    pub policy: Arc<PolicySource>,
    /// Tells the loop when the policy file changes (none: the loop looks on a short timer).
    pub policy_watch: Option<watch::Watch>,
    /// The condition checks, with the waits' history restored.
    pub checks: Checks,
    /// The runner of the core's runs.
    pub runner: Runner,
    /// What `state/connection.json` says.
    pub standing: Standing,
    /// Automatic updates are on (the owner's policy, or the environment, can turn them off).
    pub auto_update: bool,
}

/// Makes the services the loop drives over `registry`: the host commands under the owner's
/// switch, the policy and its watcher, the condition checks (their history read from
/// `store`), the runner and the standing file; a raised `stop` and a policy edit become
/// events on the loop's channel.
pub(crate) fn services(
    wiring: Wiring<'_>,
    registry: Registry,
    store: &DaemonStore,
) -> Result<Services, DaemonError> {
    let Wiring {
        options,
        home,
        host,
        clock,
        client,
        url,
        stop,
        events,
    } = wiring;
    let context_id = home.server()?.map(|s| s.context_id).unwrap_or_default();
    let denylist = home
        .folders
        .denylist()
        .map_err(|e| DaemonError::home(&home.folders.config, std::io::Error::other(e)))?;
    let commands = Arc::new(outpost_host::HostCommands::new(
        outpost_host::CommandsConfig::default(),
        denylist.clone(),
        std::env::vars_os().collect(),
    ));
    commands.set_local_opt_in(options.local.commands_enabled);
    // A background job's end wakes the loop, whose tick reaps it and reports it.
    let ended_tx = events.clone();
    commands.notify_job_end(Arc::new(move || {
        let _ = ended_tx.send(Event::CommandsAudit);
    }));
    let policy = Arc::new(PolicySource::new(
        home.folders.local_policy_file(),
        options.local.clone(),
    ));
    // The driver sleeps until the core's next timer or an event: a stop and a policy edit
    // are events too.
    let stop_tx = events.clone();
    stop.on_raise(move || {
        let _ = stop_tx.send(Event::Stop);
    });
    let policy_tx = events.clone();
    let policy_watch = watch::watch_file(&home.folders.local_policy_file(), move || {
        let _ = policy_tx.send(Event::PolicyChanged);
    });
    // A wait's history survives the restart with it.
    let seen = Arc::new(Seen::default());
    seen.restore_events(store.wait_events()?);
    let checks = Checks::new(
        CtxShared {
            seen,
            policy: policy.clone(),
            denylist: denylist.clone(),
            commands: commands.clone(),
            agent: CtxShared::fetch_agent(),
            // A wait's `exec` is never unsandboxed: the sandbox starts through this binary.
            exec_sandbox: Some(outpost_host::sandbox::SandboxConfig::default()),
        },
        context_id.clone(),
        events.clone(),
    );
    let runner = Runner::new(
        context_id,
        Arc::new(registry),
        host.clone(),
        home.runs_dir(),
        policy.clone(),
        denylist,
        clock.clone(),
        events.clone(),
        CommandsShared {
            commands: commands.clone(),
            client: client.clone(),
            events: events.clone(),
        },
    );
    let standing = Standing::new(home.folders.state.clone(), url, options.max_concurrent);
    let auto_update = update::enabled(options.local.auto_update);
    if auto_update {
        tracing::info!(
            "automatic updates are on: checking now and every {} h ± {} min",
            update::CHECK_EVERY.as_secs() / 3600,
            update::CHECK_JITTER.as_secs() / 60
        );
    } else {
        tracing::info!(
            "automatic updates are off (the local policy's \"autoUpdate\": false, or {}=0)",
            update::AUTO_UPDATE_VAR
        );
    }
    Ok(Services {
        commands,
        policy,
        policy_watch,
        checks,
        runner,
        standing,
        auto_update,
    })
}

#[cfg(test)]
mod tests {
    use outpost_core::keyset::{FrameKey, KeySet, PinnedRoots, RootKey};
    use outpost_core::sign::Ed25519Signer;
    use outpost_core::time::UnixTime;

    use super::keys_at_start;

    fn root() -> Ed25519Signer {
        Ed25519Signer::from_seed("root-unit", [1; 32])
    }

    fn roots() -> PinnedRoots {
        PinnedRoots::new(vec![RootKey {
            id: "root-unit".into(),
            public_key: root().verifying_key(),
        }])
    }

    fn document(version: u64) -> Vec<u8> {
        let key = FrameKey {
            kid: "frame-unit".into(),
            public_key: Ed25519Signer::from_seed("frame-unit", [2; 32]).verifying_key(),
            not_before: UnixTime(0),
            not_after: UnixTime(1 << 40),
        };
        KeySet::sign_document(version, &[key], &root()).unwrap()
    }

    fn set(version: u64) -> KeySet {
        KeySet::from_document(&document(version), &roots()).unwrap()
    }

    fn stored(version: u64) -> Option<(u64, String)> {
        Some((version, String::from_utf8(document(version)).unwrap()))
    }

    #[test]
    fn a_starting_daemon_never_takes_a_fetched_set_older_than_the_one_it_stored() {
        let roots = roots();
        assert_eq!(keys_at_start(set(2), stored(3), &roots).version(), 3);
        assert_eq!(keys_at_start(set(3), stored(2), &roots).version(), 3);
        assert_eq!(keys_at_start(set(2), None, &roots).version(), 2);
        // A stored document that no longer verifies is not trusted: the fetched set stands.
        let forged = Some((9, String::from("{\"type\":\"outpost.key-set\"}")));
        assert_eq!(keys_at_start(set(2), forged, &roots).version(), 2);
    }

    mod reaching {
        use std::path::Path;

        use outpost_core::join::Join;
        use outpost_core::keyset::RootKey;
        use outpost_core::sign::Ed25519Signer;

        use crate::ServerChoice;
        use crate::home::ServerFile;

        use super::super::reach;

        fn root(seed: u8) -> RootKey {
            RootKey {
                id: "root-unit".into(),
                public_key: Ed25519Signer::from_seed("root-unit", [seed; 32]).verifying_key(),
            }
        }

        fn saved() -> ServerFile {
            ServerFile {
                url: "https://a.example".into(),
                root_id: "root-unit".into(),
                root_public_key: outpost_core::b64::encode(root(1).public_key.as_bytes()),
                context_id: "ec_1".into(),
                name: "box".into(),
                key_id: "mk_1".into(),
                tls_sha256: Some("aa".repeat(32)),
                urls: vec!["https://b.example".into()],
                tls_pins: vec!["bb".repeat(32)],
            }
        }

        fn join(url: &str, alternates: &[&str], root: RootKey) -> ServerChoice {
            ServerChoice::Join(Join {
                url: url.into(),
                root,
                token: "opt_x".into(),
                tls_sha256: Some("cc".repeat(32)),
                alternates: alternates.iter().map(|u| (*u).to_owned()).collect(),
                other_pins: Vec::new(),
            })
        }

        const PATH: &str = "/home/server.json";

        #[test]
        fn a_start_from_the_saved_registration_tries_its_urls_in_order() {
            let r = reach(&ServerChoice::Saved, Some(&saved()), Path::new(PATH)).unwrap();
            assert_eq!(
                (r.url.as_str(), r.alternates.as_slice()),
                (
                    "https://a.example",
                    ["https://b.example".to_owned()].as_slice()
                )
            );
            assert_eq!(r.pin, Some("aa".repeat(32)));
            assert_eq!(r.other_pins, ["bb".repeat(32)]);
            assert!(r.token.is_none());
        }

        #[test]
        fn a_newer_join_of_the_same_server_replaces_the_lists() {
            let given = join("https://b.example", &["https://c.example"], root(1));
            let r = reach(&given, Some(&saved()), Path::new(PATH)).unwrap();
            assert_eq!(r.url, "https://b.example");
            assert_eq!(r.alternates, ["https://c.example"]);
            assert_eq!((r.pin, r.other_pins), (Some("cc".repeat(32)), Vec::new()));
        }

        #[test]
        fn a_join_that_borrows_the_root_s_id_with_another_key_is_another_server() {
            // The attacker's URL first, the real one listed: the id matches, the key does not.
            let given = join("https://evil.example", &["https://a.example"], root(9));
            let err = reach(&given, Some(&saved()), Path::new(PATH))
                .err()
                .unwrap();
            assert_eq!(err.code(), "joined_elsewhere");
            // The same root at none of the saved URLs is refused too.
            let given = join("https://z.example", &[], root(1));
            let err = reach(&given, Some(&saved()), Path::new(PATH))
                .err()
                .unwrap();
            assert_eq!(err.code(), "joined_elsewhere");
        }

        #[test]
        fn a_server_url_given_by_hand_keeps_the_saved_lists_with_the_saved_url_among_them() {
            let given = ServerChoice::Explicit {
                url: "https://b.example/".into(),
                root: root(1),
                token: "opt_x".into(),
            };
            let r = reach(&given, Some(&saved()), Path::new(PATH)).unwrap();
            assert_eq!(r.url, "https://b.example");
            assert_eq!(r.alternates, ["https://a.example"]);
            assert_eq!(
                (r.pin, r.other_pins),
                (Some("aa".repeat(32)), vec!["bb".repeat(32)])
            );
        }
    }
}
