//! Arbitrary bytes as the body of `PUT /v1/chain`, through the decoder the route uses.
//! Nothing may panic; whatever is accepted is strict JSON, and the chain written back decodes
//! to the same chain.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_server::bodies::decode_chain;

fuzz_target!(|data: &[u8]| {
    let Ok(chain) = decode_chain(data) else {
        return;
    };
    assert!(outpost_core::json::parse_strict(data).is_ok());
    let written = serde_json::to_vec(&chain).expect("a chain encodes");
    assert_eq!(decode_chain(&written).as_ref(), Ok(&chain));
});
