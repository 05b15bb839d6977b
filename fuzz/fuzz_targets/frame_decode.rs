//! Arbitrary bytes through the stream codec at arbitrary split points, then every decoded
//! body through every frame reader (JSON, strict JSON, binary `pty.output`, which must write
//! back to the same bytes, and the traces' `frame_label`). Nothing may panic, and the decoder
//! may never hold more than one frame's worth of bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::json::parse_strict;
use outpost_core::wire::{
    DaemonFrame, FrameDecoder, LENGTH_PREFIX_LEN, PtyOutputFrame, frame_label,
};

const MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let mut decoder = FrameDecoder::new(MAX);
    for chunk in stream.chunks(step) {
        let mut input = chunk;
        while !input.is_empty() {
            match decoder.decode(&mut input) {
                Ok(Some(body)) => {
                    assert!(!body.is_empty() && body.len() <= MAX);
                    let _ = DaemonFrame::from_json(&body);
                    if let Ok(frame) = PtyOutputFrame::decode(&body) {
                        assert_eq!(frame.encode().as_deref(), Some(&body[..]));
                    }
                    let _ = parse_strict(&body);
                    let _ = frame_label(&body);
                }
                Ok(None) => {}
                Err(_) => return,
            }
            assert!(decoder.buffered() <= MAX + LENGTH_PREFIX_LEN);
        }
    }
});
