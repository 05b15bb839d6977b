//! The envelope every durable record and snapshot travels in, and its strict reader.
//!
//! The server and the daemon hand their hosts what must survive a crash as typed records
//! ([`crate::server::ServerRecord`], [`crate::daemon::DaemonRecord`]) and snapshots. Each
//! encodes to one JSON document:
//!
//! ```text
//! {"v":1,"type":"server.record","writtenMs":1767225600000,"body":{…}}
//! ```
//!
//! `v` is the format version ([`RECORD_VERSION`]); a reader refuses any other with
//! [`RecordError::UnsupportedVersion`] before it looks at anything else. `type` says which
//! document this is, `writtenMs` when it was written (wall-clock milliseconds; deadlines in
//! the body are rebased from it, see [`crate::time::rebase`]), `body` the content. Reading
//! uses the strict JSON reader (no duplicate keys, integers only) and refuses unknown
//! members, so bytes that were cut, flipped or written by a newer version give a typed error,
//! never a panic and never a half-read record. `docs/RECORDS.md` describes every record.
//!
//! This module owns the envelope only; it never decides what a role keeps.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::json::{self, JsonError, Value};

/// The record format version this build writes and reads.
pub const RECORD_VERSION: i64 = 1;

/// Why bytes were refused as a record or snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The bytes are not strict JSON (cut short, flipped, not UTF-8, …).
    #[error("not a record: {0}")]
    Json(#[from] JsonError),
    /// The document has no integer `v`.
    #[error("the record has no version")]
    MissingVersion,
    /// The document was written by a format version this build does not read.
    #[error("record version {0} is not supported (this build reads version {RECORD_VERSION})")]
    UnsupportedVersion(i64),
    /// The document is of another type (a snapshot where a record was expected, …).
    #[error("expected a {expected:?} document, found {found:?}")]
    WrongType {
        /// What the reader asked for.
        expected: &'static str,
        /// What the bytes say.
        found: String,
    },
    /// The envelope or body does not have the shape of its type.
    #[error("malformed record: {0}")]
    Shape(String),
}

impl RecordError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            RecordError::Json(_) => "record_not_json",
            RecordError::MissingVersion => "record_version_missing",
            RecordError::UnsupportedVersion(_) => "record_version_unsupported",
            RecordError::WrongType { .. } => "record_wrong_type",
            RecordError::Shape(_) => "record_malformed",
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeOut<'a, T> {
    v: i64,
    #[serde(rename = "type")]
    kind: &'a str,
    written_ms: u64,
    body: &'a T,
}

/// Encodes `body` as a document of type `kind` written at `written_ms`.
pub(crate) fn encode<T: Serialize>(kind: &str, written_ms: u64, body: &T) -> Vec<u8> {
    let envelope = EnvelopeOut {
        v: RECORD_VERSION,
        kind,
        written_ms,
        body,
    };
    // Serializing these types cannot fail: every map key is a string and no value is a float.
    serde_json::to_vec(&envelope).unwrap_or_default()
}

/// Reads a document of type `kind`: its `writtenMs` and body.
pub(crate) fn decode<T: DeserializeOwned>(
    kind: &'static str,
    bytes: &[u8],
) -> Result<(u64, T), RecordError> {
    let mut value = json::parse_strict(bytes)?;
    let Value::Object(members) = &value else {
        return Err(RecordError::Shape("a record is a JSON object".into()));
    };
    match value.get("v").map(Value::as_i64) {
        None | Some(None) => return Err(RecordError::MissingVersion),
        Some(Some(RECORD_VERSION)) => {}
        Some(Some(other)) => return Err(RecordError::UnsupportedVersion(other)),
    }
    if let Some((name, _)) = members
        .iter()
        .find(|(name, _)| !matches!(name.as_str(), "v" | "type" | "writtenMs" | "body"))
    {
        return Err(RecordError::Shape(format!("unknown member {name:?}")));
    }
    let found = value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if found != kind {
        return Err(RecordError::WrongType {
            expected: kind,
            found: found.to_owned(),
        });
    }
    let written_ms = value
        .get("writtenMs")
        .and_then(Value::as_i64)
        .and_then(|ms| u64::try_from(ms).ok())
        .ok_or_else(|| RecordError::Shape("writtenMs is not a time".into()))?;
    let body = value
        .remove("body")
        .ok_or_else(|| RecordError::Shape("no body".into()))?;
    let body = body.deserialize_into::<T>().map_err(|e| match e {
        JsonError::Shape(what) => RecordError::Shape(what),
        other => RecordError::Json(other),
    })?;
    Ok((written_ms, body))
}

#[cfg(test)]
mod examples;

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        n: u64,
    }

    #[test]
    fn a_document_round_trips_and_says_when_it_was_written() {
        let bytes = encode("test.body", 42, &Body { n: 7 });
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"v":1,"type":"test.body","writtenMs":42,"body":{"n":7}}"#
        );
        assert_eq!(decode::<Body>("test.body", &bytes), Ok((42, Body { n: 7 })));
    }

    #[test]
    fn versions_types_and_members_are_checked_before_the_body() {
        let read = |s: &str| decode::<Body>("test.body", s.as_bytes());
        assert_eq!(
            read(r#"{"v":2,"type":"test.body","writtenMs":1,"body":{"x":"y"}}"#),
            Err(RecordError::UnsupportedVersion(2))
        );
        assert_eq!(
            read(r#"{"type":"test.body","writtenMs":1,"body":{"n":1}}"#),
            Err(RecordError::MissingVersion)
        );
        assert!(matches!(
            read(r#"{"v":1,"type":"other","writtenMs":1,"body":{"n":1}}"#),
            Err(RecordError::WrongType { .. })
        ));
        for bad in [
            r#"{"v":1,"type":"test.body","writtenMs":1,"body":{"n":1},"extra":0}"#,
            r#"{"v":1,"type":"test.body","writtenMs":-1,"body":{"n":1}}"#,
            r#"{"v":1,"type":"test.body","writtenMs":1,"body":{"n":1,"m":2}}"#,
            r#"{"v":1,"type":"test.body","writtenMs":1}"#,
            r#"[1]"#,
        ] {
            assert!(matches!(read(bad), Err(RecordError::Shape(_))), "{bad}");
        }
        assert!(matches!(
            read(r#"{"v":1,"v":1,"type":"test.body","writtenMs":1,"body":{"n":1}}"#),
            Err(RecordError::Json(JsonError::DuplicateKey { .. }))
        ));
    }

    #[test]
    fn every_cut_of_a_document_is_a_typed_error() {
        let bytes = encode("test.body", 42, &Body { n: 7 });
        for end in 0..bytes.len() {
            assert!(decode::<Body>("test.body", &bytes[..end]).is_err());
        }
    }
}
