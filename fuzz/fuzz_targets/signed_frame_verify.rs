//! Arbitrary bytes as signed server frames, one at a time and as a batch. Nothing may panic,
//! a refusal never moves the sequence, and batch and single verification agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::keyset::{KeySet, PinnedRoots, test_root};
use outpost_core::sign::FrameVerifier;
use outpost_core::time::UnixTime;

const NOW: UnixTime = UnixTime(1_767_225_600);

fn verifier() -> FrameVerifier {
    let doc = test_root::key_set_document(1, UnixTime(0), UnixTime(1 << 40));
    let keys = KeySet::from_document(&doc, &PinnedRoots::default().with_test_root_if_local("localhost", true))
        .expect("the test key set verifies");
    FrameVerifier::new(keys, "sess_vectors_1")
}

fuzz_target!(|data: &[u8]| {
    let mut single = verifier();
    let before = single.last_seq();
    match single.verify(data, NOW) {
        Ok(f) => assert!(f.seq > before && single.last_seq() == f.seq),
        Err(_) => assert_eq!(single.last_seq(), before),
    }
    // The same bytes split on newlines as a queue of frames.
    let frames: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    let mut one_by_one = verifier();
    let expected: Vec<_> = frames.iter().map(|f| one_by_one.verify(f, NOW)).collect();
    let mut batch = verifier();
    assert_eq!(batch.verify_batch(&frames, NOW), expected);
    assert_eq!(batch.last_seq(), one_by_one.last_seq());
});
