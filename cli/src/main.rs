//! The `outpost` command.
//!
//! `outpost run` runs a capability on this machine; `outpost serve` is the server;
//! `outpost daemon` joins a server and runs what it sends; `outpost execute` has a server run
//! one where routing says; `outpost context|chain|runs|user` manage a server; `outpost wait`
//! registers and follows condition waits; `outpost vectors
//! check` checks this build against the published protocol vectors.
//!
//! Every command's standard output follows one rule ([`stdout`]): once nobody reads it (EPIPE,
//! `outpost context list --json | head -1`), the command ends quietly with status 141. The
//! `println!` and `print!` below stand in for std's in every module of this crate, so no
//! printing can panic on it.
//!
//! `outpost confine …` is hidden: the helper every sandboxed shell and terminal run starts
//! through (see `outpost_host::sandbox`). It is dispatched before the command line is parsed,
//! so its exit statuses (125, 126) and its program's arguments pass untouched.
//!
//! This crate owns the command line and the executor registry (`executors`, the one place
//! that picks executors). It never speaks the protocol itself: the daemon (`outpost-daemon`),
//! the server (`outpost-server`) and the core do.

/// std's `println!`, except that a reader gone (EPIPE) ends the command quietly: see
/// [`stdout`].
macro_rules! println {
    () => {
        $crate::stdout::println(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stdout::println(format_args!($($arg)*))
    };
}

/// std's `print!`, except that a reader gone (EPIPE) ends the command quietly: see [`stdout`].
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::stdout::print(format_args!($($arg)*))
    };
}

mod attach;
mod check;
mod client;
mod daemon;
mod demo;
mod executors;
mod host_command;
mod log_file;
mod policy;
mod run;
mod sandbox_view;
mod serve;
mod stdout;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use outpost_host::sandbox as confine;

/// The server and the daemon run many threads that allocate small, short-lived buffers
/// (frames, rows, JSON); mimalloc's per-thread heaps serve them without the system
/// allocator's arena locks. The libraries leave the choice to whoever embeds them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// outpost: run code on machines you do not own, safely.
#[derive(Parser)]
#[command(
    name = "outpost",
    version,
    about,
    after_help = "Environment of the client commands (execute, runs, context, chain, user, audit, wait, attach):\n  OUTPOST_SERVER   the server's URL (or --server URL)\n  OUTPOST_TOKEN    your bearer token (default: the local server's admin.token)\n  OUTPOST_STATE    the local server's state folder, as `outpost serve --state DIR` was given\n                   (default: $XDG_DATA_HOME/outpost/server, else ~/.local/share/outpost/server);\n                   its join gives the server's URL and the certificate it pins\n  OUTPOST_CA_FILE  an extra CA certificate to trust (or --ca FILE)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// An extra CA certificate (PEM) to trust for the server's TLS certificate (default:
    /// OUTPOST_CA_FILE). Not needed for a server whose join pins its certificate: the local
    /// server's join, or the one a daemon joined with.
    #[arg(long, global = true, value_name = "FILE")]
    ca: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the capability in DIR on this machine and print its result.
    Run {
        /// The capability folder (holding manifest.yaml).
        dir: PathBuf,
        /// Print one JSON object instead of the capability's own output.
        #[arg(long)]
        json: bool,
        /// The network a capability that asks for it (`connect:` permissions) may reach:
        /// `none`, or `all`. Containers get no network unless this allows it.
        #[arg(long, value_enum, default_value_t = run::EgressArg::None)]
        egress: run::EgressArg,
        /// A folder of yours the sandboxed run may use, `PATH:ro` or `PATH:rw`; repeat for
        /// more (credential folders inside it stay hidden).
        #[arg(long = "fs", value_name = "PATH:ro|rw", value_parser = client::manage::folder_grant)]
        fs: Vec<(String, String)>,
        /// Run a shell or pty capability outside the sandbox (it then sees what you see).
        /// Without it the run sees the system folders, its own folder, its volumes and a
        /// private home, and the network --egress allows.
        #[arg(long)]
        no_confine: bool,
        /// Arguments passed to the capability after its manifest's args.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// The whole path on this machine: a server, a daemon joined to it, and a shell, a wasm,
    /// a container and a fallback-to-cloud run, printed as a table; then all of it removed.
    Demo {
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// Keep the temporary folders (server state, daemon home) for a look afterwards.
        #[arg(long)]
        keep: bool,
    },
    /// Serve: the HTTP API, the daemons' WebSockets and the server's own `cloud` executor.
    /// Prints `listening on URL`, then `join: JOIN` for `outpost daemon --join`.
    Serve(serve::ServeArgs),
    /// Join a server and run what it sends, within what this machine's owner allows. Exits 0
    /// when drained, revoked, replaced or unregistered (it never reconnects), 78 for a setup
    /// to fix (join, home, key, another daemon on the home), 69 when the server cannot be
    /// reached or refuses. `install | status | logs | restart | uninstall` run it as a
    /// service instead.
    Daemon(daemon::DaemonArgs),
    /// Have a server run the capability in DIR where routing says, print its output and where
    /// it ran, and exit with its exit code (124 timed out, 130 cancelled, 75 lost, 70 failed).
    Execute {
        /// The capability folder (holding manifest.yaml).
        dir: PathBuf,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long)]
        server: Option<String>,
        /// Run on this context (name or id; `cloud` for the server itself).
        #[arg(long)]
        context: Option<String>,
        /// Let a named context fall through to your chain (`chain`).
        #[arg(long, value_parser = ["chain"])]
        fallback: Option<String>,
        /// What only a machine can give (`fs`, `lan`): keeps the run off the cloud.
        #[arg(long, value_parser = ["fs", "lan"])]
        requires: Vec<String>,
        /// What to do when the context is offline (`queue`: wait for it).
        #[arg(long, value_parser = ["queue"])]
        when_offline: Option<String>,
        /// What to do when the context has every slot taken (`queue`: wait for a free one,
        /// first come first served).
        #[arg(long, value_parser = ["queue"])]
        when_busy: Option<String>,
        /// How long a queued run waits for its context (1–1440, default 60).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1440))]
        queue_minutes: Option<u32>,
        /// Print one JSON object (status, exitCode, stdout, stderr, ranOn, timing, …).
        #[arg(long)]
        json: bool,
        /// Arguments passed to the capability after its manifest's args.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Ask this machine for a host command from inside a run (`run`, `start`, `poll`,
    /// `kill`), on the run's socket; both of the machine's switches must be on.
    #[command(name = "command")]
    Ask(host_command::CommandArgs),
    /// Open a terminal on CONTEXT (a machine you operate) and attach this terminal to it:
    /// keys go there as typed, the window's size follows yours. The detach key leaves it
    /// running; the program's exit ends attach with its exit code.
    Attach {
        /// The context (name or id).
        context: String,
        /// Join this open terminal instead of opening a new one (`GET /v1/terminals`).
        #[arg(long)]
        terminal: Option<String>,
        /// The key that detaches.
        #[arg(long, default_value = "ctrl-]")]
        detach_key: String,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long)]
        server: Option<String>,
    },
    /// An unattended end-to-end check of a deployment (needs an admin's token): a throwaway
    /// machine in a temporary folder joins, runs host commands in the foreground and the
    /// background, opens a terminal, and is revoked and deleted; each step is printed with its
    /// time, the first failure exits 1, and whatever was made is removed (on Ctrl-C too).
    Check {
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long)]
        server: Option<String>,
        /// Print one JSON report (each step's name, ok, ms and detail) at the end.
        #[arg(long)]
        json: bool,
    },
    /// Terminal sessions the server recorded: list them, export one as an asciicast v2 file
    /// (`asciinema play` plays it), or play one here.
    Terminal {
        #[command(subcommand)]
        action: TerminalAction,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long, global = true)]
        server: Option<String>,
        /// Print JSON (`recordings`).
        #[arg(long, global = true)]
        json: bool,
    },
    /// The machines (execution contexts) you can use.
    Context {
        #[command(subcommand)]
        action: ContextAction,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long, global = true)]
        server: Option<String>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Your chain: where an execute without --context goes, in order.
    Chain {
        #[command(subcommand)]
        action: ChainAction,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long, global = true)]
        server: Option<String>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Your executions, newest first.
    Runs {
        #[command(subcommand)]
        action: RunsAction,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long, global = true)]
        server: Option<String>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Condition waits: a JavaScript condition your machine re-checks until it matches, then
    /// (with --then) one follow-up run.
    Wait {
        #[command(subcommand)]
        action: WaitAction,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long, global = true)]
        server: Option<String>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Users of the server (admin).
    User {
        #[command(subcommand)]
        action: UserAction,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long, global = true)]
        server: Option<String>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Join tokens (admin): the credentials join strings carry — make one bounded in time,
    /// uses and names, list them, revoke one (the first start's is `jt_first`).
    Join {
        #[command(subcommand)]
        action: JoinAction,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long, global = true)]
        server: Option<String>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
    },
    /// The server's audit log, newest first: registrations, revokes, grant edits, commands.
    Audit {
        /// At most this many events.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// The server (default: OUTPOST_SERVER, else the join in the local server's state folder:
        /// OUTPOST_STATE, else ~/.local/share/outpost/server).
        #[arg(long)]
        server: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// This build's version (`--json`: `{"version","os","arch"}`), as daemon updates read it.
    Version {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The published protocol test vectors.
    Vectors {
        #[command(subcommand)]
        action: VectorsAction,
    },
}

#[derive(Subcommand)]
enum ContextAction {
    /// Every context you can see, with its state and slots.
    List,
    /// One context and its grant.
    Show {
        /// Its name or id.
        name: String,
    },
    /// Revoke it: its runs are cancelled and its daemon stops for good.
    Revoke {
        /// Its name or id.
        name: String,
    },
    /// Delete a revoked context and what hangs off it (run records keep its name).
    Delete {
        /// Its name or id.
        name: String,
    },
    /// Host commands on this machine, on or off: the owner's local switch and the server's
    /// (which only this machine's own signed request turns on). Both must be on.
    Commands {
        /// on or off.
        #[arg(value_parser = policy::on_off, action = clap::ArgAction::Set)]
        state: bool,
        /// The daemon's home (default: OUTPOST_HOME, else the XDG folders).
        #[arg(long)]
        home: Option<PathBuf>,
    },
    /// Change what runs on a machine you operate may use (the server's grant; the machine's
    /// local policy still narrows it): folders, network, host commands off, slots. What you
    /// leave out stays as it is; prints the new grant and its version.
    Grant {
        /// Its name or id.
        name: String,
        /// A folder on the machine and its mode, `PATH:ro` or `PATH:rw`; repeat for more.
        /// Replaces the granted folders.
        #[arg(long = "fs", value_name = "PATH:ro|rw", value_parser = client::manage::folder_grant, conflicts_with = "no_fs")]
        fs: Vec<(String, String)>,
        /// Grant no folders.
        #[arg(long)]
        no_fs: bool,
        /// What runs may reach: `none`, `all`, or `HOST[:PORT],…` (`*.suffix` for a domain's
        /// hosts) for an allowlist.
        #[arg(long, value_name = "none|all|HOST:PORT,…")]
        egress: Option<String>,
        /// `off` turns host commands off (only the machine turns them on, with `outpost
        /// context commands on` there).
        #[arg(long, value_name = "off", value_parser = ["off"])]
        commands: Option<String>,
        /// The most runs the machine holds at once (1–8; the daemon's own setting still caps it).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=8))]
        max_concurrent: Option<u32>,
    },
    /// Share a machine you operate with every member, or stop (which drops every opt-in).
    /// Shared runs get no folders and no host commands.
    Share {
        /// Its name or id.
        name: String,
        /// `on`: every member may opt in to run on it; `off`: only you.
        #[arg(long, value_enum)]
        all_members: Switch,
    },
    /// Opt in to run on a machine shared with you (while your run is active the machine can
    /// use your credentials and read the responses).
    OptIn {
        /// Its name or id.
        name: String,
    },
    /// Opt out: your runs no longer go to that machine (a run of yours on it is ended).
    OptOut {
        /// Its name or id.
        name: String,
    },
    /// Ask a context's daemon, from afar, to pause (no new runs; running ones finish),
    /// resume, restart (drain, then its service manager starts it again), update now (the
    /// signed self-update), or send its recent log lines. Its owner's local policy may refuse
    /// any of them (exit 1 then; 69 when the daemon is offline or does not answer).
    Daemon {
        /// Its name or id.
        name: String,
        /// pause | resume | restart | update | logs
        #[arg(value_parser = client::manage::control_action)]
        action: outpost_core::wire::ControlAction,
        /// For `logs`: how many of the most recent lines (1–200, default 100).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=200))]
        lines: Option<u32>,
    },
    /// This machine's local policy: the folders runs here may use (read and edited on the
    /// machine, not on the server).
    Policy {
        #[command(subcommand)]
        action: Option<policy::PolicyAction>,
        /// The daemon's home (default: OUTPOST_HOME, else the XDG folders).
        #[arg(long, global = true)]
        home: Option<PathBuf>,
    },
}

/// On or off.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    On,
    Off,
}

#[derive(Subcommand)]
enum ChainAction {
    /// Set it: up to 3 contexts, `cloud` last when present (e.g. `build-box,cloud`).
    Set {
        /// Comma-separated names.
        chain: String,
    },
    /// Show it.
    Show,
}

#[derive(Subcommand)]
enum TerminalAction {
    /// The recorded sessions you may watch, newest first.
    Recordings {
        /// Only this context's (a name or an id).
        #[arg(long)]
        context: Option<String>,
    },
    /// Write a session's recording to stdout as an asciicast v2 file.
    Export {
        /// The terminal's id (`ex_…`, as `outpost terminal recordings` lists it).
        id: String,
    },
    /// Play a session's recording in this terminal with its own timing.
    Play {
        /// The terminal's id (`ex_…`).
        id: String,
        /// Play this many times as fast.
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Cut pauses longer than this many seconds to it.
        #[arg(long, value_name = "SECS")]
        idle_limit: Option<f64>,
    },
}

#[derive(Subcommand)]
enum RunsAction {
    /// List executions, newest first: capability, requester, where it ran, status, when it
    /// started (local time), how long it took.
    List {
        /// Only those that asked for, or ran on, this context (a name or an id).
        #[arg(long)]
        context: Option<String>,
        /// Only those with this status (pending, running, exited, timed_out, cancelled,
        /// failed, lost).
        #[arg(long)]
        status: Option<String>,
        /// Only your own (an admin sees every user's otherwise).
        #[arg(long)]
        mine: bool,
        /// Only those started since: a time ago (90s, 30m, 2h, 7d) or RFC 3339.
        #[arg(long)]
        since: Option<String>,
        /// How many to show (default 50; more than 500 are fetched page by page).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// One execution: its capability, requester, where and when it ran, how it ended and
    /// what it printed.
    Show {
        /// The execution's id (`ex_…`).
        id: String,
    },
    /// What an execution printed; with -f, as it prints it, until it ends.
    Logs {
        /// The execution's id (`ex_…`).
        id: String,
        /// Follow the output until the execution ends.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Cancel an execution (a run that started is stopped; it keeps what it printed).
    Cancel {
        /// The execution's id (`ex_…`).
        id: String,
    },
}

#[derive(Subcommand)]
enum WaitAction {
    /// Register a wait: CONTEXT's daemon checks the condition in FILE every interval until it
    /// returns `{ resumeText, payload? }` (an identical active wait is reused).
    Register {
        /// The machine that checks it (name or id).
        #[arg(long)]
        context: String,
        /// The condition: JavaScript, `async ({ ctx }) => false | { resumeText, payload? }`.
        #[arg(long)]
        file: PathBuf,
        /// Time between checks: `30s`, `2m`, `1h`, `1500ms` (default 30s, at least 1s).
        #[arg(long)]
        interval: Option<String>,
        /// When to give up: RFC 3339 (`2026-01-02T03:04:05Z`) or from now (`+10m`).
        #[arg(long)]
        expires_at: Option<String>,
        /// Why you wait, for people.
        #[arg(long)]
        reason: Option<String>,
        /// A capability folder to run once when it matches (it gets `outpost-wait.json`:
        /// waitId, resumeText, payload).
        #[arg(long)]
        then: Option<PathBuf>,
    },
    /// Your waits, newest first.
    List,
    /// One wait: its state, checks, last error, next check, match and continuation.
    Show {
        /// Its id.
        id: String,
    },
    /// Cancel a wait (its machine confirms).
    Cancel {
        /// Its id.
        id: String,
    },
}

#[derive(Subcommand)]
enum JoinAction {
    /// Make a join token and print its join string (shown once).
    Create {
        /// How long it is good for: 90s, 30m, 1h, 7d (default: until revoked).
        #[arg(long)]
        ttl: Option<String>,
        /// How many machines may register with it (default: any number).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        uses: Option<u32>,
        /// Machines registering with it must have a name that starts with this.
        #[arg(long)]
        name_prefix: Option<String>,
    },
    /// The join tokens: bounds, uses, whether revoked (never their secrets).
    List,
    /// Revoke a join token: it registers no more machines (those it registered stay).
    Revoke {
        /// Its id (`jt_…`).
        id: String,
    },
}

#[derive(Subcommand)]
enum UserAction {
    /// Add a user and print their token (shown once).
    Add {
        /// The user's name.
        name: String,
    },
    /// Remove a user from the organization: their tokens stop working, their opt-ins go,
    /// and the machines they operate take nobody's runs (`operator_left`).
    Remove {
        /// The user's name.
        name: String,
    },
}

#[derive(Subcommand)]
enum VectorsAction {
    /// Check this build of outpost against every vector file.
    Check {
        /// The folder holding the vector files (default: the source tree's `vectors/`).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// Logs to stderr, filtered by `OUTPOST_LOG` (default `info`), to the file
/// [`log_file::keep`] names once it is called (the daemon's own log), and to the daemon's
/// ring of recent lines.
fn init_logs() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("OUTPOST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    let file = tracing_subscriber::fmt::layer()
        .with_writer(log_file::FileWriter)
        .with_ansi(false)
        .with_target(false);
    // The last lines, for an operator's `logs` request from afar (the owner may refuse it).
    let recent = tracing_subscriber::fmt::layer()
        .with_writer(|| outpost_daemon::RecentLog)
        .with_ansi(false)
        .with_target(false);
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(file)
        .with(recent)
        .try_init();
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() == Some(std::ffi::OsStr::new(confine::SUBCOMMAND)) {
        return confine::helper_main(args);
    }
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("outpost: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    client::api::set_ca_file(cli.ca.clone());
    match cli.command {
        Command::Run {
            dir,
            json,
            egress,
            fs,
            no_confine,
            args,
        } => run::run(
            &dir,
            json,
            run::Sandbox {
                egress,
                confined: !no_confine,
                folders: fs,
            },
            args,
        ),
        Command::Demo { json, keep } => demo::demo(json, keep),
        Command::Serve(args) => {
            init_logs();
            serve::serve(args)
        }
        Command::Daemon(mut args) => {
            init_logs();
            args.ca = cli.ca;
            daemon::daemon(args)
        }
        Command::Execute {
            dir,
            server,
            context,
            fallback,
            requires,
            when_offline,
            when_busy,
            queue_minutes,
            json,
            args,
        } => client::execute::execute(&client::execute::ExecuteArgs {
            dir: &dir,
            server: server.as_deref(),
            context: context.as_deref(),
            fallback_chain: fallback.is_some(),
            requires: &requires,
            queue: when_offline.is_some(),
            queue_when_busy: when_busy.is_some(),
            queue_minutes,
            json,
            args: &args,
        }),
        Command::Ask(args) => host_command::command(args),
        Command::Attach {
            context,
            terminal,
            detach_key,
            server,
        } => attach::attach(&attach::AttachArgs {
            context: &context,
            server: server.as_deref(),
            terminal: terminal.as_deref(),
            detach_key: &detach_key,
        }),
        Command::Context {
            action,
            server,
            json,
        } => {
            match action {
                ContextAction::Policy { action, home } => {
                    let folders = daemon::folders(home.as_deref())?;
                    return policy::policy(action, &folders, json);
                }
                ContextAction::Commands { state, home } => {
                    let folders = daemon::folders(home.as_deref())?;
                    return policy::commands(state, &folders, json);
                }
                _ => {}
            }
            let api = client::api::Api::from_env(server.as_deref())?;
            use client::manage::*;
            match action {
                ContextAction::Policy { .. } | ContextAction::Commands { .. } => {
                    unreachable!("handled above")
                }
                ContextAction::List => context_list(&api, json),
                ContextAction::Show { name } => context_show(&api, &name, json),
                ContextAction::Revoke { name } => context_revoke(&api, &name, json),
                ContextAction::Delete { name } => context_delete(&api, &name, json),
                ContextAction::Share { name, all_members } => {
                    context_share(&api, &name, all_members == Switch::On, json)
                }
                ContextAction::Grant {
                    name,
                    fs,
                    no_fs,
                    egress,
                    commands,
                    max_concurrent,
                } => {
                    let change = GrantChange {
                        fs: (no_fs || !fs.is_empty()).then_some(fs),
                        egress,
                        commands_off: commands.is_some(),
                        max_concurrent,
                    };
                    context_grant(&api, &name, &change, json)
                }
                ContextAction::OptIn { name } => context_opt_in(&api, &name, true, json),
                ContextAction::OptOut { name } => context_opt_in(&api, &name, false, json),
                ContextAction::Daemon {
                    name,
                    action,
                    lines,
                } => context_daemon(&api, &name, action, lines, json),
            }
        }
        Command::Chain {
            action,
            server,
            json,
        } => {
            let api = client::api::Api::from_env(server.as_deref())?;
            match action {
                ChainAction::Set { chain } => client::manage::chain_set(&api, &chain, json),
                ChainAction::Show => client::manage::chain_show(&api, json),
            }
        }
        Command::Check { server, json } => check::check(server.as_deref(), json),
        Command::Terminal {
            action,
            server,
            json,
        } => {
            let api = client::api::Api::from_env(server.as_deref())?;
            use client::recordings;
            match action {
                TerminalAction::Recordings { context } => {
                    recordings::list(&api, context.as_deref(), json)
                }
                TerminalAction::Export { id } => recordings::export(&api, &id),
                TerminalAction::Play {
                    id,
                    speed,
                    idle_limit,
                } => recordings::play(&api, &id, recordings::PlayArgs { speed, idle_limit }),
            }
        }
        Command::Runs {
            action,
            server,
            json,
        } => {
            let api = client::api::Api::from_env(server.as_deref())?;
            match action {
                RunsAction::List {
                    context,
                    status,
                    mine,
                    since,
                    limit,
                } => client::runs::list(
                    &api,
                    &client::runs::ListArgs {
                        context: context.as_deref(),
                        status: status.as_deref(),
                        mine,
                        since: since.as_deref(),
                        limit,
                        json,
                    },
                ),
                RunsAction::Show { id } => client::runs::show(&api, &id, json),
                RunsAction::Logs { id, follow } => client::runs::logs(&api, &id, follow, json),
                RunsAction::Cancel { id } => client::runs::cancel(&api, &id, json),
            }
        }
        Command::Wait {
            action,
            server,
            json,
        } => {
            let api = client::api::Api::from_env(server.as_deref())?;
            use client::waits;
            match action {
                WaitAction::Register {
                    context,
                    file,
                    interval,
                    expires_at,
                    reason,
                    then,
                } => waits::register(
                    &api,
                    &waits::RegisterArgs {
                        context: &context,
                        file: &file,
                        interval: interval.as_deref(),
                        expires_at: expires_at.as_deref(),
                        reason: reason.as_deref(),
                        then: then.as_deref(),
                        json,
                    },
                ),
                WaitAction::List => waits::list(&api, json),
                WaitAction::Show { id } => waits::show(&api, &id, json),
                WaitAction::Cancel { id } => waits::cancel(&api, &id, json),
            }
        }
        Command::User {
            action,
            server,
            json,
        } => {
            let api = client::api::Api::from_env(server.as_deref())?;
            match action {
                UserAction::Add { name } => client::manage::user_add(&api, &name, json),
                UserAction::Remove { name } => client::manage::user_remove(&api, &name, json),
            }
        }
        Command::Join {
            action,
            server,
            json,
        } => {
            let api = client::api::Api::from_env(server.as_deref())?;
            match action {
                JoinAction::Create {
                    ttl,
                    uses,
                    name_prefix,
                } => client::joins::create(&api, ttl.as_deref(), uses, name_prefix, json),
                JoinAction::List => client::joins::list(&api, json),
                JoinAction::Revoke { id } => client::joins::revoke(&api, &id, json),
            }
        }
        Command::Audit {
            limit,
            server,
            json,
        } => {
            let api = client::api::Api::from_env(server.as_deref())?;
            client::manage::audit(&api, limit, json)
        }
        Command::Version { json } => {
            let version = outpost_daemon::running_version();
            if json {
                println!(
                    "{}",
                    serde_json::json!({"version": version.to_string(), "os": std::env::consts::OS, "arch": std::env::consts::ARCH})
                );
            } else {
                println!("outpost {version}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Vectors {
            action: VectorsAction::Check { dir },
        } => {
            let dir = dir.unwrap_or_else(outpost_vectors::default_dir);
            let report = outpost_vectors::check::check_dir(&dir)
                .with_context(|| format!("checking the vectors in {}", dir.display()))?;
            for failure in &report.failures {
                eprintln!("FAIL {failure}");
            }
            let failed = report.failures.len();
            println!("{} passed, {failed} failed", report.cases - failed);
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

#[cfg(test)]
mod tests {
    /// clap checks a command's definition only when that command is built: this builds them
    /// all, so a definition it would reject fails here rather than in a user's hands.
    #[test]
    fn every_command_definition_is_valid() {
        use clap::CommandFactory as _;
        super::Cli::command().debug_assert();
    }

    /// A root key is base64url, whose 63rd digit is `-`: one that begins with it is the key,
    /// not a flag (one start in 64 failed with "unexpected argument").
    #[test]
    fn a_root_key_that_begins_with_a_hyphen_is_read_as_the_key() {
        use clap::Parser as _;
        let key = "-oAbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-abcd";
        let parsed = super::Cli::try_parse_from([
            "outpost",
            "daemon",
            "--server",
            "https://outpost.example",
            "--root",
            key,
        ]);
        let Ok(super::Cli {
            command: super::Command::Daemon(args),
            ..
        }) = parsed
        else {
            panic!(
                "not read as the key: {:?}",
                parsed.err().map(|e| e.to_string())
            );
        };
        assert_eq!(args.root.as_deref(), Some(key));
    }
}
