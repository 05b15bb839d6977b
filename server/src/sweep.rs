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
use crate::store::Store;

/// Sweeps `store` every `every`, deleting bundles unused for `retention`, until `stop`.
pub(crate) async fn bundles(
    store: Arc<Store>,
    every: Duration,
    retention: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let unused_since = wall_now().0.saturating_sub(retention.as_secs());
        let store = store.clone();
        match tokio::task::spawn_blocking(move || store.sweep_bundles(unused_since)).await {
            Ok(Ok(gone)) if !gone.is_empty() => {
                tracing::info!(count = gone.len(), "unused bundles deleted");
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "sweeping unused bundles failed"),
            Err(e) => tracing::warn!(error = %e, "the bundle sweep stopped"),
        }
    }
}

/// Sweeps `store` every `every`, deleting recordings that ended more than `retention` ago,
/// until `stop`.
pub(crate) async fn recordings(
    store: Arc<Store>,
    every: Duration,
    retention: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let cutoff = wall_now().0.saturating_sub(retention.as_secs());
        let store = store.clone();
        match tokio::task::spawn_blocking(move || store.sweep_recordings(cutoff)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(gone)) => tracing::info!(count = gone, "old terminal recordings deleted"),
            Ok(Err(e)) => tracing::warn!(error = %e, "sweeping old recordings failed"),
            Err(e) => tracing::warn!(error = %e, "the recording sweep stopped"),
        }
    }
}
