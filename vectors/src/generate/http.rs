//! `http-signatures.json` and `content-digest.json`.

use outpost_core::httpsig::{
    DigestAlgorithm, HttpRequest, OUTPOST_LABEL, SignatureParams, content_digest, sign_request,
};

use super::{MACHINE_SECRET_HEX, NOW, public_hex, signer};
use crate::model::{ContentDigestCase, HttpSignatureCase, RequestEntry, SeenNonce, VectorFile};

/// RFC 9421 Appendix B.1.4 `test-key-ed25519`.
pub const RFC_KEY_SECRET_HEX: &str =
    "9f8362f87a484a954e6e740c5b4c0e84229139a20aa8ab56ff66586f6a7d29c5";
const MACHINE_KID: &str = "machine-test-1";

fn entry(req: &HttpRequest) -> RequestEntry {
    RequestEntry {
        method: req.method.clone(),
        url: req.url.clone(),
        headers: req.headers.clone(),
        body: String::from_utf8(req.body.clone()).expect("vector bodies are UTF-8"),
    }
}

/// RFC 9421 B.2.6, exactly as the RFC gives it.
fn rfc_b26() -> HttpSignatureCase {
    let body = b"{\"hello\": \"world\"}".to_vec();
    let mut req = HttpRequest {
        method: "POST".into(),
        url: "https://example.com/foo?param=Value&Pet=dog".into(),
        headers: vec![
            ("Host".into(), "example.com".into()),
            ("Date".into(), "Tue, 20 Apr 2021 02:07:55 GMT".into()),
            ("Content-Type".into(), "application/json".into()),
            (
                "Content-Digest".into(),
                content_digest(&body, &[DigestAlgorithm::Sha512]),
            ),
            ("Content-Length".into(), "18".into()),
        ],
        body,
    };
    let params = SignatureParams {
        components: [
            "date",
            "@method",
            "@path",
            "@authority",
            "content-type",
            "content-length",
        ]
        .map(String::from)
        .to_vec(),
        created: Some(1_618_884_473),
        keyid: Some("test-key-ed25519".into()),
        ..SignatureParams::default()
    };
    let base = sign_request(
        &mut req,
        "sig-b26",
        &params,
        &signer("test-key-ed25519", RFC_KEY_SECRET_HEX),
    )
    .expect("the RFC example signs");
    HttpSignatureCase {
        name: "rfc9421_b26_ed25519".into(),
        valid: true,
        error: None,
        profile: "rfc9421".into(),
        label: "sig-b26".into(),
        keyid: "test-key-ed25519".into(),
        public_key_hex: public_hex(RFC_KEY_SECRET_HEX),
        secret_key_hex: RFC_KEY_SECRET_HEX.into(),
        now: 1_618_884_473,
        seen_nonces: vec![],
        request: entry(&req),
        signature_base: Some(base),
    }
}

struct Outpost {
    method: &'static str,
    url: &'static str,
    body: &'static [u8],
    created: u64,
    expires: u64,
    nonce: &'static str,
    keyid: &'static str,
    /// Whether `@query` is covered (the profile requires it).
    cover_query: bool,
    /// An extra header, covered by the signature.
    extra_header: Option<(&'static str, &'static str)>,
    /// A `Content-Digest` value to send instead of the true one.
    digest_override: Option<&'static str>,
}

const TICKET: Outpost = Outpost {
    method: "POST",
    url: "https://outpost.example/v1/execution-contexts/connect-ticket",
    body: b"{\"contextId\":\"ec_vectors\"}",
    created: NOW,
    expires: NOW + 60,
    nonce: "nonce-0001",
    keyid: MACHINE_KID,
    cover_query: true,
    extra_header: None,
    digest_override: None,
};

impl Outpost {
    fn sign(&self) -> (HttpRequest, String) {
        let mut req = HttpRequest {
            method: self.method.into(),
            url: self.url.into(),
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: self.body.to_vec(),
        };
        let mut components: Vec<String> = ["@method", "@authority", "@path"]
            .map(String::from)
            .to_vec();
        if self.cover_query {
            components.push("@query".into());
        }
        if !self.body.is_empty() {
            let digest = self.digest_override.map_or_else(
                || content_digest(self.body, &[DigestAlgorithm::Sha256]),
                String::from,
            );
            req.headers.push(("Content-Digest".into(), digest));
            components.push("content-digest".into());
        }
        if let Some((name, value)) = self.extra_header {
            req.headers.push((name.into(), value.into()));
            components.push(name.to_ascii_lowercase());
        }
        let params = SignatureParams {
            components,
            created: Some(self.created),
            expires: Some(self.expires),
            nonce: Some(self.nonce.into()),
            alg: Some("ed25519".into()),
            keyid: Some(self.keyid.into()),
            tag: None,
        };
        let base = sign_request(
            &mut req,
            OUTPOST_LABEL,
            &params,
            &signer(self.keyid, MACHINE_SECRET_HEX),
        )
        .expect("signing succeeds");
        (req, base)
    }

    fn case(&self, name: &str, now: u64) -> HttpSignatureCase {
        let (req, base) = self.sign();
        HttpSignatureCase {
            name: name.into(),
            valid: true,
            error: None,
            profile: "outpost".into(),
            label: OUTPOST_LABEL.into(),
            keyid: MACHINE_KID.into(),
            public_key_hex: public_hex(MACHINE_SECRET_HEX),
            secret_key_hex: MACHINE_SECRET_HEX.into(),
            now,
            seen_nonces: vec![],
            request: entry(&req),
            signature_base: Some(base),
        }
    }
}

fn refused(mut case: HttpSignatureCase, error: &str) -> HttpSignatureCase {
    case.valid = false;
    case.error = Some(error.into());
    case.signature_base = None;
    case
}

pub(super) fn file() -> VectorFile<HttpSignatureCase> {
    let mut cases = vec![
        rfc_b26(),
        TICKET.case("outpost_post_with_content_digest", NOW + 5),
        Outpost {
            method: "GET",
            url: "https://outpost.example/v1/execution-contexts/server-keys?since=3",
            body: b"",
            nonce: "nonce-0002",
            ..TICKET
        }
        .case("outpost_get_without_body", NOW),
    ];

    let mut changed_path = TICKET.case("changed_path", NOW);
    changed_path.request.url = changed_path
        .request
        .url
        .replace("connect-ticket", "commands");
    cases.push(refused(changed_path, "bad_signature"));

    let mut changed_body = TICKET.case("changed_body", NOW);
    changed_body.request.body = "{\"contextId\":\"ec_other\"}".into();
    cases.push(refused(changed_body, "content_digest_mismatch"));

    let mut changed_digest = TICKET.case("changed_body_and_digest", NOW);
    changed_digest.request.body = "{\"contextId\":\"ec_other\"}".into();
    for (name, value) in changed_digest.request.headers.iter_mut() {
        if name == "Content-Digest" {
            *value = content_digest(b"{\"contextId\":\"ec_other\"}", &[DigestAlgorithm::Sha256]);
        }
    }
    cases.push(refused(changed_digest, "bad_signature"));

    let mut replayed = TICKET.case("replayed_nonce", NOW + 10);
    replayed.seen_nonces = vec![SeenNonce {
        keyid: MACHINE_KID.into(),
        nonce: TICKET.nonce.into(),
        created: NOW,
    }];
    cases.push(refused(replayed, "nonce_replayed"));

    cases.push(refused(
        Outpost {
            created: NOW - 400,
            expires: NOW - 340,
            ..TICKET
        }
        .case("stale_created", NOW),
        "signature_too_old",
    ));
    cases.push(refused(
        Outpost {
            created: NOW - 100,
            expires: NOW - 40,
            ..TICKET
        }
        .case("expired", NOW),
        "signature_expired",
    ));
    cases.push(refused(
        Outpost {
            created: NOW + 120,
            expires: NOW + 180,
            ..TICKET
        }
        .case("created_in_future", NOW),
        "created_in_future",
    ));
    cases.push(refused(
        Outpost {
            keyid: "machine-unknown",
            ..TICKET
        }
        .case("unknown_key", NOW),
        "unknown_key",
    ));
    cases.push(refused(
        Outpost {
            expires: NOW + 3600,
            ..TICKET
        }
        .case("validity_too_long", NOW),
        "invalid_parameter",
    ));

    // Freshness boundaries: 300 s maximum age, 30 s allowed skew.
    for (name, created, expires, error) in [
        ("created_300s_ago_accepted", NOW - 300, NOW, None),
        (
            "created_301s_ago",
            NOW - 301,
            NOW - 1,
            Some("signature_too_old"),
        ),
        ("created_30s_ahead_accepted", NOW + 30, NOW + 90, None),
        (
            "created_31s_ahead",
            NOW + 31,
            NOW + 91,
            Some("created_in_future"),
        ),
        ("expired_30s_ago_accepted", NOW - 90, NOW - 30, None),
        (
            "expired_31s_ago",
            NOW - 91,
            NOW - 31,
            Some("signature_expired"),
        ),
    ] {
        let case = Outpost {
            created,
            expires,
            ..TICKET
        }
        .case(name, NOW);
        cases.push(match error {
            Some(code) => refused(case, code),
            None => case,
        });
    }
    let long_nonce: &'static str = "n".repeat(129).leak();
    cases.push(refused(
        Outpost {
            nonce: long_nonce,
            ..TICKET
        }
        .case("nonce_too_long", NOW),
        "nonce_too_long",
    ));
    cases.push(refused(
        Outpost {
            cover_query: false,
            ..TICKET
        }
        .case("query_not_covered", NOW),
        "component_not_covered",
    ));
    cases.push(refused(
        Outpost {
            digest_override: Some("md5=:AAAAAAAAAAAAAAAAAAAAAA==:"),
            ..TICKET
        }
        .case("only_unsupported_digest", NOW),
        "no_supported_digest",
    ));
    let mut dropped_header = Outpost {
        extra_header: Some(("X-Outpost-Context", "ec_vectors")),
        ..TICKET
    }
    .case("covered_header_missing", NOW);
    dropped_header
        .request
        .headers
        .retain(|(n, _)| n != "X-Outpost-Context");
    cases.push(refused(dropped_header, "missing_component"));
    let mut unsupported = TICKET.case("unsupported_derived_component", NOW);
    for (name, value) in unsupported.request.headers.iter_mut() {
        if name == "Signature-Input" {
            *value = value.replace("\"@query\"", "\"@status\"");
        }
    }
    cases.push(refused(unsupported, "unsupported_component"));

    let mut no_nonce = TICKET.case("missing_nonce", NOW);
    for (name, value) in no_nonce.request.headers.iter_mut() {
        if name == "Signature-Input" {
            *value = value.replace(";nonce=\"nonce-0001\"", "");
        }
    }
    cases.push(refused(no_nonce, "missing_parameter"));

    let mut short_sig = TICKET.case("signature_wrong_length", NOW);
    for (name, value) in short_sig.request.headers.iter_mut() {
        if name == "Signature" {
            *value = "outpost=:AAAAAAAAAAAAAAAAAAAAAA==:".into();
        }
    }
    cases.push(refused(short_sig, "malformed_field"));

    let mut bad_sf = TICKET.case("malformed_signature_input", NOW);
    for (name, value) in bad_sf.request.headers.iter_mut() {
        if name == "Signature-Input" {
            value.push_str(";;");
        }
    }
    cases.push(refused(bad_sf, "malformed_field"));

    VectorFile {
        kind: "http-signatures".into(),
        description: "HTTP Message Signatures (RFC 9421, ed25519). Verify the signature labelled \
            `label` on `request` with the key `public_key_hex` when `keyid` matches (any other keyid \
            is unknown). Profile `rfc9421`: the signature alone. Profile `outpost`: the signature \
            must cover @method, @authority, @path, @query (and content-digest when there is a \
            body), carry created, expires (at most 300 s after created), nonce, keyid and \
            alg=\"ed25519\"; then Content-Digest must match the body; then at wall time `now`, with \
            300 s maximum age and 30 s allowed clock skew, the request must be fresh and its nonce \
            unused, given `seen_nonces`. Valid cases give the exact `signature_base`, and signing \
            it with `secret_key_hex` gives the `Signature` field."
            .into(),
        cases,
    }
}

pub(super) fn digest_file() -> VectorFile<ContentDigestCase> {
    let hello_nl = "{\"hello\": \"world\"}\n";
    let ok = |name: &str, body: &str, algs: &[DigestAlgorithm]| ContentDigestCase {
        name: name.into(),
        valid: true,
        error: None,
        body: body.into(),
        header: content_digest(body.as_bytes(), algs),
    };
    let bad = |name: &str, body: &str, header: &str, error: &str| ContentDigestCase {
        name: name.into(),
        valid: false,
        error: Some(error.into()),
        body: body.into(),
        header: header.into(),
    };
    let sha256 = content_digest(hello_nl.as_bytes(), &[DigestAlgorithm::Sha256]);
    VectorFile {
        kind: "content-digest".into(),
        description: "Content-Digest (RFC 9530). Valid cases: computing the field for `body` with \
            the algorithms `header` names, in its order, gives `header` exactly, and checking \
            accepts it. A field is accepted when every sha-256 / sha-512 member matches and at \
            least one is present; other algorithms are ignored."
            .into(),
        cases: vec![
            ok("rfc9530_sha512", hello_nl, &[DigestAlgorithm::Sha512]),
            ok("rfc9530_sha256", hello_nl, &[DigestAlgorithm::Sha256]),
            ok(
                "both_algorithms",
                hello_nl,
                &[DigestAlgorithm::Sha256, DigestAlgorithm::Sha512],
            ),
            ok(
                "rfc9421_test_request",
                "{\"hello\": \"world\"}",
                &[DigestAlgorithm::Sha512],
            ),
            ok("empty_body", "", &[DigestAlgorithm::Sha256]),
            bad(
                "wrong_body",
                "{\"hello\": \"world!\"}\n",
                &sha256,
                "content_digest_mismatch",
            ),
            bad(
                "only_unknown_algorithms",
                hello_nl,
                "md5=:AAAAAAAAAAAAAAAAAAAAAA==:",
                "no_supported_digest",
            ),
            bad(
                "not_a_byte_sequence",
                hello_nl,
                "sha-256=\"RK/0qy18MlBSVnWgjwz6lZEWjP/lF5HF9bvEF8FabDg=\"",
                "malformed_field",
            ),
            bad(
                "not_a_dictionary",
                hello_nl,
                "sha-256=:RK/0qy18:, ,",
                "malformed_field",
            ),
        ],
    }
}
