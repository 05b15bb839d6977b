//! Arbitrary bytes through the join-string reader and the bundle reader. Nothing may panic;
//! what reads must write back to text or bytes that read to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::join::Join;
use outpost_core::wire::{CapabilitySource, decode_bundle, encode_bundle};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(join) = Join::parse(text)
    {
        assert_eq!(Join::parse(&join.encode()), Ok(join));
    }
    if let Ok(CapabilitySource::Inline { manifest, files }) = decode_bundle(data) {
        let again = decode_bundle(&encode_bundle(&manifest, &files));
        assert_eq!(again, Ok(CapabilitySource::Inline { manifest, files }));
    }
});
