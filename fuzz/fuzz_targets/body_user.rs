//! Arbitrary bytes as the body of `POST /v1/users`, through the decoder the route uses.
//! Nothing may panic; whatever is accepted is strict JSON with a valid name and known scopes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_server::bodies::{SCOPES, decode_user, valid_name};

fuzz_target!(|data: &[u8]| {
    let Ok(user) = decode_user(data) else {
        return;
    };
    assert!(outpost_core::json::parse_strict(data).is_ok());
    assert!(valid_name(&user.name), "{:?}", user.name);
    for scope in user.scopes.iter().flatten() {
        assert!(SCOPES.contains(&scope.as_str()), "{scope:?}");
    }
});
