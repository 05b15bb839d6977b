//! The threads that run condition checks: made when a check finds none idle and kept for the
//! next, so a check costs no thread made and torn down (with its stack mapped, faulted in and
//! unmapped), which cost the daemon as much CPU as the check itself.
//!
//! A check never waits behind another: each is handed to a thread no other check has claimed,
//! an idle one or a new one, so there are as many threads as checks ever ran at once (the
//! schedule's `max_running`, 8 by default). This module never runs anything but the jobs
//! [`Checks`](super::checks::Checks) gives it, and never holds its queue's lock while a job runs.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// One check, run on a pool thread; what it returns runs once the thread counts itself idle
/// again (the check's outcome is sent there, so whoever hears it and starts the next check
/// finds this thread idle, and no thread is made for it).
pub(crate) type Job = Box<dyn FnOnce() -> Finish + Send>;

/// The last step of a [`Job`].
pub(crate) type Finish = Box<dyn FnOnce() + Send>;

/// Threads waiting for checks.
pub(crate) struct Pool {
    jobs: Sender<Job>,
    queue: Arc<Mutex<Receiver<Job>>>,
    /// Threads waiting for a job that no check has claimed yet.
    idle: Arc<AtomicUsize>,
    threads: usize,
    stack_bytes: usize,
}

impl Pool {
    /// A pool whose threads have stacks of `stack_bytes`; it makes none before its first job.
    pub(crate) fn new(stack_bytes: usize) -> Self {
        let (jobs, queue) = mpsc::channel();
        Self {
            jobs,
            queue: Arc::new(Mutex::new(queue)),
            idle: Arc::new(AtomicUsize::new(0)),
            threads: 0,
            stack_bytes,
        }
    }

    /// Threads the pool has made (none ends while the pool lives, unless a job panics: the
    /// check jobs catch their own).
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `job` on an idle thread, or on a new one if none is idle; `Err` if no thread
    /// could be made (the job is dropped unrun).
    pub(crate) fn run(&mut self, job: Job) -> io::Result<()> {
        let claimed = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !claimed {
            self.spawn()?;
        }
        // The receiver lives as long as the pool: the send cannot fail.
        let _ = self.jobs.send(job);
        Ok(())
    }

    /// A thread that takes jobs until the pool is dropped; it is born claimed, by the job
    /// about to be sent.
    fn spawn(&mut self) -> io::Result<()> {
        let (queue, idle) = (self.queue.clone(), self.idle.clone());
        std::thread::Builder::new()
            .name(format!("check {}", self.threads))
            .stack_size(self.stack_bytes)
            .spawn(move || {
                loop {
                    let job = match queue.lock() {
                        Ok(queue) => queue.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    let finish = job();
                    idle.fetch_add(1, Ordering::AcqRel);
                    finish();
                }
            })?;
        self.threads += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_job_never_waits_behind_a_running_one_and_threads_are_reused() {
        let mut pool = Pool::new(256 * 1024);
        // Three jobs that all wait for each other: they finish only if all run at once.
        let barrier = Arc::new(Barrier::new(4));
        let (done_tx, done_rx) = mpsc::channel();
        for _ in 0..3 {
            let (barrier, done) = (barrier.clone(), done_tx.clone());
            pool.run(Box::new(move || {
                barrier.wait();
                let id = std::thread::current().id();
                Box::new(move || {
                    let _ = done.send(id);
                })
            }))
            .unwrap();
        }
        barrier.wait();
        let first: Vec<_> = (0..3)
            .map(|_| done_rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(pool.threads(), 3);
        // Each thread counted itself idle before its job's last step said it was done: a job
        // started on hearing that finds it, however fast it comes, and no thread is made.
        for round in 0..100 {
            let done = done_tx.clone();
            pool.run(Box::new(move || {
                let id = std::thread::current().id();
                Box::new(move || {
                    let _ = done.send(id);
                })
            }))
            .unwrap();
            let id = done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert!(first.contains(&id), "round {round} ran on a new thread");
        }
        assert_eq!(pool.threads(), 3, "no thread made after the first three");
    }
}
