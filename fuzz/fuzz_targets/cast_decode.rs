//! Arbitrary bytes as a terminal recording (asciicast v2), and arbitrary chunks fed to a
//! recorder. Nothing may panic; a recording that reads has events in time order; what a
//! recorder writes always reads back, stays within its bound, and carries the output it was
//! fed (as text) unless it was cut, in which case its last event is the marker.
#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use outpost_core::terminal::cast::{Cast, CastHeader, EventKind, MIN_LIMIT, Recorder, TRUNCATED_MARKER};
use outpost_core::time::{Instant, UnixTime};

#[derive(Arbitrary, Debug)]
enum Step {
    Output { after_ms: u16, bytes: Vec<u8> },
    Input { after_ms: u16, bytes: Vec<u8> },
    Resize { after_ms: u16, cols: u16, rows: u16 },
}

#[derive(Arbitrary, Debug)]
struct Case {
    text: Vec<u8>,
    limit: u16,
    record_input: bool,
    steps: Vec<Step>,
}

fuzz_target!(|case: Case| {
    if let Ok(text) = std::str::from_utf8(&case.text)
        && let Ok(cast) = Cast::parse(text)
    {
        assert!(cast.events.windows(2).all(|w| w[0].at <= w[1].at));
    }

    let limit = MIN_LIMIT + usize::from(case.limit);
    let header = CastHeader::new(80, 24, UnixTime::from_secs(1_700_000_000), None);
    let mut now = Duration::from_secs(1);
    let mut recorder = Recorder::new(&header, Instant::from_origin(now), limit, case.record_input);
    let mut fed = Vec::new();
    for step in &case.steps {
        let after = match step {
            Step::Output { after_ms, .. }
            | Step::Input { after_ms, .. }
            | Step::Resize { after_ms, .. } => *after_ms,
        };
        now += Duration::from_millis(u64::from(after));
        let instant = Instant::from_origin(now);
        match step {
            Step::Output { bytes, .. } => {
                fed.extend_from_slice(bytes);
                recorder.output(instant, bytes);
            }
            Step::Input { bytes, .. } => recorder.input(instant, bytes),
            Step::Resize { cols, rows, .. } => recorder.resize(instant, *cols, *rows),
        }
    }
    recorder.finish(Instant::from_origin(now));
    let text = recorder.take();
    assert!(text.len() <= limit, "{} bytes over {limit}", text.len());
    assert_eq!(text.len(), recorder.len());
    let cast = Cast::parse(&text).expect("a recorder's output reads back");
    let output: String = cast
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Output)
        .map(|e| e.data.as_str())
        .collect();
    if recorder.is_truncated() {
        let last = cast.events.last().expect("the marker");
        assert_eq!((&last.kind, last.data.as_str()), (&EventKind::Marker, TRUNCATED_MARKER));
    } else {
        assert_eq!(output, String::from_utf8_lossy(&fed));
    }
    if !case.record_input {
        assert!(cast.events.iter().all(|e| e.kind != EventKind::Input));
    }
});
