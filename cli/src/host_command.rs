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
use serde_json::{Value, json};

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

fn spec_json(op: &str, spec: Spec) -> anyhow::Result<Value> {
    let mut env = serde_json::Map::new();
    for pair in spec.env {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("--env {pair:?} is not KEY=VALUE"))?;
        env.insert(key.to_owned(), json!(value));
    }
    Ok(json!({"op": op, "argv": spec.argv, "cwd": spec.cwd, "env": env}))
}

/// Sends one request and prints the answer.
pub fn command(args: CommandArgs) -> anyhow::Result<ExitCode> {
    let socket = args
        .socket
        .unwrap_or_else(|| PathBuf::from(".").join(DEFAULT_SOCKET));
    let (op, request) = match args.op {
        Op::Run { spec, timeout_ms } => {
            let mut request = spec_json("run", spec)?;
            request["timeoutMs"] = json!(timeout_ms);
            ("run", request)
        }
        Op::Start { spec } => ("start", spec_json("start", spec)?),
        Op::Poll { job } => ("poll", json!({"op": "poll", "jobId": job})),
        Op::Kill { job } => ("kill", json!({"op": "kill", "jobId": job})),
    };
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
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .context("reading the daemon's answer")?;
    let answer: Value = serde_json::from_slice(&answer)
        .context("the daemon's answer is not JSON (did the run end?)")?;
    if args.json {
        println!("{answer}");
    }
    if answer["ok"] != json!(true) {
        if !args.json {
            eprintln!(
                "outpost: {}: {}",
                answer["error"]["code"].as_str().unwrap_or("unknown"),
                answer["error"]["message"].as_str().unwrap_or("")
            );
        }
        return Ok(ExitCode::FAILURE);
    }
    if args.json {
        return Ok(ExitCode::SUCCESS);
    }
    let str_of = |key: &str| answer[key].as_str().unwrap_or("").to_owned();
    match op {
        "start" => println!("{}", answer["jobId"]),
        _ => {
            print!("{}", str_of("stdout"));
            eprint!("{}", str_of("stderr"));
            crate::stdout::lock().flush()?;
            if answer["running"] == json!(true) {
                eprintln!("running");
                return Ok(ExitCode::SUCCESS);
            }
            if op != "run" {
                eprintln!("{}", str_of("status"));
            }
            let code = match (answer["exitCode"].as_i64(), answer["signal"].as_i64()) {
                _ if answer["status"] == "timed_out" => 124,
                (Some(code), _) => code,
                (None, Some(signal)) => 128 + signal,
                (None, None) => 1,
            };
            if op == "run" {
                return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
