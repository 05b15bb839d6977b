//! Arbitrary bytes as the body of `POST /v1/execution-contexts`, through the decoder the
//! route uses. Nothing may panic; whatever is accepted is strict JSON with a valid name,
//! slots in range and a public key that is not weak, as the body spelled it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_server::bodies::{MAX_SLOTS, decode_registration, valid_name};

fuzz_target!(|data: &[u8]| {
    let Ok(registration) = decode_registration(data) else {
        return;
    };
    let value = outpost_core::json::parse_strict(data).expect("accepted bodies are strict JSON");
    assert!(valid_name(&registration.name), "{:?}", registration.name);
    assert!((1..=MAX_SLOTS).contains(&registration.max_concurrent));
    assert!(!registration.public_key.is_weak());
    let spelled = value
        .get("publicKey")
        .and_then(|v| v.as_str())
        .expect("publicKey");
    assert_eq!(
        outpost_core::b64::decode(spelled).ok().as_deref(),
        Some(registration.public_key.as_bytes().as_slice())
    );
});
