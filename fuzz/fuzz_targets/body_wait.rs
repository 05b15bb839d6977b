//! Arbitrary bytes as the body of `POST /v1/waits`, through the decoder the route uses.
//! Nothing may panic; whatever is accepted is strict JSON with a condition of 1 to 64 KiB, an
//! interval in range, a named context, a reason within its length, and a continuation that is
//! an inline capability whose manifest parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::manifest::Manifest;
use outpost_core::wire::CapabilitySource;
use outpost_server::bodies::{
    MAX_CONDITION_BYTES, MAX_INTERVAL_MS, MAX_REASON_CHARS, MIN_INTERVAL_MS, decode_wait_request,
};

fuzz_target!(|data: &[u8]| {
    let Ok(request) = decode_wait_request(data) else {
        return;
    };
    assert!(outpost_core::json::parse_strict(data).is_ok());
    assert!(!request.condition.trim().is_empty());
    assert!(request.condition.len() <= MAX_CONDITION_BYTES);
    assert!((MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&request.interval_ms));
    assert!(!request.context.is_empty());
    assert!(
        request
            .reason
            .as_ref()
            .is_none_or(|r| r.chars().count() <= MAX_REASON_CHARS)
    );
    assert_eq!(request.then.is_some(), request.then_body.is_some());
    if let Some(then) = &request.then {
        let CapabilitySource::Inline { manifest, .. } = &then.capability else {
            panic!("a continuation named a capability by digest");
        };
        assert_eq!(Manifest::parse(manifest).ok(), then.manifest);
    }
});
