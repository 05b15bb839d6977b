//! Component values (RFC 9421 §2): derived components of the request target and header
//! fields.

use super::{HttpRequest, HttpSigError};

/// The pieces of a request's target URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target<'a> {
    scheme: &'a str,
    authority: &'a str,
    path: &'a str,
    query: Option<&'a str>,
}

/// Splits an absolute `scheme://authority/path?query#fragment` URI.
pub(super) fn split_target(url: &str) -> Result<Target<'_>, HttpSigError> {
    let bad = |reason: &str| HttpSigError::MalformedField {
        field: "@target-uri",
        reason: reason.to_owned(),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("not an absolute URI"))?;
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return Err(bad("bad scheme"));
    }
    let rest = rest.split('#').next().unwrap_or(rest);
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(authority_end);
    if authority.is_empty() || authority.contains('@') {
        return Err(bad("missing authority or userinfo present"));
    }
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    Ok(Target {
        scheme,
        authority,
        path,
        query,
    })
}

/// The value of component `name` (already checked to be a known, lowercase identifier).
pub(super) fn component_value(req: &HttpRequest, name: &str) -> Result<String, HttpSigError> {
    if !name.starts_with('@') {
        return header_value(req, name);
    }
    let t = split_target(&req.url)?;
    let path = if t.path.is_empty() { "/" } else { t.path };
    Ok(match name {
        "@method" => req.method.clone(),
        "@target-uri" => req.url.clone(),
        "@authority" => normalize_authority(t.scheme, t.authority),
        "@scheme" => t.scheme.to_ascii_lowercase(),
        "@request-target" => match t.query {
            Some(q) => format!("{path}?{q}"),
            None => path.to_owned(),
        },
        "@path" => path.to_owned(),
        "@query" => format!("?{}", t.query.unwrap_or("")),
        other => return Err(HttpSigError::UnsupportedComponent(other.to_owned())),
    })
}

/// Lowercases the host and drops the scheme's default port (RFC 9421 §2.2.3).
fn normalize_authority(scheme: &str, authority: &str) -> String {
    let lower = authority.to_ascii_lowercase();
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" | "wss" => Some(":443"),
        "http" | "ws" => Some(":80"),
        _ => None,
    };
    match default_port {
        Some(port) if lower.ends_with(port) => lower[..lower.len() - port.len()].to_owned(),
        _ => lower,
    }
}

/// All values of the header field `name`, trimmed and joined by `", "` (RFC 9421 §2.1).
fn header_value(req: &HttpRequest, name: &str) -> Result<String, HttpSigError> {
    let values: Vec<&str> = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim_matches([' ', '\t']))
        .collect();
    if values.is_empty() {
        return Err(HttpSigError::MissingComponent(name.to_owned()));
    }
    let joined = values.join(", ");
    if joined.contains(['\r', '\n']) {
        return Err(HttpSigError::MalformedField {
            field: "header",
            reason: format!("{name} holds a line break"),
        });
    }
    Ok(joined)
}

/// Checks a component identifier: a known derived component or a lowercase field name.
pub(super) fn check_identifier(name: &str) -> Result<(), HttpSigError> {
    const DERIVED: &[&str] = &[
        "@method",
        "@target-uri",
        "@authority",
        "@scheme",
        "@request-target",
        "@path",
        "@query",
    ];
    if name.starts_with('@') {
        if DERIVED.contains(&name) {
            return Ok(());
        }
        return Err(HttpSigError::UnsupportedComponent(name.to_owned()));
    }
    let token_char =
        |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token_char) {
        return Err(HttpSigError::MalformedField {
            field: "signature-input",
            reason: format!("{name:?} is not a lowercase field name"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(url: &str) -> HttpRequest {
        HttpRequest {
            method: "POST".into(),
            url: url.into(),
            headers: vec![
                ("Host".into(), "example.com".into()),
                ("X-Multi".into(), " a ".into()),
                ("x-multi".into(), "b\t".into()),
            ],
            body: Vec::new(),
        }
    }

    #[test]
    fn derived_components() {
        let r = req("https://Example.COM:443/foo?param=Value&Pet=dog#frag");
        assert_eq!(component_value(&r, "@method").unwrap(), "POST");
        assert_eq!(component_value(&r, "@authority").unwrap(), "example.com");
        assert_eq!(component_value(&r, "@path").unwrap(), "/foo");
        assert_eq!(
            component_value(&r, "@query").unwrap(),
            "?param=Value&Pet=dog"
        );
        assert_eq!(
            component_value(&r, "@request-target").unwrap(),
            "/foo?param=Value&Pet=dog"
        );
        assert_eq!(component_value(&r, "@scheme").unwrap(), "https");
        let r = req("http://example.com:8080");
        assert_eq!(
            component_value(&r, "@authority").unwrap(),
            "example.com:8080"
        );
        assert_eq!(component_value(&r, "@path").unwrap(), "/");
        assert_eq!(component_value(&r, "@query").unwrap(), "?");
    }

    #[test]
    fn header_fields_combine() {
        let r = req("https://example.com/");
        assert_eq!(component_value(&r, "x-multi").unwrap(), "a, b");
        assert_eq!(
            component_value(&r, "date").unwrap_err().code(),
            "missing_component"
        );
    }

    #[test]
    fn identifiers() {
        assert!(check_identifier("@method").is_ok());
        assert!(check_identifier("content-digest").is_ok());
        assert_eq!(
            check_identifier("@status").unwrap_err().code(),
            "unsupported_component"
        );
        assert_eq!(
            check_identifier("Content-Type").unwrap_err().code(),
            "malformed_field"
        );
        assert!(split_target("/relative").is_err());
        assert!(split_target("https://user@host/").is_err());
    }
}
