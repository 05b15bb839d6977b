//! The run-side bridge to host commands: while an operator's run lives, the daemon serves a
//! Unix socket, [`SOCKET_NAME`], inside the run's capability folder (its working directory;
//! a link to a private folder's socket when that path is too long for a socket address),
//! and the run's scripts ask for commands on it — `outpost command run|start|poll|kill` is the
//! client. A shared run (not the operator's) gets no socket.
//!
//! The protocol is one JSON line each way per connection: a [`BridgeRequest`]
//! (`{"op": "run"|"start", "argv": [...], "cwd"?, "env"?, "timeoutMs"?}` or
//! `{"op": "poll"|"kill", "jobId": N}`), answered with a [`BridgeAnswer`] (`{"ok": true, ...}`
//! or `{"ok": false, "error": {"code", "message"}}`). Before every `run` and `start` the daemon
//! asks the server (the signed authorize hop) with the command cut to 1,000 characters, its
//! cwd and its variables' names; before every `poll` and `kill` it asks the job hop. A
//! refusal (`commands_off`, `commands_operator_only`, `run_not_live`, …) is the answer and
//! nothing is done. Each yes names the run's requester with their access of now: a started
//! job is theirs, and `poll` and `kill` act only on jobs of the requester the job hop just
//! named (`command_not_found` otherwise) — any live run of theirs may, not only the one that
//! started it.
//!
//! A foreground `run` waits at most the run's own time budget. Output comes back as UTF-8
//! text (invalid bytes replaced). This module owns the socket file and its threads; it never
//! decides whether commands are on — [`HostCommands`] holds both switches — and it never
//! sends a frame: it tells the driver that audit events are waiting ([`Event::CommandsAudit`]).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Duration;

use outpost_core::ids::RunId;
use outpost_host::{CommandError, CommandRequest, HostCommands, JobStatus};

use super::Event;
use outpost_adapters::http::{CommandAuthorize, JobAuthorize, JobOp, SignedClient};
pub use wire::{BridgeAnswer, BridgeEnded, BridgeEnding, BridgeOp, BridgeRequest};

mod wire;

/// The socket's file name inside the run's folder.
pub const SOCKET_NAME: &str = ".outpost-commands.sock";

/// The longest request line read (argv, cwd and env together).
const MAX_REQUEST: u64 = 1024 * 1024;

/// The most characters of a command sent to the server (it cuts there too).
const COMMAND_CHARS: usize = 1000;

/// What every run's bridge shares: the daemon's one [`HostCommands`], the signed client for
/// the authorize hop, and the driver's channel.
#[derive(Clone)]
pub(crate) struct CommandsShared {
    pub(crate) commands: Arc<HostCommands>,
    pub(crate) client: Arc<SignedClient>,
    pub(crate) events: Sender<Event>,
}

/// One run's socket; dropping it stops serving and removes the file (commands already
/// asked for finish, background jobs stay).
pub(crate) struct Bridge {
    path: PathBuf,
    /// Where the socket really is when `path` is a link to it: a private folder of its own
    /// (see [`SHORT_PATH_MAX`]).
    private_dir: Option<PathBuf>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

/// What one run's connections share.
struct RunSide {
    shared: CommandsShared,
    run_id: RunId,
    /// The longest a foreground command may take: the run's own time budget.
    budget: Duration,
}

impl Bridge {
    /// Serves `dir/`[`SOCKET_NAME`] for run `run_id` until dropped.
    pub(crate) fn serve(
        dir: &Path,
        run_id: &RunId,
        budget: Duration,
        shared: CommandsShared,
    ) -> std::io::Result<Self> {
        let path = dir.join(SOCKET_NAME);
        let _ = std::fs::remove_file(&path);
        let (listener, private_dir) = bind(&path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let side = Arc::new(RunSide {
            shared,
            run_id: run_id.clone(),
            budget,
        });
        let flag = stop.clone();
        let accept = std::thread::Builder::new()
            .name(format!("commands-{run_id}"))
            .spawn(move || {
                for stream in listener.incoming() {
                    if flag.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let side = side.clone();
                    let _ = std::thread::Builder::new()
                        .name("command".into())
                        .spawn(move || side.answer(stream));
                }
            })?;
        Ok(Self {
            path,
            private_dir,
            stop,
            accept: Some(accept),
        })
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag (by the socket's own path: a link's may be
        // too long to connect by).
        let socket = self
            .private_dir
            .as_ref()
            .map_or_else(|| self.path.clone(), |dir| dir.join(PRIVATE_SOCKET));
        let _ = UnixStream::connect(&socket);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let _ = std::fs::remove_file(&self.path);
        if let Some(dir) = &self.private_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The longest socket path bound where it is: a Unix socket's address holds at most 107
/// bytes (`sun_path`), so a run folder deep in a long home cannot hold the socket itself.
const SHORT_PATH_MAX: usize = 100;

/// The socket's name inside its private folder.
const PRIVATE_SOCKET: &str = "s";

/// Binds the socket at `path`. When `path` is too long for a socket address, the socket is
/// bound in a new private folder (mode 0700) under the system's temporary folder, and `path`
/// becomes a symbolic link to it: a run still connects to `./.outpost-commands.sock` (a
/// connect follows the link), and nobody else can reach the socket. Returns the private
/// folder to remove with the socket.
fn bind(path: &Path) -> std::io::Result<(UnixListener, Option<PathBuf>)> {
    use std::os::unix::ffi::OsStrExt as _;
    if path.as_os_str().as_bytes().len() <= SHORT_PATH_MAX {
        return Ok((UnixListener::bind(path)?, None));
    }
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(std::io::Error::other)?;
    let dir = std::env::temp_dir().join(format!("outpost-commands-{}", hex::encode(random)));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let socket = dir.join(PRIVATE_SOCKET);
    let bound = UnixListener::bind(&socket).and_then(|listener| {
        std::os::unix::fs::symlink(&socket, path)?;
        Ok(listener)
    });
    match bound {
        Ok(listener) => Ok((listener, Some(dir))),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// A refusal as the bridge answers it.
struct Refused {
    code: String,
    message: String,
}

impl Refused {
    fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

impl From<CommandError> for Refused {
    fn from(e: CommandError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl RunSide {
    fn answer(&self, stream: UnixStream) {
        let mut line = String::new();
        let read = BufReader::new((&stream).take(MAX_REQUEST)).read_line(&mut line);
        let answer = match read {
            Ok(_) => match serde_json::from_str::<BridgeRequest>(&line) {
                Ok(request) => self.carry_out(request),
                Err(e) => Err(Refused::new(
                    "invalid_request",
                    format!("the request is not one JSON line the bridge reads: {e}"),
                )),
            },
            Err(e) => Err(Refused::new("invalid_request", e.to_string())),
        };
        let value = answer.unwrap_or_else(|r| BridgeAnswer::refused(&r.code, r.message));
        let _ = self.shared.events.send(Event::CommandsAudit);
        let mut bytes = serde_json::to_vec(&value).unwrap_or_default();
        bytes.push(b'\n');
        let _ = (&stream).write_all(&bytes);
    }

    fn carry_out(&self, request: BridgeRequest) -> Result<BridgeAnswer, Refused> {
        let commands = &self.shared.commands;
        match request.op {
            BridgeOp::Run | BridgeOp::Start => {
                let background = request.op == BridgeOp::Start;
                if request.argv.is_empty() {
                    return Err(Refused::new(
                        "invalid_request",
                        "the command is empty: give its argv",
                    ));
                }
                if !commands.is_on() {
                    return Err(CommandError::CommandsOff.into());
                }
                let cwd = match request.cwd {
                    Some(cwd) => cwd,
                    None => std::env::current_dir()
                        .map_err(|e| Refused::new("spawn_failed", e.to_string()))?,
                };
                let authorized = self
                    .shared
                    .client
                    .authorize_command(&CommandAuthorize {
                        run_id: self.run_id.clone(),
                        command: request.argv.join(" ").chars().take(COMMAND_CHARS).collect(),
                        cwd: Some(cwd.display().to_string()),
                        env_keys: request.env.keys().cloned().collect(),
                        background,
                    })
                    .map_err(|e| Refused::new(e.code(), e.to_string()))?;
                let timeout = request
                    .timeout_ms
                    .map(Duration::from_millis)
                    .unwrap_or(self.budget)
                    .min(self.budget);
                let req = CommandRequest {
                    requester: authorized.requester,
                    run_id: self.run_id.clone(),
                    command_id: authorized.command_id.clone(),
                    argv: request.argv,
                    cwd: Some(cwd),
                    env: request.env,
                    timeout,
                    sandbox: None,
                };
                if background {
                    let job = commands.start(&req)?;
                    Ok(BridgeAnswer {
                        ok: true,
                        command_id: Some(authorized.command_id),
                        job_id: Some(job),
                        ..BridgeAnswer::default()
                    })
                } else {
                    let outcome = commands.run(&req)?;
                    Ok(BridgeAnswer {
                        command_id: Some(authorized.command_id),
                        ..BridgeAnswer::finished(&outcome)
                    })
                }
            }
            BridgeOp::Poll | BridgeOp::Kill => {
                let Some(job) = request.job_id else {
                    return Err(Refused::new("invalid_request", "give the job's jobId"));
                };
                if !commands.is_on() {
                    return Err(CommandError::CommandsOff.into());
                }
                let op = if request.op == BridgeOp::Kill {
                    JobOp::Kill
                } else {
                    JobOp::Poll
                };
                let requester = self
                    .shared
                    .client
                    .authorize_job(&JobAuthorize {
                        run_id: self.run_id.clone(),
                        op,
                        job_id: job,
                    })
                    .map_err(|e| Refused::new(e.code(), e.to_string()))?
                    .requester;
                if op == JobOp::Kill {
                    let outcome = commands.kill(&requester, job)?;
                    return Ok(BridgeAnswer {
                        job_id: Some(job),
                        ..BridgeAnswer::finished(&outcome)
                    });
                }
                match commands.poll(&requester, job)? {
                    JobStatus::Running { stdout, stderr } => {
                        Ok(BridgeAnswer::running(job, &stdout, &stderr))
                    }
                    JobStatus::Finished(outcome) => Ok(BridgeAnswer {
                        job_id: Some(job),
                        ..BridgeAnswer::finished(&outcome)
                    }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn folder(name: &str, depth: usize) -> PathBuf {
        let mut dir =
            std::env::temp_dir().join(format!("outpost-bridge-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for i in 0..depth {
            dir = dir.join(format!("a-rather-long-folder-name-{i}"));
        }
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_short_path_holds_the_socket_itself() {
        let dir = folder("short", 0);
        let path = dir.join(SOCKET_NAME);
        let (_listener, private) = bind(&path).unwrap();
        assert!(private.is_none());
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        UnixStream::connect(&path).expect("connects");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_path_too_long_for_a_socket_links_to_a_private_one() {
        let dir = folder("long", 4);
        let path = dir.join(SOCKET_NAME);
        assert!(
            path.as_os_str().len() > 108,
            "longer than any socket address"
        );
        let (_listener, private) = bind(&path).unwrap();
        let private = private.expect("a private folder");
        let mode = std::fs::metadata(&private).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o700,
            "only the daemon's user reaches the socket"
        );
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        // A run connects through the link (here by its target: this path is too long to
        // connect by, as a run's relative `./.outpost-commands.sock` is not).
        let target = std::fs::read_link(&path).unwrap();
        assert!(target.starts_with(&private));
        UnixStream::connect(&target).expect("connects");
        let _ = std::fs::remove_dir_all(&private);
        let _ = std::fs::remove_dir_all(dir.ancestors().nth(4).unwrap());
    }
}
