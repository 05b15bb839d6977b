//! The counters `/metrics` shows in the Prometheus text format: daemons connected, runs by
//! end status, results for runs a machine never held, the dispatch latency histogram
//! (execute received → run committed), the executions that have not ended, and the request
//! bodies still arriving.
//!
//! It only counts; it never decides anything and holds no secret.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, in seconds.
const BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

#[derive(Default)]
struct Inner {
    online: BTreeSet<String>,
    runs: BTreeMap<String, u64>,
    unknown_results: u64,
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum_secs: f64,
    pending: usize,
}

/// The server's metrics.
#[derive(Default)]
pub(crate) struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A daemon said hello.
    pub(crate) fn daemon_ready(&self, context_id: &str) {
        self.lock().online.insert(context_id.to_owned());
    }

    /// A daemon's connection went away.
    pub(crate) fn daemon_offline(&self, context_id: &str) {
        self.lock().online.remove(context_id);
    }

    /// An execution ended with `status`.
    pub(crate) fn run_finished(&self, status: &str) {
        *self.lock().runs.entry(status.to_owned()).or_default() += 1;
    }

    /// A machine sent a `run.result` for a run it never held (acknowledged, not recorded).
    pub(crate) fn unknown_result(&self) {
        self.lock().unknown_results += 1;
    }

    /// `n` executions have not ended.
    pub(crate) fn executions_pending(&self, n: usize) {
        self.lock().pending = n;
    }

    /// An execution was committed on a machine `latency` after it was received.
    pub(crate) fn dispatched(&self, latency: Duration) {
        let secs = latency.as_secs_f64();
        let mut inner = self.lock();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                inner.buckets[i] += 1;
            }
        }
        inner.count += 1;
        inner.sum_secs += secs;
    }

    /// The Prometheus text exposition, with `bodies` request bodies in progress.
    pub(crate) fn render(&self, bodies: usize) -> String {
        let inner = self.lock();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP outpost_request_bodies_in_progress Request bodies still arriving."
        );
        let _ = writeln!(out, "# TYPE outpost_request_bodies_in_progress gauge");
        let _ = writeln!(out, "outpost_request_bodies_in_progress {bodies}");
        let _ = writeln!(
            out,
            "# HELP outpost_executions_pending Executions that have not ended."
        );
        let _ = writeln!(out, "# TYPE outpost_executions_pending gauge");
        let _ = writeln!(out, "outpost_executions_pending {}", inner.pending);
        let _ = writeln!(
            out,
            "# HELP outpost_connected_daemons Daemons connected and ready."
        );
        let _ = writeln!(out, "# TYPE outpost_connected_daemons gauge");
        let _ = writeln!(out, "outpost_connected_daemons {}", inner.online.len());
        let _ = writeln!(
            out,
            "# HELP outpost_runs_total Executions ended, by status."
        );
        let _ = writeln!(out, "# TYPE outpost_runs_total counter");
        for (status, n) in &inner.runs {
            let _ = writeln!(out, "outpost_runs_total{{status=\"{status}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP outpost_unknown_results_total Results for runs the sending machine never held: acknowledged, not recorded."
        );
        let _ = writeln!(out, "# TYPE outpost_unknown_results_total counter");
        let _ = writeln!(
            out,
            "outpost_unknown_results_total {}",
            inner.unknown_results
        );
        let _ = writeln!(
            out,
            "# HELP outpost_dispatch_latency_seconds Execute received to run committed."
        );
        let _ = writeln!(out, "# TYPE outpost_dispatch_latency_seconds histogram");
        for (bound, n) in BUCKETS.iter().zip(inner.buckets) {
            let _ = writeln!(
                out,
                "outpost_dispatch_latency_seconds_bucket{{le=\"{bound}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "outpost_dispatch_latency_seconds_bucket{{le=\"+Inf\"}} {}",
            inner.count
        );
        let _ = writeln!(
            out,
            "outpost_dispatch_latency_seconds_sum {}",
            inner.sum_secs
        );
        let _ = writeln!(
            out,
            "outpost_dispatch_latency_seconds_count {}",
            inner.count
        );
        out
    }
}
