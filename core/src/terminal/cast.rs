//! Terminal sessions as asciicast v2 recordings (the format `asciinema play` plays): a
//! [`Recorder`] turns what a relay carries into the recording's lines as it happens, and
//! [`Cast::parse`] reads a recording back for playback.
//!
//! A recording is one JSON header line, `{"version": 2, "width", "height", "timestamp",
//! "title"?, "env"?}`, then one line per event, `[seconds, code, data]`: `"o"` output, `"i"`
//! input (only when the recorder was asked to keep it), `"r"` a resize (`"COLSxROWS"`), `"m"` a
//! marker. Seconds count from the header's moment, with microseconds, and never go back.
//! Output bytes are text in the format: a UTF-8 character cut between two chunks is held until
//! its end comes; invalid bytes become U+FFFD.
//!
//! A recording is bounded ([`RECORDING_LIMIT`] by default): the event that would pass the
//! bound is replaced by a marker event saying so ([`TRUNCATED_MARKER`]) and nothing more is
//! kept. This module owns the format; it never stores a recording and never reads a clock.

/// The daemon feature that says its owner lets the server record what operators type into
/// terminals there (the local policy's `"recordTerminalInput": true`). A server records input
/// only where it is told to (`outpost serve --record-terminal-input`) and the daemon announces
/// this.
pub const FEATURE_RECORD_INPUT: &str = "record-input";

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::{Instant, UnixTime};

/// The most bytes a recording keeps by default (header, events and the end's marker).
pub const RECORDING_LIMIT: usize = 8 * 1024 * 1024;

/// The marker's text at the end of a recording that reached its bound.
pub const TRUNCATED_MARKER: &str = "recording truncated: it reached its size limit";

/// Room kept for the marker line when a recording reaches its bound.
const MARKER_ROOM: usize = 128;

/// The smallest bound a recorder takes (a header and the marker fit).
pub const MIN_LIMIT: usize = 1024;

/// A recording's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CastHeader {
    /// Always 2.
    pub version: u8,
    /// Columns when the recording began.
    pub width: u16,
    /// Rows when the recording began.
    pub height: u16,
    /// When it began, in seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// A human title (outpost: the context and who opened the terminal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The session's environment as asciinema records it (`TERM`, `SHELL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

impl CastHeader {
    /// A version-2 header for a terminal of `cols` × `rows` that began at `at`.
    pub fn new(cols: u16, rows: u16, at: UnixTime, title: Option<String>) -> Self {
        Self {
            version: 2,
            width: cols,
            height: rows,
            timestamp: Some(at.as_secs()),
            title,
            env: Some(BTreeMap::from([(
                "TERM".to_owned(),
                "xterm-256color".to_owned(),
            )])),
        }
    }
}

/// What one event is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// Bytes the program wrote (`"o"`).
    Output,
    /// Keystrokes an operator typed (`"i"`).
    Input,
    /// The terminal's new size (`"r"`).
    Resize {
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// A marker (`"m"`): its data is a label.
    Marker,
    /// A code this reader does not know; players skip it.
    Other(String),
}

/// One event of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CastEvent {
    /// How long after the recording's start it happened.
    pub at: Duration,
    /// What it is.
    pub kind: EventKind,
    /// Its data as the line holds it (output text, input text, `COLSxROWS`, a label).
    pub data: String,
}

/// Why a recording could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CastError {
    /// There is no header line.
    #[error("the recording is empty")]
    Empty,
    /// The first line is not a version-2 header.
    #[error("the first line is not an asciicast v2 header: {0}")]
    Header(String),
    /// An event line is not `[seconds, code, data]`.
    #[error("line {line} is not an event [seconds, code, data]: {reason}")]
    Event {
        /// The 1-based line number.
        line: usize,
        /// What was wrong.
        reason: String,
    },
    /// An event's time is before the previous one's.
    #[error("line {line} goes back in time")]
    TimeGoesBack {
        /// The 1-based line number.
        line: usize,
    },
}

impl CastError {
    /// The stable code for APIs and the CLI.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Empty => "recording_empty",
            Self::Header(_) => "recording_header",
            Self::Event { .. } | Self::TimeGoesBack { .. } => "recording_event",
        }
    }
}

/// A recording read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cast {
    /// Its header.
    pub header: CastHeader,
    /// Its events, in time order.
    pub events: Vec<CastEvent>,
}

/// The latest an event may be: 400 days, far beyond any terminal's lease (a day). A file
/// that says later is refused rather than played as a wait of years.
const MAX_SECONDS: f64 = 400.0 * 86_400.0;

impl Cast {
    /// Reads a recording. Blank lines are skipped; anything else that is not the format is
    /// a [`CastError`] naming its line.
    pub fn parse(text: &str) -> Result<Self, CastError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, first) = lines.next().ok_or(CastError::Empty)?;
        let header: CastHeader =
            serde_json::from_str(first).map_err(|e| CastError::Header(e.to_string()))?;
        if header.version != 2 {
            return Err(CastError::Header(format!(
                "version {} (only 2 is read)",
                header.version
            )));
        }
        let mut events = Vec::new();
        let mut last = Duration::ZERO;
        for (index, line) in lines {
            let number = index + 1;
            let bad = |reason: String| CastError::Event {
                line: number,
                reason,
            };
            let (seconds, code, data): (f64, String, String) =
                serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
            if !seconds.is_finite() || !(0.0..=MAX_SECONDS).contains(&seconds) {
                return Err(bad(format!("{seconds} is not a time in the recording")));
            }
            let at = Duration::from_secs_f64(seconds);
            if at < last {
                return Err(CastError::TimeGoesBack { line: number });
            }
            last = at;
            let kind = match code.as_str() {
                "o" => EventKind::Output,
                "i" => EventKind::Input,
                "m" => EventKind::Marker,
                "r" => {
                    let size = data
                        .split_once('x')
                        .and_then(|(c, r)| Some((c.parse().ok()?, r.parse().ok()?)));
                    let Some((cols, rows)) = size else {
                        return Err(bad(format!("{data:?} is not a size COLSxROWS")));
                    };
                    EventKind::Resize { cols, rows }
                }
                _ => EventKind::Other(code),
            };
            events.push(CastEvent { at, kind, data });
        }
        Ok(Self { header, events })
    }
}

/// Writes one terminal session's recording as it happens: feed it what the relay carries
/// with the host's `now`, and [`Recorder::take`] the lines produced so far to store them.
#[derive(Debug)]
pub struct Recorder {
    started: Instant,
    limit: usize,
    len: usize,
    truncated: bool,
    record_input: bool,
    /// The start of a UTF-8 character whose end has not come yet.
    carry: Vec<u8>,
    pending: String,
    last: Duration,
    events: u64,
}

impl Recorder {
    /// A recording that begins now with `header`, keeps input only when `record_input`, and
    /// holds at most `limit` bytes (at least [`MIN_LIMIT`]).
    pub fn new(header: &CastHeader, now: Instant, limit: usize, record_input: bool) -> Self {
        let mut line = serde_json::to_string(header).unwrap_or_default();
        line.push('\n');
        Self {
            started: now,
            limit: limit.max(MIN_LIMIT).max(line.len() + MARKER_ROOM),
            len: line.len(),
            truncated: false,
            record_input,
            carry: Vec::new(),
            pending: line,
            last: Duration::ZERO,
            events: 0,
        }
    }

    /// The program wrote `bytes`.
    pub fn output(&mut self, now: Instant, bytes: &[u8]) {
        let mut joined = std::mem::take(&mut self.carry);
        joined.extend_from_slice(bytes);
        let cut = incomplete_tail(&joined);
        self.carry = joined.split_off(joined.len() - cut);
        if !joined.is_empty() {
            let text = String::from_utf8_lossy(&joined).into_owned();
            self.event(now, "o", &text);
        }
    }

    /// An operator typed `bytes`; kept only when the recorder keeps input.
    pub fn input(&mut self, now: Instant, bytes: &[u8]) {
        if self.record_input && !bytes.is_empty() {
            let text = String::from_utf8_lossy(bytes).into_owned();
            self.event(now, "i", &text);
        }
    }

    /// The terminal became `cols` × `rows`.
    pub fn resize(&mut self, now: Instant, cols: u16, rows: u16) {
        self.event(now, "r", &format!("{cols}x{rows}"));
    }

    /// The session ended: what is held of a cut character is written as it is.
    pub fn finish(&mut self, now: Instant) {
        let carry = std::mem::take(&mut self.carry);
        if !carry.is_empty() {
            let text = String::from_utf8_lossy(&carry).into_owned();
            self.event(now, "o", &text);
        }
    }

    /// The lines produced since the last call (the header first), to append to the stored
    /// recording.
    pub fn take(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Whether lines wait to be taken.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Bytes of the recording so far (taken or not).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no event was recorded yet (only the header).
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Whether the recording reached its bound (its last event is the marker).
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// Whether input is kept.
    pub fn records_input(&self) -> bool {
        self.record_input
    }

    fn event(&mut self, now: Instant, code: &str, data: &str) {
        if self.truncated {
            return;
        }
        let at = now.saturating_duration_since(self.started).max(self.last);
        self.last = at;
        let line = event_line(at, code, data);
        if self.len + line.len() + MARKER_ROOM > self.limit {
            self.truncated = true;
            let marker = event_line(at, "m", TRUNCATED_MARKER);
            self.len += marker.len();
            self.events += 1;
            self.pending.push_str(&marker);
            return;
        }
        self.len += line.len();
        self.events += 1;
        self.pending.push_str(&line);
    }
}

fn event_line(at: Duration, code: &str, data: &str) -> String {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "\"\"".to_owned());
    format!(
        "[{}.{:06}, \"{code}\", {data}]\n",
        at.as_secs(),
        at.subsec_micros()
    )
}

/// How many bytes at the end of `bytes` begin a UTF-8 character whose end is missing (0
/// when the end is whole, or when those bytes could never become a character).
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=3.min(bytes.len()) {
        let b = bytes[bytes.len() - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: look further back for the lead
        }
        let needs = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        return if needs > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    fn recorder(limit: usize, input: bool) -> Recorder {
        let header = CastHeader::new(80, 24, UnixTime::from_secs(1_700_000_000), None);
        Recorder::new(&header, at(1000), limit, input)
    }

    #[test]
    fn a_session_reads_back_as_it_was_recorded() {
        let mut r = recorder(RECORDING_LIMIT, false);
        r.output(at(1250), b"hello \xE2\x82");
        r.output(at(1500), b"\xAC\r\n");
        r.input(at(1600), b"ls\r");
        r.resize(at(2000), 100, 30);
        r.finish(at(2100));
        let text = r.take();
        let cast = Cast::parse(&text).unwrap();
        assert_eq!(cast.header.width, 80);
        assert_eq!(cast.header.timestamp, Some(1_700_000_000));
        let kinds: Vec<_> = cast.events.iter().map(|e| e.kind.clone()).collect();
        assert_eq!(
            kinds,
            [
                EventKind::Output,
                EventKind::Output,
                EventKind::Resize {
                    cols: 100,
                    rows: 30
                }
            ],
            "input is not kept unless asked"
        );
        assert_eq!(cast.events[0].data, "hello ");
        assert_eq!(cast.events[1].data, "€\r\n", "a cut character is whole");
        assert_eq!(cast.events[0].at, Duration::from_millis(250));
        assert!(text.contains("[0.250000, \"o\", \"hello \"]"), "{text}");
        assert!(r.take().is_empty(), "taken once");
    }

    #[test]
    fn input_is_kept_when_asked_and_invalid_bytes_become_replacements() {
        let mut r = recorder(RECORDING_LIMIT, true);
        r.input(at(1100), b"q");
        r.output(at(1200), b"\xFFok");
        r.output(at(1300), b"\xE2");
        r.finish(at(1400));
        let cast = Cast::parse(&r.take()).unwrap();
        assert_eq!(cast.events[0].kind, EventKind::Input);
        assert_eq!(cast.events[1].data, "\u{FFFD}ok");
        assert_eq!(
            cast.events[2].data, "\u{FFFD}",
            "a dangling lead is flushed at the end"
        );
    }

    #[test]
    fn a_recording_stops_at_its_bound_with_a_marker() {
        let mut r = recorder(4096, false);
        for i in 0..1000u64 {
            r.output(at(1000 + i), &[b'x'; 100]);
        }
        assert!(r.is_truncated());
        let text = r.take();
        assert!(text.len() <= 4096, "{} bytes", text.len());
        assert_eq!(r.len(), text.len());
        let cast = Cast::parse(&text).unwrap();
        let last = cast.events.last().unwrap();
        assert_eq!(last.kind, EventKind::Marker);
        assert_eq!(last.data, TRUNCATED_MARKER);
        r.output(at(5000), b"more");
        assert!(r.take().is_empty(), "nothing after the marker");
    }

    #[test]
    fn time_never_goes_back_in_a_recording() {
        let mut r = recorder(RECORDING_LIMIT, false);
        r.output(at(3000), b"a");
        r.output(at(2000), b"b");
        let cast = Cast::parse(&r.take()).unwrap();
        assert_eq!(cast.events[1].at, Duration::from_secs(2));
    }

    #[test]
    fn what_is_not_a_recording_is_refused_by_line() {
        assert_eq!(Cast::parse(""), Err(CastError::Empty));
        assert!(matches!(
            Cast::parse("{\"version\":1,\"width\":1,\"height\":1}"),
            Err(CastError::Header(_))
        ));
        let header = "{\"version\":2,\"width\":80,\"height\":24}\n";
        let cases = [
            ("[1.0, \"o\"]", 2),
            ("[-1.0, \"o\", \"x\"]", 2),
            ("[1.0, \"r\", \"80\"]", 2),
            ("[1e300, \"o\", \"x\"]", 2),
        ];
        for (line, number) in cases {
            match Cast::parse(&format!("{header}{line}\n")) {
                Err(CastError::Event { line, .. }) => assert_eq!(line, number),
                other => panic!("{line}: {other:?}"),
            }
        }
        let back = format!("{header}[2.0, \"o\", \"a\"]\n[1.0, \"o\", \"b\"]\n");
        assert_eq!(Cast::parse(&back), Err(CastError::TimeGoesBack { line: 3 }));
        let other = format!("{header}[2.0, \"x\", \"a\"]\n");
        assert_eq!(
            Cast::parse(&other).unwrap().events[0].kind,
            EventKind::Other("x".into())
        );
    }
}
