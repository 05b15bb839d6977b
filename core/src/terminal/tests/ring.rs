//! The ring by example: cuts, queries removed, everything else kept.

use crate::terminal::ring::{HOLD_LIMIT, RING_CAPACITY, Ring};

fn replay_of(chunks: &[&[u8]]) -> Vec<u8> {
    let mut ring = Ring::new();
    for c in chunks {
        ring.push(c);
    }
    ring.replay()
}

fn one_by_one(bytes: &[u8]) -> Vec<u8> {
    let mut ring = Ring::new();
    for b in bytes {
        ring.push(std::slice::from_ref(b));
    }
    ring.replay()
}

#[test]
fn short_output_is_replayed_as_it_came() {
    let out = b"\x1b[1;32mok\x1b[m \xe2\x82\xac\r\n\x1b]0;title\x07$ ";
    assert_eq!(replay_of(&[out]), out);
    assert_eq!(one_by_one(out), out);
}

#[test]
fn queries_are_removed_and_their_neighbours_kept() {
    let out = b"a\x1b[6nb\x1b[>c\x1b]11;?\x1b\\c\x1bP$qm\x1b\\d\x1b[?2004$pe\x1b[18tf";
    assert_eq!(replay_of(&[out]), b"abcdef");
    assert_eq!(one_by_one(out), b"abcdef");
    let mut ring = Ring::new();
    ring.push(out);
    assert_eq!(ring.removed(), (out.len() - 6) as u64);
}

#[test]
fn a_c0_control_inside_a_removed_csi_query_stays() {
    assert_eq!(replay_of(&[b"x\x1b[6\r\nn y"]), b"x\r\n y");
}

#[test]
fn a_query_that_cuts_a_sequence_short_leaves_a_can() {
    // `ESC [ 1 ;` never ends: the query's ESC ends it. Without the CAN, `2m` after the
    // removed query would complete it into SGR 1;2.
    assert_eq!(replay_of(&[b"\x1b[1;\x1b[6n2m"]), b"\x1b[1;\x182m");
}

#[test]
fn an_osc_query_ended_by_a_new_sequence_is_removed_and_the_sequence_kept() {
    // xterm.js answers an OSC ended by ESC as if by ST.
    assert_eq!(replay_of(&[b"\x1b]11;?\x1b[1mX"]), b"\x1b[1mX");
}

#[test]
fn c1_introducers_in_utf8_are_sequences_too() {
    assert_eq!(replay_of(&[b"a\xc2\x9b6nb"]), b"ab");
    assert_eq!(replay_of(&[b"a\xc2\x9d11;?\xc2\x9cb"]), b"ab");
}

#[test]
fn an_unfinished_sequence_is_replayed_so_its_rest_can_come_live() {
    let mut ring = Ring::new();
    ring.push(b"text\x1b[1;3");
    assert_eq!(ring.replay(), b"text\x1b[1;3");
    ring.push(b"1m");
    assert_eq!(ring.replay(), b"text\x1b[1;31m");
    ring.push(b"\xe2\x82");
    assert_eq!(ring.replay(), b"text\x1b[1;31m\xe2\x82");
}

#[test]
fn the_replay_starts_after_a_sequence_cut_by_the_ring_start() {
    // An OSC title long enough to straddle the ring's start, then plain text.
    let mut out = b"\x1b]0;".to_vec();
    out.extend(std::iter::repeat_n(b't', 2000));
    out.push(0x07);
    let tail: Vec<u8> = (0..RING_CAPACITY - 1000)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    out.extend(&tail);
    let replay = replay_of(&[&out]);
    assert_eq!(replay, tail);
    assert_eq!(one_by_one(&out), tail);
}

#[test]
fn the_replay_never_starts_inside_a_utf8_character() {
    let mut out = Vec::new();
    while out.len() < RING_CAPACITY + 10 {
        out.extend("€".as_bytes());
    }
    for shift in 0..3 {
        let replay = replay_of(&[&out[shift..]]);
        assert!(std::str::from_utf8(&replay).is_ok(), "shift {shift}");
        assert!(replay.len() >= RING_CAPACITY - 2);
    }
}

#[test]
fn the_ring_keeps_the_last_64_kib() {
    let out: Vec<u8> = (0..200_000u32).map(|i| b'0' + (i % 10) as u8).collect();
    let mut ring = Ring::new();
    for chunk in out.chunks(777) {
        ring.push(chunk);
    }
    assert_eq!(ring.len(), RING_CAPACITY);
    assert_eq!(ring.replay(), &out[out.len() - RING_CAPACITY..]);
    assert_eq!(ring.pushed(), 200_000);
}

#[test]
fn a_long_sequence_is_kept_as_it_comes_and_a_long_dcs_query_dropped_whole() {
    // A sixel-like DCS: not a query, so it passes through without being held.
    let mut sixel = b"\x1bPq".to_vec();
    sixel.extend(std::iter::repeat_n(b'~', HOLD_LIMIT * 2));
    sixel.extend(b"\x1b\\");
    assert_eq!(replay_of(&[&sixel, b"z"]), [&sixel[..], b"z"].concat());
    // A DECRQSS far longer than the hold limit is still dropped.
    let mut rqss = b"\x1bP$q".to_vec();
    rqss.extend(std::iter::repeat_n(b'm', HOLD_LIMIT * 2));
    rqss.extend(b"\x1b\\");
    assert_eq!(replay_of(&[b"a", &rqss, b"z"]), b"az");
    assert_eq!(one_by_one(&[b"a", &rqss[..], b"z"].concat()), b"az");
    // A long OSC is no query: kept even when it ends in `?`.
    let mut osc = b"\x1b]11;".to_vec();
    osc.extend(std::iter::repeat_n(b'x', HOLD_LIMIT));
    osc.extend(b";?\x07");
    assert_eq!(replay_of(&[&osc]), osc);
}

#[test]
fn a_replay_of_a_replay_is_the_same_replay() {
    let mut out = Vec::new();
    for i in 0..5000u32 {
        out.extend(format!("\x1b[3{}m{i}\x1b[6n é\r\n", i % 8).as_bytes());
    }
    let first = replay_of(&[&out]);
    assert_eq!(replay_of(&[&first]), first);
}
