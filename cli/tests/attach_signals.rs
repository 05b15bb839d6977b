//! `outpost attach` in a real terminal (a PTY, so it takes raw mode and follows `SIGWINCH`)
//! keeps running through a burst of window resizes while a flood of output arrives: a signal
//! that interrupts a socket read or write (`EINTR`) is retried, never taken for the end of the
//! connection.

mod common;

use std::io::{Read as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::temp_dir;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};

fn size(cols: u16, rows: u16) -> PtySize {
    PtySize {
        rows,
        cols,
        pixel_width: 0,
        pixel_height: 0,
    }
}

/// Whether the last 8 KiB shown hold `text`.
fn shows(screen: &Mutex<Vec<u8>>, text: &str) -> bool {
    let screen = screen.lock().expect("the screen");
    let tail = &screen[screen.len().saturating_sub(8192)..];
    tail.windows(text.len()).any(|w| w == text.as_bytes())
}

#[test]
fn attach_survives_a_burst_of_resizes_during_a_flood_of_output() {
    let dir = temp_dir("attach-winch");
    let (server, _daemon) = common::server_with_daemon(&dir, "box");
    let pty = native_pty_system().openpty(size(80, 24)).expect("a PTY");
    let mut command = CommandBuilder::new(common::binary());
    command.args(["attach", "box", "--server", &server.url]);
    command.env("OUTPOST_TOKEN", &server.admin);
    let mut attach = pty.slave.spawn_command(command).expect("attach starts");
    drop(pty.slave);
    let pid = Pid::from_raw(
        attach
            .process_id()
            .and_then(|p| i32::try_from(p).ok())
            .expect("a pid"),
    );
    let screen = Arc::new(Mutex::new(Vec::new()));
    let mut reader = pty.master.try_clone_reader().expect("a reader");
    let seen = screen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.lock()
                .expect("the screen")
                .extend_from_slice(&buf[..n]);
        }
    });
    let mut keys = pty.master.take_writer().expect("a writer");
    common::wait_for("attach to attach", || {
        shows(&screen, "detaches").then_some(())
    });
    // A flood: the shell prints 20,000 lines, then a marker the typed line does not hold.
    keys.write_all(b"for i in $(seq 1 20000); do echo line-$i; done; echo flood-$((6*7))\r")
        .expect("keys");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut resizes = 0u32;
    while !shows(&screen, "flood-42") {
        assert!(
            Instant::now() < deadline,
            "the flood never ended on screen ({resizes} resizes)"
        );
        if let Ok(Some(status)) = attach.try_wait() {
            panic!(
                "attach ended after {resizes} resizes: {status:?}\n{}",
                String::from_utf8_lossy(&screen.lock().expect("the screen"))
            );
        }
        // Each resize makes the kernel send SIGWINCH to attach; a second one is sent by hand.
        let (cols, rows) = if resizes.is_multiple_of(2) {
            (100, 30)
        } else {
            (80, 24)
        };
        pty.master.resize(size(cols, rows)).expect("a resize");
        let _ = kill(pid, Signal::SIGWINCH);
        resizes += 1;
        // Pacing, not waiting for anything: signals land all through the flood.
        std::thread::sleep(Duration::from_micros(500));
    }
    assert!(
        resizes > 20,
        "only {resizes} resizes landed during the flood"
    );
    assert!(
        attach.try_wait().expect("a status").is_none(),
        "attach still runs"
    );
    keys.write_all(b"exit 3\r").expect("keys");
    let status = attach.wait().expect("attach ends");
    let screen = String::from_utf8_lossy(&screen.lock().expect("the screen")).into_owned();
    assert!(!screen.contains("Interrupted"), "{screen}");
    assert_eq!(status.exit_code(), 3, "{screen}");
    let _ = std::fs::remove_dir_all(&dir);
}
