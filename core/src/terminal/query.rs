//! Which complete escape sequences are terminal *queries*: sequences a terminal emulator
//! answers by sending bytes back as if typed. A replay must not carry them, or every viewer
//! that joins late answers them again and the answers reach the program as input.
//!
//! Removed (the judgement reads the sequence with C0 controls and DEL taken out, as the
//! emulator does; `Ps` is a decimal parameter, an empty one counts as its default):
//!
//! | sequence | name |
//! |---|---|
//! | `CSI c`, `CSI 0 c` | DA1, primary device attributes |
//! | `CSI > c`, `CSI > 0 c` | DA2, secondary device attributes |
//! | `CSI = c`, `CSI = 0 c` | DA3, tertiary device attributes |
//! | `ESC Z` | DECID (answered like DA1) |
//! | `CSI 5 n`, `CSI 6 n` | DSR status, CPR cursor position |
//! | `CSI ? Ps… n` (any parameters) | DEC-specific DSR (DECXCPR, printer, UDK, keyboard, locator, colour scheme, …) |
//! | `CSI Ps $ p`, `CSI ? Ps $ p` | DECRQM, request ANSI / DEC mode |
//! | `CSI > q`, `CSI > 0 q` | XTVERSION |
//! | `CSI ? Ps m` | XTQMODKEYS, query key modifier options |
//! | `CSI Ps… t` with first `Ps` in 11, 13, 14, 15, 16, 18, 19, 20, 21 | XTWINOPS reports (state, position, size in pixels and cells, screen size, icon and window title) |
//! | `CSI Ps $ w` | DECRQPSR, presentation state report |
//! | `CSI Ps $ u` | DECRQTSR, terminal state report |
//! | `CSI x`, `CSI 0 x`, `CSI 1 x` | DECREQTPARM |
//! | `CSI ? u` | kitty keyboard protocol: query flags |
//! | `CSI ? Ps… S` | XTSMGRAPHICS (every form is answered) |
//! | `CSI Ps… # \|` | XTREPORTSGR |
//! | `CSI Ps… * y` | DECRQCRA, checksum of a rectangle |
//! | `CSI " v` | DECRQDE, displayed extent |
//! | `DCS $ q … ST` | DECRQSS, request setting |
//! | `DCS + q … ST` | XTGETTCAP, request termcap/terminfo capability |
//! | `OSC 4 ; c ; ? ST`, `OSC 5 ; c ; ? ST` (any pair's spec is `?`) | palette / special colour query |
//! | `OSC 10…19 ; ? ST` (any value is `?`) | dynamic colour query (foreground, background, cursor, …) |
//! | `OSC 21 ; key=? ST` (any item ends `=?`) | kitty colour query |
//! | `OSC 52 ; sel ; ? ST` | clipboard read (would hand a viewer's clipboard to the program) |
//! | `OSC 60`, `OSC 61`, `OSC 62` | XTQALLOWED / XTQDISALLOWED / XTQALLOWABLE |
//!
//! An OSC that sets some colours and asks for others is removed whole. Kept on purpose: ENQ
//! (xterm's answerback is empty by default and xterm.js has none), `CSI > Ps n` (it *sets*
//! modifier options), APC strings (the kitty graphics protocol's replies are not sent to
//! programs by xterm.js), and everything not in the table.

/// What a sequence begins with, and how many bytes its introducer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// `ESC` followed by intermediates and a final byte.
    Esc,
    /// `ESC [` or U+009B.
    Csi,
    /// `ESC ]` or U+009D.
    Osc,
    /// `ESC P` or U+0090.
    Dcs,
    /// Anything else (SOS, PM, APC, a lone introducer).
    Other,
}

/// The kind of the sequence `seq` (its bytes from the introducer on) and its body after the
/// introducer.
pub(super) fn kind(seq: &[u8]) -> (Kind, &[u8]) {
    match seq {
        [0x1B, b'[', rest @ ..] | [0xC2, 0x9B, rest @ ..] => (Kind::Csi, rest),
        [0x1B, b']', rest @ ..] | [0xC2, 0x9D, rest @ ..] => (Kind::Osc, rest),
        [0x1B, b'P', rest @ ..] | [0xC2, 0x90, rest @ ..] => (Kind::Dcs, rest),
        [0x1B, b'X' | b'^' | b'_', ..] => (Kind::Other, &[]),
        [0x1B, rest @ ..] => (Kind::Esc, rest),
        _ => (Kind::Other, &[]),
    }
}

/// True when the complete, dispatched sequence `seq` is a query in the module's table.
pub(super) fn is_query(seq: &[u8]) -> bool {
    let (kind, body) = kind(seq);
    let body = if kind == Kind::Osc {
        strip_terminator(body)
    } else {
        body
    };
    let body: Vec<u8> = body
        .iter()
        .copied()
        .filter(|&b| b >= 0x20 && b != 0x7F)
        .collect();
    match kind {
        Kind::Esc => body == b"Z",
        Kind::Csi => csi_is_query(&body),
        Kind::Osc => osc_is_query(&body),
        Kind::Dcs => dcs_header_is_query(seq),
        Kind::Other => false,
    }
}

/// True when the DCS whose header (introducer to final byte) starts `seq` is DECRQSS or
/// XTGETTCAP: decided when the header ends, before the string.
pub(super) fn dcs_header_is_query(seq: &[u8]) -> bool {
    let (Kind::Dcs, body) = kind(seq) else {
        return false;
    };
    let header: Vec<u8> = body
        .iter()
        .copied()
        .filter(|&b| b >= 0x20 && b != 0x7F)
        .take_while(|&b| b < 0x40)
        .collect();
    let Some(&final_byte) = body
        .iter()
        .filter(|&&b| b >= 0x20 && b != 0x7F)
        .find(|&&b| b >= 0x40)
    else {
        return false;
    };
    let intermediates: Vec<u8> = header
        .iter()
        .copied()
        .filter(|b| (0x20..=0x2F).contains(b))
        .collect();
    final_byte == b'q' && (intermediates == b"$" || intermediates == b"+")
}

/// A CSI body (after the introducer, C0 and DEL removed) split into its parts.
struct Csi<'a> {
    marker: Option<u8>,
    params: Vec<Option<u32>>,
    intermediates: &'a [u8],
    final_byte: u8,
}

fn parse_csi(body: &[u8]) -> Option<Csi<'_>> {
    let (&final_byte, rest) = body.split_last()?;
    if !(0x40..=0x7E).contains(&final_byte) || rest.iter().any(|&b| b >= 0x80) {
        return None;
    }
    let (marker, rest) = match rest.split_first() {
        Some((&m, rest)) if (0x3C..=0x3F).contains(&m) => (Some(m), rest),
        _ => (None, rest),
    };
    let split = rest
        .iter()
        .position(|b| (0x20..=0x2F).contains(b))
        .unwrap_or(rest.len());
    let (params, intermediates) = rest.split_at(split);
    if params.iter().any(|b| !(0x30..=0x3B).contains(b))
        || intermediates.iter().any(|b| !(0x20..=0x2F).contains(b))
    {
        return None;
    }
    let params = if params.is_empty() {
        Vec::new()
    } else {
        params.split(|&b| b == b';').map(param).collect()
    };
    Some(Csi {
        marker,
        params,
        intermediates,
        final_byte,
    })
}

/// A parameter's value: `None` when empty (the default) or not plain decimal (a
/// sub-parameter list).
fn param(p: &[u8]) -> Option<u32> {
    if p.is_empty() || p.len() > 9 || !p.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(p).ok()?.parse().ok()
}

fn csi_is_query(body: &[u8]) -> bool {
    let Some(csi) = parse_csi(body) else {
        return false;
    };
    let first = csi.params.first().copied().flatten();
    let only_default_or_zero = csi.params.len() <= 1 && matches!(first, None | Some(0));
    let marker = csi.marker.map(char::from);
    let inter = csi.intermediates;
    match (marker, inter, char::from(csi.final_byte)) {
        (None | Some('>') | Some('='), b"", 'c') => only_default_or_zero,
        (None, b"", 'n') => csi.params.len() == 1 && matches!(first, Some(5 | 6)),
        (Some('?'), b"", 'n') => true,
        (None | Some('?'), b"$", 'p') => true,
        (Some('>'), b"", 'q') => only_default_or_zero,
        (Some('?'), b"", 'm') => true,
        (None, b"", 't') => matches!(first, Some(11 | 13 | 14 | 15 | 16 | 18 | 19 | 20 | 21)),
        (None, b"$", 'w' | 'u') => true,
        (None, b"", 'x') => csi.params.len() <= 1 && matches!(first, None | Some(0 | 1)),
        (Some('?'), b"", 'u') => csi.params.is_empty(),
        (Some('?'), b"", 'S') => true,
        (None, b"#", '|') => true,
        (None, b"*", 'y') => true,
        (None, b"\"", 'v') => true,
        _ => false,
    }
}

/// An OSC body without its terminator (BEL, `ESC \` or U+009C).
fn strip_terminator(body: &[u8]) -> &[u8] {
    if let Some(rest) = body.strip_suffix(b"\x1b\\") {
        return rest;
    }
    if let Some(rest) = body.strip_suffix(b"\xc2\x9c") {
        return rest;
    }
    body.strip_suffix(b"\x07").unwrap_or(body)
}

fn osc_is_query(data: &[u8]) -> bool {
    let mut parts = data.split(|&b| b == b';');
    let Some(ps) = parts.next().and_then(param) else {
        return false;
    };
    let rest: Vec<&[u8]> = parts.collect();
    match ps {
        // Pairs of (colour number, spec).
        4 | 5 => rest.iter().skip(1).step_by(2).any(|spec| *spec == b"?"),
        10..=19 => rest.iter().any(|v| *v == b"?"),
        21 => rest.iter().any(|item| item.ends_with(b"=?")),
        52 => rest.get(1).is_some_and(|d| *d == b"?"),
        60..=62 => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_queries_are_queries() {
        for q in [
            &b"\x1b[c"[..],
            b"\x1b[0c",
            b"\x1b[>c",
            b"\x1b[>0c",
            b"\x1b[=c",
            b"\x1bZ",
            b"\x1b[5n",
            b"\x1b[6n",
            b"\x1b[?6n",
            b"\x1b[?996n",
            b"\x1b[4$p",
            b"\x1b[?2004$p",
            b"\x1b[>q",
            b"\x1b[?4m",
            b"\x1b[14t",
            b"\x1b[14;2t",
            b"\x1b[18t",
            b"\x1b[21t",
            b"\x1b[1$w",
            b"\x1b[1$u",
            b"\x1b[x",
            b"\x1b[?u",
            b"\x1b[?1;1S",
            b"\x1b[1;1;2;2#|",
            b"\x1b[1;1;1;1;2;2*y",
            b"\x1b[\"v",
            b"\xc2\x9b6n",
            b"\x1b[6\nn",
            b"\x1bP$qm\x1b\\",
            b"\x1bP+q544e\x1b\\",
            b"\x1b]11;?\x07",
            b"\x1b]10;?\x1b\\",
            b"\x1b]4;1;?\x07",
            b"\x1b]4;1;red;2;?\x07",
            b"\x1b]12;\n?\x07",
            b"\x1b]21;foreground=?\x07",
            b"\x1b]52;c;?\x07",
            b"\x1b]60\x07",
            b"\xc2\x9d11;?\xc2\x9c",
        ] {
            assert!(is_query(q), "{:?}", String::from_utf8_lossy(q));
        }
    }

    #[test]
    fn look_alikes_are_not_queries() {
        for q in [
            &b"\x1b[m"[..],
            b"\x1b[1c",
            b"\x1b[>1n",
            b"\x1b[3n",
            b"\x1b[2J",
            b"\x1b[22t",
            b"\x1b[8;24;80t",
            b"\x1b[>4;1m",
            b"\x1b[?25h",
            b"\x1b[>1u",
            b"\x1b[2x",
            b"\x1b[2*x",
            b"\x1b(B",
            b"\x1b7",
            b"\x1bPqsixel\x1b\\",
            b"\x1bP$p\x1b\\",
            b"\x1b]0;?\x07",
            b"\x1b]4;1;red\x07",
            b"\x1b]11;#000000\x07",
            b"\x1b]52;c;aGk=\x07",
            b"\x1b]8;;http://x/?\x07",
            b"\x1b_Ga=q\x1b\\",
        ] {
            assert!(!is_query(q), "{:?}", String::from_utf8_lossy(q));
        }
    }
}
