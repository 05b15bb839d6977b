//! `daemon-runs.json`: what a daemon answers to what a server sends — a run id runs at most
//! once (`run_seen`), and a key set never goes back to a lower version.

use outpost_core::keyset::{FrameKey, KeySet, test_root};
use outpost_core::sign::{Ed25519Signer, FrameSigner};
use outpost_core::time::UnixTime;
use outpost_core::wire::{
    CapabilitySource, CommandsGrant, Egress, Environment, Grant, GrantLimits, InlineFile,
    PROTOCOL_VERSION, ServerFrame,
};

use super::{NOW, VECTORS_ROOT_ID, VECTORS_ROOT_SECRET_HEX, public_hex, raw, signer};
use crate::model::{DaemonRunsCase, DaemonStep, RootEntry, VectorFile};

const SESSION: &str = "sess_vectors_daemon";
const DAY: u64 = 86_400;

fn frame1() -> Ed25519Signer {
    signer(test_root::FRAME_KID, test_root::FRAME_SECRET_HEX)
}

fn frame2() -> Ed25519Signer {
    signer(test_root::FRAME2_KID, test_root::FRAME2_SECRET_HEX)
}

/// A key set of `version` listing `keys`, signed by the vectors root.
fn key_set(version: u64, keys: &[&Ed25519Signer]) -> Vec<u8> {
    let keys: Vec<FrameKey> = keys
        .iter()
        .map(|s| FrameKey {
            kid: outpost_core::sign::Signer::key_id(*s).to_owned(),
            public_key: s.verifying_key(),
            not_before: UnixTime(NOW - DAY),
            not_after: UnixTime(NOW + 365 * DAY),
        })
        .collect();
    let root = signer(VECTORS_ROOT_ID, VECTORS_ROOT_SECRET_HEX);
    KeySet::sign_document(version, &keys, &root).expect("in-memory signing cannot fail")
}

fn welcome() -> ServerFrame {
    ServerFrame::Welcome {
        context_id: "ec_vectors".into(),
        protocol: PROTOCOL_VERSION,
        grant_version: 1,
        grant: Grant {
            fs: Vec::new(),
            egress: Egress::None,
            commands: CommandsGrant { enabled: false },
            limits: GrantLimits { max_concurrent: 2 },
            environments: None,
        },
        heartbeat_secs: 15,
        features: Vec::new(),
    }
}

fn request(run_id: &str) -> ServerFrame {
    ServerFrame::RunRequest {
        run_id: run_id.into(),
        environment: Environment::Shell,
        capability: CapabilitySource::Inline {
            manifest: "name: hi\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n".into(),
            files: vec![InlineFile {
                path: "run.sh".into(),
                content_b64: outpost_core::b64::encode(b"echo hi\n"),
            }],
        },
        timeout_ms: 10_000,
        shared_run: false,
        requester: "ada".into(),
    }
}

/// Builds one case's steps, signing frames in sequence.
struct Script {
    frames: FrameSigner,
    steps: Vec<DaemonStep>,
}

impl Script {
    fn new() -> Self {
        Self {
            frames: FrameSigner::new(SESSION),
            steps: Vec::new(),
        }
    }

    fn frame(mut self, frame: ServerFrame, by: &Ed25519Signer, expect: &str) -> Self {
        let bytes = self
            .frames
            .sign(&frame, by)
            .expect("in-memory signing cannot fail");
        self.steps.push(DaemonStep {
            input: "frame".into(),
            frame: raw(&bytes),
            hex: Some(hex::encode(&bytes)),
            run_id: None,
            expect: expect.into(),
        });
        self
    }

    fn key_set(mut self, document: Vec<u8>, expect: &str) -> Self {
        self.steps.push(DaemonStep {
            input: "key_set".into(),
            frame: None,
            hex: Some(hex::encode(document)),
            run_id: None,
            expect: expect.into(),
        });
        self
    }

    fn finished(mut self, run_id: &str) -> Self {
        self.steps.push(DaemonStep {
            input: "run_finished".into(),
            frame: None,
            hex: None,
            run_id: Some(run_id.into()),
            expect: "run.result".into(),
        });
        self
    }

    fn case(self, name: &str, start: Vec<u8>) -> DaemonRunsCase {
        DaemonRunsCase {
            name: name.into(),
            valid: true,
            error: None,
            pinned_roots: vec![RootEntry {
                id: VECTORS_ROOT_ID.into(),
                public_key_hex: public_hex(VECTORS_ROOT_SECRET_HEX),
            }],
            key_set_hex: hex::encode(start),
            session_id: SESSION.into(),
            now: NOW,
            steps: self.steps,
        }
    }
}

/// Every case.
pub fn file() -> VectorFile<DaemonRunsCase> {
    let (k1, k2) = (frame1(), frame2());
    let commit = |run: &str| ServerFrame::RunCommit { run_id: run.into() };
    let ack = |run: &str| ServerFrame::RunAck { run_id: run.into() };
    let cases = vec![
        Script::new()
            .frame(welcome(), &k1, "hello")
            .frame(request("run_1"), &k1, "run.accept")
            .frame(commit("run_1"), &k1, "execute")
            .finished("run_1")
            .frame(ack("run_1"), &k1, "nothing")
            .frame(request("run_1"), &k1, "run.reject:run_seen")
            .frame(commit("run_1"), &k1, "nothing")
            .case(
                "a_run_sent_again_after_its_ack_is_refused",
                key_set(1, &[&k1]),
            ),
        Script::new()
            .frame(welcome(), &k1, "hello")
            .frame(request("run_1"), &k1, "run.accept")
            .frame(request("run_1"), &k1, "run.reject:run_seen")
            .frame(commit("run_1"), &k1, "execute")
            .frame(request("run_1"), &k1, "run.reject:run_seen")
            .finished("run_1")
            .frame(request("run_1"), &k1, "run.reject:run_seen")
            .case(
                "a_run_held_or_unacknowledged_is_refused_again",
                key_set(1, &[&k1]),
            ),
        Script::new()
            .key_set(key_set(1, &[&k1, &k2]), "kept")
            .frame(welcome(), &k1, "hello")
            .frame(request("run_2"), &k2, "close:1002:unknown_kid")
            .case(
                "an_older_key_set_is_refused_and_its_retired_key_signs_nothing",
                key_set(2, &[&k1]),
            ),
        Script::new()
            // Another document with the version held changes nothing either.
            .key_set(key_set(2, &[&k1, &k2]), "kept")
            .key_set(key_set(3, &[&k1, &k2]), "taken")
            .frame(welcome(), &k1, "hello")
            .frame(request("run_3"), &k2, "run.accept")
            .case(
                "the_same_version_changes_nothing_and_a_newer_one_is_taken",
                key_set(2, &[&k1]),
            ),
    ];
    VectorFile {
        kind: "daemon-runs".into(),
        description: "A daemon (pinning root-vectors-1, holding key_set_hex, connected as session_id at `now`) is given each step's input in order and answers as `expect` says: a run id runs at most once on a machine whatever the server sends again (run.reject run_seen), and a key set with a lower version than the one held is refused (the retired key's frames then fail unknown_kid, close 1002). See README.md.".into(),
        cases,
    }
}
