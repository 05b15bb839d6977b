//! The one binary daemon frame: `pty.output` with its bytes as they are (PROTOCOL §2, §4.5).
//!
//! A terminal's output is the only frame whose size is its payload, so it skips JSON and
//! base64 (a third larger, and a pass over every byte on both sides):
//!
//! ```text
//! +------+--------+----------------------+---------------------------+
//! | 0x01 | id len | ptyId (id len bytes) | data (1 to 65,536 bytes)  |
//! +------+--------+----------------------+---------------------------+
//! ```
//!
//! A JSON frame starts with `{` (or JSON whitespace), never with [`PTY_OUTPUT_TAG`], so a
//! reader tells the two apart by the first byte. Daemon frames are not signed (§4), and this
//! one is no exception. This module owns the layout; it never decides whose terminal it is.

use super::WireError;

/// The first byte of a binary `pty.output` frame.
pub const PTY_OUTPUT_TAG: u8 = 0x01;

/// The most data one `pty.output` frame carries, in either form.
pub const MAX_PTY_OUTPUT_DATA: usize = 64 * 1024;

/// A binary `pty.output` frame, borrowed from the bytes it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtyOutputFrame<'a> {
    /// The terminal (its run id).
    pub pty_id: &'a str,
    /// The program's output, as it wrote it.
    pub data: &'a [u8],
}

impl<'a> PtyOutputFrame<'a> {
    /// Whether `bytes` are a binary frame rather than JSON text.
    pub fn is_binary(bytes: &[u8]) -> bool {
        bytes.first() == Some(&PTY_OUTPUT_TAG)
    }

    /// The frame's bytes. `None` when it cannot be written: an id that is empty or over 255
    /// bytes, or data that is empty or over [`MAX_PTY_OUTPUT_DATA`].
    pub fn encode(&self) -> Option<Vec<u8>> {
        let id_len = u8::try_from(self.pty_id.len()).ok().filter(|n| *n > 0)?;
        if self.data.is_empty() || self.data.len() > MAX_PTY_OUTPUT_DATA {
            return None;
        }
        let mut bytes = Vec::with_capacity(2 + self.pty_id.len() + self.data.len());
        bytes.push(PTY_OUTPUT_TAG);
        bytes.push(id_len);
        bytes.extend_from_slice(self.pty_id.as_bytes());
        bytes.extend_from_slice(self.data);
        Some(bytes)
    }

    /// Reads a binary frame; anything cut, empty, oversized or not UTF-8 in the id is an
    /// `invalid_frame`.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, WireError> {
        let bad = |why: &str| WireError::InvalidFrame(format!("binary pty.output: {why}"));
        let [tag, id_len, rest @ ..] = bytes else {
            return Err(bad("shorter than its header"));
        };
        if *tag != PTY_OUTPUT_TAG {
            return Err(bad("not a binary frame"));
        }
        let id_len = usize::from(*id_len);
        if id_len == 0 {
            return Err(bad("empty ptyId"));
        }
        let (id, data) = rest
            .split_at_checked(id_len)
            .ok_or_else(|| bad("cut inside its ptyId"))?;
        let pty_id = std::str::from_utf8(id).map_err(|_| bad("ptyId is not UTF-8"))?;
        if data.is_empty() {
            return Err(bad("no data"));
        }
        if data.len() > MAX_PTY_OUTPUT_DATA {
            return Err(bad("more than 65,536 bytes of data"));
        }
        Ok(Self { pty_id, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_and_bad_bytes_are_refused() {
        let frame = PtyOutputFrame {
            pty_id: "ex_1.1",
            data: b"\x1b[1mhi\x00\xff",
        };
        let bytes = frame.encode().unwrap();
        assert_eq!(&bytes[..8], b"\x01\x06ex_1.1");
        assert!(PtyOutputFrame::is_binary(&bytes));
        assert!(!PtyOutputFrame::is_binary(b"{\"type\":\"pty.output\"}"));
        assert_eq!(PtyOutputFrame::decode(&bytes).unwrap(), frame);
        let most = vec![7u8; MAX_PTY_OUTPUT_DATA];
        let big = PtyOutputFrame {
            pty_id: "p",
            data: &most,
        };
        assert_eq!(PtyOutputFrame::decode(&big.encode().unwrap()).unwrap(), big);
        let too_much = vec![7u8; MAX_PTY_OUTPUT_DATA + 1];
        let over = PtyOutputFrame {
            pty_id: "p",
            data: &too_much,
        };
        assert_eq!(over.encode(), None);
        let mut over_bytes = vec![PTY_OUTPUT_TAG, 1, b'p'];
        over_bytes.extend_from_slice(&too_much);
        let long_id = "x".repeat(256);
        for (bad, why) in [
            (&b""[..], "shorter"),
            (&b"\x01"[..], "shorter"),
            (&b"\x02\x01pz"[..], "not a binary"),
            (&b"\x01\x00z"[..], "empty ptyId"),
            (&b"\x01\x05abc"[..], "cut inside"),
            (&b"\x01\x02\xff\xfez"[..], "UTF-8"),
            (&b"\x01\x01p"[..], "no data"),
            (over_bytes.as_slice(), "65,536"),
        ] {
            let e = PtyOutputFrame::decode(bad).unwrap_err();
            assert_eq!(e.code(), "invalid_frame");
            assert!(e.to_string().contains(why), "{e} for {bad:?}");
        }
        for id in ["", long_id.as_str()] {
            let frame = PtyOutputFrame {
                pty_id: id,
                data: b"x",
            };
            assert_eq!(frame.encode(), None);
        }
    }
}
