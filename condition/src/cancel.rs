//! The cancel flag shared between the daemon, a running check and its host calls.
//!
//! Owns [`Cancel`]: a cloneable, one-way flag that wakes whoever waits on it. It must never
//! be reset: once set, a clone stays cancelled for good.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A one-way cancel flag; clones share it.
///
/// The daemon passes one to [`check`](crate::check) and sets it (from any thread) to stop the
/// check: the program is interrupted, every host call in flight is cancelled, and `check`
/// returns [`CheckError::Cancelled`](crate::CheckError::Cancelled) only after the check has
/// stopped, its host calls included. Hosts get a per-check `Cancel` in every call and must
/// return promptly once it is set ([`Cancel::wait_timeout`] is there to block on it).
#[derive(Clone, Default)]
pub struct Cancel {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    watchers: Mutex<Watchers>,
    woken: Condvar,
}

#[derive(Default)]
struct Watchers {
    next_id: u64,
    list: Vec<(u64, Box<dyn FnOnce() + Send>)>,
}

impl Cancel {
    /// A flag that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the flag (idempotent) and wakes everything waiting on it. Returns at once; the
    /// `check` it was given returns once the check has stopped.
    pub fn cancel(&self) {
        if self.inner.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        let watchers = {
            let mut guard = self.lock();
            self.inner.woken.notify_all();
            std::mem::take(&mut guard.list)
        };
        for (_, watcher) in watchers {
            watcher();
        }
    }

    /// Whether the flag is set.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Blocks until the flag is set or `timeout` passed; returns whether it is set.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let until = Instant::now().checked_add(timeout);
        let mut guard = self.lock();
        while !self.is_cancelled() {
            let left = match until {
                Some(until) => match until.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => break,
                },
                None => Duration::from_secs(3600),
            };
            guard = self
                .inner
                .woken
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        self.is_cancelled()
    }

    /// Blocks until the flag is set.
    pub fn wait(&self) {
        while !self.wait_timeout(Duration::from_secs(3600)) {}
    }

    /// Runs `f` once when the flag is set (at once if it already is), unless the returned
    /// guard was dropped first.
    pub(crate) fn on_cancel(&self, f: impl FnOnce() + Send + 'static) -> Watch {
        let mut guard = self.lock();
        if self.is_cancelled() {
            drop(guard);
            f();
            return Watch {
                cancel: None,
                id: 0,
            };
        }
        let id = guard.next_id;
        guard.next_id += 1;
        guard.list.push((id, Box::new(f)));
        Watch {
            cancel: Some(self.clone()),
            id,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Watchers> {
        self.inner
            .watchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Cancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Unregisters an [`Cancel::on_cancel`] callback when dropped.
pub(crate) struct Watch {
    cancel: Option<Cancel>,
    id: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(cancel) = &self.cancel {
            cancel.lock().list.retain(|(id, _)| *id != self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn cancel_runs_watchers_once_and_wakes_waiters() {
        let cancel = Cancel::new();
        let (tx, rx) = mpsc::channel();
        let _watch = cancel.on_cancel(move || tx.send(()).unwrap_or(()));
        let waiter = {
            let cancel = cancel.clone();
            std::thread::spawn(move || cancel.wait_timeout(Duration::from_secs(60)))
        };
        cancel.cancel();
        cancel.cancel();
        assert!(waiter.join().unwrap());
        assert_eq!(rx.try_iter().count(), 1);
        assert!(cancel.is_cancelled());
    }

    #[test]
    fn a_dropped_watch_is_not_run_and_a_late_one_runs_at_once() {
        let cancel = Cancel::new();
        let (tx, rx) = mpsc::channel::<&str>();
        let early = tx.clone();
        drop(cancel.on_cancel(move || early.send("dropped").unwrap_or(())));
        cancel.cancel();
        let _late = cancel.on_cancel(move || tx.send("late").unwrap_or(()));
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec!["late"]);
        assert!(!Cancel::new().wait_timeout(Duration::ZERO));
    }
}
