//! Wake-ups for requests that wait on one execution's end (`wait: true`, `waitSecs`): the
//! dispatcher signals an execution once the record of its end is committed, and only the
//! requests waiting on that execution wake. A waiter subscribes before it reads the store, so
//! an end committed between its read and its wait still wakes it.
//!
//! This module owns the map of executions someone waits on (an entry lives while a waiter
//! holds its [`EndWatch`]). It never reads the store and never decides that an execution
//! ended: a wake carries the row as the dispatcher committed it, or nothing (an end another
//! node committed, the notice of this node's own end heard first, or an end whose row was
//! not found), and then the waiter reads the committed row.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use outpost_core::ids::ExecutionId;
use tokio::sync::watch;

use crate::store::ExecutionEntry;

/// What an end's wake carries: the execution's row as committed, when this node committed it.
type Ended = Option<Arc<ExecutionEntry>>;

/// The executions waited on.
#[derive(Debug, Default)]
pub(crate) struct Ends {
    waited: Mutex<HashMap<ExecutionId, watch::Sender<Ended>>>,
}

impl Ends {
    fn lock(&self) -> MutexGuard<'_, HashMap<ExecutionId, watch::Sender<Ended>>> {
        // The map holds no invariant a panic could break half-way.
        self.waited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts watching `exec_id`: an [`Ends::ended`] from now on wakes the watch.
    pub(crate) fn subscribe(&self, exec_id: &str) -> EndWatch<'_> {
        let rx = self
            .lock()
            .entry(ExecutionId::new(exec_id))
            .or_insert_with(|| watch::channel(None).0)
            .subscribe();
        EndWatch {
            ends: self,
            exec_id: ExecutionId::new(exec_id),
            rx: Some(rx),
        }
    }

    /// `exec_id`'s end is committed: wakes its watches (dropping the sender wakes them all),
    /// handing them `row`, the execution's row as committed, when there is one.
    pub(crate) fn ended(&self, exec_id: &str, row: Option<ExecutionEntry>) {
        let sender = self.lock().remove(exec_id);
        if let (Some(sender), Some(row)) = (&sender, row) {
            sender.send_replace(Some(Arc::new(row)));
        }
        drop(sender);
    }

    /// How many executions are watched now.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> usize {
        self.lock().len()
    }
}

/// One waiter's watch on one execution; dropping it forgets the execution once no one
/// else watches it.
#[derive(Debug)]
pub(crate) struct EndWatch<'a> {
    ends: &'a Ends,
    exec_id: ExecutionId,
    rx: Option<watch::Receiver<Ended>>,
}

impl EndWatch<'_> {
    /// Returns once the execution was signalled as ended (at once if it already was since
    /// [`Ends::subscribe`]), with its row as committed when the signal carried it.
    pub(crate) async fn signalled(&mut self) -> Ended {
        let rx = self.rx.as_mut()?;
        // Only the sender's drop or a send ends this; either is the signal, and a value sent
        // before the drop stays readable.
        let _ = rx.changed().await;
        rx.borrow_and_update().clone()
    }
}

impl Drop for EndWatch<'_> {
    fn drop(&mut self) {
        let mut waited = self.ends.lock();
        drop(self.rx.take());
        if waited
            .get(&self.exec_id)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            waited.remove(&self.exec_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_end_wakes_its_watchers_only_and_the_map_forgets_them() {
        let ends = Ends::default();
        let mut a1 = ends.subscribe("a");
        let mut a2 = ends.subscribe("a");
        let b = ends.subscribe("b");
        ends.ended("a", None);
        a1.signalled().await;
        a2.signalled().await;
        let b_woken = b.rx.as_ref().map(|rx| rx.has_changed());
        assert!(matches!(b_woken, Some(Ok(false))), "b did not end");
        drop((a1, a2));
        assert_eq!(ends.watched(), 1);
        drop(b);
        assert_eq!(ends.watched(), 0);
    }

    #[tokio::test]
    async fn an_end_hands_its_row_to_every_watcher() {
        let ends = Ends::default();
        let mut w1 = ends.subscribe("r");
        let mut w2 = ends.subscribe("r");
        let row = ExecutionEntry {
            id: "r".into(),
            ..ExecutionEntry::default()
        };
        ends.ended("r", Some(row));
        for w in [&mut w1, &mut w2] {
            let given = w.signalled().await.expect("the row");
            assert_eq!(given.id, "r");
        }
        // An end without a row (another node's) wakes with nothing.
        let mut w = ends.subscribe("s");
        ends.ended("s", None);
        assert!(w.signalled().await.is_none());
    }

    #[tokio::test]
    async fn an_end_before_the_wait_is_not_lost() {
        let ends = Ends::default();
        let mut w = ends.subscribe("x");
        ends.ended("x", None);
        tokio::time::timeout(std::time::Duration::from_secs(5), w.signalled())
            .await
            .expect("the end signalled before the wait wakes it");
    }
}
