//! Output caps: every executor keeps at most `output_max_bytes` per stream and says when it
//! cut, and hands out what it kept as it arrives.

use super::{OutputChunk, Stream, WaitWaker};

/// Appended to a stream that was cut at its cap.
pub const TRUNCATION_MARKER: &str = "\n[outpost: output truncated]\n";

/// A byte buffer that keeps at most `cap` bytes and remembers whether it dropped any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CappedBuffer {
    cap: usize,
    bytes: Vec<u8>,
    truncated: bool,
}

impl CappedBuffer {
    /// An empty buffer keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            bytes: Vec::new(),
            truncated: false,
        }
    }

    /// Appends what fits; returns the part that was kept (for streaming it on).
    pub fn push<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let room = self.cap.saturating_sub(self.bytes.len());
        let kept = &chunk[..chunk.len().min(room)];
        if kept.len() < chunk.len() {
            self.truncated = true;
        }
        self.bytes.extend_from_slice(kept);
        kept
    }

    /// Whether anything was dropped.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes, with [`TRUNCATION_MARKER`] appended if anything was dropped.
    pub fn finish(self) -> Vec<u8> {
        let mut bytes = self.bytes;
        if self.truncated {
            bytes.extend_from_slice(TRUNCATION_MARKER.as_bytes());
        }
        bytes
    }
}

/// A run's two output streams, capped, with the chunks not yet handed out: what an executor's
/// readers push into and [`super::RunHandle::read_output`] drains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedOutput {
    stdout: CappedBuffer,
    stderr: CappedBuffer,
    fresh: Vec<OutputChunk>,
    notify: Notify,
}

/// Called when a push kept something (see [`CapturedOutput::notify_with`]).
#[derive(Clone, Default)]
struct Notify(Option<WaitWaker>);

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Notify(set)"
        } else {
            "Notify(none)"
        })
    }
}

/// Two captures are equal by what they hold; who is told of new output does not count.
impl PartialEq for Notify {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Notify {}

/// What a finished capture gives: both streams, each with [`TRUNCATION_MARKER`] appended if
/// it was cut, and whether either was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishedOutput {
    /// Captured standard output, capped.
    pub stdout: Vec<u8>,
    /// Captured standard error, capped.
    pub stderr: Vec<u8>,
    /// Whether either stream was cut.
    pub truncated: bool,
}

impl CapturedOutput {
    /// Nothing captured yet; each stream keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            stdout: CappedBuffer::new(cap),
            stderr: CappedBuffer::new(cap),
            fresh: Vec::new(),
            notify: Notify::default(),
        }
    }

    /// From now on, `waker` is called after every push that kept something, so whoever
    /// streams the output can sleep until there is some (a run's waiter, woken by it).
    pub fn notify_with(&mut self, waker: WaitWaker) {
        self.notify = Notify(Some(waker));
    }

    /// Keeps what fits of `bytes` on `stream`, and queues that part to be handed out.
    pub fn push(&mut self, stream: Stream, bytes: &[u8]) {
        let buffer = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        let kept = buffer.push(bytes);
        if !kept.is_empty() {
            self.fresh.push(OutputChunk {
                stream,
                bytes: kept.to_vec(),
            });
            if let Some(wake) = &self.notify.0 {
                wake();
            }
        }
    }

    /// The chunks kept since the last call.
    pub fn take_fresh(&mut self) -> Vec<OutputChunk> {
        std::mem::take(&mut self.fresh)
    }

    /// Takes both streams for the outcome, leaving the fresh chunks to be read; later pushes
    /// are dropped.
    pub fn finish_output(&mut self) -> FinishedOutput {
        let stdout = std::mem::replace(&mut self.stdout, CappedBuffer::new(0));
        let stderr = std::mem::replace(&mut self.stderr, CappedBuffer::new(0));
        let truncated = stdout.truncated() || stderr.truncated();
        FinishedOutput {
            stdout: stdout.finish(),
            stderr: stderr.finish(),
            truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_cap_and_marks_the_cut() {
        let mut b = CappedBuffer::new(5);
        assert_eq!(b.push(b"abc"), b"abc");
        assert_eq!(b.push(b"defg"), b"de");
        assert_eq!(b.push(b"h"), b"");
        assert!(b.truncated());
        assert_eq!(
            b.finish(),
            [b"abcde".as_slice(), TRUNCATION_MARKER.as_bytes()].concat()
        );
        let mut exact = CappedBuffer::new(3);
        exact.push(b"abc");
        assert!(!exact.truncated());
        assert_eq!(exact.finish(), b"abc");
    }

    #[test]
    fn a_capture_hands_out_what_it_kept_and_finishes_both_streams() {
        let mut c = CapturedOutput::new(4);
        c.push(Stream::Stdout, b"abc");
        c.push(Stream::Stderr, b"e");
        c.push(Stream::Stdout, b"defg");
        let fresh = c.take_fresh();
        assert_eq!(fresh.len(), 3);
        assert_eq!(
            (fresh[2].stream, fresh[2].bytes.as_slice()),
            (Stream::Stdout, &b"d"[..])
        );
        assert!(c.take_fresh().is_empty());
        let finished = c.finish_output();
        assert_eq!(
            finished.stdout,
            [b"abcd".as_slice(), TRUNCATION_MARKER.as_bytes()].concat()
        );
        assert_eq!(finished.stderr, b"e");
        assert!(finished.truncated);
        let mut small = CapturedOutput::new(2);
        small.push(Stream::Stderr, b"xyz");
        let FinishedOutput {
            stdout,
            stderr,
            truncated,
        } = small.finish_output();
        assert_eq!(
            (stdout.as_slice(), truncated),
            (&b""[..], true),
            "a cut stderr marks the whole output truncated"
        );
        assert_eq!(
            stderr,
            [b"xy".as_slice(), TRUNCATION_MARKER.as_bytes()].concat()
        );
    }
}
