//! Arbitrary text as `manifest.yaml`. Nothing may panic; whatever is accepted holds every rule
//! the executors rely on (entries, limits, volumes, environment-only fields).
#![no_main]

use libfuzzer_sys::fuzz_target;
use outpost_core::manifest::{Lifecycle, Limits, Manifest, check_image_command, check_relative_path};
use outpost_core::wire::Environment;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(m) = Manifest::parse(text) else {
        return;
    };
    if m.environment == Environment::Docker {
        assert!(check_image_command(&m.entry).is_ok(), "{:?}", m.entry);
        assert!(m.docker_image.is_some());
    } else {
        assert!(check_relative_path(&m.entry).is_ok(), "{:?}", m.entry);
        assert!(m.docker_image.is_none());
    }
    let (l, max) = (m.limits, Limits::MAX);
    for (value, bound) in [
        (l.timeout_ms, max.timeout_ms),
        (l.output_max_bytes, max.output_max_bytes),
        (l.memory_mb, max.memory_mb),
        (l.cpu_millicores, max.cpu_millicores),
        (l.pids_max, max.pids_max),
    ] {
        assert!((1..=bound).contains(&value), "{l:?}");
    }
    assert!(m.volumes.iter().all(|v| v.guest.starts_with('/')));
    assert!(m.volumes.is_empty() || matches!(m.environment, Environment::Wasm | Environment::Docker));
    assert!(m.port.is_none() || m.lifecycle == Lifecycle::Persistent);
    assert!(m.env.iter().all(|(k, _)| !k.starts_with("OUTPOST_")));
});
