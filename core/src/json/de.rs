//! Reading a strict [`Value`] into typed structures through serde, without a second parse.

use super::Value;
use core::fmt;
use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, Visitor};

/// A serde error raised while reading a [`Value`].
#[derive(Debug)]
pub(super) struct DeError(pub String);

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError(msg.to_string())
    }
}

/// A serde deserializer over a borrowed [`Value`].
pub(super) struct ValueDeserializer<'a>(pub &'a Value);

impl<'de> IntoDeserializer<'de, DeError> for ValueDeserializer<'_> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> de::Deserializer<'de> for ValueDeserializer<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => match u64::try_from(*i) {
                Ok(u) => visitor.visit_u64(u),
                Err(_) => visitor.visit_i64(*i),
            },
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.iter().map(ValueDeserializer));
                let out = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(out)
            }
            Value::Object(members) => {
                let mut map = MapDeserializer::new(
                    members
                        .iter()
                        .map(|(k, v)| (k.as_str(), ValueDeserializer(v))),
                );
                let out = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(out)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self.0 {
            // Unit variants are written as their name.
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => Err(de::Error::custom("expected an enum variant name")),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use crate::json::parse_strict;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Sample {
        run_id: String,
        count: u32,
        offset: i64,
        tags: Vec<String>,
        note: Option<String>,
        mode: Mode,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Ro,
        Rw,
    }

    #[test]
    fn reads_typed_structures_and_ignores_unknown_members() {
        let v = parse_strict(
            br#"{"runId":"r1","count":3,"offset":-4,"tags":["a"],"note":null,"mode":"rw","extra":{"x":1}}"#,
        )
        .unwrap();
        let s: Sample = v.deserialize_into().unwrap();
        assert_eq!(
            s,
            Sample {
                run_id: "r1".into(),
                count: 3,
                offset: -4,
                tags: vec!["a".into()],
                note: None,
                mode: Mode::Rw,
            }
        );
    }

    #[test]
    fn wrong_shapes_are_errors_not_panics() {
        let v =
            parse_strict(br#"{"runId":"r1","count":-1,"offset":0,"tags":[],"mode":"rx"}"#).unwrap();
        assert_eq!(
            v.deserialize_into::<Sample>().unwrap_err().code(),
            "invalid_frame"
        );
    }
}
