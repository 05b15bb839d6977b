//! The blocking host's threads for blocking work: kept warm and reused, as an async runtime's
//! blocking pool is, so a run does not pay for a new thread (and the per-thread set-up of
//! what it calls, such as a wasm engine's signal stack) every time.
//!
//! This module owns those threads. A thread idle for [`KEEP_ALIVE`] exits; there is no upper
//! bound on threads, as with `std::thread::spawn` (each task may block for as long as a run).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long an idle thread waits for more work before it exits.
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

type Task = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    idle: usize,
}

/// A pool of reusable threads.
#[derive(Clone, Default)]
pub(crate) struct Pool {
    shared: Arc<(Mutex<Queue>, Condvar)>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

impl Pool {
    /// Runs `task` on an idle thread, or on a new one when none is idle.
    pub(crate) fn spawn(&self, task: Task) {
        let (lock, ready) = &*self.shared;
        let mut queue = lock.lock().unwrap_or_else(|e| e.into_inner());
        queue.tasks.push_back(task);
        if queue.idle > 0 {
            queue.idle -= 1;
            ready.notify_one();
            return;
        }
        drop(queue);
        let shared = self.shared.clone();
        std::thread::spawn(move || work(&shared));
    }
}

fn work(shared: &(Mutex<Queue>, Condvar)) {
    let (lock, ready) = shared;
    let mut queue = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(task) = queue.tasks.pop_front() {
            drop(queue);
            task();
            queue = lock.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        queue.idle += 1;
        let (next, timeout) = ready
            .wait_timeout_while(queue, KEEP_ALIVE, |q| q.tasks.is_empty())
            .unwrap_or_else(|e| e.into_inner());
        queue = next;
        if timeout.timed_out() && queue.tasks.is_empty() {
            queue.idle = queue.idle.saturating_sub(1);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn tasks_run_and_threads_are_reused() {
        let pool = Pool::default();
        let (tx, rx) = channel();
        for i in 0..4 {
            let tx = tx.clone();
            pool.spawn(Box::new(move || {
                let _ = tx.send((i, std::thread::current().id()));
            }));
            // One at a time: each finds the previous task's thread idle.
            let _ = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the task ran");
            std::thread::sleep(Duration::from_millis(20));
        }
        let (lock, _) = &*pool.shared;
        let threads_idle = lock.lock().unwrap().idle;
        assert_eq!(threads_idle, 1, "one thread served every task");
    }
}
