//! Arbitrary bytes as the body of `PATCH /v1/execution-contexts/{context}/grant`, through the
//! decoder the route uses. Nothing may panic; whatever is accepted is strict JSON with slots
//! in range, and the grant written back decodes to the same grant.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_server::bodies::{MAX_SLOTS, decode_grant};

fuzz_target!(|data: &[u8]| {
    let Ok(grant) = decode_grant(data) else {
        return;
    };
    assert!(outpost_core::json::parse_strict(data).is_ok());
    assert!((1..=MAX_SLOTS).contains(&grant.limits.max_concurrent));
    let written = serde_json::to_vec(&grant).expect("a grant encodes");
    assert_eq!(decode_grant(&written).as_ref(), Ok(&grant));
});
