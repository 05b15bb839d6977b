//! Arbitrary bytes as a daemon's stored wait row. Nothing may panic; whatever decodes must
//! encode to bytes that decode to the same row, and a schedule restored from it must drain
//! (restore, one timeout, every output polled) without panicking.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use outpost_core::sim::now_at;
use outpost_core::wait::{Input, Output, Schedule, ScheduleConfig, WaitRow};

fuzz_target!(|data: &[u8]| {
    let Ok((written_ms, row)) = WaitRow::decode(data) else {
        return;
    };
    assert_eq!(
        WaitRow::decode(&row.encode(written_ms)).as_ref(),
        Ok(&(written_ms, row.clone()))
    );
    let now = now_at(Duration::from_secs(3600));
    let mut schedule = Schedule::restore(ScheduleConfig::default(), now, [(written_ms, row)]);
    let later = now_at(Duration::from_secs(7200));
    let _ = schedule.handle_input(later, Input::Timeout);
    for _ in 0..1000 {
        if matches!(schedule.poll_output(), Output::Wait { .. }) {
            return;
        }
    }
    panic!("a restored schedule never asked to wait");
});
