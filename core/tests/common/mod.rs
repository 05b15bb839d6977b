//! What the protocol tests share: the run they offer.

use outpost_core::session::RunSpec;
use outpost_core::wire::{CapabilitySource, Environment, InlineFile};

/// A shell run that runs `true`, offered as `run_id` for `ada`.
pub fn spec(run_id: &str) -> RunSpec {
    RunSpec {
        run_id: run_id.into(),
        environment: Environment::Shell,
        capability: CapabilitySource::Inline {
            manifest: "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n".into(),
            files: vec![InlineFile {
                path: "run.sh".into(),
                content_b64: outpost_core::b64::encode(b"true\n"),
            }],
        },
        timeout_ms: 10_000,
        shared_run: false,
        requester: "ada".into(),
    }
}
