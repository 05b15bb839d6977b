//! What a relay says: messages to viewers (with their JSON text form), messages to the runner,
//! reasons and audit events.

use crate::ids::TerminalId;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::executor::TerminalSize;
use crate::time::UnixTime;

/// The host's id for one viewer connection (one WebSocket), unique within a relay.
pub type ViewerId = u64;

/// WebSocket close codes a relay asks the host to close a viewer with.
pub mod viewer_close {
    /// Normal close: the program exited, or this viewer closed the terminal.
    pub const NORMAL: u16 = 1000;
    /// The viewer fell too far behind and was dropped.
    pub const SLOW_VIEWER: u16 = 4002;
    /// The terminal ended (closed by an operator, idle, revoked, lost).
    pub const TERMINAL_ENDED: u16 = 4003;
}

/// What a viewer may do (`operator` or `watcher` in JSON, as `Role::code` spells it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Types, resizes and may close the terminal.
    Operator,
    /// Only watches: its input and resizes are refused with `read_only_viewer`.
    Watcher,
}

impl Role {
    /// `operator` or `watcher`, as on the wire.
    pub fn code(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Watcher => "watcher",
        }
    }
}

/// How a viewer's connection went away, as the host saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// The viewer closed its WebSocket.
    Closed,
    /// The connection was lost without a close (a tab killed, a network gone, pings unanswered).
    Dropped,
}

/// Why a viewer's session or the whole terminal ended: the `reason` of a `closed` message,
/// the `why` of a `terminal.session.ended` audit event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The viewer closed its connection, or an operator closed the terminal.
    Closed,
    /// The viewer's connection was lost without a close.
    Dropped,
    /// The viewer fell more than its queue limit behind.
    SlowViewer,
    /// The terminal's program ended.
    Exited,
    /// The terminal had no viewer for its idle limit.
    Idle,
    /// The machine's access was revoked.
    Revoked,
    /// The runner (the daemon holding the terminal) was lost.
    Lost,
}

impl Reason {
    /// The stable `snake_case` code.
    pub fn code(self) -> &'static str {
        match self {
            Reason::Closed => "closed",
            Reason::Dropped => "dropped",
            Reason::SlowViewer => "slow_viewer",
            Reason::Exited => "exited",
            Reason::Idle => "idle",
            Reason::Revoked => "revoked",
            Reason::Lost => "lost",
        }
    }
}

/// A message for one viewer's WebSocket. [`ViewerMessage::Bytes`] is a binary message, every
/// other one a text message ([`ViewerMessage::to_text`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewerMessage {
    /// The first message: who the viewer is and the terminal's size.
    Ready {
        /// The terminal's id, as the relay was made with: at the server, its execution's id.
        terminal_id: TerminalId,
        /// What the viewer may do.
        role: Role,
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// The next [`ViewerMessage::Bytes`] messages, `bytes` in all, replay recent output;
    /// [`ViewerMessage::Live`] follows them.
    Replay {
        /// How many bytes the replay holds (0: no binary message follows).
        bytes: usize,
    },
    /// Terminal output, untouched (a binary message). Shared between viewers.
    Bytes(Arc<[u8]>),
    /// The replay is over: what follows is live.
    Live,
    /// The terminal's size changed.
    Resized {
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// The program ended; the host closes with 1000 next.
    Exit {
        /// Its exit code, if it has one (not when killed by a signal).
        exit_code: Option<i32>,
    },
    /// The viewer's session ends for `reason`; the host closes next.
    Closed {
        /// Why the session ends, sent as its [`Reason::code`] (`slow_viewer`, `idle`, `revoked`,
        /// …).
        reason: Reason,
    },
    /// Something the viewer sent was refused; the connection stays open.
    Error {
        /// The stable code (`read_only_viewer`, `invalid_message`).
        code: &'static str,
        /// For people.
        message: String,
    },
}

impl ViewerMessage {
    /// The JSON text of a text message, `type` first; `None` for [`ViewerMessage::Bytes`].
    pub fn to_text(&self) -> Option<String> {
        let mut s = String::new();
        match self {
            ViewerMessage::Bytes(_) => return None,
            ViewerMessage::Ready {
                terminal_id,
                role,
                cols,
                rows,
            } => {
                s.push_str("{\"type\":\"ready\",\"terminalId\":");
                push_json_string(&mut s, terminal_id);
                let _ = write!(
                    s,
                    ",\"role\":\"{}\",\"cols\":{cols},\"rows\":{rows}}}",
                    role.code()
                );
            }
            ViewerMessage::Replay { bytes } => {
                let _ = write!(s, "{{\"type\":\"replay\",\"bytes\":{bytes}}}");
            }
            ViewerMessage::Live => s.push_str("{\"type\":\"live\"}"),
            ViewerMessage::Resized { cols, rows } => {
                let _ = write!(
                    s,
                    "{{\"type\":\"resized\",\"cols\":{cols},\"rows\":{rows}}}"
                );
            }
            ViewerMessage::Exit { exit_code } => match exit_code {
                Some(code) => {
                    let _ = write!(s, "{{\"type\":\"exit\",\"exitCode\":{code}}}");
                }
                None => s.push_str("{\"type\":\"exit\",\"exitCode\":null}"),
            },
            ViewerMessage::Closed { reason } => {
                let _ = write!(
                    s,
                    "{{\"type\":\"closed\",\"reason\":\"{}\"}}",
                    reason.code()
                );
            }
            ViewerMessage::Error { code, message } => {
                s.push_str("{\"type\":\"error\",\"code\":");
                push_json_string(&mut s, code);
                s.push_str(",\"message\":");
                push_json_string(&mut s, message);
                s.push('}');
            }
        }
        Some(s)
    }
}

/// A text message as a viewer reads it: what [`ViewerMessage::to_text`] writes, decoded with
/// owned fields, leniently so a newer server's codes and message types still read (a code is
/// kept as text, an unknown `type` is [`ViewerText::Other`]). Binary messages are output and
/// never come here.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ViewerText {
    /// [`ViewerMessage::Ready`]: the terminal, the viewer's role and the size.
    #[serde(rename_all = "camelCase")]
    Ready {
        /// The terminal's id.
        terminal_id: TerminalId,
        /// `operator` or `watcher` (or a newer role's code).
        role: String,
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// [`ViewerMessage::Replay`]: this many bytes of replay follow as binary messages.
    Replay {
        /// The replay's length in bytes.
        bytes: usize,
    },
    /// [`ViewerMessage::Live`]: what follows is live output.
    Live,
    /// [`ViewerMessage::Resized`]: the terminal's new size.
    Resized {
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// [`ViewerMessage::Exit`]: the program ended, with this code unless a signal ended it.
    #[serde(rename_all = "camelCase")]
    Exit {
        /// The exit code; `None` when a signal ended the program.
        exit_code: Option<i32>,
    },
    /// [`ViewerMessage::Closed`]: the viewer's session ended; `reason` is a [`Reason::code`].
    Closed {
        /// Why, as its stable code (`slow_viewer`, `idle`, …).
        reason: String,
    },
    /// [`ViewerMessage::Error`]: something the viewer sent was refused.
    Error {
        /// The stable code (`read_only_viewer`, `invalid_message`, …).
        code: String,
        /// For people.
        message: String,
    },
    /// A message type this build does not know (a newer server's); a viewer ignores it.
    #[serde(other)]
    Other,
}

impl ViewerText {
    /// Decodes one text message; `None` when it is not a JSON object with a `type` this
    /// decoder can read (a viewer ignores it, as it ignores [`ViewerText::Other`]).
    pub fn parse(text: &str) -> Option<ViewerText> {
        serde_json::from_str(text).ok()
    }
}

fn push_json_string(out: &mut String, value: &str) {
    // serde_json writes a string with exactly the escapes JSON needs; it cannot fail.
    out.push_str(&serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned()));
}

/// A message for the runner (the daemon holding the terminal), sent as a signed `pty.*` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerMessage {
    /// Keystrokes from an operator (`pty.input`).
    Input(Vec<u8>),
    /// The new size (`pty.resize`).
    Resize(TerminalSize),
    /// End the terminal: kill its process group (`pty.close`).
    Close,
    /// The runner may send this many more output bytes (`pty.credit`).
    Credit(u64),
}

/// An audit event. [`Audit::action`] is the audit log's action name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audit {
    /// A viewer joined (`terminal.session.started`).
    SessionStarted {
        /// The host's id for the viewer's connection, as given when it joined.
        viewer: ViewerId,
        /// Who (the ticket's user).
        user: String,
        /// With what role.
        role: Role,
        /// When it joined: the wall time of the input that joined it.
        at: UnixTime,
    },
    /// A viewer's session ended, however it ended (`terminal.session.ended`).
    SessionEnded {
        /// The host's id for the viewer's connection, as in its `SessionStarted`.
        viewer: ViewerId,
        /// The ticket's user, as in its `SessionStarted`.
        user: String,
        /// With what role.
        role: Role,
        /// When the viewer joined: the `at` of its `SessionStarted`.
        started_at: UnixTime,
        /// When the session ended: the wall time of the input that ended it.
        at: UnixTime,
        /// How it ended: the viewer left ([`Reason::Closed`], [`Reason::Dropped`]), was dropped as
        /// [`Reason::SlowViewer`], or the whole terminal ended.
        why: Reason,
    },
    /// The terminal ended (`terminal.closed`): after every viewer's `SessionEnded`.
    TerminalClosed {
        /// When the terminal ended: the wall time of the input that ended it.
        at: UnixTime,
        /// Why the terminal ended: [`Reason::Exited`], [`Reason::Closed`] by an operator,
        /// [`Reason::Idle`], [`Reason::Revoked`] or [`Reason::Lost`].
        reason: Reason,
        /// The program's exit code, when it exited with one.
        exit_code: Option<i32>,
    },
}

impl Audit {
    /// The action name in the audit log.
    pub fn action(&self) -> &'static str {
        match self {
            Audit::SessionStarted { .. } => "terminal.session.started",
            Audit::SessionEnded { .. } => "terminal.session.ended",
            Audit::TerminalClosed { .. } => "terminal.closed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a viewer should read `msg` as.
    fn read_as_viewer(msg: &ViewerMessage) -> ViewerText {
        match msg {
            ViewerMessage::Ready {
                terminal_id,
                role,
                cols,
                rows,
            } => ViewerText::Ready {
                terminal_id: terminal_id.clone(),
                role: role.code().into(),
                cols: *cols,
                rows: *rows,
            },
            ViewerMessage::Replay { bytes } => ViewerText::Replay { bytes: *bytes },
            ViewerMessage::Bytes(_) => unreachable!("binary messages are not text"),
            ViewerMessage::Live => ViewerText::Live,
            ViewerMessage::Resized { cols, rows } => ViewerText::Resized {
                cols: *cols,
                rows: *rows,
            },
            ViewerMessage::Exit { exit_code } => ViewerText::Exit {
                exit_code: *exit_code,
            },
            ViewerMessage::Closed { reason } => ViewerText::Closed {
                reason: reason.code().into(),
            },
            ViewerMessage::Error { code, message } => ViewerText::Error {
                code: (*code).into(),
                message: message.clone(),
            },
        }
    }

    #[test]
    fn text_messages_are_the_documented_json() {
        let cases = [
            (
                ViewerMessage::Ready {
                    terminal_id: "run_\"1".into(),
                    role: Role::Watcher,
                    cols: 80,
                    rows: 24,
                },
                r#"{"type":"ready","terminalId":"run_\"1","role":"watcher","cols":80,"rows":24}"#,
            ),
            (
                ViewerMessage::Replay { bytes: 12 },
                r#"{"type":"replay","bytes":12}"#,
            ),
            (ViewerMessage::Live, r#"{"type":"live"}"#),
            (
                ViewerMessage::Resized { cols: 1, rows: 2 },
                r#"{"type":"resized","cols":1,"rows":2}"#,
            ),
            (
                ViewerMessage::Exit { exit_code: None },
                r#"{"type":"exit","exitCode":null}"#,
            ),
            (
                ViewerMessage::Exit {
                    exit_code: Some(-1),
                },
                r#"{"type":"exit","exitCode":-1}"#,
            ),
            (
                ViewerMessage::Closed {
                    reason: Reason::SlowViewer,
                },
                r#"{"type":"closed","reason":"slow_viewer"}"#,
            ),
            (
                ViewerMessage::Error {
                    code: "read_only_viewer",
                    message: "watch\nonly".into(),
                },
                r#"{"type":"error","code":"read_only_viewer","message":"watch\nonly"}"#,
            ),
        ];
        for (msg, json) in cases {
            assert_eq!(msg.to_text().as_deref(), Some(json));
            crate::json::parse_strict(json.as_bytes()).expect("strict JSON");
            assert_eq!(
                ViewerText::parse(json),
                Some(read_as_viewer(&msg)),
                "{json}"
            );
        }
        assert_eq!(
            ViewerText::parse(r#"{"type":"closed","reason":"a_newer_reason"}"#),
            Some(ViewerText::Closed {
                reason: "a_newer_reason".into()
            })
        );
        assert_eq!(
            ViewerText::parse(r#"{"type":"a_newer_message","x":1}"#),
            Some(ViewerText::Other)
        );
        assert_eq!(ViewerText::parse("not json"), None);
        assert_eq!(ViewerMessage::Bytes(Arc::from(&b"x"[..])).to_text(), None);
    }
}

/// What a viewer's text message asks (PROTOCOL §11.5): `{"type":"resize","cols":N,"rows":N}`
/// or `{"type":"close"}`. Keystrokes are binary messages and never pass through here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum ViewerControl {
    /// A new size (each side clamped to 1–1000 by the relay).
    Resize {
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// An operator ends the terminal.
    Close,
}

impl ViewerControl {
    /// Reads a viewer's text message; anything else is refused with a message that says what
    /// a text message may be (the host answers it as `invalid_message`).
    pub fn from_text(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| {
            format!(
                "a text message is {{\"type\":\"resize\",\"cols\":N,\"rows\":N}} or {{\"type\":\"close\"}}: {e}"
            )
        })
    }
}
