//! What changed, for the pages that keep a list open (`GET /v1/events`): the store announces
//! each commit that touched executions, contexts or the audit, and the dispatcher announces a
//! machine that came online, went offline, or was paused or resumed.
//!
//! An announcement carries only its [`Topic`], never a row: a listener reads the list again
//! through the API, which applies the caller's access. Nothing waits on a listener: one that
//! falls behind is told that everything changed. This module never decides who may see what.

use serde::Serialize;
use tokio::sync::{broadcast, watch};

/// How many announcements a slow listener may fall behind before it is told everything
/// changed.
const BACKLOG: usize = 64;

/// Which list changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Topic {
    /// A context: registered, deleted, its grant or sharing, online, offline, paused, resumed.
    Contexts,
    /// An execution: created, started, ended.
    Runs,
    /// The audit: a row was added.
    Audit,
}

impl Topic {
    /// Every topic, as a listener that fell behind is told.
    pub const ALL: [Topic; 3] = [Topic::Contexts, Topic::Runs, Topic::Audit];

    /// The topic's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Contexts => "contexts",
            Topic::Runs => "runs",
            Topic::Audit => "audit",
        }
    }
}

/// The announcer; every listener subscribes to it.
#[derive(Debug)]
pub struct Changes {
    tx: broadcast::Sender<Topic>,
    /// True once the server stops: every listener's stream ends.
    closed: watch::Sender<bool>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(BACKLOG).0,
            closed: watch::channel(false).0,
        }
    }
}

impl Changes {
    /// Announces that `topic` changed (nobody listening is fine).
    pub fn notify(&self, topic: Topic) {
        let _ = self.tx.send(topic);
    }

    /// A listener for announcements from now on, and what says the server is stopping.
    pub fn subscribe(&self) -> (broadcast::Receiver<Topic>, watch::Receiver<bool>) {
        (self.tx.subscribe(), self.closed.subscribe())
    }

    /// The server stops: every listener's stream ends (so none holds the stop up).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }
}
