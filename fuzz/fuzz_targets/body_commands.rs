//! Arbitrary bytes as the bodies of `POST /v1/execution-contexts/commands`,
//! `…/commands/authorize` and `…/commands/jobs/authorize`, through the decoders the routes use. Nothing may panic; whatever is
//! accepted is strict JSON and, written back, decodes to the same request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_server::bodies::{
    decode_command_authorize, decode_commands_switch, decode_job_authorize,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(switch) = decode_commands_switch(data) {
        assert!(outpost_core::json::parse_strict(data).is_ok());
        let written = serde_json::to_vec(&switch).expect("a switch encodes");
        assert_eq!(decode_commands_switch(&written), Ok(switch));
    }
    if let Ok(authorize) = decode_command_authorize(data) {
        assert!(outpost_core::json::parse_strict(data).is_ok());
        let written = serde_json::to_vec(&authorize).expect("an authorize body encodes");
        assert_eq!(decode_command_authorize(&written), Ok(authorize));
    }
    if let Ok(job) = decode_job_authorize(data) {
        assert!(outpost_core::json::parse_strict(data).is_ok());
        let written = serde_json::to_vec(&job).expect("a job body encodes");
        assert_eq!(decode_job_authorize(&written), Ok(job));
    }
});
