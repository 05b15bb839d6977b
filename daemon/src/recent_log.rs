//! The daemon's most recent log lines, kept in memory so an operator can read them from afar
//! (`control.request` `logs`, when the owner's policy allows it).
//!
//! The binary adds [`RecentLog`] as one more writer of its log (without colours); every
//! line lands in a ring of the last [`KEPT_LINES`], each cut to
//! [`MAX_CONTROL_LINE_BYTES`](outpost_core::wire::MAX_CONTROL_LINE_BYTES). This module only
//! keeps lines: it never decides what is logged or who may read it.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Mutex;

use outpost_core::wire::{MAX_CONTROL_LINES, bounded_line};

/// How many lines are kept: as many as one answer may carry.
pub const KEPT_LINES: usize = MAX_CONTROL_LINES as usize;

struct Ring {
    lines: VecDeque<String>,
    /// Bytes of a line not yet ended by a newline.
    partial: Vec<u8>,
}

static RING: Mutex<Ring> = Mutex::new(Ring {
    lines: VecDeque::new(),
    partial: Vec::new(),
});

/// A log writer that keeps what it is given in the ring (for `tracing_subscriber`'s
/// `with_writer(|| RecentLog)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RecentLog;

impl Write for RecentLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut ring = RING.lock().unwrap_or_else(|e| e.into_inner());
        for &byte in buf {
            if byte == b'\n' {
                let line = String::from_utf8_lossy(&ring.partial).into_owned();
                ring.partial.clear();
                if ring.lines.len() == KEPT_LINES {
                    ring.lines.pop_front();
                }
                ring.lines.push_back(bounded_line(&line));
            } else if ring.partial.len() < 4 * outpost_core::wire::MAX_CONTROL_LINE_BYTES {
                ring.partial.push(byte);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The last `n` lines kept (at most [`KEPT_LINES`]), oldest first.
pub fn last(n: usize) -> Vec<String> {
    let ring = RING.lock().unwrap_or_else(|e| e.into_inner());
    let skip = ring.lines.len().saturating_sub(n);
    ring.lines.iter().skip(skip).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_lines_whole_and_bounded() {
        let mut w = RecentLog;
        for i in 0..KEPT_LINES + 5 {
            writeln!(w, "line {i}").unwrap();
        }
        // A line written in two pieces is one line.
        w.write_all(b"split ").unwrap();
        w.write_all(b"line\n").unwrap();
        let long = "x".repeat(5000);
        writeln!(w, "{long}").unwrap();
        let lines = last(KEPT_LINES + 10);
        assert_eq!(lines.len(), KEPT_LINES);
        assert_eq!(lines[lines.len() - 2], "split line");
        assert!(lines[lines.len() - 1].ends_with('…'));
        assert!(
            lines
                .iter()
                .all(|l| l.len() <= outpost_core::wire::MAX_CONTROL_LINE_BYTES)
        );
        assert_eq!(last(1).len(), 1);
    }
}
