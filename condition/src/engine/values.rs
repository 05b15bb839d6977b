//! Reading what the program left behind: thrown values and its return.
//!
//! Owns the mapping from JS exceptions to [`CheckError`] and the return contract
//! (`false | { resumeText, payload? }`). Every read here may run program code (getters,
//! proxies, `toJSON`); this module must never panic or trust a value's shape.

use rquickjs::{Ctx, Object, Value};

use crate::{CheckError, Limits, Verdict};

/// Longest error message kept from the program.
const MAX_MESSAGE: usize = 1024;
/// Longest `.code` kept from a thrown error.
const MAX_CODE: usize = 64;

/// Where an exception came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Evaluating the source to a function: a `SyntaxError` is [`CheckError::Syntax`].
    Compile,
    /// Running it.
    Run,
}

/// A thrown value as text.
pub(super) struct Thrown {
    pub(super) name: Option<String>,
    pub(super) message: String,
    pub(super) code: Option<String>,
}

/// An engine error as a check error (the caller checks the stop reasons first).
pub(super) fn failure<'js>(
    ctx: &Ctx<'js>,
    error: rquickjs::Error,
    phase: Phase,
    limits: &Limits,
) -> CheckError {
    match error {
        rquickjs::Error::Exception => thrown(ctx, &ctx.catch(), phase, limits),
        rquickjs::Error::Allocation => CheckError::MemoryLimit {
            limit: limits.memory_bytes,
        },
        rquickjs::Error::InvalidString(_) if phase == Phase::Compile => CheckError::Syntax {
            message: "the source contains a NUL byte".into(),
        },
        other => CheckError::Engine {
            message: other.to_string(),
        },
    }
}

/// A thrown value as a check error.
pub(super) fn thrown<'js>(
    ctx: &Ctx<'js>,
    value: &Value<'js>,
    phase: Phase,
    limits: &Limits,
) -> CheckError {
    if is_out_of_memory(value) {
        return CheckError::MemoryLimit {
            limit: limits.memory_bytes,
        };
    }
    if is_stack_overflow(value) {
        return CheckError::StackOverflow {
            limit: limits.max_stack_bytes,
        };
    }
    let thrown = describe(ctx, value);
    if phase == Phase::Compile && thrown.name.as_deref() == Some("SyntaxError") {
        return CheckError::Syntax {
            message: thrown.message,
        };
    }
    CheckError::Threw {
        message: thrown.message,
        code: thrown.code,
    }
}

/// Whether `value` is the engine running out of memory or stack (never the program's own
/// error to handle: a `ctx` call re-throws these).
pub(super) fn is_resource_error(value: &Value<'_>) -> bool {
    is_out_of_memory(value) || is_stack_overflow(value)
}

/// QuickJS throws an `InternalError("out of memory")`, or `null` when it cannot even allocate
/// that error (a program's own uncaught `throw null` is taken for the same).
fn is_out_of_memory(value: &Value<'_>) -> bool {
    value.is_null() || error_is(value, "InternalError", "out of memory")
}

fn is_stack_overflow(value: &Value<'_>) -> bool {
    error_is(value, "RangeError", "Maximum call stack size exceeded")
}

/// Whether `value` is an `Error` with this name and message. A getter on either may run
/// program code; one that throws counts as "no".
fn error_is(value: &Value<'_>, name: &str, message: &str) -> bool {
    let Some(error) = value.as_exception() else {
        return false;
    };
    let ctx = value.ctx();
    string_property(ctx, error.as_object(), "message").as_deref() == Some(message)
        && string_property(ctx, error.as_object(), "name").as_deref() == Some(name)
}

/// What a value is, for messages ("a number", "an array", ...).
pub(super) fn kind(value: &Value<'_>) -> &'static str {
    if value.is_undefined() {
        "undefined"
    } else if value.is_null() {
        "null"
    } else if value.is_bool() {
        "a boolean"
    } else if value.is_number() {
        "a number"
    } else if value.is_string() {
        "a string"
    } else if value.is_symbol() {
        "a symbol"
    } else if value.is_big_int() {
        "a bigint"
    } else if value.is_array() {
        "an array"
    } else if value.is_function() {
        "a function"
    } else if value.is_promise() {
        "a promise"
    } else if value.is_object() {
        "an object"
    } else {
        "an unknown value"
    }
}

/// A thrown value as text: `name`, `message` and `code` when it is an object. Getters that
/// throw are skipped.
pub(super) fn describe<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> Thrown {
    if let Some(object) = value.as_object() {
        let name = string_property(ctx, object, "name");
        let message = string_property(ctx, object, "message")
            .or_else(|| name.clone())
            .unwrap_or_else(|| "an object without a message".into());
        let code = string_property(ctx, object, "code").map(|code| shorten(code, MAX_CODE));
        return Thrown {
            name,
            message: shorten(message, MAX_MESSAGE),
            code,
        };
    }
    let message = if let Some(string) = value.as_string() {
        string
            .to_string()
            .unwrap_or_else(|_| "a string that is not valid Unicode".into())
    } else if let Some(number) = value.as_number() {
        number.to_string()
    } else if let Some(boolean) = value.as_bool() {
        boolean.to_string()
    } else {
        kind(value).to_owned()
    };
    Thrown {
        name: None,
        message: shorten(message, MAX_MESSAGE),
        code: None,
    }
}

fn string_property<'js>(ctx: &Ctx<'js>, object: &Object<'js>, key: &str) -> Option<String> {
    match object.get::<_, Value>(key) {
        Ok(value) => value.as_string().and_then(|s| s.to_string().ok()),
        Err(_) => {
            ctx.catch();
            None
        }
    }
}

fn shorten(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// The program's settled value as a verdict.
pub(super) fn verdict<'js>(
    ctx: &Ctx<'js>,
    value: Value<'js>,
    limits: &Limits,
) -> Result<Verdict, CheckError> {
    let bad = |problem: String| CheckError::BadReturn { problem };
    if let Some(matched) = value.as_bool() {
        return if matched {
            Err(bad(
                "got true; return an object with resumeText to match".into()
            ))
        } else {
            Ok(Verdict::NotYet)
        };
    }
    let object = match value.as_object() {
        Some(object) if !value.is_array() && !value.is_function() && !value.is_promise() => object,
        _ => return Err(bad(format!("got {}", kind(&value)))),
    };

    let resume = property(ctx, object, "resumeText", limits)?;
    let Some(resume) = resume.as_string() else {
        return Err(bad(format!(
            "resumeText must be a string, got {}",
            kind(&resume)
        )));
    };
    let resume_text = resume
        .to_string()
        .map_err(|_| bad("resumeText is not valid Unicode".into()))?;
    if resume_text.len() > limits.max_payload_bytes {
        return Err(bad(format!(
            "resumeText is {} bytes, at most {}",
            resume_text.len(),
            limits.max_payload_bytes
        )));
    }

    let payload = property(ctx, object, "payload", limits)?;
    if payload.is_undefined() {
        return Ok(Verdict::Matched {
            resume_text,
            payload: None,
        });
    }
    let json = match ctx.json_stringify(payload) {
        Ok(Some(json)) => json
            .to_string()
            .map_err(|_| bad("payload is not valid Unicode".into()))?,
        Ok(None) => return Err(bad("payload must be JSON, got a function or symbol".into())),
        Err(rquickjs::Error::Exception) => {
            let thrown_value = ctx.catch();
            if is_resource_error(&thrown_value) {
                return Err(thrown(ctx, &thrown_value, Phase::Run, limits));
            }
            let message = describe(ctx, &thrown_value).message;
            return Err(bad(format!("payload must be JSON: {message}")));
        }
        Err(other) => return Err(failure(ctx, other, Phase::Run, limits)),
    };
    if json.len() > limits.max_payload_bytes {
        return Err(bad(format!(
            "payload is {} bytes of JSON, at most {}",
            json.len(),
            limits.max_payload_bytes
        )));
    }
    let payload =
        serde_json::from_str(&json).map_err(|e| bad(format!("payload is not usable JSON: {e}")))?;
    Ok(Verdict::Matched {
        resume_text,
        payload: Some(payload),
    })
}

/// `object[key]`, running getters; a getter that throws is a bad return.
fn property<'js>(
    ctx: &Ctx<'js>,
    object: &Object<'js>,
    key: &str,
    limits: &Limits,
) -> Result<Value<'js>, CheckError> {
    match object.get::<_, Value>(key) {
        Ok(value) => Ok(value),
        Err(rquickjs::Error::Exception) => {
            let thrown_value = ctx.catch();
            if is_resource_error(&thrown_value) {
                return Err(thrown(ctx, &thrown_value, Phase::Run, limits));
            }
            let message = describe(ctx, &thrown_value).message;
            Err(CheckError::BadReturn {
                problem: format!("reading {key} threw: {message}"),
            })
        }
        Err(other) => Err(failure(ctx, other, Phase::Run, limits)),
    }
}
