//! The OpenAPI document against the code it describes. Every route of the table the router is
//! built from is in the document with each of its answers and error codes; every `$ref`
//! resolves and every schema compiles; and each body decoder agrees with its schema: on a full
//! valid example and on its variations (each member left out, given another type, set to
//! `null`, pushed past each bound the schema states, and every member name the document or
//! the protocol's examples know added), the decoder takes exactly what the schema takes. So a decoder reading a member the
//! schema lacks, a schema naming a member the decoder does not read, and a range or pattern on
//! one side only all fail here.

use std::collections::BTreeSet;

use outpost_core::b64;
use serde_json::{Map, Value, json};

use super::openapi::{Carries, document};
use super::routes;
use crate::bodies;

type Decode = fn(&[u8]) -> Result<(), String>;

fn code<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<(), String> {
    r.map(drop).map_err(|e| e.to_string())
}

/// Every body a route reads: its schema's name, its decoder, full valid examples.
fn decoders() -> Vec<(&'static str, Decode, Vec<Value>)> {
    let key = b64::encode(
        outpost_core::sign::Ed25519Signer::from_seed("k", [7; 32])
            .verifying_key()
            .as_bytes(),
    );
    let manifest = "name: hi\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n";
    let inline = json!({"kind": "inline", "manifest": manifest,
        "files": [{"path": "bin/run.sh", "contentB64": "ZWNobyBoaQ"}]});
    let execute = json!({"capability": inline, "context": "build-box", "fallback": "chain",
        "requires": ["fs"], "whenOffline": "queue", "whenBusy": "queue", "queueMinutes": 60,
        "wantsCommands": true,
        "wait": true, "waitSecs": 60});
    vec![
        (
            "RegisterRequest",
            |b| code(bodies::decode_registration(b)),
            vec![
                json!({"name": "build-box", "publicKey": key, "maxConcurrent": 2,
                "environments": ["shell", "wasm"], "daemonVersion": "0.1.0"}),
            ],
        ),
        (
            "ExecuteRequest",
            |b| code(bodies::decode_execution_request(b)),
            vec![
                execute.clone(),
                json!({"capability": {"kind": "digest", "sha256": "ab".repeat(32), "size": 10}}),
            ],
        ),
        (
            "Grant",
            |b| code(bodies::decode_grant(b)),
            vec![json!({"fs": [{"path": "/srv/data", "mode": "ro"}],
                "egress": {"mode": "allowlist", "hosts": ["example.com:443"]},
                "commands": {"enabled": false}, "limits": {"maxConcurrent": 2},
                "environments": ["shell"]})],
        ),
        (
            "Chain",
            |b| code(bodies::decode_chain(b)),
            vec![json!({"chain": ["build-box", "cloud"]})],
        ),
        (
            "UserRequest",
            |b| code(bodies::decode_user(b)),
            vec![json!({"name": "ada", "scopes": ["execution_context:read", "admin"]})],
        ),
        (
            "JoinTokenRequest",
            |b| code(bodies::decode_join_token(b)),
            vec![json!({"ttlSecs": 3600, "uses": 3, "namePrefix": "ci-"})],
        ),
        (
            "ShareRequest",
            |b| code(bodies::decode_share(b)),
            vec![json!({"allMembers": true})],
        ),
        (
            "DaemonControl",
            |b| code(bodies::decode_daemon_control(b)),
            vec![
                json!({"action": "pause"}),
                json!({"action": "logs", "lines": 50}),
            ],
        ),
        (
            "CommandsSwitch",
            |b| code(bodies::decode_commands_switch(b)),
            vec![json!({"enabled": true})],
        ),
        (
            "CommandAuthorize",
            |b| code(bodies::decode_command_authorize(b)),
            vec![
                json!({"runId": "run_1", "command": "echo hi", "cwd": "/home/ada",
                "envKeys": ["GREETING"], "background": false}),
            ],
        ),
        (
            "JobAuthorize",
            |b| code(bodies::decode_job_authorize(b)),
            vec![json!({"runId": "run_1", "op": "poll", "jobId": 3})],
        ),
        (
            "TerminalOpen",
            |b| code(bodies::decode_terminal_open(b)),
            vec![json!({"cols": 80, "rows": 24})],
        ),
        (
            "WaitRequest",
            |b| code(bodies::decode_wait_request(b)),
            vec![
                json!({"context": "build-box", "condition": "async ({ ctx }) => false",
                "intervalMs": 30000, "expiresAtMs": 4_102_444_800_000u64,
                "reason": "deploy when green", "then": execute}),
            ],
        ),
        (
            "BundleDocument",
            |b| match outpost_core::wire::decode_bundle(b).map_err(|e| e.to_string())? {
                outpost_core::wire::CapabilitySource::Inline { manifest, files } => {
                    code(bodies::check_inline(&manifest, &files))
                }
                _ => Err("not inline".into()),
            },
            vec![
                json!({"type": "outpost.bundle", "version": 1, "manifest": manifest,
                "files": [{"path": "run.sh", "contentB64": "ZWNobyBoaQo"}]}),
            ],
        ),
    ]
}

/// What a decoder may refuse that no schema can say, by the refusal's code: a manifest is
/// YAML read by its own parser.
const SEMANTIC: &[&str] = &["invalid_manifest"];

/// A validator of `schema`, whose `$ref`s point into the document's components.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = schema.clone();
    root["components"] = doc["components"].clone();
    jsonschema::draft202012::new(&root)
        .unwrap_or_else(|e| panic!("the schema {schema} does not compile: {e}"))
}

/// `schema` with its `$ref` followed and an `Option`'s `null` branch taken away.
fn resolve(doc: &Value, schema: &Value) -> Value {
    if let Some(name) = schema["$ref"].as_str() {
        let name = name.trim_start_matches("#/components/schemas/");
        return resolve(doc, &doc["components"]["schemas"][name]);
    }
    if let Some(branches) = schema["anyOf"].as_array() {
        let some: Vec<&Value> = branches.iter().filter(|b| b["type"] != "null").collect();
        if let [one] = some[..] {
            return resolve(doc, one);
        }
    }
    schema.clone()
}

/// The object schema `value` is an instance of, among `schema`'s `oneOf` branches.
fn branch(doc: &Value, schema: &Value, value: &Value) -> Option<Value> {
    let schema = resolve(doc, schema);
    match schema["oneOf"].as_array() {
        Some(branches) => branches
            .iter()
            .map(|b| resolve(doc, b))
            .find(|b| validator(doc, b).is_valid(value)),
        None => schema["properties"].is_object().then_some(schema),
    }
}

/// Values past and at the bounds `member` states.
fn bounds(member: &Value, example: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let n = |v: &Value| v.as_i64();
    if let Some(min) = n(&member["minimum"]) {
        out.push((format!("minimum {min} - 1"), json!(min - 1)));
        out.push((format!("minimum {min}"), json!(min)));
    }
    if let Some(max) = n(&member["maximum"]) {
        out.push((format!("maximum {max}"), json!(max)));
        out.push((format!("maximum {max} + 1"), json!(max + 1)));
    }
    for (key, delta) in [
        ("minLength", -1i64),
        ("minLength", 0),
        ("maxLength", 0),
        ("maxLength", 1),
    ] {
        if let Some(len) = n(&member[key]) {
            let len = (len + delta).max(0) as usize;
            out.push((format!("{key} {delta:+}"), json!("a".repeat(len))));
        }
    }
    if let (Some(max), Some(first)) = (n(&member["maxItems"]), example.get(0)) {
        for len in [max, max + 1] {
            let items = vec![first.clone(); len as usize];
            out.push((format!("{len} items"), Value::Array(items)));
        }
    }
    if member["pattern"].is_string() {
        for text in ["Not Valid!", "a/../b", "-x", ""] {
            out.push((format!("{text:?} against the pattern"), json!(text)));
        }
        if let Some(text) = example.as_str() {
            out.push(("the example and a space".into(), json!(format!("{text} "))));
        }
    }
    out
}

/// The variations of `example` (an object of `schema`), members of nested objects included.
fn variations(
    doc: &Value,
    schema: &Value,
    example: &Value,
    known: &BTreeSet<String>,
) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let Some(object) = branch(doc, schema, example) else {
        return out;
    };
    let Value::Object(members) = example else {
        return out;
    };
    let with = |name: &str, value: Value| {
        let mut changed = members.clone();
        changed.insert(name.to_owned(), value);
        Value::Object(changed)
    };
    let properties = object["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (name, member) in &properties {
        if members.contains_key(name) {
            let mut without = members.clone();
            without.remove(name);
            out.push((format!("{name} left out"), Value::Object(without)));
        }
        for other in [
            json!(null),
            json!(true),
            json!(0),
            json!(7),
            json!(-1),
            json!("x"),
            json!(""),
            json!([]),
            json!({}),
            json!(["x"]),
        ] {
            out.push((format!("{name} = {other}"), with(name, other)));
        }
        let resolved = resolve(doc, member);
        let current = members.get(name).cloned().unwrap_or(Value::Null);
        for (label, value) in bounds(&resolved, &current) {
            out.push((format!("{name}: {label}"), with(name, value)));
        }
        if let Some(items) = current.as_array() {
            let item_schema = &resolved["items"];
            for (i, item) in items.iter().enumerate() {
                for (label, value) in bounds(&resolve(doc, item_schema), item) {
                    let mut list = items.clone();
                    list[i] = value;
                    out.push((
                        format!("{name}[{i}]: {label}"),
                        with(name, Value::Array(list)),
                    ));
                }
                if item.is_object() {
                    for (label, value) in variations(doc, item_schema, item, known) {
                        let mut list = items.clone();
                        list[i] = value;
                        out.push((
                            format!("{name}[{i}].{label}"),
                            with(name, Value::Array(list)),
                        ));
                    }
                }
            }
        }
        if current.is_object() {
            for (label, value) in variations(doc, member, &current, known) {
                out.push((format!("{name}.{label}"), with(name, value)));
            }
        }
    }
    for name in known.iter().filter(|n| !properties.contains_key(*n)) {
        for other in [json!(7), json!("x"), json!(null)] {
            out.push((
                format!("a member {name} = {other}, which the schema lacks"),
                with(name, other),
            ));
        }
    }
    out
}

/// Every member name any schema of the document has.
fn member_names(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get("properties") {
                out.extend(properties.keys().cloned());
            }
            map.values().for_each(|v| member_names(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| member_names(v, out)),
        _ => {}
    }
}

/// Every `"name":` in PROTOCOL.md's JSON.
fn protocol_members() -> BTreeSet<String> {
    let text = include_str!("../../../docs/PROTOCOL.md");
    text.split('"')
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[1].starts_with(':'))
        .map(|w| w[0])
        .filter(|n| n.chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
        .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(str::to_owned)
        .collect()
}

/// The names of the schemas request bodies refer to.
fn request_schemas(doc: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for methods in doc["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, m)| m)
    {
        for op in methods.as_object().into_iter().flatten().map(|(_, o)| o) {
            for media in op["requestBody"]["content"]
                .as_object()
                .into_iter()
                .flatten()
            {
                let name = media.1["schema"]["$ref"].as_str().expect("a named schema");
                out.insert(name.trim_start_matches("#/components/schemas/").to_owned());
            }
        }
    }
    out
}

#[test]
fn every_route_is_documented_with_its_answers_and_error_codes() {
    let doc = document(&routes());
    let mut operations = 0;
    for route in routes() {
        let d = &route.doc;
        let op = &doc["paths"][d.path][d.method.to_ascii_lowercase()];
        assert!(
            op.is_object(),
            "{} {} is not in the document",
            d.method,
            d.path
        );
        operations += 1;
        assert!(
            !d.answers.is_empty(),
            "{} {} documents no answer",
            d.method,
            d.path
        );
        for answer in &d.answers {
            let documented = &op["responses"][answer.status.to_string()];
            assert!(
                documented.is_object(),
                "{} {}: {}",
                d.method,
                d.path,
                answer.status
            );
            if let Carries::Json(_) = answer.carries {
                assert!(
                    documented["content"]["application/json"]["schema"].is_object(),
                    "{} {}: {} has no schema",
                    d.method,
                    d.path,
                    answer.status
                );
            }
        }
        for (status, code) in d.all_errors() {
            let codes = &op["responses"][status.to_string()]["x-error-codes"];
            assert!(
                codes
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c == code)),
                "{} {}: {status} {code} is not documented",
                d.method,
                d.path
            );
        }
    }
    let documented: usize = doc["paths"]
        .as_object()
        .expect("paths")
        .values()
        .map(|m| m.as_object().map_or(0, Map::len))
        .sum();
    assert_eq!(
        documented, operations,
        "the document has operations no route serves"
    );
    // Every reference resolves, and every schema compiles.
    let text = doc.to_string();
    for piece in text.split("\"$ref\":\"").skip(1) {
        let target = piece.split('"').next().unwrap_or_default();
        let name = target.trim_start_matches("#/components/schemas/");
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{target} names no schema"
        );
    }
    for name in doc["components"]["schemas"]
        .as_object()
        .expect("schemas")
        .keys()
    {
        validator(
            &doc,
            &json!({"$ref": format!("#/components/schemas/{name}")}),
        );
    }
    // The descriptions come from doc comments: none may carry a rustdoc link for a reader of
    // the document to stumble on.
    assert!(!text.contains("[`"), "a description holds a rustdoc link");
}

#[test]
fn each_body_decoder_takes_exactly_what_its_schema_takes() {
    let doc = document(&routes());
    let decoders = decoders();
    let named: BTreeSet<String> = decoders.iter().map(|(n, _, _)| (*n).to_owned()).collect();
    assert_eq!(
        named,
        request_schemas(&doc),
        "each request schema needs its decoder and examples here"
    );
    // The names a decoder could read: every member of the document and of the protocol's
    // JSON examples.
    let mut known = BTreeSet::new();
    member_names(&doc["components"], &mut known);
    known.extend(protocol_members());
    let mut failures = Vec::new();
    let mut cases = 0;
    for (name, decode, examples) in decoders {
        let schema = json!({"$ref": format!("#/components/schemas/{name}")});
        let valid = validator(&doc, &schema);
        for example in examples {
            let bytes = example.to_string();
            assert_eq!(
                decode(bytes.as_bytes()),
                Ok(()),
                "{name}: the example {example}"
            );
            assert!(
                valid.is_valid(&example),
                "{name}: the schema refuses {example}"
            );
            for (label, body) in variations(&doc, &schema, &example, &known) {
                cases += 1;
                let decoded = decode(body.to_string().as_bytes());
                let fits = valid.is_valid(&body);
                let semantic = decoded
                    .as_ref()
                    .is_err_and(|e| SEMANTIC.iter().any(|c| e.starts_with(c)));
                if decoded.is_ok() != fits && !(fits && semantic) {
                    failures.push(format!(
                        "{name}, {label}: the decoder {}, the schema {}",
                        match &decoded {
                            Ok(()) => "takes it".to_owned(),
                            Err(e) => format!("refuses it ({e})"),
                        },
                        if fits { "takes it" } else { "refuses it" }
                    ));
                }
            }
        }
    }
    assert!(cases > 1000, "only {cases} variations");
    assert!(
        failures.is_empty(),
        "{} of {cases} variations disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
