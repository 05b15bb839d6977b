//! The OpenAPI 3.1 document, generated from the route table: each [`RouteDoc`] names its
//! method, path, authentication, the types of its request body, query and answers, and its
//! error codes, and [`document`] turns the table into `/v1/openapi.json`.
//!
//! The schemas are not written here: each is generated (schemars, JSON Schema 2020-12) from
//! the type a route decodes its body or query into ([`crate::bodies`], the routes' query
//! types) or answers with ([`super::views`]), so the document cannot describe a member, a
//! pattern or a range those types do not have. Only what the server serves as stored bytes
//! (the key set and release documents of §7, metrics, this document) is described by hand
//! here. This module decides no behaviour; it only describes.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use super::Route;
use super::body::JSON_MEDIA;

/// How a route authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// Nothing.
    None,
    /// `Authorization: Bearer` with this scope.
    Bearer(&'static str),
    /// RFC 9421 signature by the machine key.
    Signed,
    /// Both: a signature by the new key and a bearer token with this scope.
    SignedBearer(&'static str),
    /// A connect ticket in the query.
    Ticket,
}

/// A schema, made by the generator of the document.
pub(crate) type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// What a success answer carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Carries {
    /// Nothing (204, 101).
    Nothing,
    /// JSON of this schema.
    Json(SchemaFn),
    /// Bytes of this media type.
    Bytes(&'static str),
}

/// One success answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) when: &'static str,
    pub(crate) carries: Carries,
}

/// One route's documentation.
#[derive(Debug, Clone)]
pub(crate) struct RouteDoc {
    pub(crate) method: &'static str,
    pub(crate) path: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) auth: Auth,
    /// The body's schema and the media types it may be sent as.
    pub(crate) request: Option<(SchemaFn, &'static [&'static str])>,
    pub(crate) answers: Vec<Answer>,
    /// The query's type (its members are the parameters).
    pub(crate) query: Option<SchemaFn>,
    /// Path parameters with a shape (`^[0-9a-f]{64}$`); the others are any text.
    pub(crate) params: &'static [(&'static str, &'static str)],
    pub(crate) errors: &'static [(u16, &'static str)],
}

/// Starts a route's documentation.
pub(crate) fn api(method: &'static str, path: &'static str, summary: &'static str) -> RouteDoc {
    RouteDoc {
        method,
        path,
        summary,
        auth: Auth::None,
        request: None,
        answers: Vec::new(),
        query: None,
        params: &[],
        errors: &[],
    }
}

impl RouteDoc {
    pub(crate) fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }
    /// The body is JSON read into `T`.
    pub(crate) fn request<T: JsonSchema>(self) -> Self {
        self.request_as::<T>(JSON_MEDIA)
    }
    /// The body is `T`, sent as one of `media`.
    pub(crate) fn request_as<T: JsonSchema>(mut self, media: &'static [&'static str]) -> Self {
        self.request = Some((schema_of::<T>, media));
        self
    }
    /// Answers `status` with a `T`.
    pub(crate) fn answer<T: JsonSchema>(self, status: u16) -> Self {
        self.answer_when::<T>(status, "success")
    }
    /// Answers `status` with a `T` in the case `when`.
    pub(crate) fn answer_when<T: JsonSchema>(mut self, status: u16, when: &'static str) -> Self {
        self.answers.push(Answer {
            status,
            when,
            carries: Carries::Json(schema_of::<T>),
        });
        self
    }
    /// Answers `status` with a document described by `schema`.
    pub(crate) fn answer_schema(mut self, status: u16, schema: SchemaFn) -> Self {
        self.answers.push(Answer {
            status,
            when: "success",
            carries: Carries::Json(schema),
        });
        self
    }
    /// Answers `status` with nothing, or with bytes of `media`.
    pub(crate) fn answer_raw(mut self, status: u16, when: &'static str, carries: Carries) -> Self {
        self.answers.push(Answer {
            status,
            when,
            carries,
        });
        self
    }
    /// The query is read into `T`.
    pub(crate) fn query<T: JsonSchema>(mut self) -> Self {
        self.query = Some(|_| {
            SchemaSettings::draft2020_12()
                .with(|s| s.inline_subschemas = true)
                .into_generator()
                .into_root_schema_for::<T>()
        });
        self
    }
    /// Path parameters and the pattern each must match.
    pub(crate) fn params(mut self, params: &'static [(&'static str, &'static str)]) -> Self {
        self.params = params;
        self
    }
    pub(crate) fn errors(mut self, errors: &'static [(u16, &'static str)]) -> Self {
        self.errors = errors;
        self
    }

    /// Every error this route may answer, with the ones its authentication and body add.
    pub(crate) fn all_errors(&self) -> Vec<(u16, &'static str)> {
        let mut out: Vec<(u16, &'static str)> = vec![
            // The HTTP layer's own (`crate::http_layer`), before any route reads the request.
            (400, "malformed_request"),
            (408, "request_timeout"),
            (414, "uri_too_long"),
            (431, "headers_too_large"),
        ];
        let bearer = [
            (401, "token_missing"),
            (401, "token_invalid"),
            (401, "token_expired"),
            (403, "scope_missing"),
        ];
        let signed = [
            (401, "malformed_field"),
            (401, "missing_signature"),
            (401, "missing_component"),
            (401, "unsupported_component"),
            (401, "component_not_covered"),
            (401, "missing_parameter"),
            (401, "invalid_parameter"),
            (401, "unknown_key"),
            (401, "bad_signature"),
            (401, "content_digest_mismatch"),
            (401, "no_supported_digest"),
            (401, "created_in_future"),
            (401, "signature_too_old"),
            (401, "signature_expired"),
            (401, "nonce_replayed"),
            (401, "nonce_too_long"),
            (503, "replay_cache_full"),
            (429, "rate_limited"),
            // The body is read for its digest.
            (413, "body_too_large"),
            (408, "request_timeout"),
        ];
        match self.auth {
            Auth::None => {}
            Auth::Bearer(_) => out.extend(bearer),
            Auth::Signed => out.extend(signed),
            Auth::SignedBearer(_) => {
                out.extend(bearer);
                out.extend(signed);
            }
            Auth::Ticket => out.push((429, "rate_limited")),
        }
        if self.path.contains('{') {
            out.push((400, "invalid_path"));
        }
        if self.query.is_some() && self.auth != Auth::Ticket {
            out.push((400, "invalid_query"));
        }
        if self.request.is_some() {
            out.extend([
                (415, "unsupported_media_type"),
                (413, "body_too_large"),
                (408, "request_timeout"),
                (429, "rate_limited"),
                (400, "invalid_body"),
                (400, "malformed_json"),
                (400, "duplicate_key"),
                (400, "float_not_allowed"),
                (400, "invalid_utf8"),
                (400, "truncated"),
                (400, "too_deep"),
                (400, "integer_out_of_range"),
                (400, "lone_surrogate"),
            ]);
        }
        out.extend(self.errors.iter().copied());
        out
    }
}

/// The generator of the document's schemas: JSON Schema 2020-12 (what OpenAPI 3.1 uses), with
/// named schemas under `#/components/schemas`. Bodies are described as a reader takes them
/// (members with a default may be left out), answers as the server writes them (a member
/// always written is required, `null` or not).
fn generator(answers: bool) -> SchemaGenerator {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.definitions_path = "/components/schemas".into();
        s.meta_schema = None;
    });
    if answers {
        settings.for_serialize().into_generator()
    } else {
        settings.for_deserialize().into_generator()
    }
}

/// A query parameter's schema: the member's, without `null` (a query has no `null`).
fn parameter_schema(member: &Value) -> Value {
    let mut schema = member.clone();
    if let Some(types) = schema.get_mut("type").and_then(Value::as_array_mut) {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            schema["type"] = types[0].clone();
        }
    }
    schema
}

/// The document for `routes`.
pub(crate) fn document(routes: &[Route]) -> Value {
    let mut bodies = generator(false);
    let mut answers = generator(true);
    let mut paths = Map::new();
    for route in routes {
        let d = &route.doc;
        let mut op = Map::new();
        op.insert("summary".into(), json!(d.summary));
        op.insert(
            "operationId".into(),
            json!(format!("{} {}", d.method, d.path)),
        );
        let security = match d.auth {
            Auth::None => json!([]),
            Auth::Bearer(scope) => json!([{"bearer": [scope]}]),
            Auth::Signed => json!([{"httpSignature": []}]),
            Auth::SignedBearer(scope) => json!([{"httpSignature": [], "bearer": [scope]}]),
            Auth::Ticket => json!([{"ticket": []}]),
        };
        op.insert("security".into(), security);
        let mut params = Vec::new();
        for segment in d.path.split('/') {
            if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                let mut schema = json!({"type": "string"});
                if let Some((_, pattern)) = d.params.iter().find(|(n, _)| *n == name) {
                    schema["pattern"] = json!(pattern);
                }
                params
                    .push(json!({"name": name, "in": "path", "required": true, "schema": schema}));
            }
        }
        if let Some(query) = d.query {
            let schema = query(&mut bodies);
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let members = schema.get("properties").and_then(Value::as_object);
            for (name, member) in members.into_iter().flatten() {
                let mut param = json!({"name": name, "in": "query",
                    "required": required.contains(&name.as_str()),
                    "schema": parameter_schema(member)});
                if let Some(text) = member.get("description") {
                    param["description"] = text.clone();
                }
                params.push(param);
            }
        }
        op.insert("parameters".into(), Value::Array(params));
        if let Some((schema, media)) = d.request {
            let schema = schema(&mut bodies);
            let content: Map<String, Value> = media
                .iter()
                .map(|m| ((*m).to_owned(), json!({"schema": schema})))
                .collect();
            op.insert(
                "requestBody".into(),
                json!({"required": true, "content": content}),
            );
        }
        let mut responses = Map::new();
        for answer in &d.answers {
            let mut entry = json!({"description": answer.when});
            match answer.carries {
                Carries::Nothing => {}
                Carries::Json(schema) => {
                    entry["content"] =
                        json!({"application/json": {"schema": schema(&mut answers)}});
                }
                Carries::Bytes(media) => {
                    entry["content"] = json!({media: {"schema": {"type": "string"}}});
                }
            }
            responses.insert(answer.status.to_string(), entry);
        }
        let mut by_status: std::collections::BTreeMap<u16, Vec<&str>> = Default::default();
        for (status, code) in d.all_errors() {
            let codes = by_status.entry(status).or_default();
            if !codes.contains(&code) {
                codes.push(code);
            }
        }
        for (status, codes) in by_status {
            responses.insert(
                status.to_string(),
                json!({
                    "description": format!("error: {}", codes.join(", ")),
                    "x-error-codes": codes,
                    "content": {"application/json": {"schema": answers.subschema_for::<super::error::ErrorAnswer>()}},
                }),
            );
        }
        op.insert("responses".into(), Value::Object(responses));
        let entry = paths
            .entry(d.path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(methods) = entry {
            methods.insert(d.method.to_ascii_lowercase(), Value::Object(op));
        }
    }
    let mut schemas = answers.take_definitions(true);
    // A type both read and answered (a Grant) is described as a reader takes it: what the
    // server writes always fits it.
    schemas.extend(bodies.take_definitions(true));
    crate::bodies::constrain(&mut schemas);
    json!({
        "openapi": "3.1.0",
        "info": {"title": "outpost", "version": env!("CARGO_PKG_VERSION"),
                 "description": "The outpost server's HTTP API (docs/PROTOCOL.md §11)."},
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "opt_… token (§11.2)"},
                "httpSignature": {"type": "apiKey", "in": "header", "name": "Signature",
                                  "description": "RFC 9421 signature by the machine key (§8)"},
                "ticket": {"type": "apiKey", "in": "query", "name": "ticket",
                           "description": "single-use connect ticket (§9)"}
            },
            "schemas": schemas,
        }
    })
}

/// The key set document of §7 (served as the server signed it).
pub(crate) fn key_set(_: &mut SchemaGenerator) -> Schema {
    let s = json!({"type": "string"});
    let i = json!({"type": "integer"});
    let key = json!({"type": "object", "required": ["kid", "publicKey", "notBefore", "notAfter"],
        "properties": {"kid": s, "publicKey": s, "notBefore": i, "notAfter": i}});
    Schema::try_from(json!({
        "type": "object", "description": "The server's key set (§7), signed by its root key.",
        "required": ["type", "version", "root", "keys", "sig"],
        "properties": {"type": s, "version": i, "root": s, "sig": s,
                       "keys": {"type": "array", "items": key}}
    }))
    .unwrap_or_default()
}

/// The daemon release document of §7.1 (served as the server signed it).
pub(crate) fn daemon_release(_: &mut SchemaGenerator) -> Schema {
    let s = json!({"type": "string"});
    let i = json!({"type": "integer"});
    Schema::try_from(json!({
        "type": "object", "description": "A daemon release (§7.1), signed by the server's root key.",
        "required": ["type", "version", "os", "arch", "size", "sha512", "root", "sig"],
        "properties": {"type": s, "version": s, "os": s, "arch": s, "size": i, "sha512": s,
                       "root": s, "sig": s}
    }))
    .unwrap_or_default()
}

/// This document.
pub(crate) fn open_api(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(json!({"type": "object", "description": "this document (OpenAPI 3.1)"}))
        .unwrap_or_default()
}
