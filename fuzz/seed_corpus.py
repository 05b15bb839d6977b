#!/usr/bin/env python3
"""Seeds each fuzz target's corpus from the published vectors (vectors/*.json)."""
import json
import pathlib
import hashlib

ROOT = pathlib.Path(__file__).resolve().parent
VECTORS = ROOT.parent / "vectors"


def load(name):
    return json.loads((VECTORS / name).read_text())["cases"]


def write(target, blobs):
    folder = ROOT / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    for blob in blobs:
        (folder / hashlib.sha1(blob).hexdigest()).write_bytes(blob)
    print(f"{target}: {len(blobs)} seeds")


frames = [bytes.fromhex(c["frame_hex"]) for c in load("signed-frames.json")]
json_inputs = [bytes.fromhex(c["input_hex"]) for c in load("canonical-json.json")]
documents = [bytes.fromhex(c["document_hex"]) for c in load("key-sets.json")]


def length_prefixed(bodies):
    out = b""
    for body in bodies:
        out += len(body).to_bytes(4, "big") + body
    return out


write("signed_frame_verify", frames + [b"\n".join(frames[:6])])
write("canonical_json", json_inputs + frames)
write("key_set_parse", documents)
write("frame_decode", [bytes([step]) + length_prefixed(frames[i:i + 3]) for i, step in
                       zip(range(0, len(frames), 3), [1, 3, 7, 64, 255, 2, 5, 11, 13, 17])])

http = []
for case in load("http-signatures.json"):
    headers = {k.lower(): v for k, v in case["request"]["headers"]}
    http.append("\n".join([headers.get("signature-input", ""), headers.get("signature", ""),
                           headers.get("content-digest", ""), case["request"]["url"],
                           case["request"]["body"]]).encode())
write("http_signature_parse", http)

manifests = [p.read_bytes() for p in sorted((ROOT.parent / "examples").glob("*/manifest.yaml"))]
manifests.append(b"name: boxed\nenvironment: docker\nlifecycle: persistent\n"
                 b"docker_image: outpost-test/busybox:latest\nentry: httpd\n"
                 b"args: [\"-f\", \"-p\", \"8080\"]\nport: 8080\n"
                 b"volumes: [{host: ., guest: /www, mode: ro}]\n"
                 b"permissions: [\"connect:example.org:443\"]\n"
                 b"limits: {timeout_ms: 1000, memory_mb: 64, cpu_millicores: 500, pids_max: 32}\n")
write("manifest_parse", manifests)

records = [line.encode() for line in (ROOT.parent / "docs" / "RECORDS.md").read_text().splitlines()
           if line.startswith('{"v":')]
write("record_decode", records)
spec = {"waitId": "wait_1", "requester": "ada", "source": "async () => false", "intervalMs": 1000}
rows = [
    {"spec": spec, "checks": 0, "consecutiveErrors": 0, "nextCheckMs": 1767225601000},
    {"spec": dict(spec, expiresAtMs=1767225700000, operator=True), "checks": 3, "consecutiveErrors": 1,
     "lastError": {"code": "check_threw", "message": "no", "atMs": 1767225602000},
     "nextCheckMs": 1767225603000, "stopping": "cancelled"},
    {"spec": spec, "checks": 4, "consecutiveErrors": 0,
     "ending": {"outcome": "matched", "resumeText": "up", "payload": "{}", "evidence": "[]",
                "continuationId": "wait_1.then", "matchedAtMs": 1767225604000}},
    {"spec": spec, "checks": 5, "consecutiveErrors": 5,
     "ending": {"outcome": "failed", "reason": "check_errors", "atMs": 1767225605000}},
]
write("wait_row_decode", [json.dumps({"v": 1, "type": "wait.row", "writtenMs": 1767225600000, "body": r},
                                     separators=(",", ":")).encode() for r in rows])

# The request bodies of PROTOCOL §11, as its examples spell them, and near misses.
run_sh = "ZWNobyBoaQo"
inline = {"kind": "inline", "manifest": "name: hi\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
          "files": [{"path": "run.sh", "contentB64": run_sh}]}
write("body_execution_request", [json.dumps(b).encode() for b in [
    {"capability": inline},
    {"capability": inline, "context": "build-box", "fallback": "chain", "requires": ["fs"],
     "whenOffline": "queue", "queueMinutes": 60, "wait": True, "waitSecs": 60},
    {"capability": {"kind": "digest", "sha256": "00" * 32, "size": 1}},
    {"capability": inline, "waitSecs": 301},
]])
write("body_grant", [json.dumps(b).encode() for b in [
    {"egress": {"mode": "none"}, "limits": {"maxConcurrent": 1}},
    {"fs": [{"path": "/home/ada/src", "mode": "rw"}], "egress": {"mode": "allowlist", "hosts": ["*.example.org:443"]},
     "commands": {"enabled": True}, "limits": {"maxConcurrent": 8}, "environments": ["shell", "wasm"]},
    {"egress": {"mode": "all"}, "limits": [1]},
]])
write("body_chain", [b'{"chain":["build-box","cloud"]}', b'{"chain":[]}', b'{"chain":"cloud"}'])
write("body_user", [b'{"name":"ada"}', b'{"name":"ada","scopes":["execution_context:read","admin"]}',
                    b'{"name":"Ada","scopes":["root"]}'])
write("body_share", [b'{"allMembers":true}', b'{"allMembers":false}', b'{"allMembers":"on"}',
                     b'{"allMembers":true,"allMembers":false}', b'{"allMembers":true,"x":1}'])
write("body_commands", [b'{"enabled":true}', b'{"enabled":"yes"}', b'{"enabled":true,"x":1}',
                        b'{"runId":"x.1","command":"echo hi","cwd":"/tmp","envKeys":["A"],"background":false}',
                        b'{"runId":"x.1","command":"echo hi","background":true,"envKeys":[1]}'])
key = "Tiu7yzmXQoBYEOutpb8QaFQCs4ozR9TAglCukgLAIYc"
write("body_registration", [json.dumps(b).encode() for b in [
    {"name": "build-box", "publicKey": key, "maxConcurrent": 2, "environments": ["shell", "wasm"],
     "daemonVersion": "0.1.0"},
    {"name": "b", "publicKey": key},
    {"name": "build-box", "publicKey": "A" * 43, "maxConcurrent": 9},
]])
write("body_wait", [json.dumps(b).encode() for b in [
    {"context": "build-box", "condition": "async ({ ctx }) => false"},
    {"context": "build-box", "condition": "async () => ({ resumeText: 'up' })", "intervalMs": 1000,
     "expiresAtMs": 1767225720000, "reason": "deploy", "then": {"capability": inline}},
    {"context": "build-box", "condition": " ", "intervalMs": 999},
    {"context": "", "condition": "async () => false", "then": {"capability": {"kind": "digest", "sha256": "00" * 32, "size": 1}}},
]])
