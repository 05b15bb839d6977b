//! Output caps: every executor keeps at most `output_max_bytes` per stream and says when it
//! cut.

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
}
