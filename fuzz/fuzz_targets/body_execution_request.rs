//! Arbitrary bytes as the body of `POST /v1/executions`, through the decoder the route uses.
//! Nothing may panic; whatever is accepted is strict JSON, an inline capability whose
//! manifest parses and whose files have safe paths (or a capability named by a well-formed
//! digest, with no manifest yet), and waits within the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::manifest::{Manifest, check_relative_path};
use outpost_core::wire::CapabilitySource;
use outpost_server::bodies::{MAX_WAIT_SECS, decode_execution_request};

fuzz_target!(|data: &[u8]| {
    let Ok(request) = decode_execution_request(data) else {
        return;
    };
    assert!(outpost_core::json::parse_strict(data).is_ok());
    assert!(request.wait_secs <= MAX_WAIT_SECS);
    let (manifest, files) = match &request.capability {
        CapabilitySource::Inline { manifest, files } => (manifest, files),
        CapabilitySource::Digest { sha256, .. } => {
            assert!(request.manifest.is_none());
            assert_eq!(sha256.len(), 64);
            assert!(sha256.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            return;
        }
    };
    assert_eq!(
        Manifest::parse(manifest).ok(),
        request.manifest
    );
    for file in files {
        assert!(check_relative_path(&file.path).is_ok(), "{:?}", file.path);
        assert!(outpost_core::b64::decode(&file.content_b64).is_ok());
    }
});
