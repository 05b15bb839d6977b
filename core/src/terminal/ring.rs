//! The last 64 KiB of a terminal's output, and the replay cut from it for a viewer that joins
//! late or reconnects.
//!
//! Every pushed byte goes through the escape-sequence state machine of [`super::scan`]
//! (however the output was chunked), so the ring knows:
//! - where its oldest byte stands: a second scanner follows the bytes as they fall off the
//!   front, so when the ring's start is inside a sequence or a UTF-8 character the replay
//!   starts after it ends — never inside an escape sequence (CSI, OSC, DCS, SOS/PM/APC
//!   strings, two-byte ESC sequences) nor inside a UTF-8 character;
//! - which sequences are *queries* ([`super::query`] has the exact list): they are never
//!   stored, so a new viewer's emulator does not answer them again. Every other byte is kept
//!   as it came, in order.
//!
//! A sequence is held (up to [`HOLD_LIMIT`] bytes) until it ends and can be judged. One
//! longer than that is not a query and is stored as it comes — except a DCS already known to
//! be DECRQSS or XTGETTCAP from its header, which is dropped whole. An OSC query longer than
//! [`HOLD_LIMIT`] is therefore kept: no emulator's query is that long.
//!
//! Removing a query leaves the C0 controls executed inside a CSI query (a CR, a LF) where
//! they were; a query that cut short an unfinished sequence (`ESC [ 1 ESC [ 6 n`) leaves a
//! CAN, which ends the unfinished one the way the query's ESC did and does nothing itself.
//!
//! The ring never interprets what it keeps; it does not know the screen, the modes or the
//! colours in force at the cut.

use std::collections::VecDeque;

use super::query::{self, Kind};
use super::scan::{Action, Decoded, Scanner, State, plain_run};

/// How many bytes of output a ring keeps.
pub const RING_CAPACITY: usize = 64 * 1024;

/// The longest sequence held back to be judged; see the module docs.
pub const HOLD_LIMIT: usize = 4096;

const CAN: u8 = 0x18;

/// What happens to the sequence in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Its bytes are held in `seq` until it ends.
    Holding,
    /// It is not a query: its bytes are stored as they come (`seq` holds at most an ESC that
    /// may start its ST).
    Passing,
    /// It is a query too long to hold: its bytes are dropped as they come.
    Discarding,
}

/// The last [`RING_CAPACITY`] bytes of a terminal's output, queries removed. See the module
/// docs.
#[derive(Debug, Clone)]
pub struct Ring {
    /// The stored bytes, oldest first.
    content: VecDeque<u8>,
    /// The state of the stream just before `content`'s first byte.
    front: Scanner,
    /// The state of the stream after everything pushed.
    back: Scanner,
    /// The sequence in progress, not yet stored (see [`Mode`]).
    seq: Vec<u8>,
    mode: Mode,
    /// The DCS in progress is DECRQSS or XTGETTCAP.
    known_query: bool,
    /// The sequence in progress cut short one that had not ended: if it is removed, a CAN
    /// takes its place.
    interrupts: bool,
    /// The bytes of a UTF-8 character not yet complete.
    partial: Vec<u8>,
    /// How many bytes were pushed in all.
    pushed: u64,
    /// How many bytes were removed as queries.
    removed: u64,
}

impl Default for Ring {
    fn default() -> Self {
        Self::new()
    }
}

impl Ring {
    /// An empty ring; the stream starts outside any sequence.
    pub fn new() -> Self {
        Self {
            content: VecDeque::with_capacity(RING_CAPACITY),
            front: Scanner::new(),
            back: Scanner::new(),
            seq: Vec::new(),
            mode: Mode::Holding,
            known_query: false,
            interrupts: false,
            partial: Vec::with_capacity(4),
            pushed: 0,
            removed: 0,
        }
    }

    /// How many bytes were pushed since the ring was made.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// How many pushed bytes were removed as (parts of) queries.
    pub fn removed(&self) -> u64 {
        self.removed
    }

    /// How many bytes the ring stores now (at most [`RING_CAPACITY`]), not counting a
    /// sequence or character still in progress.
    pub fn len(&self) -> usize {
        self.content.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.seq.is_empty() && self.partial.is_empty()
    }

    /// Adds output, in any chunking: the result never depends on where chunks were split.
    pub fn push(&mut self, bytes: &[u8]) {
        self.pushed += bytes.len() as u64;
        let mut i = 0;
        while i < bytes.len() {
            if self.back.safe() && self.seq.is_empty() {
                let run = plain_run(&bytes[i..]);
                if run > 0 {
                    self.content.extend(&bytes[i..i + run]);
                    i += run;
                    continue;
                }
            }
            let b = bytes[i];
            loop {
                match self.back.utf8.push(b) {
                    Decoded::Need => {
                        self.partial.push(b);
                        break;
                    }
                    Decoded::Char(cp) => {
                        self.partial.push(b);
                        self.code_point(cp);
                        break;
                    }
                    Decoded::Broken => self.code_point(0xFFFD),
                }
            }
            i += 1;
        }
        self.trim();
    }

    /// The bytes to show a viewer that joins now: the stored bytes from the first place that
    /// is safe to start reading, then the sequence or character in progress (the rest of it
    /// comes live).
    pub fn replay(&self) -> Vec<u8> {
        let skip = self.front.first_safe(self.content.iter().copied());
        let mut out = Vec::with_capacity(self.content.len() - skip + self.seq.len() + 4);
        let (a, b) = self.content.as_slices();
        if skip < a.len() {
            out.extend_from_slice(&a[skip..]);
            out.extend_from_slice(b);
        } else {
            out.extend_from_slice(&b[skip - a.len()..]);
        }
        if self.mode != Mode::Discarding {
            out.extend_from_slice(&self.seq);
            out.extend_from_slice(&self.partial);
        }
        out
    }

    /// Drops the oldest bytes past the capacity, following them with the front scanner.
    fn trim(&mut self) {
        let over = self.content.len().saturating_sub(RING_CAPACITY);
        if over == 0 {
            return;
        }
        let (a, b) = self.content.as_slices();
        let in_a = over.min(a.len());
        self.front.skip(&a[..in_a]);
        self.front.skip(&b[..over - in_a]);
        self.content.drain(..over);
    }

    /// Handles one complete code point, whose bytes are in `self.partial`.
    fn code_point(&mut self, cp: u32) {
        let bytes = std::mem::take(&mut self.partial);
        let before = self.back.machine.state;
        let step = self.back.machine.advance(cp);
        if step.split {
            // The string ended at the ESC held last in `seq`; that ESC begins a new sequence.
            let esc = self.seq.pop();
            match self.mode {
                Mode::Holding => self.judge(),
                Mode::Passing => {}
                Mode::Discarding => self.removed += self.seq.len() as u64,
            }
            self.seq.clear();
            self.seq.extend(esc);
            self.mode = Mode::Holding;
            self.known_query = false;
            self.interrupts = false;
        }
        match step.action {
            Action::Text => self.content.extend(&bytes),
            Action::Begin => {
                self.interrupts = self.abandon();
                self.seq.extend_from_slice(&bytes);
                self.after_hold_step(State::Ground);
            }
            Action::Continue => self.continue_seq(&bytes, before),
            Action::Dispatch => {
                match self.mode {
                    Mode::Holding => {
                        self.seq.extend_from_slice(&bytes);
                        self.judge();
                    }
                    Mode::Passing => {
                        self.content.extend(&self.seq);
                        self.content.extend(&bytes);
                    }
                    Mode::Discarding => {
                        self.removed += (self.seq.len() + bytes.len()) as u64;
                    }
                }
                self.reset_seq();
            }
            Action::Cancel => {
                self.abandon();
                self.content.extend(&bytes);
            }
        }
        let mut bytes = bytes;
        bytes.clear();
        self.partial = bytes;
    }

    /// A code point inside the sequence in progress.
    fn continue_seq(&mut self, bytes: &[u8], before: State) {
        let at_esc = self.back.machine.state == State::StringEscape;
        match self.mode {
            Mode::Holding => {
                self.seq.extend_from_slice(bytes);
                if !at_esc {
                    self.after_hold_step(before);
                }
            }
            Mode::Passing if at_esc => self.seq.extend_from_slice(bytes),
            Mode::Passing => self.content.extend(bytes),
            Mode::Discarding if at_esc => self.seq.extend_from_slice(bytes),
            Mode::Discarding => self.removed += bytes.len() as u64,
        }
    }

    /// After a held sequence took a code point: stop holding it when it can no longer be a
    /// query, or when it grew too long.
    fn after_hold_step(&mut self, before: State) {
        let state = self.back.machine.state;
        let never_query = matches!(
            state,
            State::SosPmApcString | State::DcsIgnore | State::CsiIgnore
        );
        if never_query {
            return self.start_passing();
        }
        if before.is_dcs_header() && state == State::DcsPassthrough {
            if query::dcs_header_is_query(&self.seq) {
                self.known_query = true;
            } else {
                return self.start_passing();
            }
        }
        if self.seq.len() > HOLD_LIMIT {
            if self.known_query {
                self.removed += self.seq.len() as u64;
                self.seq.clear();
                self.mode = Mode::Discarding;
            } else {
                self.start_passing();
            }
        }
    }

    fn start_passing(&mut self) {
        self.content.extend(&self.seq);
        self.seq.clear();
        self.mode = Mode::Passing;
    }

    /// The sequence in progress ends without being dispatched (cut short by a new sequence,
    /// CAN, SUB or a C1 control): its bytes are kept (it has no effect in the emulator but
    /// must still end there). Returns whether the stored stream is now left inside it.
    fn abandon(&mut self) -> bool {
        let open = match self.mode {
            Mode::Holding => !self.seq.is_empty(),
            Mode::Passing => true,
            Mode::Discarding => false,
        };
        if self.mode != Mode::Discarding {
            self.content.extend(&self.seq);
        }
        self.reset_seq();
        open
    }

    /// The held, complete sequence in `seq` was dispatched: store it, or drop it if a query.
    fn judge(&mut self) {
        if self.known_query || query::is_query(&self.seq) {
            self.removed += self.seq.len() as u64;
            if self.interrupts {
                self.content.push_back(CAN);
            }
            if matches!(query::kind(&self.seq).0, Kind::Csi | Kind::Esc) {
                // C0 controls inside a CSI or ESC sequence are executed where they stand.
                for &b in self.seq.iter().skip(1).filter(|&&b| b < 0x20) {
                    self.content.push_back(b);
                    self.removed -= 1;
                }
            }
        } else {
            self.content.extend(&self.seq);
        }
    }

    fn reset_seq(&mut self) {
        self.seq.clear();
        self.mode = Mode::Holding;
        self.known_query = false;
        self.interrupts = false;
    }
}
