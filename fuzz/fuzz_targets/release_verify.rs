//! Arbitrary bytes as daemon release documents, under the test root. Nothing may panic;
//! whatever verifies names a sane release whose binary check refuses anything but its size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::keyset::PinnedRoots;
use outpost_core::release::verify_release;

fuzz_target!(|data: &[u8]| {
    let roots = PinnedRoots::default().with_test_root_if_local("localhost", true);
    if let Ok(release) = verify_release(data, &roots) {
        assert!(release.size > 0);
        assert_eq!(release.sha512.len(), 128);
        assert!(release.check_binary(b"").is_err());
    }
});
