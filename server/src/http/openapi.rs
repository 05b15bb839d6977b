//! The OpenAPI 3.1 document, generated from the route table: each [`RouteDoc`] names its
//! method, path, authentication, request and response schemas and its error codes, and
//! [`document`] turns the table into `/v1/openapi.json`. The schemas are written here once,
//! by name; a route naming a schema that is not here is a test failure, not a silent gap.

use serde_json::{Map, Value, json};

use super::Route;

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

/// One route's documentation.
#[derive(Debug, Clone)]
pub(crate) struct RouteDoc {
    pub(crate) method: &'static str,
    pub(crate) path: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) auth: Auth,
    pub(crate) request: Option<&'static str>,
    pub(crate) status: u16,
    pub(crate) response: Option<&'static str>,
    pub(crate) query: &'static [&'static str],
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
        status: 200,
        response: None,
        query: &[],
        errors: &[],
    }
}

impl RouteDoc {
    pub(crate) fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }
    pub(crate) fn request(mut self, schema: &'static str) -> Self {
        self.request = Some(schema);
        self
    }
    pub(crate) fn response(mut self, status: u16, schema: Option<&'static str>) -> Self {
        self.status = status;
        self.response = schema;
        self
    }
    pub(crate) fn query(mut self, names: &'static [&'static str]) -> Self {
        self.query = names;
        self
    }
    pub(crate) fn errors(mut self, errors: &'static [(u16, &'static str)]) -> Self {
        self.errors = errors;
        self
    }

    /// Every error this route may answer, with the ones its authentication and body add.
    pub(crate) fn all_errors(&self) -> Vec<(u16, &'static str)> {
        let mut out: Vec<(u16, &'static str)> = Vec::new();
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
        if !self.query.is_empty() && self.auth != Auth::Ticket {
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

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn content(name: &str) -> Value {
    let media = if name == "Metrics" {
        "text/plain"
    } else {
        "application/json"
    };
    json!({ media: {"schema": schema_ref(name)} })
}

/// The document for `routes`.
pub(crate) fn document(routes: &[Route]) -> Value {
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
                params.push(json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}));
            }
        }
        for name in d.query {
            params.push(json!({"name": name, "in": "query", "required": *name == "ticket", "schema": {"type": "string"}}));
        }
        op.insert("parameters".into(), Value::Array(params));
        if let Some(name) = d.request {
            op.insert(
                "requestBody".into(),
                json!({"required": true, "content": content(name)}),
            );
        }
        let mut responses = Map::new();
        let mut ok = json!({"description": "success"});
        if let Some(name) = d.response {
            ok["content"] = content(name);
        }
        responses.insert(d.status.to_string(), ok);
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
                    "content": content("Error"),
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
            "schemas": schemas(),
        }
    })
}

fn object(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

/// Every schema a route may name.
pub(crate) fn schemas() -> Value {
    let s = json!({"type": "string"});
    let i = json!({"type": "integer"});
    let b = json!({"type": "boolean"});
    let strings = json!({"type": "array", "items": {"type": "string"}});
    let any = json!({"type": "object"});
    let mut all = json!({
        "Error": object(&["error"], json!({"error": object(&["code", "message"], json!({"code": s, "message": s}))})),
        "RegisterRequest": object(&["name", "publicKey"], json!({
            "name": s, "publicKey": s, "maxConcurrent": i, "environments": strings, "daemonVersion": s})),
        "Registered": object(&["contextId", "name", "operator", "keyId", "grant", "grantVersion"], json!({
            "contextId": s, "name": s, "operator": s, "keyId": s, "grant": schema_ref("Grant"), "grantVersion": i})),
        "ConnectTicket": object(&["ticket", "sessionId", "expiresAt"], json!({"ticket": s, "sessionId": s, "expiresAt": i})),
        "Bundle": object(&["sha256", "size"], json!({"sha256": s, "size": i})),
        "CommandsSwitch": object(&["enabled"], json!({"enabled": b, "grantVersion": i})),
        "CommandAuthorize": object(&["runId", "command", "background"], json!({
            "runId": s, "command": s, "cwd": s, "envKeys": strings, "background": b})),
        "CommandAuthorized": object(&["commandId", "requester"], json!({"commandId": s, "requester": s})),
        "JobAuthorize": object(&["runId", "op", "jobId"], json!({
            "runId": s, "op": {"enum": ["poll", "kill"]}, "jobId": i})),
        "JobAuthorized": object(&["requester"], json!({"requester": s})),
        "DaemonRelease": object(
            &["type", "version", "os", "arch", "size", "sha512", "root", "sig"],
            json!({"type": s, "version": s, "os": s, "arch": s, "size": i, "sha512": s, "root": s, "sig": s}),
        ),
        "KeySet": object(&["type", "version", "root", "keys", "sig"], json!({
            "type": s, "version": i, "root": s, "sig": s,
            "keys": {"type": "array", "items": object(&["kid", "publicKey", "notBefore", "notAfter"], json!({
                "kid": s, "publicKey": s, "notBefore": i, "notAfter": i}))}})),
        "Grant": object(&["egress", "limits"], json!({
            "fs": {"type": "array", "items": object(&["path", "mode"], json!({"path": s, "mode": {"enum": ["ro", "rw"]}}))},
            "egress": any, "commands": object(&["enabled"], json!({"enabled": b})),
            "limits": object(&["maxConcurrent"], json!({"maxConcurrent": i})), "environments": strings})),
        "ExecuteRequest": object(&["capability"], json!({
            "capability": any, "context": s, "fallback": {"enum": ["none", "chain"]},
            "requires": strings, "whenOffline": {"enum": ["fail", "queue"]}, "queueMinutes": i,
            "wantsCommands": b, "wait": b, "waitSecs": i})),
        "Execution": object(&["executionId", "status", "createdAt"], json!({
            "executionId": s,
            "status": {"enum": ["pending", "running", "exited", "timed_out", "cancelled", "failed", "lost"]},
            "exitCode": i, "signal": i, "stdout": s, "stderr": s, "truncated": b,
            "error": object(&["code", "message"], json!({"code": s, "message": s, "reason": s})),
            "ranOn": any, "ranOnText": s, "timing": any, "createdAt": i, "finishedAt": i})),
        "Runs": object(&["runs"], json!({"runs": {"type": "array", "items": schema_ref("Execution")}})),
        "Context": object(&["id", "name", "operator", "online", "grant", "grantVersion", "revoked"], json!({
            "id": s, "name": s, "operator": s, "online": b, "slotsUsed": i, "slotsTotal": i,
            "grant": schema_ref("Grant"), "grantVersion": i, "revoked": b, "daemonVersion": s,
            "registeredAt": i, "environments": strings, "sharedWithAllMembers": b, "optedIn": strings,
            "operatorIsMember": b})),
        "ShareRequest": object(&["allMembers"], json!({"allMembers": b})),
        "Contexts": object(&["contexts"], json!({"contexts": {"type": "array", "items": schema_ref("Context")}})),
        "Chain": object(&["chain"], json!({"chain": strings})),
        "UserRequest": object(&["name"], json!({"name": s, "scopes": strings})),
        "User": object(&["user", "token", "scopes"], json!({"user": s, "token": s, "scopes": strings})),
        "Audit": object(&["events"], json!({"events": {"type": "array", "items": object(&["at", "kind", "actor", "detail"], json!({
            "at": i, "kind": s, "actor": s, "contextId": s, "detail": s}))}})),
        "TerminalOpen": object(&[], json!({"cols": i, "rows": i})),
        "TerminalOpened": object(&["terminalId", "context", "contextId", "ticket", "role", "expiresInMs", "cols", "rows"], json!({
            "terminalId": s, "context": s, "contextId": s, "ticket": s, "role": {"enum": ["operator", "watcher"]},
            "expiresInMs": i, "cols": i, "rows": i})),
        "TerminalTicket": object(&["ticket", "role", "expiresInMs"], json!({
            "ticket": s, "role": {"enum": ["operator", "watcher"]}, "expiresInMs": i})),
        "Terminals": object(&["terminals"], json!({"terminals": {"type": "array", "items": object(
            &["terminalId", "context", "contextId", "state", "viewers", "cols", "rows", "openedAt", "openedBy"], json!({
            "terminalId": s, "context": s, "contextId": s, "state": {"enum": ["starting", "open", "closed"]},
            "viewers": i, "cols": i, "rows": i, "openedAt": i, "openedBy": s}))}})),
        "Health": object(&["ok"], json!({"ok": b})),
        "Metrics": {"type": "string", "description": "Prometheus text format"},
        "OpenApi": {"type": "object", "description": "this document"},
    });
    all["WaitRequest"] = object(
        &["context", "condition"],
        json!({
            "context": s, "condition": s, "intervalMs": i, "expiresAtMs": i, "reason": s,
            "then": schema_ref("ExecuteRequest")
        }),
    );
    all["Wait"] = wait_schema();
    all["Waits"] = object(
        &["waits"],
        json!({"waits": {"type": "array", "items": schema_ref("Wait")}}),
    );
    all
}

/// The Wait schema (apart: one `json!` of it all is past the macro's recursion limit).
fn wait_schema() -> Value {
    let s = json!({"type": "string"});
    let i = json!({"type": "integer"});
    let continuation = object(
        &["state"],
        json!({
            "id": s, "executionId": s, "error": s,
            "state": {"enum": ["none", "pending", "started", "access_lost", "cancelled", "expired", "refused"]}
        }),
    );
    let last_error = object(
        &["code", "message", "atMs"],
        json!({"code": s, "message": s, "atMs": i}),
    );
    object(
        &[
            "waitId",
            "context",
            "contextId",
            "requester",
            "state",
            "intervalMs",
            "createdAtMs",
            "checks",
            "consecutiveErrors",
            "continuation",
        ],
        json!({
            "waitId": s, "context": s, "contextId": s, "requester": s,
            "state": {"enum": ["active", "cancelling", "matched", "failed"]},
            "reason": s, "intervalMs": i, "expiresAtMs": i, "createdAtMs": i, "checks": i,
            "consecutiveErrors": i, "lastError": last_error, "nextCheckAtMs": i,
            "resumeText": s, "payload": {}, "evidence": {},
            "failReason": {"enum": ["check_errors", "expired", "cancelled", "context_revoked"]}, "endedAtMs": i,
            "deduplicated": {"type": "boolean"}, "continuation": continuation,
        }),
    )
}
