//! The terminal's bytes: the reader of the PTY master, the accounting every read goes
//! through (bytes counted, the tail kept for the outcome, the time of the last activity),
//! and the two halves handed to the host.
//!
//! Until the terminal is taken, a drain thread reads the master so the program never blocks
//! on a full terminal; once it is taken, the drain thread parks the reader after its current
//! read and [`PtyOutput`] reads the master itself (no copy through a queue). Bytes read but
//! not yet handed out are given out first, in order. This module never signals a process.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use outpost_core::executor::{ExecError, TerminalInput, TerminalOutput, TerminalSize, WaitWaker};
use portable_pty::MasterPty;

/// What the run, the drain thread and the output half share.
pub(crate) struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

pub(crate) struct State {
    /// The master's reader, handed over by the drain thread once the terminal is taken.
    parked: Option<Box<dyn Read + Send>>,
    /// Whether the host took the terminal.
    taken: bool,
    /// Read and not yet handed out (at most `cap` bytes: the oldest go first).
    pending: VecDeque<u8>,
    /// The master reached end-of-file (nothing holds the terminal any more).
    eof: bool,
    /// Every byte read.
    bytes_read: u64,
    /// The last `cap` bytes read, for the outcome.
    tail: VecDeque<u8>,
    cap: usize,
    /// The last input or output.
    last_activity: Instant,
    /// Called after the drain thread added to `pending` or reached end-of-file, once someone
    /// streams the output ([`Shared::notify_with`]).
    notify: Option<WaitWaker>,
}

impl State {
    fn account(&mut self, bytes: &[u8]) {
        self.bytes_read += bytes.len() as u64;
        keep_last(&mut self.tail, bytes, self.cap);
        self.last_activity = Instant::now();
    }

    /// Every byte read so far.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The time of the last input or output.
    pub(crate) fn last_activity(&self) -> Instant {
        self.last_activity
    }

    /// The tail kept for the outcome.
    pub(crate) fn tail(&self) -> Vec<u8> {
        self.tail.iter().copied().collect()
    }
}

fn keep_last(buffer: &mut VecDeque<u8>, bytes: &[u8], cap: usize) {
    let bytes = &bytes[bytes.len().saturating_sub(cap)..];
    let excess = (buffer.len() + bytes.len()).saturating_sub(cap);
    buffer.drain(..excess);
    buffer.extend(bytes);
}

fn copy_out(pending: &mut VecDeque<u8>, buf: &mut [u8]) -> usize {
    let n = pending.len().min(buf.len());
    for (slot, byte) in buf.iter_mut().zip(pending.drain(..n)) {
        *slot = byte;
    }
    n
}

impl Shared {
    /// Shared state for a terminal whose outcome keeps the last `cap` bytes.
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                parked: None,
                taken: false,
                pending: VecDeque::new(),
                eof: false,
                bytes_read: 0,
                tail: VecDeque::new(),
                cap,
                last_activity: Instant::now(),
                notify: None,
            }),
            changed: Condvar::new(),
        })
    }

    /// The state, even if a reader panicked while holding it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks the terminal taken: from now on output goes only to [`PtyOutput`].
    pub(crate) fn take(&self) {
        self.lock().taken = true;
        self.changed.notify_all();
    }

    /// From now on, `waker` is called whenever the drain thread read output nobody took yet,
    /// and at end-of-file.
    pub(crate) fn notify_with(&self, waker: WaitWaker) {
        self.lock().notify = Some(waker);
    }

    /// What the drain thread read and nobody took yet, while the terminal is not taken.
    pub(crate) fn take_pending(&self) -> Vec<u8> {
        let mut state = self.lock();
        if state.taken {
            return Vec::new();
        }
        state.pending.drain(..).collect()
    }

    /// Waits at most `bound` for the master's end-of-file; whether it came.
    pub(crate) fn wait_eof(&self, bound: Duration) -> bool {
        let until = Instant::now() + bound;
        let mut state = self.lock();
        while !state.eof {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = match self.changed.wait_timeout(state, left) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        true
    }

    fn touch(&self) {
        self.lock().last_activity = Instant::now();
    }

    fn end(&self) {
        self.lock().eof = true;
        self.changed.notify_all();
    }
}

/// Reads the master until the terminal is taken (then parks the reader) or ends.
pub(crate) fn spawn_drain(mut reader: Box<dyn Read + Send>, shared: Arc<Shared>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let read = reader.read(&mut buf);
            let mut state = shared.lock();
            match read {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // EIO once the last holder of the terminal is gone reads as 0 (portable-pty).
                Ok(0) | Err(_) => {
                    state.eof = true;
                    let notify = state.notify.clone();
                    drop(state);
                    shared.changed.notify_all();
                    if let Some(notify) = notify {
                        notify();
                    }
                    return;
                }
                Ok(n) => {
                    state.account(&buf[..n]);
                    let cap = state.cap.max(buf.len());
                    keep_last(&mut state.pending, &buf[..n], cap);
                    if state.taken {
                        state.parked = Some(reader);
                        drop(state);
                        shared.changed.notify_all();
                        return;
                    }
                    // Called with the lock released: the woken reader takes it at once.
                    let notify = state.notify.clone();
                    drop(state);
                    if let Some(notify) = notify {
                        notify();
                    }
                }
            }
        }
    });
}

/// The terminal's output half.
pub(crate) struct PtyOutput {
    pub(crate) shared: Arc<Shared>,
    pub(crate) reader: Option<Box<dyn Read + Send>>,
    pub(crate) done: bool,
}

impl TerminalOutput for PtyOutput {
    fn read_output(&mut self, buf: &mut [u8]) -> Result<usize, ExecError> {
        if buf.is_empty() || self.done {
            return Ok(0);
        }
        if self.reader.is_none() {
            let mut state = self.shared.lock();
            loop {
                if !state.pending.is_empty() {
                    return Ok(copy_out(&mut state.pending, buf));
                }
                if state.eof {
                    self.done = true;
                    return Ok(0);
                }
                if let Some(reader) = state.parked.take() {
                    self.reader = Some(reader);
                    break;
                }
                state = match self.shared.changed.wait(state) {
                    Ok(state) => state,
                    Err(poisoned) => poisoned.into_inner(),
                };
            }
        }
        let Some(reader) = self.reader.as_mut() else {
            return Ok(0);
        };
        loop {
            match reader.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) => {
                    self.done = true;
                    self.shared.end();
                    return Ok(0);
                }
                Ok(n) => {
                    self.shared.lock().account(&buf[..n]);
                    return Ok(n);
                }
                Err(e) => {
                    self.done = true;
                    self.shared.end();
                    return Err(ExecError::Failed(format!("reading the terminal: {e}")));
                }
            }
        }
    }
}

/// The terminal's input half. The writer is shared with the run, so dropping this half never
/// sends the program an end-of-file.
pub(crate) struct PtyInput {
    pub(crate) shared: Arc<Shared>,
    pub(crate) writer: Arc<Mutex<Box<dyn Write + Send>>>,
    pub(crate) master: Arc<Mutex<Box<dyn MasterPty + Send>>>,
}

impl TerminalInput for PtyInput {
    fn write_input(&mut self, bytes: &[u8]) -> Result<(), ExecError> {
        self.shared.touch();
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| ExecError::Failed("the terminal's writer panicked".into()))?;
        writer
            .write_all(bytes)
            .and_then(|()| writer.flush())
            .map_err(|e| ExecError::Failed(format!("writing to the terminal: {e}")))
    }

    fn resize(&mut self, size: TerminalSize) -> Result<(), ExecError> {
        self.shared.touch();
        let master = self
            .master
            .lock()
            .map_err(|_| ExecError::Failed("the terminal panicked".into()))?;
        master
            .resize(crate::pty_size(size))
            .map_err(|e| ExecError::Failed(format!("resizing the terminal: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let mut tail = VecDeque::new();
        keep_last(&mut tail, b"abc", 4);
        keep_last(&mut tail, b"def", 4);
        assert_eq!(tail.iter().copied().collect::<Vec<_>>(), b"cdef");
        keep_last(&mut tail, b"0123456789", 4);
        assert_eq!(tail.iter().copied().collect::<Vec<_>>(), b"6789");
        let mut out = [0u8; 3];
        assert_eq!(copy_out(&mut tail, &mut out), 3);
        assert_eq!(&out, b"678");
        assert_eq!(tail.len(), 1);
    }
}
