//! The engine's epoch clock: one thread that advances wasmtime's epoch every tick while a
//! module runs, so a store's epoch deadline (a timeout, a cancel, an abandoned run) is
//! checked, and that sleeps on a condition variable — no wake-ups at all — while none does.
//!
//! This module owns that thread and the count of running stores. It never decides whether a
//! store stops: the store's epoch callback does.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use wasmtime::Engine;

#[derive(Default)]
struct State {
    /// Stores executing now (each holds a [`Ticking`]).
    running: usize,
    /// The executor is gone: the thread ends.
    stop: bool,
    /// Epochs advanced so far.
    ticks: u64,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The epoch thread of one engine. Stopped when dropped.
pub(crate) struct EpochTicker {
    shared: Arc<Shared>,
}

/// Held while a store executes: the epoch advances as long as one is held.
pub(crate) struct Ticking {
    shared: Arc<Shared>,
}

impl EpochTicker {
    /// Starts the thread that advances `engine`'s epoch every `tick` while a [`Ticking`] is
    /// held. Without that thread no deadline could stop a module: an error then.
    pub(crate) fn start(engine: Engine, tick: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let ticker = shared.clone();
        std::thread::Builder::new()
            .name("outpost-wasm-epoch".into())
            .spawn(move || {
                loop {
                    let mut state = ticker.lock();
                    while state.running == 0 && !state.stop {
                        state = ticker.wake.wait(state).unwrap_or_else(|p| p.into_inner());
                    }
                    if state.stop {
                        return;
                    }
                    drop(state);
                    std::thread::sleep(tick);
                    engine.increment_epoch();
                    ticker.lock().ticks += 1;
                }
            })?;
        Ok(Self { shared })
    }

    /// Keeps the epoch advancing until the returned guard is dropped.
    pub(crate) fn hold(&self) -> Ticking {
        self.shared.lock().running += 1;
        self.shared.wake.notify_one();
        Ticking {
            shared: self.shared.clone(),
        }
    }

    /// How many epochs it advanced so far.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.shared.lock().ticks
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.running = state.running.saturating_sub(1);
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_advances_while_a_store_holds_the_clock_and_never_else() {
        let engine = Engine::new(wasmtime::Config::new().epoch_interruption(true)).unwrap();
        let ticker = EpochTicker::start(engine, Duration::from_millis(1)).unwrap();
        let quiet = Duration::from_millis(50);
        std::thread::sleep(quiet);
        assert_eq!(ticker.ticks(), 0, "no store runs: the clock sleeps");
        let (a, b) = (ticker.hold(), ticker.hold());
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while ticker.ticks() < 5 {
            assert!(
                std::time::Instant::now() < until,
                "the clock advances while held"
            );
            std::thread::yield_now();
        }
        drop(a);
        let with_one = ticker.ticks();
        while ticker.ticks() < with_one + 5 {
            assert!(
                std::time::Instant::now() < until,
                "one holder keeps it advancing"
            );
            std::thread::yield_now();
        }
        drop(b);
        // A tick already asleep may still land; then nothing more.
        let released = ticker.ticks();
        std::thread::sleep(quiet);
        assert!(
            ticker.ticks() <= released + 1,
            "released: the clock sleeps again"
        );
    }
}
