//! Arbitrary bytes as the body of `PUT /v1/bundles/{sha256}`, through the check the route
//! runs (it reads the bundle in place instead of decoding it). Nothing may panic; whatever it
//! accepts, outpost-core's bundle decoder reads too, with the same manifest, and whatever the
//! decoder refuses as a document the check refuses with the same code.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::wire::{CapabilitySource, decode_bundle};
use outpost_server::bodies::check_bundle;

fuzz_target!(|data: &[u8]| {
    let checked = check_bundle(data);
    match decode_bundle(data) {
        Ok(CapabilitySource::Inline { manifest, .. }) => {
            if let Ok(checked) = &checked {
                assert_eq!(checked.manifest_text, manifest);
            }
        }
        Ok(CapabilitySource::Digest { .. }) => assert!(checked.is_err()),
        Err(e) => {
            let refused = checked.expect_err("the decoder refused it");
            assert_eq!(refused.code(), e.code(), "{refused:?} vs {e:?}");
        }
    }
});
