//! `outpost command run|start|poll|kill`: what a capability's script calls to ask the
//! machine for a host command. It speaks the daemon's bridge protocol (one JSON line each
//! way) on the run's socket — by default `./.outpost-commands.sock`, the run's folder being
//! its working directory — and prints what came back.
//!
//! Without `--json`: `run` prints the command's output on the same streams and exits with
//! its code (124 timed out, 128+N killed by signal N); `start` prints the job id; `poll`
//! prints the output so far and `running` or how it ended on stderr; `kill` prints how it
//! ended. A refusal prints `outpost: CODE: message` and exits 1. This module decides
//! nothing: the daemon and the server do.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use outpost_daemon::{BridgeAnswer, BridgeOp, BridgeRequest};

/// The bridge's socket in the run's folder.
const DEFAULT_SOCKET: &str = outpost_daemon::COMMANDS_SOCKET;

/// `outpost command …`.
#[derive(clap::Args)]
pub struct CommandArgs {
    #[command(subcommand)]
    op: Op,
    /// The run's host-commands socket (default: ./.outpost-commands.sock).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Print the daemon's JSON answer as it came.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Args)]
struct Spec {
    /// Where the command runs (default: the daemon's working directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// A variable to set, KEY=VALUE (repeatable; only its name reaches the audit log).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// The program and its arguments (no shell).
    #[arg(last = true, required = true)]
    argv: Vec<String>,
}

#[derive(clap::Subcommand)]
enum Op {
    /// Run a command on the machine and wait for it (at most the run's own time budget).
    Run {
        #[command(flatten)]
        spec: Spec,
        /// Stop it after this many milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Start a background job that outlives the run; prints its job id.
    Start {
        #[command(flatten)]
        spec: Spec,
    },
    /// A job's output so far, or how it ended.
    Poll {
        /// The job id `start` printed.
        job: u64,
    },
    /// Kill a job's whole process group.
    Kill {
        /// The job id `start` printed.
        job: u64,
    },
}

fn request(op: BridgeOp, spec: Spec) -> anyhow::Result<BridgeRequest> {
    let mut request = BridgeRequest::command(op, spec.argv);
    request.cwd = spec.cwd;
    for pair in spec.env {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("--env {pair:?} is not KEY=VALUE"))?;
        request.env.insert(key.to_owned(), value.to_owned());
    }
    Ok(request)
}

/// Sends one request and prints the answer.
pub fn command(args: CommandArgs) -> anyhow::Result<ExitCode> {
    let socket = args
        .socket
        .unwrap_or_else(|| PathBuf::from(".").join(DEFAULT_SOCKET));
    let request = match args.op {
        Op::Run { spec, timeout_ms } => BridgeRequest {
            timeout_ms,
            ..request(BridgeOp::Run, spec)?
        },
        Op::Start { spec } => request(BridgeOp::Start, spec)?,
        Op::Poll { job } => BridgeRequest::job(BridgeOp::Poll, job),
        Op::Kill { job } => BridgeRequest::job(BridgeOp::Kill, job),
    };
    let op = request.op;
    let mut stream = UnixStream::connect(&socket).with_context(|| {
        format!(
            "no host-commands socket at {}: host commands are asked for from inside a machine operator's run",
            socket.display()
        )
    })?;
    let mut line = serde_json::to_vec(&request)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut bytes = Vec::new();
    stream
        .read_to_end(&mut bytes)
        .context("reading the daemon's answer")?;
    let answer: BridgeAnswer = serde_json::from_slice(&bytes)
        .context("the daemon's answer is not a bridge answer (did the run end?)")?;
    if args.json {
        println!("{}", String::from_utf8_lossy(&bytes).trim_end());
    }
    if !answer.ok {
        if !args.json {
            let (code, message) = answer
                .error
                .as_ref()
                .map_or(("unknown", ""), |e| (e.code.as_str(), e.message.as_str()));
            eprintln!("outpost: {code}: {message}");
        }
        return Ok(ExitCode::FAILURE);
    }
    if args.json {
        return Ok(ExitCode::SUCCESS);
    }
    if op == BridgeOp::Start {
        println!("{}", answer.job_id.unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", answer.stdout.as_deref().unwrap_or(""));
    eprint!("{}", answer.stderr.as_deref().unwrap_or(""));
    crate::stdout::lock().flush()?;
    if answer.running == Some(true) {
        eprintln!("running");
        return Ok(ExitCode::SUCCESS);
    }
    if op == BridgeOp::Run {
        return Ok(ExitCode::from(
            u8::try_from(answer.exit_code()).unwrap_or(1),
        ));
    }
    if let Some(ended) = &answer.ended {
        eprintln!("{}", ended.status.as_str());
    }
    Ok(ExitCode::SUCCESS)
}
