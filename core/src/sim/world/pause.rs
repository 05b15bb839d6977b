//! Faults of a misbehaving or stopped server (a node, in a cluster): a pause of its process (SIGSTOP: no input
//! handled, no ping sent, no ticket issued; what arrives waits, and on resume its timers come
//! due before the waiting frames are read), a server that sends a finished run again, and one
//! that serves a key set older than the daemon's with a key the newer set retired.
//!
//! It decides only when these happen; the roles decide what they mean.

use std::time::Duration;

use super::World;
use crate::daemon;
use crate::keyset::{FrameKey, KeySet, PinnedRoots, test_root};
use crate::server;
use crate::session::RunSpec;
use crate::sign::{Ed25519Signer, FrameSigner};
use crate::time::UnixTime;
use crate::wire::{CapabilitySource, Environment, ServerFrame};

/// The run ids a rogue key's frames ask for start with this.
pub(super) const ROGUE_PREFIX: &str = "rogue.";

impl World {
    /// Stops node `n`'s process for `secs`.
    pub(super) fn pause_node(&mut self, n: usize, secs: u64) {
        self.nodes[n].paused_until = Some(self.elapsed + Duration::from_secs(secs));
    }

    /// Lets each stopped node go on once its pause is over: its timers first — as a host
    /// whose timer fires before its readers have passed on what waited in the sockets — then
    /// every input that arrived meanwhile, in order.
    pub(super) fn resume_nodes_if_due(&mut self) {
        for n in 0..self.nodes.len() {
            if self.nodes[n]
                .paused_until
                .is_none_or(|at| at > self.elapsed)
            {
                continue;
            }
            self.nodes[n].paused_until = None;
            self.note(format!("node {n} resumed"));
            self.feed_node(n, server::Input::Timeout);
            for input in std::mem::take(&mut self.nodes[n].paused_inputs) {
                self.feed_node(n, input);
            }
        }
    }

    /// The running node machine `i`'s connection reached, if it has one.
    fn node_of_machine(&self, i: usize) -> Option<usize> {
        let conn = self.machines[i].conn?;
        let (_, n) = self.conns.get(&conn)?;
        self.node_running(*n).then_some(*n)
    }

    /// A server that offers and commits again a run machine `i` already finished (its id
    /// from the checker's ledger): the daemon must refuse it (`run_seen`) and run nothing.
    pub(super) fn resend_finished_run(&mut self, i: usize) {
        let Some(run_id) = self
            .finished_runs
            .get(&i)
            .and_then(|ids| ids.last())
            .cloned()
        else {
            return;
        };
        let Some(n) = self.node_of_machine(i) else {
            return;
        };
        let context_id = self.machines[i].context_id.clone();
        if self.nodes[n]
            .server
            .resend_run_for_test(&context_id, rogue_spec(&run_id))
        {
            self.note(format!(
                "fault: server re-sends finished run {run_id} to machine {i}"
            ));
        }
    }

    /// A server that serves machine `i` key set version 2, then version 1 with a key version
    /// 2 retired, then offers a run signed by that key: the daemon must refuse the older set,
    /// so the frame fails (`unknown_kid`) and nothing runs.
    pub(super) fn roll_keys_back(&mut self, i: usize) {
        let (Some(conn), Some(n)) = (self.machines[i].conn, self.node_of_machine(i)) else {
            return;
        };
        let Some(session_id) = self.nodes[n]
            .server
            .session(&self.machines[i].context_id)
            .and_then(|s| s.session_id_for_test())
        else {
            return;
        };
        self.rogue += 1;
        let (newer, older) = (key_set(2, None), key_set(1, Some(&rogue_signer())));
        self.feed_daemon(i, daemon::Input::KeysUpdated(newer));
        self.feed_daemon(i, daemon::Input::KeysUpdated(older));
        // A sequence far ahead, so only the key can refuse it.
        let mut frames = FrameSigner::resume_at(session_id, 1 << 40);
        let spec = rogue_spec(&format!("{ROGUE_PREFIX}{}", self.rogue));
        let commit = ServerFrame::RunCommit {
            run_id: spec.run_id.clone(),
        };
        let offer = ServerFrame::RunRequest {
            run_id: spec.run_id,
            environment: spec.environment,
            capability: spec.capability,
            timeout_ms: spec.timeout_ms,
            shared_run: spec.shared_run,
            requester: spec.requester,
        };
        self.note(format!(
            "fault: machine {i} offered an older key set and rogue frames"
        ));
        let at = self.elapsed + self.latency();
        for frame in [offer, commit] {
            let Ok(bytes) = frames.sign(&frame, &rogue_signer()) else {
                return;
            };
            self.send_to_daemon_at(at, conn, bytes, false);
        }
    }
}

/// The key a newer key set retired.
fn rogue_signer() -> Ed25519Signer {
    Ed25519Signer::from_seed("frame-retired", [0x52; 32])
}

/// A key set of `version` with the test frame key, and `extra` if given, signed by the test
/// root.
fn key_set(version: u64, extra: Option<&Ed25519Signer>) -> KeySet {
    let key = |signer: &Ed25519Signer, kid: &str| FrameKey {
        kid: kid.to_owned(),
        public_key: signer.verifying_key(),
        not_before: UnixTime(0),
        not_after: UnixTime(1 << 40),
    };
    let mut keys = vec![key(&test_root::frame_signer(), test_root::FRAME_KID)];
    if let Some(extra) = extra {
        keys.push(key(extra, "frame-retired"));
    }
    let roots = PinnedRoots::default().with_test_root_if_local("localhost", true);
    KeySet::sign_document(version, &keys, &test_root::root_signer())
        .ok()
        .and_then(|doc| KeySet::from_document(&doc, &roots).ok())
        .unwrap_or_else(super::super::pair::test_keys)
}

/// A run a faulty server offers as `run_id`.
fn rogue_spec(run_id: &str) -> RunSpec {
    RunSpec {
        run_id: run_id.into(),
        environment: Environment::Shell,
        capability: CapabilitySource::Inline {
            manifest: "name: rogue\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n".into(),
            files: Vec::new(),
        },
        timeout_ms: 5_000,
        shared_run: false,
        requester: "ada".into(),
    }
}
