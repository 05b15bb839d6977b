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
