//! Arbitrary bytes as the signature fields of a request: line 1 is `Signature-Input`, line 2
//! `Signature`, line 3 `Content-Digest`, line 4 the URL, the rest the body. Nothing may
//! panic under either profile, and the replay guard never grows past its capacity.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::httpsig::{HttpRequest, Profile, check_content_digest, verify_signature};
use outpost_core::keyset::test_root;
use outpost_core::replay::{ReplayGuard, ReplayPolicy};
use outpost_core::time::UnixTime;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(5, '\n');
    let mut next = || lines.next().unwrap_or("").to_owned();
    let (input, signature, digest, url, body) = (next(), next(), next(), next(), next());
    let url = if url.is_empty() { "https://outpost.example/v1/x?y=1".to_owned() } else { url };
    let req = HttpRequest {
        method: "POST".into(),
        url,
        headers: vec![
            ("Signature-Input".into(), input),
            ("Signature".into(), signature),
            ("Content-Digest".into(), digest.clone()),
        ],
        body: body.into_bytes(),
    };
    let key = test_root::frame_signer().verifying_key();
    let lookup = move |_: &str| Some(key);
    let mut guard = ReplayGuard::new(ReplayPolicy { capacity: 4, ..ReplayPolicy::default() });
    for profile in [Profile::rfc9421(), Profile::outpost()] {
        for label in ["outpost", "sig-b26", "sig1"] {
            if let Ok(v) = verify_signature(&req, label, &lookup, &profile) {
                let _ = guard.check_request(&v, UnixTime(1_767_225_600));
                assert!(guard.len() <= 4);
            }
        }
    }
    let _ = check_content_digest(&digest, &req.body);
});
