//! A run's output bytes as the text pieces of `run.output` (PROTOCOL §4.2): each stream turned
//! into UTF-8 as it arrives, exactly as the run's result will carry it (invalid bytes become
//! U+FFFD as `String::from_utf8_lossy` makes them), cut into pieces of at most
//! [`MAX_RUN_OUTPUT_TEXT`] bytes, each with its offset in its stream's text.
//!
//! This module owns that conversion and the offsets. It never caps (the capture did) and
//! never decides whether a piece is sent (the daemon's state machine does).

use crate::wire::{MAX_RUN_OUTPUT_TEXT, OutputStream};

/// One `run.output` piece: the next part of one stream's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPiece {
    /// Which stream the text comes from: `stdout` or `stderr`, each with its own offsets.
    pub stream: OutputStream,
    /// Bytes of this stream's text before `text`.
    pub offset: u64,
    /// At most [`MAX_RUN_OUTPUT_TEXT`] bytes, never empty.
    pub text: String,
}

/// Both streams' text so far: the offsets reached, and the bytes of a character cut by a
/// chunk's end, kept for the next chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputText {
    stdout: StreamText,
    stderr: StreamText,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct StreamText {
    offset: u64,
    carry: Vec<u8>,
}

impl OutputText {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The pieces `bytes` completes on `stream` (none while a character is still cut).
    pub fn push(&mut self, stream: OutputStream, bytes: &[u8]) -> Vec<OutputPiece> {
        let state = self.stream_mut(stream);
        let mut all = std::mem::take(&mut state.carry);
        all.extend_from_slice(bytes);
        let mut text = String::with_capacity(all.len());
        let mut chunks = all.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            text.push_str(chunk.valid());
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            // A character the next bytes may complete is held back, not replaced.
            let incomplete = chunks.peek().is_none()
                && std::str::from_utf8(invalid).is_err_and(|e| e.error_len().is_none());
            if incomplete {
                state.carry = invalid.to_vec();
            } else {
                text.push(char::REPLACEMENT_CHARACTER);
            }
        }
        pieces(stream, state, text)
    }

    /// The end of both streams: a character still cut becomes U+FFFD, as the result has it.
    pub fn finish(&mut self) -> Vec<OutputPiece> {
        let mut out = Vec::new();
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let state = self.stream_mut(stream);
            if !state.carry.is_empty() {
                state.carry.clear();
                out.extend(pieces(stream, state, char::REPLACEMENT_CHARACTER.into()));
            }
        }
        out
    }

    fn stream_mut(&mut self, stream: OutputStream) -> &mut StreamText {
        match stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        }
    }
}

/// `text` cut on character boundaries into pieces of at most [`MAX_RUN_OUTPUT_TEXT`] bytes.
fn pieces(stream: OutputStream, state: &mut StreamText, text: String) -> Vec<OutputPiece> {
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let mut end = rest.len().min(MAX_RUN_OUTPUT_TEXT);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, after) = rest.split_at(end);
        out.push(OutputPiece {
            stream,
            offset: state.offset,
            text: piece.to_owned(),
        });
        state.offset += piece.len() as u64;
        rest = after;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(pieces: &[OutputPiece], stream: OutputStream) -> String {
        let mut text = String::new();
        for p in pieces.iter().filter(|p| p.stream == stream) {
            assert_eq!(p.offset, text.len() as u64, "pieces follow each other");
            assert!(!p.text.is_empty() && p.text.len() <= MAX_RUN_OUTPUT_TEXT);
            text.push_str(&p.text);
        }
        text
    }

    #[test]
    fn the_text_is_the_lossy_text_of_all_the_bytes_however_they_were_cut() {
        let bytes: Vec<u8> = [
            "héllo ".as_bytes(),
            &[0xe2, 0x82, 0xac],
            b" bad:",
            &[0xff, 0xe2, 0x41],
            " end ☃".as_bytes(),
            &[0xf0, 0x9f],
        ]
        .concat();
        let whole = String::from_utf8_lossy(&bytes).into_owned();
        for cut in 1..6 {
            let mut text = OutputText::new();
            let mut pieces = Vec::new();
            for chunk in bytes.chunks(cut) {
                pieces.extend(text.push(OutputStream::Stdout, chunk));
            }
            pieces.extend(text.finish());
            assert_eq!(
                joined(&pieces, OutputStream::Stdout),
                whole,
                "cut every {cut}"
            );
        }
    }

    #[test]
    fn long_text_is_cut_on_character_boundaries_and_streams_keep_their_own_offsets() {
        let mut text = OutputText::new();
        let big = "é".repeat(MAX_RUN_OUTPUT_TEXT);
        let pieces = text.push(OutputStream::Stderr, big.as_bytes());
        assert_eq!(pieces.len(), 2);
        assert_eq!(joined(&pieces, OutputStream::Stderr), big);
        let out = text.push(OutputStream::Stdout, b"x");
        assert_eq!(out[0].offset, 0, "stdout counts from its own start");
        let err = text.push(OutputStream::Stderr, b"y");
        assert_eq!(err[0].offset, big.len() as u64);
        assert!(text.push(OutputStream::Stdout, b"").is_empty());
        assert!(text.finish().is_empty());
    }
}
