use ed25519_dalek::VerifyingKey;

use super::signature::OUTPOST_LABEL;
use super::*;
use crate::keyset::test_root::seed_from_hex;
use crate::sign::Ed25519Signer;

/// RFC 9421 Appendix B.1.4: `test-key-ed25519`.
const RFC_KEY_SEED: &str = "9f8362f87a484a954e6e740c5b4c0e84229139a20aa8ab56ff66586f6a7d29c5";
const RFC_KEY_PUBLIC: &str = "26b40b8f93fff3d897112f7ebc582b232dbd72517d082fe83cfb30ddce43d1bb";

fn rfc_signer() -> Ed25519Signer {
    Ed25519Signer::from_seed("test-key-ed25519", seed_from_hex(RFC_KEY_SEED).unwrap())
}

/// RFC 9421 Appendix B.2: the test request.
fn rfc_test_request() -> HttpRequest {
    HttpRequest {
        method: "POST".into(),
        url: "https://example.com/foo?param=Value&Pet=dog".into(),
        headers: vec![
            ("Host".into(), "example.com".into()),
            ("Date".into(), "Tue, 20 Apr 2021 02:07:55 GMT".into()),
            ("Content-Type".into(), "application/json".into()),
            (
                "Content-Digest".into(),
                "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:".into(),
            ),
            ("Content-Length".into(), "18".into()),
        ],
        body: b"{\"hello\": \"world\"}".to_vec(),
    }
}

const B26_BASE: &str = "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n\"@method\": POST\n\"@path\": /foo\n\"@authority\": example.com\n\"content-type\": application/json\n\"content-length\": 18\n\"@signature-params\": (\"date\" \"@method\" \"@path\" \"@authority\" \"content-type\" \"content-length\");created=1618884473;keyid=\"test-key-ed25519\"";
const B26_INPUT: &str = "sig-b26=(\"date\" \"@method\" \"@path\" \"@authority\" \"content-type\" \"content-length\");created=1618884473;keyid=\"test-key-ed25519\"";
const B26_SIGNATURE: &str = "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:";

fn b26_params() -> SignatureParams {
    SignatureParams {
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
        created: Some(1618884473),
        keyid: Some("test-key-ed25519".into()),
        ..SignatureParams::default()
    }
}

fn rfc_lookup(kid: &str) -> Option<VerifyingKey> {
    (kid == "test-key-ed25519").then(|| rfc_signer().verifying_key())
}

#[test]
fn reproduces_rfc9421_b26_byte_for_byte() {
    assert_eq!(
        hex::encode(rfc_signer().verifying_key().as_bytes()),
        RFC_KEY_PUBLIC
    );
    let mut req = rfc_test_request();
    assert_eq!(signature_base(&req, &b26_params()).unwrap(), B26_BASE);
    let base = sign_request(&mut req, "sig-b26", &b26_params(), &rfc_signer()).unwrap();
    assert_eq!(base, B26_BASE);
    assert_eq!(req.header("signature-input").unwrap(), B26_INPUT.to_owned());
    assert_eq!(req.header("signature").unwrap(), B26_SIGNATURE.to_owned());
}

#[test]
fn verifies_the_rfc_example_as_received() {
    let mut req = rfc_test_request();
    req.headers
        .push(("Signature-Input".into(), B26_INPUT.into()));
    req.headers.push(("Signature".into(), B26_SIGNATURE.into()));
    let v = verify_signature(&req, "sig-b26", &rfc_lookup, &Profile::rfc9421()).unwrap();
    assert_eq!(v.signature_base, B26_BASE);
    assert_eq!(v.keyid, "test-key-ed25519");
    // The RFC example does not meet outpost's profile.
    let err = verify_signature(&req, "sig-b26", &rfc_lookup, &Profile::outpost()).unwrap_err();
    assert_eq!(err.code(), "component_not_covered");
    // Tampering with a covered header breaks it.
    req.set_header("Content-Type", "text/plain");
    let err = verify_signature(&req, "sig-b26", &rfc_lookup, &Profile::rfc9421()).unwrap_err();
    assert_eq!(err.code(), "bad_signature");
}

fn outpost_request(body: &[u8]) -> (HttpRequest, Ed25519Signer) {
    let signer = Ed25519Signer::from_seed("machine-1", [3; 32]);
    let mut req = HttpRequest {
        method: "POST".into(),
        url: "https://outpost.example/v1/execution-contexts/connect-ticket?x=1".into(),
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: body.to_vec(),
    };
    req.set_header(
        "Content-Digest",
        content_digest(body, &[DigestAlgorithm::Sha256]),
    );
    let params = SignatureParams {
        components: ["@method", "@authority", "@path", "@query", "content-digest"]
            .map(String::from)
            .to_vec(),
        created: Some(1_700_000_000),
        expires: Some(1_700_000_060),
        nonce: Some("n-1".into()),
        alg: Some("ed25519".into()),
        keyid: Some("machine-1".into()),
        tag: None,
    };
    sign_request(&mut req, OUTPOST_LABEL, &params, &signer).unwrap();
    (req, signer)
}

#[test]
fn outpost_profile_round_trip_and_tampering() {
    let (req, signer) = outpost_request(b"{\"a\":1}");
    let key = signer.verifying_key();
    let lookup = move |kid: &str| (kid == "machine-1").then_some(key);
    let v = verify_signature(&req, OUTPOST_LABEL, &lookup, &Profile::outpost()).unwrap();
    assert_eq!(v.params.nonce.as_deref(), Some("n-1"));

    let mut changed_path = req.clone();
    changed_path.url = changed_path.url.replace("connect-ticket", "commands");
    assert_eq!(
        verify_signature(&changed_path, OUTPOST_LABEL, &lookup, &Profile::outpost())
            .unwrap_err()
            .code(),
        "bad_signature"
    );
    let mut changed_body = req.clone();
    changed_body.body = b"{\"a\":2}".to_vec();
    assert_eq!(
        verify_signature(&changed_body, OUTPOST_LABEL, &lookup, &Profile::outpost())
            .unwrap_err()
            .code(),
        "content_digest_mismatch"
    );
    assert_eq!(
        verify_signature(&req, OUTPOST_LABEL, &|_| None, &Profile::outpost())
            .unwrap_err()
            .code(),
        "unknown_key"
    );
    assert_eq!(
        verify_signature(&req, "other", &lookup, &Profile::outpost())
            .unwrap_err()
            .code(),
        "missing_signature"
    );
}

#[test]
fn profile_requirements() {
    let signer = Ed25519Signer::from_seed("k", [5; 32]);
    let key = signer.verifying_key();
    let lookup = move |_: &str| Some(key);
    let base_params = SignatureParams {
        components: ["@method", "@authority", "@path", "@query"]
            .map(String::from)
            .to_vec(),
        created: Some(100),
        expires: Some(160),
        nonce: Some("n".into()),
        alg: Some("ed25519".into()),
        keyid: Some("k".into()),
        tag: None,
    };
    let check = |params: SignatureParams, body: &[u8]| {
        let mut req = HttpRequest {
            method: "GET".into(),
            url: "https://h/p".into(),
            headers: vec![],
            body: body.to_vec(),
        };
        sign_request(&mut req, "outpost", &params, &signer).unwrap();
        verify_signature(&req, "outpost", &lookup, &Profile::outpost()).map(|_| ())
    };
    assert_eq!(check(base_params.clone(), b""), Ok(()));
    assert_eq!(
        check(base_params.clone(), b"x").unwrap_err().code(),
        "component_not_covered"
    );
    let no_nonce = SignatureParams {
        nonce: None,
        ..base_params.clone()
    };
    assert_eq!(
        check(no_nonce, b"").unwrap_err().code(),
        "missing_parameter"
    );
    let long = SignatureParams {
        expires: Some(1000),
        ..base_params.clone()
    };
    assert_eq!(check(long, b"").unwrap_err().code(), "invalid_parameter");
    let rsa = SignatureParams {
        alg: Some("rsa-pss-sha512".into()),
        ..base_params.clone()
    };
    assert_eq!(check(rsa, b"").unwrap_err().code(), "invalid_parameter");
    let no_query = SignatureParams {
        components: ["@method", "@authority", "@path"]
            .map(String::from)
            .to_vec(),
        ..base_params
    };
    assert_eq!(
        check(no_query, b"").unwrap_err().code(),
        "component_not_covered"
    );
}

#[test]
fn malformed_fields_are_typed_errors() {
    let (req, signer) = outpost_request(b"");
    let key = signer.verifying_key();
    let lookup = move |_: &str| Some(key);
    let with = |name: &str, value: &str| {
        let mut r = req.clone();
        r.set_header(name, value);
        verify_signature(&r, OUTPOST_LABEL, &lookup, &Profile::rfc9421())
            .unwrap_err()
            .code()
    };
    assert_eq!(
        with("Signature-Input", "outpost=(\"@method\""),
        "malformed_field"
    );
    assert_eq!(with("Signature-Input", "outpost=\"x\""), "malformed_field");
    assert_eq!(
        with("Signature-Input", "outpost=(\"@status\");keyid=\"k\""),
        "unsupported_component"
    );
    assert_eq!(
        with("Signature-Input", "outpost=(\"@method\";req);keyid=\"k\""),
        "unsupported_component"
    );
    assert_eq!(
        with(
            "Signature-Input",
            "outpost=(\"@method\" \"@method\");keyid=\"k\""
        ),
        "malformed_field"
    );
    assert_eq!(
        with(
            "Signature-Input",
            "outpost=(\"@method\");created=-1;keyid=\"k\""
        ),
        "invalid_parameter"
    );
    assert_eq!(with("Signature", "outpost=:AAAA:"), "malformed_field");
    assert_eq!(
        with("Signature", "outpost=:not base64!:"),
        "malformed_field"
    );
    assert_eq!(with("Signature", "outpost=?1"), "malformed_field");
}
