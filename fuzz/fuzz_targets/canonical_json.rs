//! Arbitrary bytes through the strict reader. Nothing may panic, and whatever is accepted
//! has a canonical form that reads back (as the same members, reordered) and is its own
//! canonical form.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::json::parse_strict;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = parse_strict(data) {
        let canonical = value.to_canonical();
        let again = parse_strict(&canonical).expect("canonical output is strict JSON");
        assert_eq!(again.to_canonical(), canonical);
    }
});
