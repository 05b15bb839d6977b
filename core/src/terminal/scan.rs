//! The escape-sequence state machine the ring cuts and filters with: which bytes of a
//! terminal's output belong to an escape sequence, where each sequence begins and ends.
//!
//! It follows the DEC/ANSI parser of Paul Williams (the model xterm, xterm.js and alacritty's
//! `vte` share) over code points decoded from UTF-8, the way xterm.js reads its input: the
//! code points U+0080–U+009F act as C1 controls (CSI, OSC, DCS, ST, …); a byte that is not
//! valid UTF-8 is data (U+FFFD). It only tracks states and reports, per code point, what the
//! code point does to the sequence in progress — it never interprets a sequence, and keeps
//! no bytes.

/// The replacement character: what an invalid byte counts as.
const REPLACEMENT: u32 = 0xFFFD;

const ESC: u32 = 0x1B;
const CAN: u32 = 0x18;
const SUB: u32 = 0x1A;
const BEL: u32 = 0x07;
/// C1 "single graphic character introducer" and "single character introducer": xterm.js
/// treats them like CAN and SUB.
const SGCI: u32 = 0x99;
const SCI: u32 = 0x9A;
const C1_DCS: u32 = 0x90;
const C1_SOS: u32 = 0x98;
const C1_CSI: u32 = 0x9B;
const C1_ST: u32 = 0x9C;
const C1_OSC: u32 = 0x9D;
const C1_PM: u32 = 0x9E;
const C1_APC: u32 = 0x9F;

/// Where the parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Ground,
    Escape,
    EscapeIntermediate,
    CsiEntry,
    CsiParam,
    CsiIntermediate,
    CsiIgnore,
    DcsEntry,
    DcsParam,
    DcsIntermediate,
    DcsPassthrough,
    DcsIgnore,
    OscString,
    SosPmApcString,
    /// An ESC inside a string: `\` makes it ST; anything else ends the string at the ESC and
    /// is read as the byte after an ESC.
    StringEscape,
}

impl State {
    /// The DCS header states, before the final byte hooks the string.
    pub(super) fn is_dcs_header(self) -> bool {
        matches!(
            self,
            State::DcsEntry | State::DcsParam | State::DcsIntermediate
        )
    }

    fn is_string(self) -> bool {
        matches!(
            self,
            State::DcsPassthrough | State::DcsIgnore | State::OscString | State::SosPmApcString
        )
    }
}

/// What one code point does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// Outside any sequence: printed or executed.
    Text,
    /// Begins a sequence (an ESC or a C1 introducer); a sequence in progress is abandoned
    /// without being dispatched.
    Begin,
    /// Part of the sequence in progress (a C0 control executed inside a CSI included).
    Continue,
    /// The last code point of the sequence in progress, which is dispatched.
    Dispatch,
    /// Abandons the sequence in progress (CAN, SUB, a C1 control) and is itself text.
    Cancel,
}

/// What one code point does, and whether the ESC before it ended a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Step {
    /// The string in progress ended (was dispatched) at the ESC just before this code point,
    /// and that ESC began a new sequence, which `action` applies to.
    pub(super) split: bool,
    /// What this code point does.
    pub(super) action: Action,
}

/// A UTF-8 decoder that never fails: it yields code points, and U+FFFD for bytes that do not
/// decode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Utf8 {
    cp: u32,
    need: u8,
    min: u32,
}

/// What one byte completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decoded {
    /// The byte is part of a code point not yet complete.
    Need,
    /// The byte completes this code point (with the bytes held before it).
    Char(u32),
    /// The bytes held before this one do not form a code point (they count as U+FFFD); the
    /// decoder was reset and the byte must be pushed again.
    Broken,
}

impl Utf8 {
    /// True when no code point is half read.
    pub(super) fn idle(&self) -> bool {
        self.need == 0
    }

    pub(super) fn push(&mut self, b: u8) -> Decoded {
        if self.need > 0 {
            if b & 0xC0 != 0x80 {
                *self = Utf8::default();
                return Decoded::Broken;
            }
            self.cp = (self.cp << 6) | u32::from(b & 0x3F);
            self.need -= 1;
            if self.need > 0 {
                return Decoded::Need;
            }
            let cp = self.cp;
            let min = self.min;
            *self = Utf8::default();
            let valid = cp >= min && cp <= 0x10FFFF && !(0xD800..=0xDFFF).contains(&cp);
            return Decoded::Char(if valid { cp } else { REPLACEMENT });
        }
        let (need, cp, min) = match b {
            0x00..=0x7F => return Decoded::Char(u32::from(b)),
            0xC2..=0xDF => (1, b & 0x1F, 0x80),
            0xE0..=0xEF => (2, b & 0x0F, 0x800),
            0xF0..=0xF4 => (3, b & 0x07, 0x10000),
            _ => return Decoded::Char(REPLACEMENT),
        };
        *self = Utf8 {
            cp: u32::from(cp),
            need,
            min,
        };
        Decoded::Need
    }
}

/// The parser state and the UTF-8 decoder together: everything needed to know, byte by byte,
/// whether the stream is at a safe place to start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scanner {
    pub(super) utf8: Utf8,
    pub(super) machine: Machine,
}

impl Scanner {
    pub(super) fn new() -> Self {
        Self {
            utf8: Utf8::default(),
            machine: Machine {
                state: State::Ground,
            },
        }
    }

    /// True when a reader starting at the next byte reads it exactly as this stream does:
    /// outside any sequence and not inside a UTF-8 character.
    pub(super) fn safe(&self) -> bool {
        self.machine.state == State::Ground && self.utf8.idle()
    }

    /// Runs `bytes` through, keeping only the state. Plain ASCII in the ground state is
    /// skipped in bulk.
    pub(super) fn skip(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            if self.safe() {
                i += plain_run(&bytes[i..]);
                if i == bytes.len() {
                    break;
                }
            }
            let b = bytes[i];
            loop {
                match self.utf8.push(b) {
                    Decoded::Need => break,
                    Decoded::Char(cp) => {
                        self.machine.advance(cp);
                        break;
                    }
                    Decoded::Broken => {
                        self.machine.advance(REPLACEMENT);
                    }
                }
            }
            i += 1;
        }
    }

    /// How many leading bytes of `bytes` must be skipped to reach the first place that is
    /// safe to start reading, given that the stream is in this scanner's state before them;
    /// `bytes.len()` when there is none.
    pub(super) fn first_safe(mut self, bytes: impl IntoIterator<Item = u8>) -> usize {
        let mut skipped = 0;
        for b in bytes {
            if self.safe() {
                return skipped;
            }
            self.skip(&[b]);
            skipped += 1;
        }
        skipped
    }
}

/// The length of the leading run of bytes that are text in the ground state whatever comes
/// next: printable ASCII and C0 controls other than ESC, CAN and SUB.
pub(super) fn plain_run(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|&b| b >= 0x80 || b == 0x1B || b == 0x18 || b == 0x1A)
        .unwrap_or(bytes.len())
}

/// The DEC/ANSI state machine over code points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Machine {
    pub(super) state: State,
}

impl Machine {
    /// Moves on by one code point and says what it did.
    pub(super) fn advance(&mut self, cp: u32) -> Step {
        if self.state == State::StringEscape {
            if cp == u32::from(b'\\') {
                self.state = State::Ground;
                return Step {
                    split: false,
                    action: Action::Dispatch,
                };
            }
            self.state = State::Escape;
            let action = self.advance_unsplit(cp);
            return Step {
                split: true,
                action,
            };
        }
        Step {
            split: false,
            action: self.advance_unsplit(cp),
        }
    }

    fn advance_unsplit(&mut self, cp: u32) -> Action {
        use State::*;
        let state = self.state;
        // The transitions from anywhere.
        match cp {
            CAN | SUB | SGCI | SCI => {
                self.state = Ground;
                return if state == Ground {
                    Action::Text
                } else {
                    Action::Cancel
                };
            }
            ESC => {
                if state.is_string() {
                    self.state = StringEscape;
                    return Action::Continue;
                }
                self.state = Escape;
                return Action::Begin;
            }
            C1_ST if state.is_string() => {
                self.state = Ground;
                return Action::Dispatch;
            }
            0x80..=0x9F => {
                let next = match cp {
                    C1_CSI => Some(CsiEntry),
                    C1_DCS => Some(DcsEntry),
                    C1_OSC => Some(OscString),
                    C1_SOS | C1_PM | C1_APC => Some(SosPmApcString),
                    _ => None,
                };
                return match next {
                    Some(next) => {
                        self.state = next;
                        Action::Begin
                    }
                    None => {
                        self.state = Ground;
                        if state == Ground {
                            Action::Text
                        } else {
                            Action::Cancel
                        }
                    }
                };
            }
            _ => {}
        }
        let (next, action) = match (state, cp) {
            (Ground, _) => (Ground, Action::Text),
            // C0 controls are executed inside ESC and CSI sequences, ignored in DCS headers;
            // DEL is ignored; code points past ASCII are ignored. None ends the sequence.
            (s, 0x00..=0x1F | 0x7F..) if !s.is_string() => (s, Action::Continue),
            (Escape, 0x20..=0x2F) => (EscapeIntermediate, Action::Continue),
            (Escape, 0x5B) => (CsiEntry, Action::Continue),
            (Escape, 0x5D) => (OscString, Action::Continue),
            (Escape, 0x50) => (DcsEntry, Action::Continue),
            (Escape, 0x58 | 0x5E | 0x5F) => (SosPmApcString, Action::Continue),
            (Escape, _) => (Ground, Action::Dispatch),
            (EscapeIntermediate, 0x20..=0x2F) => (EscapeIntermediate, Action::Continue),
            (EscapeIntermediate, _) => (Ground, Action::Dispatch),
            (CsiEntry | CsiParam, 0x30..=0x3B) => (CsiParam, Action::Continue),
            (CsiEntry, 0x3C..=0x3F) => (CsiParam, Action::Continue),
            (CsiParam, 0x3C..=0x3F) => (CsiIgnore, Action::Continue),
            (CsiEntry | CsiParam | CsiIntermediate, 0x20..=0x2F) => {
                (CsiIntermediate, Action::Continue)
            }
            (CsiIntermediate, 0x30..=0x3F) => (CsiIgnore, Action::Continue),
            (CsiEntry | CsiParam | CsiIntermediate | CsiIgnore, 0x40..=0x7E) => {
                (Ground, Action::Dispatch)
            }
            (CsiIgnore, _) => (CsiIgnore, Action::Continue),
            (DcsEntry | DcsParam, 0x30..=0x3B) => (DcsParam, Action::Continue),
            (DcsEntry, 0x3C..=0x3F) => (DcsParam, Action::Continue),
            (DcsParam, 0x3C..=0x3F) => (DcsIgnore, Action::Continue),
            (DcsEntry | DcsParam | DcsIntermediate, 0x20..=0x2F) => {
                (DcsIntermediate, Action::Continue)
            }
            (DcsIntermediate, 0x30..=0x3F) => (DcsIgnore, Action::Continue),
            (DcsEntry | DcsParam | DcsIntermediate, 0x40..=0x7E) => {
                (DcsPassthrough, Action::Continue)
            }
            (OscString, BEL) => (Ground, Action::Dispatch),
            (s, _) => (s, Action::Continue),
        };
        self.state = next;
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states(bytes: &[u8]) -> Vec<bool> {
        let mut s = Scanner::new();
        bytes
            .iter()
            .map(|&b| {
                s.skip(&[b]);
                s.safe()
            })
            .collect()
    }

    #[test]
    fn csi_osc_dcs_and_strings_end_where_xterm_ends_them() {
        for (input, safe_after) in [
            (&b"\x1b[1;31m"[..], 7),
            (b"\x1b]0;title\x07", 10),
            (b"\x1b]0;title\x1b\\", 11),
            (b"\x1bP$qm\x1b\\", 7),
            (b"\x1b_apc \x07 still\x1b\\", 15),
            (b"\xc2\x9b6n", 4),
            (b"\x1b(B", 3),
            (b"\x1b[1\x18", 4),
        ] {
            let safe = states(input);
            assert_eq!(safe.len(), input.len());
            assert!(safe[safe_after - 1], "{input:?} ends at {safe_after}");
            assert!(
                safe[..safe_after - 1].iter().all(|s| !s),
                "{input:?} is not safe before {safe_after}: {safe:?}"
            );
        }
    }

    #[test]
    fn a_utf8_character_is_safe_only_once_complete() {
        assert_eq!(states("é€😀".as_bytes()), {
            let mut v = vec![false, true, false, false, true];
            v.extend([false, false, false, true]);
            v
        });
        // A broken character is data: the next byte starts afresh.
        assert_eq!(states(b"\xe2a"), vec![false, true]);
    }

    #[test]
    fn an_esc_ending_a_string_starts_the_next_sequence() {
        let mut m = Machine {
            state: State::Ground,
        };
        let steps: Vec<Step> = "\x1b]0;t\x1b[m"
            .chars()
            .map(|c| m.advance(c as u32))
            .collect();
        assert_eq!(steps[5].action, Action::Continue);
        assert_eq!(
            steps[6],
            Step {
                split: true,
                action: Action::Continue
            }
        );
        assert_eq!(steps[7].action, Action::Dispatch);
        assert_eq!(m.state, State::Ground);
    }
}
