//! The daemon's side of terminal runs: for each run whose executor handed over a terminal, a
//! reader thread that reads the terminal only as far as the server's credit allows and sends
//! what it read to the driver ([`Event::TerminalOutput`]), and a writer thread that types
//! the relay's keystrokes and applies its sizes, so a program that does not read its input
//! never blocks the driver.
//!
//! The window starts at [`PTY_WINDOW`] bytes per terminal and again on every new connection
//! (what was in flight on a dropped one is gone); `pty.credit` adds to it. What the reader
//! reads waits in the terminal's [`Pending`] bytes until the driver takes them: the reader
//! tells the driver once, and everything it reads before the driver comes goes out together
//! (in `pty.output` frames of up to 64 KiB), so a busy driver sends fewer, larger frames
//! while a lone keystroke's echo still goes at once. The window bounds what waits. This
//! module owns the threads, the windows and the pending bytes; it never decides whether a
//! terminal may run.

use std::collections::HashMap;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use outpost_core::executor::{Terminal, TerminalInput, TerminalOutput, TerminalSize};
use outpost_core::ids::RunId;
use outpost_core::wire::PTY_WINDOW;

use super::Event;

/// The most one read of the terminal asks for.
const CHUNK: usize = 16 * 1024;

/// How long a finished terminal's reader may take to send what is left.
const FINISH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What the writer thread does.
enum Keys {
    Input(Vec<u8>),
    Resize(TerminalSize),
}

/// How much output the server has room for.
#[derive(Default)]
struct Window {
    state: Mutex<(u64, bool)>,
    changed: Condvar,
}

impl Window {
    fn new() -> Self {
        Self {
            state: Mutex::new((PTY_WINDOW, false)),
            changed: Condvar::new(),
        }
    }

    /// Waits for room; the room there is (at most `max`), or `None` once closed.
    fn wait(&self, max: usize) -> Option<usize> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if state.1 {
                return None;
            }
            if state.0 > 0 {
                return Some(usize::try_from(state.0).unwrap_or(max).min(max));
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn spend(&self, n: usize) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(n as u64);
    }

    fn add(&self, n: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_add(n).min(PTY_WINDOW.saturating_mul(4));
        self.changed.notify_all();
    }

    fn reset(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.max(PTY_WINDOW);
        self.changed.notify_all();
    }

    fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.1 = true;
        self.changed.notify_all();
    }
}

/// Output read from a terminal and not yet taken by the driver.
#[derive(Default)]
pub(crate) struct Pending {
    /// The bytes, and whether the driver has been told of them.
    state: Mutex<(Vec<u8>, bool)>,
}

impl Pending {
    /// Adds `bytes`; whether the driver must now be told (it has not been since it last took).
    fn push(&self, bytes: &[u8]) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0.extend_from_slice(bytes);
        !std::mem::replace(&mut state.1, true)
    }

    /// Takes every byte waiting (the driver, told by an [`Event::TerminalOutput`]).
    pub(crate) fn take(&self) -> Vec<u8> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.1 = false;
        std::mem::take(&mut state.0)
    }
}

struct Entry {
    keys: Sender<Keys>,
    window: Arc<Window>,
}

/// Every live terminal of this daemon, shared between the driver and the runs' threads.
#[derive(Clone, Default)]
pub(crate) struct Terminals {
    live: Arc<Mutex<HashMap<RunId, Entry>>>,
}

/// One terminal's threads, held by its run's thread.
pub(crate) struct Attached {
    run_id: RunId,
    reader: Option<JoinHandle<()>>,
    /// Disconnects when the reader thread ends.
    read_all: mpsc::Receiver<()>,
    window: Arc<Window>,
    terminals: Terminals,
}

/// A terminal run's place in the table from the moment it is started, so keystrokes and
/// credit that arrive before its program is up wait for it instead of being lost.
pub(crate) struct Reserved {
    run_id: RunId,
    queue: Option<mpsc::Receiver<Keys>>,
    window: Arc<Window>,
    terminals: Terminals,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        // Never attached (the launch failed): forget it.
        if self.queue.is_some() {
            self.terminals.lock().remove(&self.run_id);
        }
    }
}

impl Terminals {
    /// Makes room for the terminal of `run_id`, which is about to be launched.
    pub(crate) fn reserve(&self, run_id: &RunId) -> Reserved {
        let window = Arc::new(Window::new());
        let (keys, queue) = mpsc::channel();
        self.lock().insert(
            run_id.clone(),
            Entry {
                keys,
                window: window.clone(),
            },
        );
        Reserved {
            run_id: run_id.clone(),
            queue: Some(queue),
            window,
            terminals: self.clone(),
        }
    }

    /// Starts relaying `terminal`: what was typed before it was up is typed now.
    pub(crate) fn attach(
        &self,
        mut reserved: Reserved,
        terminal: Terminal,
        events: Sender<Event>,
    ) -> std::io::Result<Attached> {
        let run_id = reserved.run_id.clone();
        let window = reserved.window.clone();
        let queue = reserved.queue.take().unwrap_or_else(|| mpsc::channel().1);
        let Terminal { input, output } = terminal;
        std::thread::Builder::new()
            .name(format!("pty-keys-{run_id}"))
            .spawn(move || type_keys(input, queue))?;
        let (done, read_all) = mpsc::channel::<()>();
        let reader = {
            let window = window.clone();
            let run_id = run_id.clone();
            std::thread::Builder::new()
                .name(format!("pty-read-{run_id}"))
                .spawn(move || {
                    read_output(output, &window, &run_id, &events);
                    drop(done);
                })?
        };
        Ok(Attached {
            run_id,
            reader: Some(reader),
            read_all,
            window,
            terminals: self.clone(),
        })
    }

    /// The table of live terminals, by run id (taken even if a thread panicked holding it).
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Entry>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Types `bytes` into the terminal of `run_id`; a terminal this daemon does not hold is
    /// ignored (it ended).
    pub(crate) fn input(&self, run_id: &RunId, bytes: Vec<u8>) {
        if let Some(e) = self.lock().get(run_id) {
            let _ = e.keys.send(Keys::Input(bytes));
        }
    }

    /// Resizes the terminal of `run_id`.
    pub(crate) fn resize(&self, run_id: &RunId, cols: u16, rows: u16) {
        if let Some(e) = self.lock().get(run_id) {
            let _ = e.keys.send(Keys::Resize(TerminalSize::clamped(cols, rows)));
        }
    }

    /// Gives the terminal of `run_id` room for `bytes` more.
    pub(crate) fn credit(&self, run_id: &RunId, bytes: u64) {
        if let Some(e) = self.lock().get(run_id) {
            e.window.add(bytes);
        }
    }

    /// A new connection: every terminal starts with a full window again.
    pub(crate) fn reset_windows(&self) {
        for e in self.lock().values() {
            e.window.reset();
        }
    }
}

impl Attached {
    /// Waits until the reader has read the terminal to its end (the executor closes it once
    /// the program and everything holding it ended), so every byte is sent before
    /// `pty.exit` — at most [`FINISH_LIMIT`]: a reader still waiting for credit then (no
    /// connection, say) stops, and what it did not read is dropped with the terminal.
    pub(crate) fn finish(mut self) {
        let _ = self.read_all.recv_timeout(FINISH_LIMIT);
        self.window.close();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        // The writer thread ends when its queue's sender goes.
        self.terminals.lock().remove(&self.run_id);
        self.window.close();
    }
}

fn type_keys(mut input: Box<dyn TerminalInput>, queue: mpsc::Receiver<Keys>) {
    while let Ok(keys) = queue.recv() {
        let done = match keys {
            Keys::Input(bytes) => {
                let typed = input.write_input(&bytes);
                tracing::trace!(target: "outpost::timeline", stage = "pty.typed");
                typed
            }
            Keys::Resize(size) => input.resize(size),
        };
        if let Err(e) = done {
            tracing::debug!("a terminal refused keys: {e}");
        }
    }
}

fn read_output(
    mut output: Box<dyn TerminalOutput>,
    window: &Window,
    run_id: &RunId,
    events: &Sender<Event>,
) {
    let mut buf = vec![0u8; CHUNK];
    let pending = Arc::new(Pending::default());
    while let Some(room) = window.wait(CHUNK) {
        match output.read_output(&mut buf[..room]) {
            Ok(0) => return,
            Ok(n) => {
                tracing::trace!(target: "outpost::timeline", stage = "pty.read");
                window.spend(n);
                if pending.push(&buf[..n]) {
                    let event = Event::TerminalOutput {
                        run_id: run_id.clone(),
                        pending: pending.clone(),
                    };
                    if events.send(event).is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::debug!(run = %run_id, "reading a terminal failed: {e}");
                return;
            }
        }
    }
}
