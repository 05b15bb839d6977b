//! The sweeps of what is kept for a while: every [`Limits::bundle_sweep`](crate::Limits), the
//! bundles last used more than [`Limits::bundle_retention`](crate::Limits) ago that no
//! execution not ended names are deleted, and the terminal recordings that ended more than
//! [`Limits::recording_retention`](crate::Limits) ago (the store keeps the rules; these tasks
//! only keep the time). They run until the server stops, and a failed sweep is logged and
//! tried again at the next one.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::wall_now;
use crate::store::{Store, StoreError};

/// Sweeps `store` every `every`, deleting bundles unused for `retention`, until `stop`.
pub(crate) async fn bundles(
    store: Arc<Store>,
    every: Duration,
    retention: Duration,
    stop: watch::Receiver<bool>,
) {
    sweep_every(store, every, stop, "unused bundles", move |store| {
        let unused_since = wall_now().0.saturating_sub(retention.as_secs());
        store.sweep_bundles(unused_since).map(|gone| gone.len())
    })
    .await;
}

/// Sweeps `store` every `every`, deleting recordings that ended more than `retention` ago,
/// until `stop`.
pub(crate) async fn recordings(
    store: Arc<Store>,
    every: Duration,
    retention: Duration,
    stop: watch::Receiver<bool>,
) {
    sweep_every(
        store,
        every,
        stop,
        "old terminal recordings",
        move |store| store.sweep_recordings(wall_now().0.saturating_sub(retention.as_secs())),
    )
    .await;
}

/// Runs `sweep` (which says how many it deleted) on a blocking thread every `every` until
/// `stop`, logging what it did as `what`.
async fn sweep_every(
    store: Arc<Store>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
    sweep: impl Fn(&Store) -> Result<usize, StoreError> + Clone + Send + 'static,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let (store, sweep) = (store.clone(), sweep.clone());
        match tokio::task::spawn_blocking(move || sweep(&store)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(count)) => tracing::info!(count, "{what} deleted"),
            Ok(Err(e)) => tracing::warn!(error = %e, "sweeping {what} failed"),
            Err(e) => tracing::warn!(error = %e, "the sweep of {what} stopped"),
        }
    }
}
