//! A frame's type, read for logs and traces: `frame_label` names a frame by its `type`
//! member (or `pty.output` for the binary frame) without decoding the rest.
//!
//! This module owns that naming only. It never decides anything about a frame (the frame may
//! be forged, unsigned or malformed and still get a label), so nothing may branch on what it
//! returns: the state machines decode and verify.

use super::PTY_OUTPUT_TAG;

/// The longest label: a peer's `type` is cut to this many bytes (at a character boundary).
pub const MAX_FRAME_LABEL: usize = 64;

/// The frame's `type` as its bytes give it: `pty.output` for a binary frame, the top-level
/// `type` string of a JSON object (cut to [`MAX_FRAME_LABEL`] bytes: the peer chose it), or
/// `unreadable` for anything else (bad JSON, no `type`, a `type` that is not a string).
/// Costs one pass of a JSON parser; call it only where a trace or a log is enabled.
pub fn frame_label(bytes: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "type")]
        kind: String,
    }
    if bytes.first() == Some(&PTY_OUTPUT_TAG) {
        return "pty.output".to_owned();
    }
    match serde_json::from_slice::<Head>(bytes) {
        Ok(mut head) => {
            let mut end = head.kind.len().min(MAX_FRAME_LABEL);
            while !head.kind.is_char_boundary(end) {
                end -= 1;
            }
            head.kind.truncate(end);
            head.kind
        }
        Err(_) => "unreadable".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::frame_label;

    #[test]
    fn labels_json_and_binary_frames_and_refuses_nothing() {
        assert_eq!(
            frame_label(br#"{"runId":"run_1","type":"run.commit","x":{"type":"inner"}}"#),
            "run.commit"
        );
        assert_eq!(frame_label(&[0x01, 1, b'r', b'x']), "pty.output");
        for bad in [
            &b""[..],
            b"{",
            b"[1]",
            br#"{"type":3}"#,
            b"\xff\xfe",
            br#"{"a":1}"#,
        ] {
            assert_eq!(frame_label(bad), "unreadable", "{bad:?}");
        }
        let long = format!(r#"{{"type":"{}"}}"#, "é".repeat(100));
        let label = frame_label(long.as_bytes());
        assert!(label.len() <= super::MAX_FRAME_LABEL && label.starts_with('é'));
    }
}
