//! The strict reader: bytes to [`Value`], refusing everything the module docs list.

use super::{JsonError, MAX_SAFE_INTEGER, Value};

/// The default limit on nested arrays and objects.
pub const MAX_DEPTH: usize = 32;

/// Reads `input` as one strict JSON value with the default depth limit.
pub fn parse_strict(input: &[u8]) -> Result<Value, JsonError> {
    parse_strict_with_depth(input, MAX_DEPTH)
}

/// Reads `input` as one strict JSON value, nesting at most `max_depth` levels.
pub fn parse_strict_with_depth(input: &[u8], max_depth: usize) -> Result<Value, JsonError> {
    if let Err(e) = core::str::from_utf8(input) {
        return Err(JsonError::InvalidUtf8 {
            offset: e.valid_up_to(),
        });
    }
    let mut p = Parser {
        bytes: input,
        pos: 0,
        max_depth,
    };
    p.skip_ws();
    let value = p.value(0)?;
    p.skip_ws();
    if p.pos != input.len() {
        return Err(p.syntax("trailing characters after the value"));
    }
    Ok(value)
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    max_depth: usize,
}

/// Objects larger than this are checked for duplicates by sorting, not by scanning.
const LINEAR_DUPLICATE_SCAN: usize = 16;

impl<'a> Parser<'a> {
    fn syntax(&self, what: &'static str) -> JsonError {
        if self.pos >= self.bytes.len() {
            JsonError::Truncated
        } else {
            JsonError::Syntax {
                offset: self.pos,
                what,
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, literal: &'static [u8], value: Value) -> Result<Value, JsonError> {
        let end = self.pos + literal.len();
        match self.bytes.get(self.pos..end) {
            Some(s) if s == literal => {
                self.pos = end;
                Ok(value)
            }
            Some(_) => Err(self.syntax("unknown literal")),
            None => Err(JsonError::Truncated),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        match self.peek() {
            None => Err(JsonError::Truncated),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.expect_literal(b"true", Value::Bool(true)),
            Some(b'f') => self.expect_literal(b"false", Value::Bool(false)),
            Some(b'n') => self.expect_literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.syntax("expected a value")),
        }
    }

    fn enter(&self, depth: usize) -> Result<(), JsonError> {
        if depth > self.max_depth {
            return Err(JsonError::TooDeep {
                limit: self.max_depth,
                offset: self.pos,
            });
        }
        Ok(())
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.enter(depth)?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.syntax("expected ',' or ']'")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.enter(depth)?;
        let start = self.pos;
        self.pos += 1; // '{'
        let mut members: Vec<(String, Value)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a member name"));
            }
            let key_at = self.pos;
            let key = self.string()?;
            if members.len() < LINEAR_DUPLICATE_SCAN && members.iter().any(|(k, _)| *k == key) {
                return Err(JsonError::DuplicateKey {
                    key,
                    offset: key_at,
                });
            }
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("expected ':'"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value(depth)?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.syntax("expected ',' or '}'")),
            }
        }
        if members.len() > LINEAR_DUPLICATE_SCAN {
            let mut names: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
            names.sort_unstable();
            if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
                return Err(JsonError::DuplicateKey {
                    key: pair[0].to_owned(),
                    offset: start,
                });
            }
        }
        Ok(Value::Object(members))
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let digits_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = self.peek() {
                    self.pos += 1;
                }
            }
            _ => return Err(self.syntax("expected a digit")),
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return Err(JsonError::FloatNotAllowed { offset: start });
        }
        if let Some(b'0'..=b'9') = self.peek() {
            return Err(self.syntax("leading zero"));
        }
        let digits = &self.bytes[digits_start..self.pos];
        // 16 digits already exceed 2^53; refuse before any arithmetic can overflow.
        if digits.len() > 16 {
            return Err(JsonError::IntegerOutOfRange { offset: start });
        }
        let magnitude = digits
            .iter()
            .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
        if magnitude > MAX_SAFE_INTEGER {
            return Err(JsonError::IntegerOutOfRange { offset: start });
        }
        Ok(Value::Int(if negative { -magnitude } else { magnitude }))
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let Some(hex) = self.bytes.get(self.pos..self.pos + 4) else {
            return Err(JsonError::Truncated);
        };
        let mut v: u16 = 0;
        for &h in hex {
            let d = match h {
                b'0'..=b'9' => h - b'0',
                b'a'..=b'f' => h - b'a' + 10,
                b'A'..=b'F' => h - b'A' + 10,
                _ => return Err(self.syntax("bad \\u escape")),
            };
            v = (v << 4) | u16::from(d);
        }
        self.pos += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.pos += 1; // opening quote
        let mut out = String::new();
        loop {
            // Copy the longest run of plain characters at once.
            let run_start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // The whole input is valid UTF-8 and runs end at ASCII bytes, so this cannot fail.
            let run = core::str::from_utf8(&self.bytes[run_start..self.pos])
                .map_err(|_| JsonError::InvalidUtf8 { offset: run_start })?;
            out.push_str(run);
            match self.peek() {
                None => return Err(JsonError::Truncated),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => self.escape(&mut out)?,
                Some(_) => return Err(self.syntax("raw control character in string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let at = self.pos;
        self.pos += 1; // backslash
        let Some(kind) = self.peek() else {
            return Err(JsonError::Truncated);
        };
        self.pos += 1;
        let c = match kind {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                match first {
                    0xD800..=0xDBFF => {
                        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return Err(JsonError::LoneSurrogate { offset: at });
                        }
                        self.pos += 2;
                        let second = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err(JsonError::LoneSurrogate { offset: at });
                        }
                        let code = 0x10000
                            + ((u32::from(first) - 0xD800) << 10)
                            + (u32::from(second) - 0xDC00);
                        char::from_u32(code).ok_or(JsonError::LoneSurrogate { offset: at })?
                    }
                    0xDC00..=0xDFFF => return Err(JsonError::LoneSurrogate { offset: at }),
                    _ => char::from_u32(u32::from(first))
                        .ok_or(JsonError::LoneSurrogate { offset: at })?,
                }
            }
            _ => {
                self.pos = at;
                return Err(self.syntax("unknown escape"));
            }
        };
        out.push(c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(input: &str) -> JsonError {
        parse_strict(input.as_bytes()).unwrap_err()
    }

    #[test]
    fn reads_plain_values() {
        let v = parse_strict(br#" {"a": [1, -2, true, null, "x\u00e9\ud83d\ude00"], "b": {}} "#)
            .unwrap();
        assert_eq!(
            v.get("a"),
            Some(&Value::Array(vec![
                Value::Int(1),
                Value::Int(-2),
                Value::Bool(true),
                Value::Null,
                Value::String("xé😀".into()),
            ]))
        );
        assert_eq!(v.get("b"), Some(&Value::Object(vec![])));
    }

    #[test]
    fn refuses_what_the_module_promises_to_refuse() {
        assert_eq!(err(r#"{"a":1,"a":2}"#).code(), "duplicate_key");
        assert_eq!(err("1.5").code(), "float_not_allowed");
        assert_eq!(err("1e3").code(), "float_not_allowed");
        assert_eq!(err("9007199254740992").code(), "integer_out_of_range");
        assert_eq!(
            err("-99999999999999999999999").code(),
            "integer_out_of_range"
        );
        assert_eq!(
            parse_strict(b"9007199254740991").unwrap(),
            Value::Int(MAX_SAFE_INTEGER)
        );
        assert_eq!(err(r#""\ud800""#).code(), "lone_surrogate");
        assert_eq!(err(r#""\udc00\ud800""#).code(), "lone_surrogate");
        assert_eq!(err("\"a\u{1}\"").code(), "malformed_json");
        assert_eq!(err("01").code(), "malformed_json");
        assert_eq!(err("[1,]").code(), "malformed_json");
        assert_eq!(err("{\"a\":1} x").code(), "malformed_json");
        assert_eq!(err("{\"a\":").code(), "truncated");
        assert_eq!(err("\"abc").code(), "truncated");
        assert_eq!(
            parse_strict(b"\"\xff\"").unwrap_err(),
            JsonError::InvalidUtf8 { offset: 1 }
        );
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(err(&deep).code(), "too_deep");
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse_strict(ok.as_bytes()).is_ok());
    }

    #[test]
    fn duplicates_in_large_objects_are_found() {
        let mut text = String::from("{");
        for i in 0..100 {
            text.push_str(&format!("\"k{i}\":{i},"));
        }
        text.push_str("\"k7\":0}");
        match err(&text) {
            JsonError::DuplicateKey { key, .. } => assert_eq!(key, "k7"),
            other => panic!("expected a duplicate key, got {other:?}"),
        }
    }
}
