//! One execution's path through the system, stage by stage: the server, the daemon and its
//! host emit `trace` events with the target `outpost::timeline` (a `stage` name, the frame's
//! type where one leaves or arrives); this collects them with the instant and thread of each
//! and prints, over many executions, each stage's median time since the client sent its
//! request and since the stage before it.
//!
//! Only a bench installs it: the events cost nothing where no subscriber asks for them, and
//! it must never be installed while a figure that excludes it is measured (it takes a lock
//! and the clock at every stage).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};

/// The target every stage event is emitted under.
const TARGET: &str = "outpost::timeline";

/// One stage as it happened: when, on which thread, and its label (`stage` and `frame`).
#[derive(Debug, Clone)]
struct Stage {
    at: Instant,
    thread: String,
    label: String,
}

/// The events of the execution being recorded (none while `on` is false).
#[derive(Default)]
struct Shared {
    on: AtomicBool,
    stages: Mutex<Vec<Stage>>,
}

struct Collect(Arc<Shared>);

#[derive(Default)]
struct Label(String);

impl Visit for Label {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.push(field, &format!("{value:?}"));
    }
}

impl Label {
    fn push(&mut self, field: &Field, value: &str) {
        match field.name() {
            "stage" => self.0.insert_str(0, value),
            "frame" => {
                self.0.push(' ');
                self.0.push_str(value);
            }
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for Collect {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if metadata.target() == TARGET {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.target() == TARGET
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !self.0.on.load(Ordering::Relaxed) {
            return;
        }
        let at = Instant::now();
        let mut label = Label::default();
        event.record(&mut label);
        let thread = std::thread::current().name().unwrap_or("?").to_owned();
        self.0.stages.lock().unwrap().push(Stage {
            at,
            thread,
            label: label.0,
        });
    }
}

/// The collector, installed as the process's subscriber (once per process).
pub struct Timeline {
    shared: Arc<Shared>,
    opening: &'static str,
    runs: Vec<Vec<(Duration, String, String)>>,
}

/// How many executions [`Timeline::report`] also prints stage by stage, as they ran
/// (`OUTPOST_BENCH_RAW_TIMELINE=3`).
pub const RAW_RUNS_ENV: &str = "OUTPOST_BENCH_RAW_TIMELINE";

impl Timeline {
    /// Installs the collector; recording starts with [`Timeline::record`]. Each recorded
    /// call keeps its stages from the first `opening` stage on: what the call before left
    /// behind (a frame still being acknowledged) is not this call's. None, and a line that
    /// says so, when the process already has a subscriber (`OUTPOST_LOG` set for a bench).
    pub fn install(opening: &'static str) -> Option<Timeline> {
        let shared = Arc::new(Shared::default());
        let subscriber = tracing_subscriber::registry().with(Collect(shared.clone()));
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            println!(
                "no timeline: this process already has a tracing subscriber (unset OUTPOST_LOG)"
            );
            return None;
        }
        Some(Timeline {
            shared,
            opening,
            runs: Vec::new(),
        })
    }

    /// Runs `execute` once and keeps its stages, timed from just before the call; the
    /// call's return is the last stage, `client.answered`.
    pub fn record(&mut self, execute: impl FnOnce()) {
        self.shared.stages.lock().unwrap().clear();
        self.shared.on.store(true, Ordering::SeqCst);
        let started = Instant::now();
        execute();
        let ended = Instant::now();
        self.shared.on.store(false, Ordering::SeqCst);
        let mut stages = std::mem::take(&mut *self.shared.stages.lock().unwrap());
        stages.sort_by_key(|s| s.at);
        let opened = stages
            .iter()
            .position(|s| s.label == self.opening)
            .unwrap_or(stages.len());
        let mut run: Vec<(Duration, String, String)> = stages
            .into_iter()
            .skip(opened)
            .map(|s| (s.at.saturating_duration_since(started), s.thread, s.label))
            .collect();
        run.push((ended - started, "client".into(), "client.answered".into()));
        self.runs.push(run);
    }

    /// Each stage seen in at least 90 % of the recorded executions (a stage seen twice in
    /// one is numbered `#2`), in the order of its median time since the request: that time,
    /// the time since the stage before, and the thread most often seen at it.
    pub fn report(&self, title: &str) -> String {
        let mut offsets: HashMap<String, (Vec<Duration>, HashMap<String, usize>)> = HashMap::new();
        for run in &self.runs {
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for (offset, thread, label) in run {
                let n = seen.entry(label).or_default();
                *n += 1;
                let key = if *n == 1 {
                    label.clone()
                } else {
                    format!("{label} #{n}")
                };
                let entry = offsets.entry(key).or_default();
                entry.0.push(*offset);
                *entry.1.entry(thread.clone()).or_default() += 1;
            }
        }
        let wanted = self.runs.len() * 9 / 10;
        let mut rows: Vec<(Duration, String, String)> = offsets
            .into_iter()
            .filter(|(_, (times, _))| times.len() >= wanted.max(1))
            .map(|(key, (mut times, threads))| {
                times.sort();
                let thread = threads
                    .into_iter()
                    .max_by_key(|(_, n)| *n)
                    .map(|(t, _)| t)
                    .unwrap_or_default();
                (times[times.len() / 2], key, thread)
            })
            .collect();
        rows.sort_by_key(|r| r.0);
        let mut out = format!(
            "{title}: median µs since the request (Δ since the stage before) over {} executions\n",
            self.runs.len()
        );
        let mut before = Duration::ZERO;
        for (offset, key, thread) in rows {
            stage_line(&mut out, "  ", offset, before, &key, &thread);
            before = offset;
        }
        out.push_str(&self.raw_runs());
        out
    }

    /// The first [`RAW_RUNS_ENV`] recorded executions stage by stage, each in its own order
    /// (medians of separate stages need not keep one execution's order); none when unset.
    fn raw_runs(&self) -> String {
        let wanted: usize = std::env::var(RAW_RUNS_ENV)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let mut out = String::new();
        for (i, run) in self.runs.iter().take(wanted).enumerate() {
            let _ = writeln!(out, "  execution {i}:");
            let mut before = Duration::ZERO;
            for (offset, thread, label) in run {
                stage_line(&mut out, "    ", *offset, before, label, thread);
                before = *offset;
            }
        }
        out
    }

    /// Forgets what was recorded (the next [`Timeline::report`] covers what follows).
    pub fn clear(&mut self) {
        self.runs.clear();
    }
}

/// One stage's line: its time since the request, since the stage before (at `before`), its
/// label and its thread.
fn stage_line(
    out: &mut String,
    indent: &str,
    offset: Duration,
    before: Duration,
    label: &str,
    thread: &str,
) {
    let _ = writeln!(
        out,
        "{indent}{:>8.0} (+{:>6.0})  {label:<32} [{thread}]",
        offset.as_secs_f64() * 1e6,
        offset.saturating_sub(before).as_secs_f64() * 1e6
    );
}
