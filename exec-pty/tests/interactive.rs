//! Real interactive programs on the PTY: a shell, a REPL, a full-screen pager, a resize and
//! Ctrl-C, each waited on through the terminal's output with a deadline.

mod common;

use std::time::{Duration, Instant};

use common::{PATIENCE, Screen, capability, executor, finish, gone, launch_of, manifest, start};
use outpost_core::executor::{Ending, Executor};

/// The `sleep` in the foreground of session `sid`, once the terminal's foreground process
/// group is its group.
fn foreground_sleep(sid: u32) -> i32 {
    let until = Instant::now() + PATIENCE;
    while Instant::now() < until {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some((head, tail)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = tail.split_whitespace().collect();
            // state ppid pgrp session tty_nr tpgid
            if head.ends_with("(sleep")
                && fields.get(3) == Some(&sid.to_string().as_str())
                && fields.get(2) == fields.get(5)
            {
                return pid;
            }
        }
        // The poll's pace: /proc is the only word on the foreground group; read it again.
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no sleep in the foreground of session {sid}");
}

fn session_of(handle: &dyn outpost_core::executor::RunHandle) -> u32 {
    handle.service_id().unwrap().parse().unwrap()
}

#[test]
fn bash_computes_what_is_typed() {
    let mut run = start("bash", &["--norc", "--noprofile", "-i"], "");
    let mut screen = Screen::of(run.as_mut());
    screen.expect("$ ");
    screen.type_text("echo $((6*7))\r");
    screen.expect("\r42\r\n");
    screen.type_text("exit 5\r");
    assert!(screen.closes_within(PATIENCE));
    let outcome = finish(run.as_mut());
    assert_eq!(
        (outcome.ending, outcome.exit_code),
        (Ending::Exited, Some(5))
    );
    let stdout = String::from_utf8_lossy(&outcome.stdout);
    assert!(
        stdout.contains("\r42\r\n"),
        "the outcome keeps the screen: {stdout:?}"
    );
}

#[test]
fn the_python_repl_answers_and_exits() {
    let mut run = start("python3", &["-q"], "");
    let mut screen = Screen::of(run.as_mut());
    screen.expect(">>> ");
    screen.type_text("6*7\r");
    screen.expect("42\r\n>>> ");
    screen.type_text("exit()\r");
    assert!(screen.closes_within(PATIENCE));
    let outcome = finish(run.as_mut());
    assert_eq!(outcome.exit_code, Some(0));
}

#[test]
fn stty_sees_the_initial_size_then_each_resize() {
    let mut run = start(
        "bash",
        &["--norc", "--noprofile", "-i"],
        "terminal: {cols: 132, rows: 43}\n",
    );
    let mut screen = Screen::of(run.as_mut());
    screen.expect("$ ");
    screen.type_text("stty size\r");
    screen.expect("\r43 132\r\n");
    screen.resize(100, 30);
    screen.type_text("stty size\r");
    screen.expect("\r30 100\r\n");
    // The shell learned the size from SIGWINCH too. Resized at its prompt, where the shell
    // itself holds the terminal (while `stty` ran, the signal went to stty's group), and
    // asked on the next line, once the shell has taken the signal in.
    screen.expect("$ ");
    screen.resize(77, 19);
    screen.type_text("kill -WINCH $$\r");
    screen.expect("$ ");
    screen.type_text("echo cols=$COLUMNS\r");
    screen.expect("cols=77");
    run.cancel().unwrap();
    assert_eq!(finish(run.as_mut()).ending, Ending::Cancelled);
}

#[test]
fn ctrl_c_reaches_the_foreground_program_and_the_prompt_comes_back() {
    let mut run = start("bash", &["--norc", "--noprofile", "-i"], "");
    let sid = session_of(run.as_ref());
    let mut screen = Screen::of(run.as_mut());
    screen.expect("$ ");
    screen.type_text("sleep 100\r");
    let sleep = foreground_sleep(sid);
    screen.type_text("\x03");
    assert!(gone(sleep), "the interrupt ended the foreground sleep");
    screen.type_text("echo back-$((1+1))\r");
    screen.expect("back-2");
    screen.type_text("exit\r");
    let outcome = finish(run.as_mut());
    assert_eq!(
        (outcome.ending, outcome.exit_code),
        (Ending::Exited, Some(0))
    );
}

#[test]
fn less_runs_full_screen_and_quits_on_q() {
    let text: String = (1..=200).map(|i| format!("line-{i}\n")).collect();
    let dir = capability(
        &manifest("less", &["notes.txt"], "terminal: {cols: 80, rows: 24}\n"),
        &[("notes.txt", &text)],
    );
    let mut run = executor()
        .launch(launch_of(&dir, Duration::from_secs(60)))
        .unwrap();
    let mut screen = Screen::of(run.as_mut());
    screen.expect("\x1b[?1049h"); // the alternate screen
    screen.expect("line-1\r");
    screen.expect("line-23");
    assert!(!screen.text().contains("line-30\r"), "one screen at a time");
    screen.type_text(" "); // the next page
    screen.expect("line-46");
    screen.type_text("q");
    screen.expect("\x1b[?1049l"); // back to the normal screen
    assert!(screen.closes_within(PATIENCE));
    assert_eq!(finish(run.as_mut()).exit_code, Some(0));
}

#[test]
fn vi_opens_a_file_and_quits() {
    let dir = capability(
        &manifest("vi", &["-u", "NONE", "notes.txt"], ""),
        &[("notes.txt", "the vi test line\n")],
    );
    let mut run = executor()
        .launch(launch_of(&dir, Duration::from_secs(60)))
        .unwrap();
    let mut screen = Screen::of(run.as_mut());
    screen.expect("the vi test line");
    screen.type_text("\x1b:q\r");
    assert!(screen.closes_within(PATIENCE));
    assert_eq!(finish(run.as_mut()).exit_code, Some(0));
}
