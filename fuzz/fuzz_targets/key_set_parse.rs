//! Arbitrary bytes as key-set documents, under the test root. Nothing may panic; whatever is
//! accepted re-signs to the same bytes (only the root's own canonical documents verify).
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::keyset::{KeySet, PinnedRoots, test_root};
use outpost_core::time::UnixTime;

fuzz_target!(|data: &[u8]| {
    let roots = PinnedRoots::default().with_test_root_if_local("localhost", true);
    if let Ok(set) = KeySet::from_document(data, &roots) {
        for key in set.keys() {
            let _ = set.key_for(&key.kid, UnixTime(1_767_225_600));
        }
        let again = KeySet::sign_document(set.version(), set.keys(), &test_root::root_signer())
            .expect("in-memory signing");
        assert!(KeySet::from_document(&again, &roots).is_ok());
    }
});
