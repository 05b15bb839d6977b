//! Runs the service manager's own tools (`systemctl`, `loginctl`, `launchctl`) with a
//! deadline, so a manager that hangs never hangs `outpost daemon install`.
//!
//! This module owns how those tools are started and waited for. It never decides what to
//! run: the callers in `systemd` and `launchd` do.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one tool call may take.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// What a tool printed and how it ended.
#[derive(Debug)]
pub struct Ran {
    /// Whether it exited 0.
    pub ok: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Ran {
    /// Its first line of standard error (or output), for a message.
    pub fn why(&self) -> String {
        let text = if self.stderr.trim().is_empty() {
            &self.stdout
        } else {
            &self.stderr
        };
        text.lines().next().unwrap_or("no output").trim().to_owned()
    }
}

/// Runs `program args…` with no input; `Err` says why it could not run or did not end
/// within [`DEADLINE`] (it is killed then).
pub fn run(program: &str, args: &[&str]) -> Result<Ran, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program} cannot run: {e}"))?;
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{program} {} did not answer within {} s",
                    args.join(" "),
                    DEADLINE.as_secs()
                ));
            }
            Err(e) => return Err(format!("{program}: {e}")),
        }
    };
    Ok(Ran {
        ok: status.success(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Whether `program` is found on `PATH`.
pub fn exists(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            let file = dir.join(program);
            file.is_file()
        })
    })
}
