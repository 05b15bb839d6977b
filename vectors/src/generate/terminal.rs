//! `terminal.json`: the binary `pty.output` frame and a viewer's text messages, as the server
//! reads them (PROTOCOL §4.5, §11.5).

use outpost_core::terminal::ViewerControl;
use outpost_core::wire::{MAX_PTY_OUTPUT_DATA, PtyOutputFrame};

use super::raw;
use crate::model::{TerminalCase, VectorFile};

/// The code a viewer's refused text message carries.
pub const INVALID_MESSAGE: &str = "invalid_message";

fn blank(name: &str, form: &str, input: &[u8]) -> TerminalCase {
    TerminalCase {
        name: name.into(),
        form: form.into(),
        valid: false,
        error: None,
        input: None,
        input_hex: hex::encode(input),
        pty_id: None,
        data_hex: None,
        cols: None,
        rows: None,
        close: None,
    }
}

fn pty_output(name: &str, input: &[u8]) -> TerminalCase {
    let mut case = blank(name, "pty_output", input);
    match PtyOutputFrame::decode(input) {
        Ok(frame) => {
            case.valid = true;
            case.pty_id = Some(frame.pty_id.to_owned());
            case.data_hex = Some(hex::encode(frame.data));
        }
        Err(e) => case.error = Some(e.code().to_owned()),
    }
    case
}

fn frame(pty_id: &str, data: &[u8]) -> Vec<u8> {
    PtyOutputFrame { pty_id, data }
        .encode()
        .expect("the vectors' frames are writable")
}

fn viewer_control(name: &str, text: &str) -> TerminalCase {
    let mut case = blank(name, "viewer_control", text.as_bytes());
    case.input = raw(text.as_bytes());
    match ViewerControl::from_text(text) {
        Ok(ViewerControl::Resize { cols, rows }) => {
            case.valid = true;
            case.cols = Some(cols);
            case.rows = Some(rows);
        }
        Ok(ViewerControl::Close) => {
            case.valid = true;
            case.close = Some(true);
        }
        Err(_) => case.error = Some(INVALID_MESSAGE.to_owned()),
    }
    case
}

pub(super) fn file() -> VectorFile<TerminalCase> {
    let long_id = "t".repeat(255);
    // The data limit from both sides: 128 KiB of hex each, the price of pinning the boundary.
    let most_data = vec![b'x'; MAX_PTY_OUTPUT_DATA];
    let mut too_much_data = frame("ex_1.1", &most_data);
    too_much_data.push(b'x');
    let cases = vec![
        pty_output("text_and_crlf", &frame("ex_1.1", b"hi\r\n")),
        pty_output(
            "escape_sequences_and_invalid_utf8",
            &frame("ex_1.1", b"\x1b[1;31mred\x1b[0m \xff\xfe\x00"),
        ),
        pty_output("longest_pty_id", &frame(&long_id, b"x")),
        pty_output("header_only", b"\x01"),
        pty_output("empty_pty_id", b"\x01\x00data"),
        pty_output("cut_inside_pty_id", b"\x01\x09ex_1"),
        pty_output("no_data", b"\x01\x06ex_1.1"),
        pty_output("pty_id_not_utf8", b"\x01\x02\xc3\x28data"),
        pty_output("most_data", &frame("ex_1.1", &most_data)),
        pty_output("one_byte_too_much_data", &too_much_data),
        viewer_control("resize", r#"{"type":"resize","cols":120,"rows":40}"#),
        viewer_control(
            "resize_members_in_any_order",
            r#"{"rows":1,"cols":1,"type":"resize"}"#,
        ),
        viewer_control("close", r#"{"type":"close"}"#),
        viewer_control("resize_without_rows", r#"{"type":"resize","cols":80}"#),
        viewer_control(
            "resize_too_large",
            r#"{"type":"resize","cols":65536,"rows":24}"#,
        ),
        viewer_control("unknown_member", r#"{"type":"close","now":true}"#),
        viewer_control("unknown_type", r#"{"type":"input","data":"ls"}"#),
        viewer_control("not_json", "ls -la"),
    ];
    VectorFile {
        kind: "terminal".into(),
        description: "What a server reads on a terminal's two sockets. `form: pty_output`: the \
            daemon's binary `pty.output` frame (0x01, one byte of ptyId length, the ptyId, 1 to \
            65,536 bytes of data); a valid case reads as `pty_id` and exactly `data_hex`, and \
            writing them back gives `input_hex`; an invalid one is refused with `error`. \
            `form: viewer_control`: a viewer's text message (`input`, exactly `input_hex`); a \
            valid case is a resize to `cols` × `rows` or a `close`; anything else is answered \
            with an error message carrying `invalid_message`, and the connection stays open."
            .into(),
        cases,
    }
}
