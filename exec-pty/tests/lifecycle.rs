//! How terminal runs end: on their own, with a grandchild holding the terminal, cancelled,
//! timed out, idle, dropped; and how they are refused before anything runs.

mod common;

use std::time::Duration;

use common::{
    PATIENCE, Screen, capability, executor, finish, gone, launch_of, manifest, process_alive, start,
};
use outpost_core::executor::{
    Allowlists, Ending, Executor, Probe, Registry, Scope, TRUNCATION_MARKER, run_capability,
};
use outpost_core::manifest::Permission;
use outpost_core::wire::Environment;
use outpost_exec_pty::{PtyConfig, PtyExecutor};

/// The number after `label=` on the screen.
fn number_after(text: &str, label: &str) -> i32 {
    let at = text.find(label).expect(label) + label.len();
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

#[test]
fn a_program_that_exits_ends_the_output_and_reports_its_code() {
    let dir = capability(
        &manifest("run.sh", &[], ""),
        &[("run.sh", "#!/bin/sh\necho hello-from-pty\nexit 3\n")],
    );
    let mut run = executor()
        .launch(launch_of(&dir, Duration::from_secs(30)))
        .unwrap();
    let mut screen = Screen::of(run.as_mut());
    screen.expect("hello-from-pty\r\n");
    assert!(screen.closes_within(PATIENCE), "end-of-file once it exits");
    let outcome = finish(run.as_mut());
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!((outcome.exit_code, outcome.signal), (Some(3), None));
    assert_eq!(outcome.stdout, b"hello-from-pty\r\n");
    assert!(!outcome.truncated);
    assert!(run.take_terminal().is_none(), "a terminal is taken once");
}

#[test]
fn an_untaken_terminal_is_drained_and_its_last_output_kept() {
    let dir = capability(
        &manifest("run.sh", &[], "limits: {output_max_bytes: 1000}\n"),
        &[(
            "run.sh",
            "#!/bin/sh\nhead -c 3000000 /dev/zero | tr '\\0' x\necho\necho the-end\n",
        )],
    );
    let mut run = executor()
        .launch(launch_of(&dir, Duration::from_secs(30)))
        .unwrap();
    let outcome = finish(run.as_mut());
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "never blocked on a full terminal"
    );
    assert!(outcome.truncated);
    assert!(outcome.stdout.starts_with(TRUNCATION_MARKER.as_bytes()));
    assert_eq!(outcome.stdout.len(), TRUNCATION_MARKER.len() + 1000);
    assert!(outcome.stdout.ends_with(b"xxx\r\nthe-end\r\n"));
    // What `read_output` hands out is capped too: the last 1000 bytes at most.
    let handed: usize = run.read_output().iter().map(|c| c.bytes.len()).sum();
    assert!(handed <= 16 * 1024, "{handed}");
}

#[test]
fn read_output_streams_an_untaken_terminal() {
    let mut run = start("sh", &["-c", "echo one; echo two"], "");
    let outcome = finish(run.as_mut());
    let streamed: Vec<u8> = run
        .read_output()
        .into_iter()
        .flat_map(|c| c.bytes)
        .collect();
    assert_eq!(streamed, b"one\r\ntwo\r\n");
    assert_eq!(outcome.stdout, b"one\r\ntwo\r\n");
}

#[test]
fn a_grandchild_holding_the_terminal_does_not_keep_it_open() {
    // One ignores the hang-up inside the session; one left the session with setsid.
    let script = "#!/bin/sh\n(trap '' HUP; exec sleep 1000) &\necho inside=$!\n\
                  setsid sleep 1001 &\necho outside=$!\nexit 0\n";
    let dir = capability(&manifest("run.sh", &[], ""), &[("run.sh", script)]);
    let mut run = executor()
        .launch(launch_of(&dir, Duration::from_secs(60)))
        .unwrap();
    let mut screen = Screen::of(run.as_mut());
    screen.expect("outside=");
    screen.expect("\r\n");
    let (inside, outside) = (
        number_after(&screen.text(), "inside="),
        number_after(&screen.text(), "outside="),
    );
    assert!(
        screen.closes_within(Duration::from_secs(10)),
        "the terminal closed although two sleeps held it"
    );
    let outcome = finish(run.as_mut());
    assert_eq!(
        (outcome.ending, outcome.exit_code),
        (Ending::Exited, Some(0))
    );
    assert!(gone(inside) && gone(outside), "both holders were killed");
}

#[test]
fn cancel_kills_every_job_of_the_session() {
    let mut run = start("bash", &["--norc", "--noprofile", "-i"], "");
    let mut screen = Screen::of(run.as_mut());
    screen.expect("$ ");
    // `jo""b=` keeps the echoed command line from matching `job=`.
    screen.type_text("trap '' HUP; sleep 100 & echo jo\"\"b=$!; sleep 200\r");
    screen.expect("job=");
    screen.expect("\r\n");
    let job = number_after(&screen.text(), "job=");
    assert!(process_alive(job));
    run.cancel().unwrap();
    let outcome = finish(run.as_mut());
    assert_eq!(outcome.ending, Ending::Cancelled);
    assert!(gone(job), "the background job went with the shell");
    assert!(screen.closes_within(PATIENCE));
}

/// A cancel raised while the run's waiter waits is acted on at once: the waker ends the wait
/// in progress (a wait of minutes would otherwise outlast the test's patience).
#[test]
fn a_raised_cancel_wakes_the_waiter_and_ends_the_run() {
    let mut run = start("sh", &["-c", "echo ready; exec sleep 300"], "");
    let mut screen = Screen::of(run.as_mut());
    screen.expect("ready\r\n");
    assert!(run.wait_waker().is_some(), "a terminal run can be woken");
    let cancel = outpost_host::Cancel::new();
    let raiser = {
        let cancel = cancel.clone();
        std::thread::spawn(move || cancel.raise())
    };
    let started = std::time::Instant::now();
    let outcome = outpost_host::run_to_end(run.as_mut(), &cancel).unwrap();
    raiser.join().unwrap();
    assert_eq!(outcome.ending, Ending::Cancelled);
    assert!(
        started.elapsed() < PATIENCE,
        "the cancel ended the wait early: {:?}",
        started.elapsed()
    );
}

#[test]
fn dropping_a_run_kills_it() {
    let mut run = start(
        "sh",
        &["-c", "trap '' HUP TERM; echo pid=$$; exec sleep 300"],
        "",
    );
    let mut screen = Screen::of(run.as_mut());
    screen.expect("pid=");
    screen.expect("\r\n");
    let pid = number_after(&screen.text(), "pid=");
    drop(run);
    assert!(gone(pid));
    assert!(screen.closes_within(PATIENCE));
}

#[test]
fn the_time_limit_stops_it() {
    let dir = capability(&manifest("sleep", &["100"], ""), &[]);
    let mut run = executor()
        .launch(launch_of(&dir, Duration::from_millis(300)))
        .unwrap();
    let outcome = finish(run.as_mut());
    assert_eq!(outcome.ending, Ending::TimedOut);
    assert_eq!(outcome.signal, Some(1), "hung up");
    assert!(outcome.execute >= Duration::from_millis(300));
}

#[test]
fn a_silent_terminal_is_stopped_after_its_idle_limit() {
    let mut run = start(
        "bash",
        &["--norc", "--noprofile", "-i"],
        "limits: {idle_ms: 600}\n",
    );
    let mut screen = Screen::of(run.as_mut());
    screen.expect("$ ");
    screen.type_text("echo alive\r");
    screen.expect("\ralive\r\n");
    let outcome = finish(run.as_mut());
    assert_eq!(outcome.ending, Ending::TimedOut);
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    assert!(
        stderr.contains("600 ms without input or output"),
        "{stderr}"
    );
    assert!(outcome.execute >= Duration::from_millis(600));
}

#[test]
fn output_keeps_an_idle_limit_from_firing() {
    let mut run = start(
        "sh",
        &["-c", "for i in 1 2 3 4 5 6; do echo tick; sleep 0.2; done"],
        "limits: {idle_ms: 800}\n",
    );
    let outcome = finish(run.as_mut());
    assert_eq!(
        (outcome.ending, outcome.exit_code),
        (Ending::Exited, Some(0))
    );
    assert!(
        outcome.execute >= Duration::from_millis(1000),
        "it ran past the idle limit"
    );
}

#[test]
fn without_a_pty_device_every_launch_is_refused() {
    let missing = PtyExecutor::new(PtyConfig {
        ptmx: "/nonexistent/ptmx".into(),
        ..PtyConfig::default()
    });
    let Probe::Unavailable { reason, remedy } = missing.probe() else {
        panic!("a missing ptmx probes unavailable");
    };
    assert!(reason.contains("/nonexistent/ptmx"), "{reason}");
    assert!(remedy.contains("devpts"), "{remedy}");
    let dir = capability(
        &manifest("run.sh", &[], ""),
        &[("run.sh", "#!/bin/sh\ntouch ran\n")],
    );
    let refused = missing
        .launch(launch_of(&dir, Duration::from_secs(5)))
        .err()
        .unwrap();
    assert_eq!(refused.code(), "environment_unavailable");
    assert!(
        refused.to_string().starts_with("The PTY is unavailable"),
        "{refused}"
    );
    let mut registry = Registry::new();
    registry.register(Box::new(missing));
    let mut lists = Allowlists::new();
    lists
        .allow(Permission::run_capability(Environment::Pty), Scope::Session)
        .unwrap();
    let refused = run_capability(&registry, &lists, launch_of(&dir, Duration::from_secs(5)))
        .err()
        .unwrap();
    assert_eq!(refused.code(), "environment_unavailable");
    assert!(!dir.join("ran").exists(), "nothing ran anywhere");

    let Probe::Available { description } = executor().probe() else {
        panic!("this machine has pseudo-terminals");
    };
    assert_eq!(description, "/dev/ptmx (portable-pty)");
}

#[test]
fn a_working_directory_outside_the_folder_is_refused() {
    let dir = capability(
        &manifest("run.sh", &[], ""),
        &[("run.sh", "#!/bin/sh\ntouch ran\n")],
    );
    let mut launch = launch_of(&dir, Duration::from_secs(5));
    launch.cwd = Some(std::env::temp_dir());
    let refused = executor().launch(launch).err().unwrap();
    assert_eq!(refused.code(), "path_refused");
    assert!(!dir.join("ran").exists());
    // Inside the folder it starts there.
    std::fs::create_dir(dir.join("sub")).unwrap();
    let mut launch = launch_of(&dir, Duration::from_secs(5));
    launch.cwd = Some(dir.join("sub"));
    let mut run = executor().launch(launch).unwrap();
    finish(run.as_mut());
    assert!(dir.join("sub/ran").exists());
}

#[test]
fn other_environments_and_missing_programs_are_refused() {
    let dir = capability(
        "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
        &[("run.sh", "#!/bin/sh\n")],
    );
    let refused = executor()
        .launch(launch_of(&dir, Duration::from_secs(5)))
        .err()
        .unwrap();
    assert_eq!(refused.code(), "invalid_capability");
    let dir = capability(&manifest("no-such-program-anywhere", &[], ""), &[]);
    let refused = executor()
        .launch(launch_of(&dir, Duration::from_secs(5)))
        .err()
        .unwrap();
    assert_eq!(refused.code(), "invalid_capability");
    assert!(refused.to_string().contains("PATH"), "{refused}");
}

#[test]
fn the_program_gets_a_terminal_type_and_the_manifest_s_env() {
    let mut run = start(
        "sh",
        &["-c", "echo term=$TERM greeting=$GREETING tty=$(tty)"],
        "",
    );
    let outcome = finish(run.as_mut());
    let stdout = String::from_utf8_lossy(&outcome.stdout);
    assert!(stdout.contains("term=xterm-256color"), "{stdout}");
    assert!(stdout.contains("tty=/dev/pts/"), "{stdout}");
}

#[test]
fn output_read_before_the_terminal_is_taken_reaches_it_first_and_in_order() {
    let dir = capability(
        &manifest(
            "sh",
            &["-c", "echo early-one; echo early-two; read x; echo late-$x"],
            "",
        ),
        &[],
    );
    let mut run = executor()
        .start(launch_of(&dir, Duration::from_secs(30)))
        .unwrap();
    // The executor's own reader has drained the first lines before anyone took the terminal.
    let until = std::time::Instant::now() + PATIENCE;
    while run.bytes_read() < "early-one\r\nearly-two\r\n".len() as u64 {
        assert!(std::time::Instant::now() < until, "nothing was drained");
        // The poll's pace: the count has no change signal; it is read again.
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut screen = Screen::of(&mut run);
    screen.type_text("z\r");
    screen.expect("late-z\r\n");
    assert!(screen.closes_within(PATIENCE));
    let text = screen.text();
    assert!(
        text.starts_with("early-one\r\nearly-two\r\n"),
        "the early lines first: {text:?}"
    );
    assert!(run.tty().is_some_and(|t| t.starts_with("/dev/pts")));
    assert_eq!(finish(&mut run).exit_code, Some(0));
}

/// An untaken terminal streamed by the daemon: what the program prints ends a long wait at
/// once (the drain thread calls the notifier `notify_output` set), and so does its end, so the
/// streaming waiter never looks at the run in slices.
#[test]
fn an_untaken_terminal_s_output_and_end_wake_its_waiter() {
    use std::sync::{Arc, mpsc};
    let dir = capability(
        &manifest("run.sh", &[], ""),
        &[(
            "run.sh",
            // It prints only once the test has set its notifier (the file `go` says so).
            "#!/bin/sh\nwhile [ ! -e go ]; do sleep 0.02; done\necho first-line\nread line\necho got-$line\n",
        )],
    );
    // A deadline far enough not to end the test, near enough that a wake that never comes
    // fails it (the wait then ends with the deadline) instead of hanging it for an hour.
    let mut run = executor()
        .launch(launch_of(&dir, Duration::from_secs(60)))
        .unwrap();
    let wake = run.wait_waker().expect("a pty run can be woken");
    let (told, calls) = mpsc::channel();
    assert!(run.notify_output(Arc::new(move || {
        let _ = told.send(());
        wake();
    })));
    std::fs::write(dir.join("go"), "").unwrap();
    assert!(
        run.wait(Duration::from_secs(3600)).unwrap().is_none(),
        "the output ended the wait while the program still runs"
    );
    assert!(
        calls.try_recv().is_ok(),
        "the drain thread called the notifier"
    );
    let mut streamed: Vec<u8> = run
        .read_output()
        .into_iter()
        .flat_map(|c| c.bytes)
        .collect();
    while !String::from_utf8_lossy(&streamed).contains("first-line") {
        assert!(run.wait(Duration::from_secs(3600)).unwrap().is_none());
        streamed.extend(run.read_output().into_iter().flat_map(|c| c.bytes));
    }
    // Its end ends a long wait too.
    let mut terminal = run.take_terminal().expect("the terminal");
    terminal.input.write_input(b"42\n").unwrap();
    let outcome = loop {
        if let Some(outcome) = run.wait(Duration::from_secs(3600)).unwrap() {
            break outcome;
        }
    };
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!(outcome.exit_code, Some(0));
}
