//! Properties of the ring over generated terminal output: atoms (characters, complete
//! sequences, queries, unfinished sequences) whose expected replay is known without the ring's
//! own parser.

use proptest::prelude::*;

use crate::terminal::ring::{RING_CAPACITY, Ring};

/// One piece of generated output and what the ring must keep of it.
#[derive(Debug, Clone)]
struct Atom {
    bytes: Vec<u8>,
    /// What the replay holds for it.
    kept: Vec<u8>,
    /// True when a reader may start right after it (false after an unfinished sequence).
    safe_after: bool,
    /// True for a sequence that leaves its predecessor cut short.
    starts_sequence: bool,
}

fn text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => "[ -~]{1,12}".prop_map(String::into_bytes),
        1 => Just(b"\r\n".to_vec()),
        1 => prop::sample::select(vec!["é", "€", "😀", "中", "\u{a0}"]).prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::sample::select(vec![0x07u8, 0x08, 0x09, 0x0D, 0x0A, 0x0E, 0x0F, 0x05]).prop_map(|b| vec![b]),
    ]
}

/// Complete sequences that are not queries.
fn kept_sequence() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[0-9;]{0,8}[mHJKABCDhl]".prop_map(|s| format!("\x1b[{s}").into_bytes()),
        "[0-9;]{0,5}[hl]".prop_map(|s| format!("\x1b[?{s}").into_bytes()),
        Just(b"\x1b[>4;1m".to_vec()),
        Just(b"\x1b[22t".to_vec()),
        Just(b"\x1b[8;24;80t".to_vec()),
        Just(b"\x1b(B".to_vec()),
        Just(b"\x1b7".to_vec()),
        Just(b"\x1b=".to_vec()),
        "[ -~]{0,40}".prop_map(|s| format!("\x1b]0;{s}\x07").into_bytes()),
        "[a-z]{0,20}".prop_map(|s| format!("\x1b]8;;http://{s}\x1b\\").into_bytes()),
        Just(b"\x1b]11;#000000\x07".to_vec()),
        "[ -~]{0,30}".prop_map(|s| format!("\x1b_{s}\x1b\\").into_bytes()),
        (0usize..9000).prop_map(|n| {
            let mut v = b"\x1bPq".to_vec();
            v.extend(std::iter::repeat_n(b'#', n));
            v.extend(b"\x1b\\");
            v
        }),
        (0usize..6000).prop_map(|n| {
            let mut v = b"\x1b]2;".to_vec();
            v.extend(std::iter::repeat_n(b'T', n));
            v.push(0x07);
            v
        }),
        Just("\u{9b}1m".as_bytes().to_vec()),
    ]
}

/// Queries, with the C0 controls inside a CSI query that must stay.
fn query() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let plain = prop::sample::select(vec![
        "\x1b[c",
        "\x1b[0c",
        "\x1b[>c",
        "\x1b[>0c",
        "\x1b[=c",
        "\x1bZ",
        "\x1b[5n",
        "\x1b[6n",
        "\x1b[?6n",
        "\x1b[?15n",
        "\x1b[12$p",
        "\x1b[?25$p",
        "\x1b[>q",
        "\x1b[?4m",
        "\x1b[11t",
        "\x1b[13t",
        "\x1b[14;2t",
        "\x1b[16t",
        "\x1b[18t",
        "\x1b[19t",
        "\x1b[20t",
        "\x1b[21t",
        "\x1b[1$w",
        "\x1b[1$u",
        "\x1b[x",
        "\x1b[1x",
        "\x1b[?u",
        "\x1b[?1;1;0S",
        "\x1b[1;1;2;2#|",
        "\x1b[1;1;1;1;1;1*y",
        "\x1b[\"v",
        "\x1bP$qm\x1b\\",
        "\x1bP$q\"p\x1b\\",
        "\x1bP+q544e;636f6c73\x1b\\",
        "\x1b]4;1;?\x07",
        "\x1b]4;1;red;3;?\x1b\\",
        "\x1b]10;?\x07",
        "\x1b]11;?\x1b\\",
        "\x1b]12;?\x07",
        "\x1b]17;?;?\x07",
        "\x1b]21;foreground=?\x07",
        "\x1b]52;c;?\x07",
        "\x1b]60\x07",
        "\u{9b}6n",
        "\u{9d}11;?\u{9c}",
        "\u{90}$qm\u{9c}",
    ])
    .prop_map(|q| (q.as_bytes().to_vec(), Vec::new()));
    let with_c0 = prop::sample::select(vec![("\x1b[6\rn", "\r"), ("\x1b[\n>c", "\n")])
        .prop_map(|(q, kept)| (q.as_bytes().to_vec(), kept.as_bytes().to_vec()));
    let long_dcs = (4000usize..9000).prop_map(|n| {
        let mut v = b"\x1bP$q".to_vec();
        v.extend(std::iter::repeat_n(b'm', n));
        v.extend(b"\x1b\\");
        (v, Vec::new())
    });
    prop_oneof![8 => plain, 1 => with_c0, 1 => long_dcs]
}

/// Sequences that never end: the next atom's ESC cuts them short.
fn unfinished() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec!["\x1b[1;", "\x1b[?25", "\x1b", "\x1b("])
        .prop_map(|s| s.as_bytes().to_vec())
}

fn atoms() -> impl Strategy<Value = Vec<Atom>> {
    let atom = prop_oneof![
        6 => text().prop_map(|b| (0u8, b, Vec::new())),
        3 => kept_sequence().prop_map(|b| (1u8, b, Vec::new())),
        3 => query().prop_map(|(b, kept)| (2u8, b, kept)),
        1 => unfinished().prop_map(|b| (3u8, b, Vec::new())),
        // An OSC the next sequence's ESC ends (xterm.js dispatches it): nothing is cut
        // short, but the ring, not knowing what follows the ESC, starts after the next one.
        1 => Just((4u8, b"\x1b]0;ab".to_vec(), Vec::new())),
    ];
    prop::collection::vec(atom, 0..400).prop_map(|raw| {
        let mut atoms: Vec<Atom> = Vec::new();
        let mut last_kind = 0u8;
        for (kind, bytes, kept_c0) in raw {
            let prev_open = atoms.last().is_some_and(|a| !a.safe_after);
            // An unfinished sequence is cut short by what follows; an unterminated OSC is
            // ended by a following ESC but cut short by a C1 introducer.
            let prev_unfinished =
                prev_open && (last_kind == 3 || (last_kind == 4 && bytes.first() == Some(&0xC2)));
            if prev_open && kind == 0 {
                // Only a sequence may follow an unfinished one (text would continue it).
                continue;
            }
            let atom = match kind {
                0 => Atom {
                    kept: bytes.clone(),
                    bytes,
                    safe_after: true,
                    starts_sequence: false,
                },
                1 => Atom {
                    kept: bytes.clone(),
                    bytes,
                    safe_after: true,
                    starts_sequence: true,
                },
                2 => {
                    let mut kept = Vec::new();
                    if prev_unfinished {
                        kept.push(0x18);
                    }
                    kept.extend(kept_c0);
                    Atom {
                        bytes,
                        kept,
                        safe_after: true,
                        starts_sequence: true,
                    }
                }
                _ => Atom {
                    kept: bytes.clone(),
                    bytes,
                    safe_after: false,
                    starts_sequence: true,
                },
            };
            last_kind = kind;
            atoms.push(atom);
        }
        while atoms.last().is_some_and(|a| !a.safe_after) {
            atoms.pop();
        }
        atoms
    })
}

/// The expected replay: the kept bytes from the first safe boundary within the last
/// `RING_CAPACITY` kept bytes.
fn expected(atoms: &[Atom]) -> Vec<u8> {
    let kept: Vec<u8> = atoms.iter().flat_map(|a| a.kept.iter().copied()).collect();
    let window_start = kept.len().saturating_sub(RING_CAPACITY);
    // Every offset of `kept` where a reader may start.
    let mut safe = vec![false; kept.len() + 1];
    safe[0] = true;
    let mut offset = 0;
    for a in atoms {
        let end = offset + a.kept.len();
        // Inside ASCII text and inside a removed query's leftovers (CAN, C0 controls) every
        // byte boundary is a character boundary outside any sequence.
        if end > offset + 1
            && a.kept.iter().all(u8::is_ascii)
            && !(a.starts_sequence && a.kept == a.bytes)
        {
            for s in &mut safe[offset + 1..end] {
                *s = true;
            }
        }
        safe[end] = a.safe_after;
        offset = end;
    }
    match (window_start..=kept.len()).find(|&i| safe[i]) {
        Some(i) => kept[i..].to_vec(),
        None => Vec::new(),
    }
}

/// Where two replays first differ, with some context, escaped: what a failure prints.
fn diff(got: &[u8], want: &[u8]) -> String {
    let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    let from = at.saturating_sub(40);
    let show = |v: &[u8]| {
        v[from.min(v.len())..(at + 40).min(v.len())]
            .escape_ascii()
            .to_string()
    };
    format!(
        "lengths {} / {}, first difference at {at}:\n got  {}\n want {}",
        got.len(),
        want.len(),
        show(got),
        show(want)
    )
}

fn push_chunked(bytes: &[u8], cuts: &[usize]) -> Ring {
    let mut ring = Ring::new();
    let mut at = 0;
    for &c in cuts {
        let end = (at + c).min(bytes.len());
        ring.push(&bytes[at..end]);
        at = end;
    }
    ring.push(&bytes[at..]);
    ring
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// However the output is chunked, the replay is exactly the non-query bytes from the first
    /// safe boundary of the last 64 KiB: it never starts inside a sequence or a character, no
    /// query survives, everything else is there in order.
    #[test]
    fn replay_is_the_kept_bytes_from_a_safe_boundary(
        atoms in atoms(),
        cuts in prop::collection::vec(0usize..3000, 0..200),
    ) {
        let bytes: Vec<u8> = atoms.iter().flat_map(|a| a.bytes.iter().copied()).collect();
        let want = expected(&atoms);
        let got = push_chunked(&bytes, &[]).replay();
        prop_assert!(got == want, "{}", diff(&got, &want));
        let got = push_chunked(&bytes, &cuts).replay();
        prop_assert!(got == want, "chunked: {}", diff(&got, &want));
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Byte at a time gives the same replay as one push, even in the middle of a stream.
    #[test]
    fn byte_at_a_time_is_the_same_as_whole(atoms in atoms(), stop in any::<prop::sample::Index>()) {
        let bytes: Vec<u8> = atoms.iter().flat_map(|a| a.bytes.iter().copied()).collect();
        let stop = if bytes.is_empty() { 0 } else { stop.index(bytes.len()) };
        let mut one = Ring::new();
        for b in &bytes[..stop] {
            one.push(std::slice::from_ref(b));
        }
        let whole = push_chunked(&bytes[..stop], &[]);
        let (got, want) = (one.replay(), whole.replay());
        prop_assert!(got == want, "{}", diff(&got, &want));
    }

}

proptest! {
    /// Arbitrary bytes: chunking never matters, the replay stays bounded, and a replay fed to
    /// a fresh ring comes back unchanged (it starts where a reader may start and holds no
    /// query).
    #[test]
    fn arbitrary_bytes_replay_consistently(
        raw in prop::collection::vec(any::<u8>(), 0..5000),
        cuts in prop::collection::vec(0usize..64, 0..200),
    ) {
        // Half the bytes from the ones sequences are made of, so sequences are common.
        const OFTEN: [u8; 9] = [0x1b, b'[', b']', b'P', b'?', b'\\', 0x07, b'6', b'n'];
        let bytes: Vec<u8> = raw
            .iter()
            .map(|&b| if b & 1 == 0 { OFTEN[usize::from(b >> 1) % OFTEN.len()] } else { b })
            .collect();
        let whole = push_chunked(&bytes, &[]);
        let chunked = push_chunked(&bytes, &cuts);
        let replay = whole.replay();
        let got = chunked.replay();
        prop_assert!(got == replay, "{}", diff(&got, &replay));
        prop_assert!(replay.len() <= RING_CAPACITY + crate::terminal::HOLD_LIMIT + 8);
        let again = push_chunked(&replay, &[]).replay();
        prop_assert!(again == replay, "again: {}", diff(&again, &replay));
    }
}
