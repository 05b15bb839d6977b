//! A cached thread pool for runs: an idle thread takes the next run, a new thread is started
//! only when none is idle, and a thread idle for a minute ends. Starting a run costs a channel
//! send instead of a thread spawn, and a long run never holds up another.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

const IDLE_LIFETIME: Duration = Duration::from_secs(60);

/// The pool. Cloning shares it.
#[derive(Clone, Default)]
pub(crate) struct RunPool {
    idle: Arc<Mutex<Vec<Sender<Job>>>>,
}

impl RunPool {
    /// Runs `job` on an idle thread, or on a new one.
    pub(crate) fn spawn(&self, job: Job) {
        let mut job = Some(job);
        while let Some(worker) = self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            match worker.send(job.take().unwrap_or_else(|| Box::new(|| {}))) {
                Ok(()) => return,
                // That thread just timed out; try the next.
                Err(mpsc::SendError(back)) => job = Some(back),
            }
        }
        let (tx, rx) = mpsc::channel();
        let idle = self.idle.clone();
        if let Some(job) = job {
            std::thread::spawn(move || worker(job, tx, rx, idle));
        }
    }
}

fn worker(first: Job, me: Sender<Job>, jobs: Receiver<Job>, idle: Arc<Mutex<Vec<Sender<Job>>>>) {
    first();
    loop {
        if let Ok(mut list) = idle.lock() {
            list.push(me.clone());
        }
        match jobs.recv_timeout(IDLE_LIFETIME) {
            Ok(job) => job(),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
        }
    }
}
