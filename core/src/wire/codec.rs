//! The stream codec: each frame is a 4-byte big-endian length, then that many bytes of
//! UTF-8 JSON.
//!
//! The decoder takes bytes in whatever pieces the transport delivers, returns each frame as
//! soon as its last byte arrives, and refuses a length over its limit as soon as the 4 length
//! bytes are in — before buffering any of the body. A refused stream cannot be resynchronised:
//! after an error the decoder keeps returning it and the connection must be closed.

use super::WireError;

/// The default largest frame body: 1 MiB.
pub const DEFAULT_MAX_FRAME_LEN: usize = 1 << 20;

/// Bytes in the length prefix.
pub const LENGTH_PREFIX_LEN: usize = 4;

/// Appends `payload` to `out` as one length-prefixed frame.
///
/// Refuses an empty payload or one over `max_len`, so a sender cannot produce what its
/// peer must refuse.
pub fn encode_frame(payload: &[u8], max_len: usize, out: &mut Vec<u8>) -> Result<(), WireError> {
    check_len(payload.len(), max_len)?;
    // check_len bounds the length by max_len; a max_len above u32::MAX is refused there too.
    let len = u32::try_from(payload.len()).map_err(|_| WireError::FrameTooLarge {
        len: payload.len() as u64,
        max: max_len as u64,
    })?;
    out.reserve(LENGTH_PREFIX_LEN + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

fn check_len(len: usize, max_len: usize) -> Result<(), WireError> {
    if len == 0 {
        return Err(WireError::EmptyFrame);
    }
    if len > max_len || u32::try_from(len).is_err() {
        return Err(WireError::FrameTooLarge {
            len: len as u64,
            max: max_len as u64,
        });
    }
    Ok(())
}

/// Incremental decoder for length-prefixed frames.
#[derive(Debug)]
pub struct FrameDecoder {
    max_len: usize,
    prefix: [u8; LENGTH_PREFIX_LEN],
    prefix_filled: usize,
    /// The body being collected, once the prefix is known.
    body: Vec<u8>,
    body_len: Option<usize>,
    failed: Option<WireError>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl FrameDecoder {
    /// A decoder that refuses frames longer than `max_len` bytes.
    pub fn new(max_len: usize) -> Self {
        Self {
            max_len,
            prefix: [0; LENGTH_PREFIX_LEN],
            prefix_filled: 0,
            body: Vec::new(),
            body_len: None,
            failed: None,
        }
    }

    /// The largest frame body this decoder accepts.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Bytes held for a frame not yet complete.
    pub fn buffered(&self) -> usize {
        self.prefix_filled + self.body.len()
    }

    /// Consumes bytes from the front of `input` until one frame is complete or `input` is
    /// empty. Returns the frame body, or `None` if more bytes are needed.
    ///
    /// Call it again while `input` is not empty: one call returns at most one frame.
    pub fn decode(&mut self, input: &mut &[u8]) -> Result<Option<Vec<u8>>, WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let body_len = match self.body_len {
            Some(n) => n,
            None => {
                let take = (LENGTH_PREFIX_LEN - self.prefix_filled).min(input.len());
                self.prefix[self.prefix_filled..self.prefix_filled + take]
                    .copy_from_slice(&input[..take]);
                self.prefix_filled += take;
                *input = &input[take..];
                if self.prefix_filled < LENGTH_PREFIX_LEN {
                    return Ok(None);
                }
                let len = u32::from_be_bytes(self.prefix) as usize;
                if let Err(e) = check_len(len, self.max_len) {
                    self.failed = Some(e.clone());
                    return Err(e);
                }
                self.body_len = Some(len);
                // Fast path: the whole body is already here.
                if input.len() >= len {
                    let body = input[..len].to_vec();
                    *input = &input[len..];
                    self.reset();
                    return Ok(Some(body));
                }
                self.body.reserve_exact(len);
                len
            }
        };
        let take = (body_len - self.body.len()).min(input.len());
        self.body.extend_from_slice(&input[..take]);
        *input = &input[take..];
        if self.body.len() < body_len {
            return Ok(None);
        }
        let body = core::mem::take(&mut self.body);
        self.reset();
        Ok(Some(body))
    }

    fn reset(&mut self) {
        self.prefix_filled = 0;
        self.body_len = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frames(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            encode_frame(p, DEFAULT_MAX_FRAME_LEN, &mut out).unwrap();
        }
        out
    }

    fn decode_all(dec: &mut FrameDecoder, mut input: &[u8]) -> Result<Vec<Vec<u8>>, WireError> {
        let mut out = Vec::new();
        while !input.is_empty() {
            if let Some(f) = dec.decode(&mut input)? {
                out.push(f);
            }
        }
        Ok(out)
    }

    #[test]
    fn refuses_oversized_before_buffering() {
        let mut dec = FrameDecoder::new(16);
        let mut input: &[u8] = &[0, 0, 0, 17, b'x'];
        assert_eq!(
            dec.decode(&mut input),
            Err(WireError::FrameTooLarge { len: 17, max: 16 })
        );
        assert_eq!(dec.buffered(), 4, "nothing of the body was kept");
        // Poisoned: the stream cannot be trusted any more.
        let mut more: &[u8] = &[0, 0, 0, 1, b'x'];
        assert!(dec.decode(&mut more).is_err());
        // A 4 GiB claim is refused on the prefix alone.
        let mut dec = FrameDecoder::default();
        let mut huge: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            dec.decode(&mut huge),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn refuses_empty_frames_both_ways() {
        assert_eq!(
            encode_frame(b"", 10, &mut Vec::new()),
            Err(WireError::EmptyFrame)
        );
        let mut dec = FrameDecoder::default();
        let mut input: &[u8] = &[0, 0, 0, 0];
        assert_eq!(dec.decode(&mut input), Err(WireError::EmptyFrame));
        assert!(matches!(
            encode_frame(b"abc", 2, &mut Vec::new()),
            Err(WireError::FrameTooLarge { len: 3, max: 2 })
        ));
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_frames(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..20),
        ) {
            let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
            let stream = frames(&refs);
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
            points.push(0);
            points.push(stream.len());
            points.sort_unstable();
            let mut dec = FrameDecoder::default();
            let mut got = Vec::new();
            for w in points.windows(2) {
                got.extend(decode_all(&mut dec, &stream[w[0]..w[1]]).unwrap());
            }
            prop_assert_eq!(got, payloads);
            prop_assert_eq!(dec.buffered(), 0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut dec = FrameDecoder::new(32);
            let _ = decode_all(&mut dec, &bytes);
            prop_assert!(dec.buffered() <= 32 + LENGTH_PREFIX_LEN);
        }
    }
}
