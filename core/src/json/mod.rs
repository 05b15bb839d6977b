//! Strict JSON for signed data, and its RFC 8785 canonical form.
//!
//! Signed frames and key sets are read with [`parse_strict`], never with a lenient parser:
//! a signature is only as good as the agreement on what was signed, and lenient parsers
//! disagree about duplicate keys, big numbers and broken surrogates. The strict reader
//! accepts the I-JSON subset (RFC 7493) restricted further to integers:
//!
//! - input must be UTF-8; strings must not hold lone surrogates or raw control characters;
//! - an object must not repeat a key;
//! - numbers must be integers within ±(2^53 − 1) — a fraction or exponent is refused;
//! - nesting is limited to [`MAX_DEPTH`] arrays and objects.
//!
//! [`Value::to_canonical`] writes the RFC 8785 (JCS) form: no whitespace, object members
//! sorted by the UTF-16 code units of their names, strings with the minimal escapes of
//! ECMAScript `JSON.stringify`, integers in plain decimal.
//!
//! This module owns the byte-level agreement on signed JSON and must never accept two
//! different readings of the same bytes.

mod canonical;
mod de;
mod parse;

pub use parse::{MAX_DEPTH, parse_strict, parse_strict_with_depth};

/// The largest integer magnitude accepted: 2^53 − 1, the I-JSON safe range.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A JSON value read by the strict parser.
///
/// Objects keep their members in input order; the parser has already refused duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// An integer within ±(2^53 − 1).
    Int(i64),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object, members in input order, names unique.
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The member `name` of an object, if this is an object that has it.
    pub fn get(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// This value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// This value as an integer, if it is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// Removes and returns the member `name` of an object.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        match self {
            Value::Object(members) => {
                let at = members.iter().position(|(k, _)| k == name)?;
                Some(members.remove(at).1)
            }
            _ => None,
        }
    }

    /// Writes the RFC 8785 canonical form of this value.
    pub fn to_canonical(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        canonical::write_value(self, &mut out);
        out
    }

    /// Appends the RFC 8785 canonical form of this value to `out`.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        canonical::write_value(self, out);
    }

    /// The canonical form of this value, an object, with the member `name` set to the
    /// string `text` computed from everything else: `text_of` gets the canonical bytes of the
    /// object without that member, after `prefix`, and returns the text. The member is added
    /// in its sorted place, so the result is this value's canonical form with the member
    /// added, written once. Returns `None`, calling nothing, when this is not an object or
    /// already has `name`.
    ///
    /// This is how a signature is added to what it signs: `prefix` is the domain separator and
    /// `text_of` signs `prefix || canonical(value)`.
    pub fn write_canonical_with<E>(
        &self,
        prefix: &[u8],
        name: &str,
        text_of: impl FnOnce(&[u8]) -> Result<String, E>,
    ) -> Option<Result<Vec<u8>, E>> {
        let Value::Object(members) = self else {
            return None;
        };
        if members.iter().any(|(k, _)| k == name) {
            return None;
        }
        let mut input = Vec::with_capacity(prefix.len() + 256);
        input.extend_from_slice(prefix);
        let at = canonical::write_object(members, name, &mut input);
        let text = match text_of(&input) {
            Ok(text) => text,
            Err(e) => return Some(Err(e)),
        };
        let mut member = Vec::with_capacity(name.len() + text.len() + 6);
        canonical::write_string(name, &mut member);
        member.push(b':');
        canonical::write_string(&text, &mut member);
        // Before a member that sorts after it, a comma follows; before the closing brace of
        // an object with members, one precedes.
        if input[at] == b'}' {
            if !members.is_empty() {
                member.insert(0, b',');
            }
        } else {
            member.push(b',');
        }
        let mut out = Vec::with_capacity(input.len() - prefix.len() + member.len());
        out.extend_from_slice(&input[prefix.len()..at]);
        out.extend_from_slice(&member);
        out.extend_from_slice(&input[at..]);
        Some(Ok(out))
    }

    /// Reads this value into a typed structure through serde.
    pub fn deserialize_into<T: serde::de::DeserializeOwned>(&self) -> Result<T, JsonError> {
        T::deserialize(de::ValueDeserializer(self)).map_err(|e| JsonError::Shape(e.0))
    }
}

/// Why JSON was refused by the strict reader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The input is not valid UTF-8.
    #[error("invalid UTF-8 at byte {offset}")]
    InvalidUtf8 {
        /// Where the invalid sequence starts.
        offset: usize,
    },
    /// The input ended inside a value.
    #[error("JSON ends early")]
    Truncated,
    /// The input is not JSON.
    #[error("malformed JSON at byte {offset}: {what}")]
    Syntax {
        /// Where the problem is.
        offset: usize,
        /// What was expected or found.
        what: &'static str,
    },
    /// An object names the same member twice.
    #[error("duplicate object key {key:?} at byte {offset}")]
    DuplicateKey {
        /// The member name that appears twice, unescaped.
        key: String,
        /// Where the second occurrence starts.
        offset: usize,
    },
    /// Arrays and objects nest deeper than allowed.
    #[error("nesting deeper than {limit} levels at byte {offset}")]
    TooDeep {
        /// The most arrays and objects allowed inside one another ([`MAX_DEPTH`] unless the caller
        /// chose another).
        limit: usize,
        /// Where the limit was passed.
        offset: usize,
    },
    /// A number with a fraction or exponent.
    #[error("number at byte {offset} is not an integer (signed JSON carries integers only)")]
    FloatNotAllowed {
        /// Where the number starts.
        offset: usize,
    },
    /// An integer outside ±(2^53 − 1).
    #[error("integer at byte {offset} is outside ±(2^53 - 1)")]
    IntegerOutOfRange {
        /// Where the number starts.
        offset: usize,
    },
    /// A `\u` escape of half a surrogate pair.
    #[error("lone surrogate escape at byte {offset}")]
    LoneSurrogate {
        /// Where the escape starts.
        offset: usize,
    },
    /// The value read fine but does not have the shape the reader expected.
    #[error("unexpected shape: {0}")]
    Shape(String),
}

impl JsonError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            JsonError::InvalidUtf8 { .. } => "invalid_utf8",
            JsonError::Truncated => "truncated",
            JsonError::Syntax { .. } => "malformed_json",
            JsonError::DuplicateKey { .. } => "duplicate_key",
            JsonError::TooDeep { .. } => "too_deep",
            JsonError::FloatNotAllowed { .. } => "float_not_allowed",
            JsonError::IntegerOutOfRange { .. } => "integer_out_of_range",
            JsonError::LoneSurrogate { .. } => "lone_surrogate",
            JsonError::Shape(_) => "invalid_frame",
        }
    }
}
