//! Helpers the exec-pty tests share: capability folders, launches, and a screen that reads a
//! terminal on its own thread so a test can wait for a pattern with a deadline.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use outpost_core::executor::{
    Executor, Launch, Outcome, RunHandle, Terminal, TerminalInput, TerminalSize,
};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Manifest;
use outpost_exec_pty::{PtyConfig, PtyExecutor};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// How long any one expected thing may take.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A fresh capability folder with `manifest.yaml` and executable files.
pub fn capability(manifest: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "outpost-pty-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.yaml"), manifest).unwrap();
    for (name, body) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir.canonicalize().unwrap()
}

/// A pty manifest running `entry` with `args`, a fixed `PATH`, and `extra` lines.
pub fn manifest(entry: &str, args: &[&str], extra: &str) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "name: t\nenvironment: pty\nlifecycle: oneshot\nentry: {entry}\nargs: [{}]\n\
         env: {{PATH: /usr/bin:/bin, PS1: \"$ \"}}\n{extra}",
        args.join(", ")
    )
}

/// The launch of the capability in `dir`.
pub fn launch_of(dir: &Path, timeout: Duration) -> Launch {
    let text = std::fs::read_to_string(dir.join("manifest.yaml")).unwrap();
    Launch {
        run_id: "run-1".into(),
        dir: dir.to_path_buf(),
        entry_bytes: None,
        manifest: Manifest::parse(&text).unwrap(),
        extra_args: Vec::new(),
        mounts: Vec::new(),
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout,
        egress: outpost_core::wire::Egress::None,
        confined: false,
        context: String::new(),
    }
}

/// The executor the tests use: a short grace and drain.
pub fn executor() -> PtyExecutor {
    PtyExecutor::new(PtyConfig {
        grace: Duration::from_millis(300),
        drain: Duration::from_millis(200),
        ..PtyConfig::default()
    })
}

/// Launches `entry args` with `extra` manifest lines.
pub fn start(entry: &str, args: &[&str], extra: &str) -> Box<dyn RunHandle> {
    let dir = capability(&manifest(entry, args, extra), &[]);
    executor()
        .launch(launch_of(&dir, Duration::from_secs(60)))
        .unwrap()
}

/// Waits for the run to end.
pub fn finish(handle: &mut dyn RunHandle) -> Outcome {
    let until = Instant::now() + PATIENCE;
    while Instant::now() < until {
        if let Some(outcome) = handle.wait(Duration::from_millis(200)).unwrap() {
            return outcome;
        }
    }
    panic!("the run did not end within {PATIENCE:?}");
}

/// The output so far and whether it ended, with its change signal.
type Seen = Arc<(Mutex<(Vec<u8>, bool)>, Condvar)>;

/// What a terminal printed, read on a thread of its own.
pub struct Screen {
    seen: Seen,
    /// Keystrokes and size.
    pub input: Box<dyn TerminalInput>,
    /// Where the last [`Screen::expect`] matched, so each waits for new output.
    mark: usize,
}

impl Screen {
    /// Takes the run's terminal and starts reading it.
    pub fn of(handle: &mut dyn RunHandle) -> Screen {
        let Terminal { input, mut output } = handle.take_terminal().expect("a terminal");
        let seen: Seen = Arc::new((Mutex::new((Vec::new(), false)), Condvar::new()));
        let writer = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let n = output.read_output(&mut buf).unwrap_or(0);
                let (lock, changed) = &*writer;
                let mut state = lock.lock().unwrap();
                if n == 0 {
                    state.1 = true;
                    changed.notify_all();
                    return;
                }
                state.0.extend_from_slice(&buf[..n]);
                changed.notify_all();
            }
        });
        Screen {
            seen,
            input,
            mark: 0,
        }
    }

    /// Types `text`.
    pub fn type_text(&mut self, text: &str) {
        self.input.write_input(text.as_bytes()).unwrap();
    }

    /// Resizes the terminal.
    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.input.resize(TerminalSize { cols, rows }).unwrap();
    }

    /// Waits until `pattern` appears after the last match; panics with the screen if it does
    /// not within [`PATIENCE`].
    pub fn expect(&mut self, pattern: &str) {
        let until = Instant::now() + PATIENCE;
        let (lock, changed) = &*self.seen;
        let mut state = lock.lock().unwrap();
        loop {
            if let Some(at) = find(&state.0[self.mark..], pattern.as_bytes()) {
                self.mark += at + pattern.len();
                return;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || state.1 {
                panic!(
                    "{pattern:?} did not appear ({}); the screen: {:?}",
                    if state.1 {
                        "end of output"
                    } else {
                        "timed out"
                    },
                    String::from_utf8_lossy(&state.0)
                );
            }
            state = changed.wait_timeout(state, left).unwrap().0;
        }
    }

    /// Waits for the end of the output; whether it came within `bound`.
    pub fn closes_within(&self, bound: Duration) -> bool {
        let until = Instant::now() + bound;
        let (lock, changed) = &*self.seen;
        let mut state = lock.lock().unwrap();
        while !state.1 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = changed.wait_timeout(state, left).unwrap().0;
        }
        true
    }

    /// Everything printed so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.0.lock().unwrap().0).into_owned()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Whether process `pid` is still running (a zombie waiting for its reaper is not).
pub fn process_alive(pid: impl std::fmt::Display) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Waits until `pid` is gone; whether it went within [`PATIENCE`].
pub fn gone(pid: i32) -> bool {
    let until = Instant::now() + PATIENCE;
    while Instant::now() < until {
        if !process_alive(pid) {
            return true;
        }
        // The poll's pace: no event for the death of a process that is not our child.
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
