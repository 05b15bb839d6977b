//! Executions that have not ended, counted per user and per machine context, with the bytes
//! their inline capabilities hold in the server's memory: what [`Limits::pending_per_user`],
//! [`Limits::pending_per_context`] and [`Limits::pending_bytes_per_user`] bound.
//!
//! The dispatcher counts an execution when the core takes it (restored ones included) and
//! forgets it when it ends; a new execute from a route that would pass a bound is declined
//! with [`QueueFull`] before the core sees it. Nothing here refuses an execution the core
//! already holds, or a wait's continuation (the wait was admitted when it was registered).

use std::collections::HashMap;

use outpost_core::ids::ExecutionId;
use outpost_core::routing::{CLOUD_ID, ExecuteTarget};
use outpost_core::server::{ExecuteRequest, ServerSnapshot};
use outpost_core::wire::CapabilitySource;

use crate::Limits;

/// An execute declined because its requester, or the context it names, has too many
/// executions that have not ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueFull {
    /// What is full and what to do.
    pub(crate) message: String,
}

/// What one execution holds.
struct Held {
    user: String,
    context: Option<String>,
    bytes: u64,
}

impl Held {
    fn new(user: &str, target: &ExecuteTarget, capability: &CapabilitySource) -> Self {
        Self {
            user: user.to_owned(),
            context: target.context.clone().filter(|c| c != CLOUD_ID),
            bytes: capability_bytes(capability),
        }
    }
}

/// The bytes of text an inline capability holds; a digest holds none worth counting.
fn capability_bytes(capability: &CapabilitySource) -> u64 {
    match capability {
        CapabilitySource::Inline { manifest, files } => {
            let files: usize = files
                .iter()
                .map(|f| f.path.len() + f.content_b64.len())
                .sum();
            (manifest.len() + files) as u64
        }
        CapabilitySource::Digest { .. } => 0,
    }
}

/// The executions not ended, and their sums.
pub(crate) struct Pending {
    limits: Limits,
    by_exec: HashMap<ExecutionId, Held>,
    /// Per user: executions, bytes.
    users: HashMap<String, (usize, u64)>,
    contexts: HashMap<String, usize>,
}

impl Pending {
    /// Counts the executions `snapshot` restores.
    pub(crate) fn new(limits: Limits, snapshot: Option<&ServerSnapshot>) -> Self {
        let mut pending = Self {
            limits,
            by_exec: HashMap::new(),
            users: HashMap::new(),
            contexts: HashMap::new(),
        };
        for row in snapshot.map(|s| s.executions.as_slice()).unwrap_or(&[]) {
            let held = Held::new(&row.requester.user_id, &row.target, &row.capability);
            pending.hold(row.exec_id.clone(), held);
        }
        pending
    }

    /// Executions not ended, every user's.
    pub(crate) fn count(&self) -> usize {
        self.by_exec.len()
    }

    /// Whether `request` may join the executions not ended.
    pub(crate) fn admit(&self, request: &ExecuteRequest) -> Result<(), QueueFull> {
        let held = Held::new(
            &request.requester.user_id,
            &request.target,
            &request.capability,
        );
        let (count, bytes) = self.users.get(&held.user).copied().unwrap_or_default();
        let limits = &self.limits;
        if count >= limits.pending_per_user {
            return Err(QueueFull {
                message: format!(
                    "you have {count} executions that have not ended, the most one user may have; wait for some to end or cancel them"
                ),
            });
        }
        if bytes.saturating_add(held.bytes) > limits.pending_bytes_per_user {
            return Err(QueueFull {
                message: format!(
                    "your executions that have not ended hold {bytes} bytes of inline capabilities and this one {}; at most {} are held: wait for some to end, or upload large capabilities as bundles (PUT /v1/bundles/{{sha256}})",
                    held.bytes, limits.pending_bytes_per_user
                ),
            });
        }
        if let Some(context) = &held.context {
            let on_it = self.contexts.get(context).copied().unwrap_or_default();
            if on_it >= limits.pending_per_context {
                return Err(QueueFull {
                    message: format!(
                        "{on_it} executions for this context have not ended, the most one context may have; wait for its daemon to work through them"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Counts `request`, given to the core; `false` when its id was counted already.
    pub(crate) fn add(&mut self, request: &ExecuteRequest) -> bool {
        let held = Held::new(
            &request.requester.user_id,
            &request.target,
            &request.capability,
        );
        self.hold(request.exec_id.clone(), held)
    }

    fn hold(&mut self, exec_id: ExecutionId, held: Held) -> bool {
        if self.by_exec.contains_key(&exec_id) {
            return false;
        }
        let user = self.users.entry(held.user.clone()).or_default();
        user.0 += 1;
        user.1 += held.bytes;
        if let Some(context) = &held.context {
            *self.contexts.entry(context.clone()).or_default() += 1;
        }
        self.by_exec.insert(exec_id, held);
        true
    }

    /// Forgets `exec_id`, which ended.
    pub(crate) fn ended(&mut self, exec_id: &str) {
        let Some(held) = self.by_exec.remove(exec_id) else {
            return;
        };
        if let Some(user) = self.users.get_mut(&held.user) {
            user.0 = user.0.saturating_sub(1);
            user.1 = user.1.saturating_sub(held.bytes);
            if user.0 == 0 {
                self.users.remove(&held.user);
            }
        }
        if let Some(context) = &held.context
            && let Some(n) = self.contexts.get_mut(context)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.contexts.remove(context);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outpost_core::routing::Requester;
    use outpost_core::wire::{Environment, InlineFile};

    fn request(id: &str, user: &str, context: Option<&str>, b64: usize) -> ExecuteRequest {
        ExecuteRequest {
            exec_id: id.into(),
            requester: Requester {
                user_id: user.into(),
            },
            target: ExecuteTarget {
                context: context.map(str::to_owned),
                ..ExecuteTarget::default()
            },
            environment: Environment::Shell,
            capability: CapabilitySource::Inline {
                manifest: "m".into(),
                files: vec![InlineFile {
                    path: "p".into(),
                    content_b64: "A".repeat(b64),
                }],
            },
            timeout_ms: 1000,
        }
    }

    #[test]
    fn each_bound_declines_the_next_and_an_end_makes_room() {
        let limits = Limits {
            pending_per_user: 3,
            pending_per_context: 2,
            pending_bytes_per_user: 100,
            ..Limits::default()
        };
        let mut pending = Pending::new(limits, None);
        for i in 0..2 {
            let r = request(&format!("a{i}"), "ana", Some("ec_1"), 10);
            pending.admit(&r).expect("room");
            pending.add(&r);
        }
        // The context is full; the cloud and another context are not.
        assert!(
            pending
                .admit(&request("a2", "ana", Some("ec_1"), 10))
                .is_err()
        );
        assert!(
            pending
                .admit(&request("a2", "bo", Some("ec_1"), 10))
                .is_err()
        );
        let cloud = request("a2", "ana", Some(CLOUD_ID), 10);
        pending.admit(&cloud).expect("the cloud is not a queue");
        pending.add(&cloud);
        // Ana has three now.
        let e = pending.admit(&request("a3", "ana", None, 10)).unwrap_err();
        assert!(e.message.contains("3 executions"), "{}", e.message);
        pending.ended("a0");
        pending
            .admit(&request("a3", "ana", Some("ec_1"), 10))
            .expect("room again");
        // Bytes: 2 + 10 each so far; 100 at most.
        assert!(pending.admit(&request("a3", "ana", None, 90)).is_err());
        pending.ended("a1");
        pending.ended("a2");
        pending.ended("a2");
        assert_eq!(pending.count(), 0);
        assert!(pending.users.is_empty() && pending.contexts.is_empty());
    }
}
