//! RFC 8785 (JCS) output for [`Value`].

use super::Value;
use core::cmp::Ordering;

pub(super) fn write_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int(i) => write_int(*i, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out);
            }
            out.push(b']');
        }
        Value::Object(members) => {
            write_object(members, "", out);
        }
    }
}

/// Writes the object `members` and returns where in `out` a member named `slot` would start
/// were it added: the opening quote of the first member that sorts after it, or the closing
/// brace when none does. An empty `slot` sorts first.
pub(super) fn write_object(members: &[(String, Value)], slot: &str, out: &mut Vec<u8>) -> usize {
    let mut order: Vec<&(String, Value)> = members.iter().collect();
    order.sort_by(|a, b| utf16_cmp(&a.0, &b.0));
    out.push(b'{');
    let mut at = None;
    for (i, (name, value)) in order.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if at.is_none() && utf16_cmp(name, slot) == Ordering::Greater {
            at = Some(out.len());
        }
        write_string(name, out);
        out.push(b':');
        write_value(value, out);
    }
    let at = at.unwrap_or(out.len());
    out.push(b'}');
    at
}

/// Member names sort by their UTF-16 code units (RFC 8785 §3.2.3).
fn utf16_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_int(i: i64, out: &mut Vec<u8>) {
    // Integers within ±(2^53 − 1) print the same in ECMAScript as in plain decimal.
    let mut buf = [0u8; 20];
    let mut n = i.unsigned_abs();
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if i < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&buf[at..]);
}

pub(super) fn write_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x09 => Some(b"\\t"),
            0x0a => Some(b"\\n"),
            0x0c => Some(b"\\f"),
            0x0d => Some(b"\\r"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[run_start..i]);
        run_start = i + 1;
        match escape {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
    }
    out.extend_from_slice(&bytes[run_start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use crate::json::{Value, parse_strict};

    fn canon(input: &str) -> String {
        String::from_utf8(parse_strict(input.as_bytes()).unwrap().to_canonical()).unwrap()
    }

    #[test]
    fn sorts_members_and_drops_whitespace() {
        assert_eq!(
            canon(r#"{ "b": 1, "a": [ 2 , {"d":null,"c":true} ] }"#),
            r#"{"a":[2,{"c":true,"d":null}],"b":1}"#
        );
    }

    #[test]
    fn escapes_like_json_stringify() {
        assert_eq!(
            canon(r#""\u0041\/\"\\\b\f\n\r\t\u0001\u001f\u007f\u2028é""#),
            "\"A/\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}\u{2028}é\""
        );
    }

    #[test]
    fn sorts_by_utf16_code_units_not_code_points() {
        // U+FB33 sorts after U+1F600 in UTF-16 (0xFB33 > 0xD83D) but before it by code point.
        assert_eq!(
            canon("{\"\u{1F600}\":1,\"\u{FB33}\":2}"),
            "{\"\u{1F600}\":1,\"\u{FB33}\":2}"
        );
        assert_eq!(
            canon("{\"\u{FB33}\":2,\"\u{1F600}\":1}"),
            "{\"\u{1F600}\":1,\"\u{FB33}\":2}"
        );
        assert_eq!(
            canon(r#"{"b":1,"a":2,"\r":3,"1":4}"#),
            r#"{"\r":3,"1":4,"a":2,"b":1}"#
        );
    }

    #[test]
    fn integers_print_plainly() {
        assert_eq!(
            canon("[0,-0,-9007199254740991,9007199254740991,10]"),
            "[0,0,-9007199254740991,9007199254740991,10]"
        );
    }

    #[test]
    fn a_member_written_into_its_place_matches_the_canonical_form_with_it() {
        // Before every member, between two, after every member, into an empty object, among
        // names that sort differently by UTF-16 and by code point, and with a text that needs
        // escaping.
        let objects = [
            r#"{"type":"run.commit","runId":"r"}"#,
            r#"{"seq":1,"sid":"s","kid":"k","type":"t"}"#,
            r#"{"a":1,"b":[1,{"z":2,"sig2":3}]}"#,
            "{}",
            "{\"\u{FB33}\":1,\"\u{1F600}\":2,\"si\":3}",
        ];
        for text in objects {
            for name in ["sig", "\u{FB00}", ""] {
                let value = parse_strict(text.as_bytes()).unwrap();
                let mut seen = Vec::new();
                let written = value
                    .write_canonical_with(b"pre\0", name, |input| {
                        seen = input.to_vec();
                        Ok::<_, ()>(format!("t\"{}", input.len()))
                    })
                    .unwrap()
                    .unwrap();
                let mut expected_input = b"pre\0".to_vec();
                expected_input.extend(value.to_canonical());
                assert_eq!(
                    seen, expected_input,
                    "{text}: the bytes handed to the closure"
                );
                let mut with = value.clone();
                if let Value::Object(members) = &mut with {
                    let text = format!("t\"{}", expected_input.len());
                    members.push((name.to_owned(), Value::String(text)));
                }
                assert_eq!(
                    String::from_utf8(written).unwrap(),
                    String::from_utf8(with.to_canonical()).unwrap(),
                    "{text} with {name:?}"
                );
            }
        }
        // Not an object, or the member already there: nothing is written or called.
        let refuse = |text: &str| {
            parse_strict(text.as_bytes())
                .unwrap()
                .write_canonical_with(b"", "sig", |_| -> Result<String, ()> {
                    panic!("called for {text}")
                })
                .is_none()
        };
        assert!(refuse("[1]"));
        assert!(refuse(r#"{"sig":"x"}"#));
    }
}
