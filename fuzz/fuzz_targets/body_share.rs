//! Arbitrary bytes as the body of `POST /v1/execution-contexts/{context}/share`, through the
//! decoder the route uses. Nothing may panic; whatever is accepted is strict JSON, an object
//! with `allMembers` alone, and the body written back decodes to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_server::bodies::decode_share;

fuzz_target!(|data: &[u8]| {
    let Ok(share) = decode_share(data) else {
        return;
    };
    assert!(outpost_core::json::parse_strict(data).is_ok());
    let value: serde_json::Value = serde_json::from_slice(data).expect("accepted JSON");
    assert_eq!(value.as_object().map(|o| o.len()), Some(1), "{value}");
    assert_eq!(value["allMembers"].as_bool(), Some(share.all_members));
    let written = serde_json::to_vec(&share).expect("a share request encodes");
    assert_eq!(decode_share(&written), Ok(share));
});
