//! `canonical-json.json`.

use outpost_core::json::{MAX_DEPTH, parse_strict};

use super::raw;
use crate::model::{CanonicalJsonCase, VectorFile};

fn case(name: &str, input: &[u8]) -> CanonicalJsonCase {
    let (valid, error, canonical_hex) = match parse_strict(input) {
        Ok(v) => (true, None, Some(hex::encode(v.to_canonical()))),
        Err(e) => (false, Some(e.code().to_owned()), None),
    };
    CanonicalJsonCase {
        name: name.into(),
        valid,
        error,
        input: raw(input),
        input_hex: hex::encode(input),
        canonical_hex,
    }
}

pub(super) fn file() -> VectorFile<CanonicalJsonCase> {
    let deep_ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    let deep_bad = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
    let cases = vec![
        case("literals_and_whitespace", b"{\t\"b\" : true ,\r\n\"a\" : [ null , false ] }"),
        case("surrounding_whitespace", b" \n[1] \t"),
        case("nested_key_order", br#"{"z":{"b":1,"a":2},"a":{"d":[3,{"y":1,"x":2}],"c":"s"}}"#),
        // RFC 8785 §3.2.3: sorting by UTF-16 code units, not code points.
        case(
            "rfc8785_key_order_utf16",
            r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#.as_bytes(),
        ),
        case("raw_non_ascii_keys", "{\"\u{1F600}\":1,\"\u{FB33}\":2,\"é\":3,\"e\":4}".as_bytes()),
        case(
            "string_escapes",
            br#"["\u0000\u0001\u001f", "\b\f\n\r\t", "\"\\\/", "\u007f\u0080\u2028\u2029", "\u00e9\u4e2d\ud83d\ude00"]"#,
        ),
        case("integers", b"[0, -0, 1, -1, 9007199254740991, -9007199254740991, 100]"),
        case("empty_containers", b"{\"a\":{},\"b\":[],\"c\":\"\"}"),
        case("max_depth", deep_ok.as_bytes()),
        case("duplicate_key", br#"{"a":1,"b":2,"a":3}"#),
        case("duplicate_key_after_escape", br#"{"a":1,"\u0061":2}"#),
        case("float", b"{\"a\":1.5}"),
        case("float_with_zero_fraction", b"{\"a\":1.0}"),
        case("exponent", b"{\"a\":1e2}"),
        case("integer_beyond_2_53", b"{\"a\":9007199254740992}"),
        case("lone_high_surrogate", br#"["\ud800"]"#),
        case("lone_low_surrogate", br#"["\udc00x"]"#),
        case("too_deep", deep_bad.as_bytes()),
        case("invalid_utf8", b"[\"\xc3\x28\"]"),
        case("raw_control_character", b"[\"a\tb\"]"),
        case("leading_zero", b"[01]"),
        case("unknown_escape", br#"["\x41"]"#),
        case("trailing_comma", b"[1,]"),
        case("truncated", b"{\"a\":[1,2"),
        case("trailing_garbage", b"{} {}"),
    ];
    VectorFile {
        kind: "canonical-json".into(),
        description: "The strict JSON reader and RFC 8785 canonical form used for signed data. \
            Read the bytes `input_hex` (also embedded verbatim as `input` where a JSON file can \
            hold them). Valid cases: the canonical form is exactly `canonical_hex`. Invalid \
            cases: refused with `error` (duplicate keys, non-integers, integers beyond \
            ±(2^53-1), lone surrogates, more than 32 levels of nesting, invalid UTF-8 and \
            malformed JSON are all refused)."
            .into(),
        cases,
    }
}
