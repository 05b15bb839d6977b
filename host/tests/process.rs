//! A process run streamed to its end: a program whose output never stops still meets its
//! deadline, because a wake from its output runs the stop schedule too, and its wakes are
//! folded so they cannot pile up ahead of the deadline.

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use outpost_core::executor::Ending;
use outpost_host::process::{ProcessRun, Spawn};
use outpost_host::{Cancel, run_to_end_streaming};

#[test]
fn a_program_that_never_stops_printing_still_meets_its_deadline() {
    let mut run = ProcessRun::spawn(Spawn {
        run_id: "run-chatty".into(),
        sandbox: None,
        refusals: Arc::new(Mutex::new(Vec::new())),
        program: "sh".into(),
        args: vec!["-c".into(), "while :; do echo x; done".into()],
        cwd: std::env::temp_dir(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        timeout: Duration::from_millis(500),
        output_cap: 1 << 20,
        grace: Duration::from_millis(500),
        started: Instant::now(),
    })
    .expect("the program starts");
    // Streamed on a thread of its own: a run that never ends fails the test after 60 s
    // instead of hanging it.
    let (done, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let mut chunks = 0usize;
        let outcome = run_to_end_streaming(&mut run, &Cancel::new(), &mut |c| chunks += c.len());
        let _ = done.send((outcome, chunks));
    });
    let (outcome, chunks) = ended
        .recv_timeout(Duration::from_secs(60))
        .expect("the run ends by its deadline, output or not");
    let outcome = outcome.expect("an outcome");
    assert_eq!(outcome.ending, Ending::TimedOut, "{outcome:?}");
    assert!(chunks > 0, "its output was streamed while it ran");
}
