//! What an ended run leaves behind — its process group and sandbox, its host-command bridge,
//! its folder and service file — kept until the server has the run's result, and cleaned up
//! then: the cleaning (a sandbox's teardown, removing folders, making the next warm sandbox)
//! is work for this machine's cores that must not compete with handing the result on.
//!
//! This module owns the parked leftovers and the one thread that drops them. It never
//! decides a run's result and never talks to the server: the driver tells it when a result
//! was delivered ([`Janitor::delivered`]).

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use outpost_core::ids::RunId;

use super::bridge::Bridge;

/// How long leftovers wait for their result's delivery: a daemon that lost its connection
/// still cleans up its ended runs, and its results wait in the outbox without them.
const HOLD_AT_MOST: Duration = Duration::from_secs(2);

/// What an ended run leaves to clean up: dropping it ends the run's process group (and its
/// sandbox: its namespaces end, its private folders go, the next warm sandbox is made),
/// stops its host-command bridge, and removes its folder and its service file.
pub(crate) struct Leftovers {
    pub(crate) handle: Option<Box<dyn outpost_core::executor::RunHandle>>,
    pub(crate) bridge: Option<Bridge>,
    pub(crate) run_dir: PathBuf,
    pub(crate) service_file: PathBuf,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        drop(self.handle.take());
        drop(self.bridge.take());
        let _ = std::fs::remove_file(&self.service_file);
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

/// What the janitor's thread is told, in the order it happened.
enum Message {
    /// A run ended: hold what it left until its result is delivered.
    Park(RunId, Leftovers),
    /// The server acknowledged the run's result.
    Delivered(RunId),
}

/// Holds ended runs' leftovers on a thread of its own until their results are delivered
/// (or [`HOLD_AT_MOST`] passed), then drops them there. Dropping the janitor drops every
/// leftover it holds and waits for that: a daemon that stops leaves nothing behind.
pub(crate) struct Janitor {
    tell: Option<Sender<Message>>,
    thread: Option<JoinHandle<()>>,
}

impl Janitor {
    /// Starts the janitor's thread; without one (the system refused a thread), leftovers are
    /// dropped at once, where they are parked.
    pub(crate) fn start() -> Self {
        let (tell, heard) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("outpost-leftovers".into())
            .spawn(move || keep(&heard))
            .ok();
        Self {
            tell: thread.as_ref().map(|_| tell),
            thread,
        }
    }

    /// Holds what run `run_id` left until its result is delivered. Call it before the
    /// result is handed to the driver, so the delivery never comes first.
    pub(crate) fn park(&self, run_id: &RunId, leftovers: Leftovers) {
        if let Some(tell) = &self.tell
            && let Err(mpsc::SendError(Message::Park(_, leftovers))) =
                tell.send(Message::Park(run_id.clone(), leftovers))
        {
            drop(leftovers);
        }
    }

    /// The server has run `run_id`'s result: what the run left is cleaned up now.
    pub(crate) fn delivered(&self, run_id: &RunId) {
        if let Some(tell) = &self.tell {
            let _ = tell.send(Message::Delivered(run_id.clone()));
        }
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        drop(self.tell.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The janitor's thread: parks, drops on delivery or when held too long, and drops the rest
/// when the janitor is dropped.
fn keep(heard: &Receiver<Message>) {
    let mut parked: Vec<(RunId, Instant, Leftovers)> = Vec::new();
    loop {
        let next = parked.iter().map(|(_, until, _)| *until).min();
        let message = match next {
            Some(until) => heard.recv_timeout(until.saturating_duration_since(Instant::now())),
            None => heard.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match message {
            Ok(Message::Park(run_id, leftovers)) => {
                parked.push((run_id, Instant::now() + HOLD_AT_MOST, leftovers));
            }
            Ok(Message::Delivered(run_id)) => parked.retain(|(id, _, _)| *id != run_id),
            Err(RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                parked.retain(|(_, until, _)| *until > now);
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outpost_core::executor::{ExecError, Outcome, OutputChunk, RunHandle};

    /// A run handle that says when it is dropped.
    struct Told(&'static str, Sender<&'static str>);

    impl RunHandle for Told {
        fn run_id(&self) -> &str {
            self.0
        }
        fn wait(&mut self, _: Duration) -> Result<Option<Outcome>, ExecError> {
            Ok(None)
        }
        fn cancel(&mut self) -> Result<(), ExecError> {
            Ok(())
        }
        fn read_output(&mut self) -> Vec<OutputChunk> {
            Vec::new()
        }
    }

    impl Drop for Told {
        fn drop(&mut self) {
            let _ = self.1.send(self.0);
        }
    }

    fn leftovers(
        dir: &std::path::Path,
        name: &'static str,
        told: &Sender<&'static str>,
    ) -> Leftovers {
        let run_dir = dir.join(name);
        std::fs::create_dir_all(&run_dir).unwrap();
        Leftovers {
            handle: Some(Box::new(Told(name, told.clone()))),
            bridge: None,
            run_dir,
            service_file: dir.join(format!("{name}.service")),
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("outpost-leftovers-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn leftovers_wait_for_their_delivery_and_a_stopping_janitor_drops_the_rest() {
        let dir = scratch("delivery");
        let (told, dropped) = mpsc::channel();
        let janitor = Janitor::start();
        janitor.park(&"run_a".into(), leftovers(&dir, "run_a", &told));
        janitor.park(&"run_b".into(), leftovers(&dir, "run_b", &told));
        janitor.delivered(&"run_unknown".into());
        janitor.delivered(&"run_a".into());
        // One thread cleans, in order: once the fence is dropped, run_a's cleaning is over.
        janitor.park(&"fence".into(), leftovers(&dir, "fence", &told));
        janitor.delivered(&"fence".into());
        assert_eq!(dropped.recv_timeout(Duration::from_secs(5)), Ok("run_a"));
        assert_eq!(dropped.recv_timeout(Duration::from_secs(5)), Ok("fence"));
        assert!(
            !dir.join("run_a").exists(),
            "a delivered run's folder stays"
        );
        assert!(!dir.join("run_a.service").exists());
        assert!(
            dir.join("run_b").exists(),
            "an undelivered run's folder went"
        );
        drop(janitor);
        assert_eq!(
            dropped.try_recv(),
            Ok("run_b"),
            "a stopped janitor kept a run"
        );
        assert!(
            !dir.join("run_b").exists(),
            "a stopped janitor left a run's folder"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn leftovers_whose_result_is_never_delivered_go_after_the_hold() {
        let dir = scratch("hold");
        let (told, dropped) = mpsc::channel();
        let janitor = Janitor::start();
        let parked = Instant::now();
        janitor.park(&"run_a".into(), leftovers(&dir, "run_a", &told));
        assert_eq!(dropped.recv_timeout(HOLD_AT_MOST * 3), Ok("run_a"));
        assert!(parked.elapsed() >= HOLD_AT_MOST, "dropped before the hold");
        // Stopping waits for the cleaning in progress.
        drop(janitor);
        assert!(!dir.join("run_a").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
