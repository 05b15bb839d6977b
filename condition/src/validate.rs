//! Turns a `ctx` call's JSON arguments into a typed request, or a [`CallError`] saying which
//! rule it broke.
//!
//! Owns the request rules of the SPEC's "Condition waits" (resources and their params, the
//! fetch rules, the exec shape). Pure functions over `serde_json::Value`: this module must
//! never touch the engine or the host.

use serde_json::{Map, Value};

use crate::host::{CallError, ExecRequest, FetchMethod, FetchRequest, ReadRequest};

/// The most events one `read('events')` returns, and its default.
pub const MAX_EVENTS: u32 = 100;

/// Headers a fetch may send (lowercase).
pub const FETCH_HEADERS: [&str; 2] = ["accept", "accept-language"];

/// `ctx.read(resource, params?)`.
pub fn read(args: &[Value]) -> Result<ReadRequest, CallError> {
    let (resource, params) = match args {
        [] => return Err(invalid("read(resource, params?) needs a resource name")),
        [resource] => (resource, &Value::Null),
        [resource, params] => (resource, params),
        _ => {
            return Err(invalid(
                "read(resource, params?) takes at most two arguments",
            ));
        }
    };
    let Value::String(resource) = resource else {
        return Err(invalid(format!(
            "read's resource must be a string, got {}",
            kind(resource)
        )));
    };
    let what = format!("read('{resource}')");
    match resource.as_str() {
        "runs" => no_params(&what, params).map(|()| ReadRequest::Runs),
        "services" => no_params(&what, params).map(|()| ReadRequest::Services),
        "files" => {
            let params = object(&what, params, &["path", "read"])?;
            let path = match params.get("path") {
                Some(Value::String(path)) if !path.is_empty() => text(&what, "path", path)?,
                Some(Value::String(_)) => return Err(invalid(format!("{what}: path is empty"))),
                Some(other) => {
                    return Err(invalid(format!(
                        "{what}: path must be a string, got {}",
                        kind(other)
                    )));
                }
                None => return Err(invalid(format!("{what} needs {{path}}"))),
            };
            let read = match params.get("read") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(read)) => *read,
                Some(other) => {
                    return Err(invalid(format!(
                        "{what}: read must be a boolean, got {}",
                        kind(other)
                    )));
                }
            };
            Ok(ReadRequest::Files { path, read })
        }
        "events" => {
            let params = object(&what, params, &["since", "limit"])?;
            let since = match params.get("since") {
                None | Some(Value::Null) => None,
                Some(since) => Some(integer(&what, "since", since, 0, 1 << 53)?),
            };
            let limit = match params.get("limit") {
                None | Some(Value::Null) => MAX_EVENTS,
                Some(limit) => {
                    let limit = integer(&what, "limit", limit, 1, u64::from(MAX_EVENTS))?;
                    u32::try_from(limit).unwrap_or(MAX_EVENTS)
                }
            };
            Ok(ReadRequest::Events { since, limit })
        }
        _ => Err(CallError::new(
            CallError::UNKNOWN_RESOURCE,
            format!("{what}: no such resource (runs, services, files, events)"),
        )),
    }
}

/// `ctx.fetch(url, {method?, headers?})`.
pub fn fetch(args: &[Value], max_body: usize) -> Result<FetchRequest, CallError> {
    let (url, options) = match args {
        [] => return Err(invalid("fetch(url, options?) needs a URL")),
        [url] => (url, &Value::Null),
        [url, options] => (url, options),
        _ => return Err(invalid("fetch(url, options?) takes at most two arguments")),
    };
    let Value::String(url) = url else {
        return Err(invalid(format!(
            "fetch's url must be a string, got {}",
            kind(url)
        )));
    };
    let options = match options {
        Value::Null => Map::new(),
        Value::Object(options) => options.clone(),
        other => {
            return Err(invalid(format!(
                "fetch's options must be an object, got {}",
                kind(other)
            )));
        }
    };
    if let Some(key) = options
        .keys()
        .find(|key| !["method", "headers"].contains(&key.as_str()))
    {
        return Err(refused(format!(
            "option '{key}' is not allowed: only method and headers may be given"
        )));
    }

    let mut parsed =
        url::Url::parse(url).map_err(|e| refused(format!("the URL does not parse: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(refused(format!(
            "scheme '{}' is not allowed: only http and https",
            parsed.scheme()
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(refused("credentials in the URL are not allowed"));
    }
    if parsed.host().is_none() {
        return Err(refused("the URL has no host"));
    }
    parsed.set_fragment(None);

    let method = match options.get("method") {
        None | Some(Value::Null) => FetchMethod::Get,
        Some(Value::String(method)) if method.eq_ignore_ascii_case("GET") => FetchMethod::Get,
        Some(Value::String(method)) if method.eq_ignore_ascii_case("HEAD") => FetchMethod::Head,
        Some(Value::String(method)) => {
            return Err(refused(format!(
                "method {method} is not allowed: only GET and HEAD"
            )));
        }
        Some(other) => {
            return Err(invalid(format!(
                "fetch: method must be a string, got {}",
                kind(other)
            )));
        }
    };

    let mut headers = Vec::new();
    match options.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(given)) => {
            for (name, value) in given {
                let lower = name.to_ascii_lowercase();
                if !FETCH_HEADERS.contains(&lower.as_str()) {
                    return Err(refused(format!(
                        "header '{name}' is not allowed: only accept and accept-language"
                    )));
                }
                let Value::String(value) = value else {
                    return Err(refused(format!(
                        "header '{name}' must be a string, got {}",
                        kind(value)
                    )));
                };
                if value.contains(['\r', '\n', '\0']) {
                    return Err(refused(format!(
                        "header '{name}' contains a line break or NUL byte"
                    )));
                }
                headers.push((lower, value.clone()));
            }
        }
        Some(other) => {
            return Err(invalid(format!(
                "fetch: headers must be an object, got {}",
                kind(other)
            )));
        }
    }

    Ok(FetchRequest {
        url: parsed.into(),
        method,
        headers,
        max_body,
    })
}

/// `ctx.exec({command, args?, cwd?})`.
pub fn exec(args: &[Value]) -> Result<ExecRequest, CallError> {
    let what = "exec({command, args?, cwd?})";
    let [spec] = args else {
        return Err(invalid(format!("{what} takes exactly one object")));
    };
    let spec = object(what, spec, &["command", "args", "cwd"])?;
    let command = match spec.get("command") {
        Some(Value::String(command)) if !command.is_empty() => text(what, "command", command)?,
        Some(Value::String(_)) => return Err(invalid(format!("{what}: command is empty"))),
        Some(other) => {
            return Err(invalid(format!(
                "{what}: command must be a string, got {}",
                kind(other)
            )));
        }
        None => return Err(invalid(format!("{what} needs a command"))),
    };
    let args = match spec.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(arg) => text(what, &format!("args[{i}]"), arg),
                other => Err(invalid(format!(
                    "{what}: args[{i}] must be a string, got {}",
                    kind(other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(invalid(format!(
                "{what}: args must be an array of strings, got {}",
                kind(other)
            )));
        }
    };
    let cwd = match spec.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(cwd)) => Some(text(what, "cwd", cwd)?),
        Some(other) => {
            return Err(invalid(format!(
                "{what}: cwd must be a string, got {}",
                kind(other)
            )));
        }
    };
    Ok(ExecRequest { command, args, cwd })
}

fn no_params(what: &str, params: &Value) -> Result<(), CallError> {
    match params {
        Value::Null => Ok(()),
        Value::Object(map) if map.is_empty() => Ok(()),
        _ => Err(invalid(format!("{what} takes no params"))),
    }
}

fn object<'a>(
    what: &str,
    params: &'a Value,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>, CallError> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    let map = match params {
        Value::Object(map) => map,
        Value::Null => EMPTY.get_or_init(Map::new),
        other => {
            return Err(invalid(format!(
                "{what}: params must be an object, got {}",
                kind(other)
            )));
        }
    };
    if let Some(key) = map.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(invalid(format!(
            "{what}: unknown param '{key}' (allowed: {})",
            allowed.join(", ")
        )));
    }
    Ok(map)
}

fn integer(what: &str, name: &str, value: &Value, min: u64, max: u64) -> Result<u64, CallError> {
    let wrong = || {
        invalid(format!(
            "{what}: {name} must be an integer from {min} to {max}, got {value}"
        ))
    };
    let number = match value {
        Value::Number(number) => number,
        _ => return Err(wrong()),
    };
    let int = match (number.as_u64(), number.as_f64()) {
        (Some(int), _) => int,
        (None, Some(float)) if float.fract() == 0.0 && float >= 0.0 && float <= max as f64 => {
            float as u64
        }
        _ => return Err(wrong()),
    };
    if (min..=max).contains(&int) {
        Ok(int)
    } else {
        Err(wrong())
    }
}

fn text(what: &str, name: &str, value: &str) -> Result<String, CallError> {
    if value.contains('\0') {
        return Err(invalid(format!("{what}: {name} contains a NUL byte")));
    }
    Ok(value.to_owned())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn invalid(message: impl Into<String>) -> CallError {
    CallError::new(CallError::INVALID_PARAMS, message)
}

fn refused(message: impl Into<String>) -> CallError {
    CallError::new(CallError::FETCH_REFUSED, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> Vec<Value> {
        match value {
            Value::Array(items) => items,
            _ => unreachable!("tests pass arrays"),
        }
    }

    #[test]
    fn reads_parse_into_typed_requests() {
        assert_eq!(read(&args(json!(["runs"]))), Ok(ReadRequest::Runs));
        assert_eq!(
            read(&args(json!(["services", {}]))),
            Ok(ReadRequest::Services)
        );
        assert_eq!(
            read(&args(json!(["files", {"path": "/out/a", "read": true}]))),
            Ok(ReadRequest::Files {
                path: "/out/a".into(),
                read: true
            })
        );
        assert_eq!(
            read(&args(json!(["events", {"since": 7, "limit": 1.0}]))),
            Ok(ReadRequest::Events {
                since: Some(7),
                limit: 1
            })
        );
        assert_eq!(
            read(&args(json!(["events"]))),
            Ok(ReadRequest::Events {
                since: None,
                limit: 100
            })
        );
    }

    #[test]
    fn bad_reads_name_what_was_wrong() {
        let err = read(&args(json!(["files", {}]))).unwrap_err();
        assert_eq!(err.code, "invalid_params");
        assert!(err.message.contains("path"), "{}", err.message);
        let err = read(&args(json!(["runs", {"all": true}]))).unwrap_err();
        assert!(err.message.contains("takes no params"), "{}", err.message);
        let err = read(&args(json!(["events", {"limit": 2.5}]))).unwrap_err();
        assert!(err.message.contains("limit"), "{}", err.message);
        let err = read(&args(json!(["events", {"since": -1}]))).unwrap_err();
        assert!(err.message.contains("since"), "{}", err.message);
        let err = read(&args(json!(["files", {"path": "a", "mode": 1}]))).unwrap_err();
        assert!(err.message.contains("'mode'"), "{}", err.message);
        assert_eq!(read(&args(json!([5]))).unwrap_err().code, "invalid_params");
    }

    #[test]
    fn fetch_normalizes_the_url_and_headers() {
        let req = fetch(
            &args(json!(["HTTPS://Example.COM/a#frag", {"method": "head", "headers": {"Accept": "text/html"}}])),
            10,
        )
        .unwrap();
        assert_eq!(req.url, "https://example.com/a");
        assert_eq!(req.method, FetchMethod::Head);
        assert_eq!(req.headers, vec![("accept".into(), "text/html".into())]);
        assert_eq!(req.max_body, 10);
    }

    #[test]
    fn fetch_refuses_line_breaks_bodies_and_unparsable_urls() {
        for (call, needle) in [
            (
                json!(["http://a/", {"headers": {"accept": "a\r\nx: y"}}]),
                "line break",
            ),
            (json!(["http://a/", {"body": "x"}]), "'body'"),
            (json!(["not a url"]), "does not parse"),
            (json!(["http://:pw@a/"]), "credentials"),
        ] {
            let err = fetch(&args(call), 1).unwrap_err();
            assert_eq!(err.code, "fetch_refused");
            assert!(err.message.contains(needle), "{}", err.message);
        }
    }

    #[test]
    fn exec_takes_a_command_and_an_argument_vector() {
        assert_eq!(
            exec(&args(
                json!([{"command": "ls", "args": ["-l", "a b"], "cwd": "/tmp"}])
            )),
            Ok(ExecRequest {
                command: "ls".into(),
                args: vec!["-l".into(), "a b".into()],
                cwd: Some("/tmp".into())
            })
        );
        for call in [
            json!([{"command": ""}]),
            json!([{"command": "ls", "args": "-l"}]),
            json!([{"command": "ls", "args": [1]}]),
            json!([{"command": "ls", "shell": true}]),
            json!(["ls"]),
            json!([{"command": "l\u{0}s"}]),
        ] {
            assert_eq!(exec(&args(call)).unwrap_err().code, "invalid_params");
        }
    }
}
