//! Arbitrary bytes as the body of `POST /v1/execution-contexts/{context}/daemon`, through the
//! decoder the route uses. Nothing may panic; whatever is accepted is strict JSON naming one
//! of the five actions, with `lines` (when given) 1 to 200, and the body written back decodes
//! to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::wire::{ControlAction, MAX_CONTROL_LINES};
use outpost_server::bodies::decode_daemon_control;

fuzz_target!(|data: &[u8]| {
    let Ok(control) = decode_daemon_control(data) else {
        return;
    };
    assert!(outpost_core::json::parse_strict(data).is_ok());
    assert!(ControlAction::ALL.contains(&control.action));
    if let Some(lines) = control.lines {
        assert!((1..=MAX_CONTROL_LINES).contains(&lines), "{lines}");
    }
    let written = serde_json::to_vec(&control).expect("a control request encodes");
    assert_eq!(decode_daemon_control(&written).ok(), Some(control));
});
