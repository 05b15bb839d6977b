//! The helper process: the `outpost` binary's hidden `confine` subcommand, which a sandboxed
//! run starts through. Run with `--net`, it is two processes: the first enters new user,
//! mount, PID (and network) namespaces and starts itself again as PID 1 inside them (`--init`),
//! which makes the run's file system in `--root` (only what the run is given, then `/proc`),
//! hides credential paths, brings loopback up, bridges the gate,
//! restricts itself with Landlock and starts the program, then reaps until the program ends
//! and reports how it ended; the first relays that as its own exit. Without `--net` it
//! restricts itself with Landlock and becomes the program.
//!
//! ```text
//! outpost confine --probe
//! outpost confine [--ro DIR]… [--rw DIR]… [--hide PATH]… [--root DIR]
//!                 [--net host|loopback|gate=SOCKET] [--publish PORT] -- PROGRAM [ARGS…]
//! outpost confine --warm --root DIR --net host|loopback [--report FIFO]
//! ```
//!
//! With `--report FIFO` (a FIFO the caller holds open), PID 1 writes how the run ended there
//! as two bytes — `0, CODE` for an exit (its own refusals included), `1, SIGNAL` for a fatal
//! signal — as soon as it knows, and neither helper process keeps the run's stdout or stderr
//! open once the program is started: the caller has the run's end one process exit earlier
//! than the first process's own, and that process's exit and the namespaces' teardown happen
//! after it. The FIFO is opened before the run's root is made and closed on exec: the
//! program never holds it.
//!
//! A **warm** helper makes everything that does not depend on its run ahead of time (the
//! namespaces, PID 1, the root with the system folders and `/proc`, loopback), then reads its
//! run from stdin — its length in bytes (4, little-endian), then the arguments above, then
//! `--env KEY=VALUE`… and `--cwd DIR`, each ended by a NUL byte — and finishes as a cold one
//! would; the program's stdin is `/dev/null`. An input that ends early or asks for another
//! network or root runs nothing. When the program ends, its PID 1 kills every other process
//! in the sandbox, reports the end, and then holds the sandbox until its stdin closes: the
//! namespaces' teardown (work for the kernel) comes when the caller lets go, not while it
//! hands on the run's end.
//!
//! This file owns the helper's processes and their exit statuses; what each rule allows is
//! the caller's ([`super::prepare`]). It never runs a program before every rule holds.

use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::wait::{WaitStatus, waitpid};

use super::{
    EXIT_CANNOT_EXECUTE, EXIT_NOT_CONFINED, PROBE_OK, PROXY_PORT, STDERR_PREFIX, SUBCOMMAND,
    bridge, kernel,
};

/// The network a namespaced run gets.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NetArg {
    Host,
    Loopback,
    Gate(PathBuf),
}

#[derive(Debug, Default)]
struct Args {
    ro: Vec<PathBuf>,
    rw: Vec<PathBuf>,
    hide: Vec<PathBuf>,
    /// `--root DIR`: an empty folder to make the run's whole file system in.
    root: Option<PathBuf>,
    net: Option<NetArg>,
    /// A service's port, published from the run's network namespace on the host's loopback.
    publish: Option<u16>,
    /// `--relay PORT`: this is the relay of a published port; its stdin is the listener.
    relay: Option<u16>,
    probe: bool,
    /// `--warm`: make what does not depend on the run, then read the run from stdin.
    warm: bool,
    /// `--env KEY=VALUE`: the program's whole environment (a warm helper's run only).
    env: Vec<OsString>,
    /// `--cwd DIR`: the program's working folder (a warm helper's run only).
    cwd: Option<PathBuf>,
    /// `--init FD`: this is PID 1 inside; FD (or `-`) takes the program's fatal signal.
    init: Option<Option<i32>>,
    /// `--report FIFO`: where PID 1 writes how the run ended (see the module doc).
    report: Option<PathBuf>,
    program: Option<OsString>,
    rest: Vec<OsString>,
}

fn parse(args: &mut impl Iterator<Item = OsString>) -> Result<Args, String> {
    let mut out = Args::default();
    while let Some(arg) = args.next() {
        let text = arg.to_str().map(str::to_owned);
        match text.as_deref() {
            Some("--probe") => out.probe = true,
            Some("--warm") => out.warm = true,
            Some("--") => {
                out.program = args.next();
                out.rest = args.collect();
                break;
            }
            Some(
                flag @ ("--ro" | "--rw" | "--hide" | "--root" | "--net" | "--init" | "--publish"
                | "--relay" | "--env" | "--cwd" | "--report"),
            ) => {
                let Some(value) = args.next().filter(|value| value != "--") else {
                    let what = match flag {
                        "--net" => "a network",
                        "--init" => "a descriptor",
                        "--publish" | "--relay" => "a port",
                        "--env" => "KEY=VALUE",
                        _ => "a folder",
                    };
                    return Err(format!("{flag} needs {what}"));
                };
                match flag {
                    "--ro" => out.ro.push(value.into()),
                    "--rw" => out.rw.push(value.into()),
                    "--hide" => out.hide.push(value.into()),
                    "--root" => out.root = Some(value.into()),
                    "--report" => out.report = Some(value.into()),
                    "--cwd" => out.cwd = Some(value.into()),
                    "--env" => out.env.push(value),
                    "--net" => out.net = Some(net(&value)?),
                    "--publish" | "--relay" => {
                        let port = value.to_str().and_then(|p| p.parse::<u16>().ok());
                        let port = Some(
                            port.filter(|p| *p != 0)
                                .ok_or(format!("{flag} needs a port"))?,
                        );
                        if flag == "--publish" {
                            out.publish = port;
                        } else {
                            out.relay = port;
                        }
                    }
                    _ => {
                        out.init = Some(match value.to_str() {
                            Some("-") => None,
                            Some(fd) => Some(fd.parse().map_err(|_| "--init needs a descriptor")?),
                            None => return Err("--init needs a descriptor".into()),
                        });
                    }
                }
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    Ok(out)
}

fn net(value: &std::ffi::OsStr) -> Result<NetArg, String> {
    let text = value.to_string_lossy();
    match text.as_ref() {
        "host" => Ok(NetArg::Host),
        "loopback" => Ok(NetArg::Loopback),
        other => other
            .strip_prefix("gate=")
            .map(|path| NetArg::Gate(PathBuf::from(path)))
            .ok_or_else(|| format!("--net {other:?} is none of host, loopback, gate=SOCKET")),
    }
}

/// The helper itself: `args` are what follows the subcommand. On success it runs the program
/// (and, without `--net`, becomes it). Exits [`EXIT_NOT_CONFINED`] without running anything
/// when an argument is wrong or a rule cannot be enforced, [`EXIT_CANNOT_EXECUTE`] when the
/// program cannot be executed; otherwise with the program's status (a fatal signal is
/// raised again, so the caller sees the signal).
pub fn helper_main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let parsed = match parse(&mut args.into_iter()) {
        Ok(parsed) => parsed,
        Err(why) => return not_confined(why),
    };
    if let Some(port) = parsed.relay {
        return relay(port);
    }
    match (&parsed.init, parsed.probe, &parsed.net) {
        (Some(status), _, _) => {
            // A handle of our own, closed on exec, then the inherited number closed: the
            // program never holds the pipe.
            let status = status.and_then(|fd| {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(format!("/proc/self/fd/{fd}"))
                    .ok();
                let _ = nix::unistd::close(fd);
                file
            });
            ExitCode::from(init(&parsed, status))
        }
        (None, true, _) => probe(),
        (None, false, Some(_)) => outer(&parsed),
        (None, false, None) => landlock_only(&parsed),
    }
}

/// Landlock alone (no namespaces): restrict, then become the program.
fn landlock_only(args: &Args) -> ExitCode {
    if !args.hide.is_empty() {
        return not_confined("hiding credential paths needs namespaces (--net)");
    }
    if let Err(why) = kernel::restrict(&args.ro, &args.rw) {
        return not_confined(why);
    }
    let Some(program) = &args.program else {
        return not_confined("no program after `--`");
    };
    let err = Command::new(program).args(&args.rest).exec();
    cannot_execute(program, err)
}

/// The first process: enters the namespaces, starts PID 1 inside, relays how the program
/// ended.
fn outer(args: &Args) -> ExitCode {
    // A stop is for the program (it gets the same signal, in the same process group); this
    // process outlives it to report the program's status.
    let stops = stop_signals();
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&stops), None);
    // A service's port, bound on the host's loopback before this process leaves the host's
    // network: the socket stays there, and connections to it are relayed inside.
    let published = match args.publish {
        Some(port) if args.net != Some(NetArg::Host) => {
            match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Ok(listener) => Some((listener, port)),
                Err(e) => {
                    return not_confined(format!("cannot publish port {port} on 127.0.0.1: {e}"));
                }
            }
        }
        _ => None,
    };
    if let Err(why) = kernel::enter_namespaces(args.net != Some(NetArg::Host)) {
        return not_confined(why);
    }
    let (read, write) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(pair) => pair,
        Err(e) => return not_confined(format!("cannot make the status pipe: {e}")),
    };
    let (child, read) = match fork_init(args, read, write) {
        Forked::Parent { child, read } => (child, read),
        Forked::Failed(why) => return not_confined(why),
    };
    if args.report.is_some() {
        // PID 1 reports the run's end; this process must not keep the run's output open.
        let _ = let_go_of_output();
    }
    // The relay is a process of its own: this one entered a new PID namespace and can start
    // no thread. Its stdin is the listener (a socket handed over as a standard stream).
    let _relay = match published {
        Some((listener, port)) => match Command::new("/proc/self/exe")
            .args([SUBCOMMAND, "--relay", &port.to_string()])
            .stdin(std::os::fd::OwnedFd::from(listener))
            .spawn()
        {
            Ok(relay) => Some(relay),
            Err(e) => {
                let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                return not_confined(format!("cannot relay port {port}: {e}"));
            }
        },
        None => None,
    };
    let status = loop {
        match waitpid(child, None) {
            Err(nix::errno::Errno::EINTR) => {}
            other => break other,
        }
    };
    let mut fatal = [0u8; 1];
    let signalled = std::fs::File::from(read).read(&mut fatal).ok() == Some(1);
    let code = match status {
        Ok(WaitStatus::Exited(_, code)) => {
            if signalled {
                relay_signal(i32::from(fatal[0]), &stops);
            }
            code
        }
        Ok(WaitStatus::Signaled(_, signal, _)) => {
            relay_signal(signal as i32, &stops);
            128 + signal as i32
        }
        Ok(other) => return not_confined(format!("the sandbox's first process {other:?}")),
        Err(e) => return not_confined(format!("lost the sandbox's first process: {e}")),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

/// What [`fork_init`] left this process with.
enum Forked {
    /// This is the first process; `child` is PID 1 inside, `read` its status pipe.
    Parent {
        child: nix::unistd::Pid,
        read: std::os::fd::OwnedFd,
    },
    /// Nothing was started.
    Failed(String),
}

/// Starts PID 1 of the new PID namespace as a copy of this process (no second exec of the
/// binary: that was a third of a sandboxed run's set-up), which runs [`init`] and exits with
/// its status; `write` is the child's end of the status pipe.
#[allow(unsafe_code)]
fn fork_init(args: &Args, read: std::os::fd::OwnedFd, write: std::os::fd::OwnedFd) -> Forked {
    // SAFETY: fork(2) in a multi-threaded process leaves the child with only async-signal-safe
    // calls; this process is single-threaded — the kernel refused `unshare(CLONE_NEWUSER)` to
    // any process with more than one thread, and that call succeeded just before — so the
    // child is a whole copy and may run anything.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop(read);
            let code = init(args, Some(std::fs::File::from(write)));
            std::process::exit(i32::from(code));
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(write);
            Forked::Parent { child, read }
        }
        Err(e) => Forked::Failed(format!("cannot start the sandbox's first process: {e}")),
    }
}

/// Reports `why` on stderr, marked as the helper's; the status of a helper that ran nothing.
fn refuse(why: impl std::fmt::Display) -> u8 {
    eprintln!("{STDERR_PREFIX} {why}");
    EXIT_NOT_CONFINED
}

/// `--relay PORT`: serves the listener handed over as stdin, relaying each connection to
/// `127.0.0.1:PORT` in this process's network namespace, until the namespace ends.
fn relay(port: u16) -> ExitCode {
    use std::os::fd::AsFd as _;
    let listener = match nix::unistd::dup(std::io::stdin().as_fd()) {
        Ok(fd) => std::net::TcpListener::from(fd),
        Err(e) => return not_confined(format!("no listener to relay: {e}")),
    };
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    bridge::publish(listener, port);
    ExitCode::SUCCESS
}

/// Ends this process with `signal`, as the program ended.
fn relay_signal(signal: i32, stops: &SigSet) {
    if let Ok(signal) = Signal::try_from(signal) {
        let _ = nix::sys::signal::raise(signal);
        let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(stops), None);
    }
}

fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        set.add(signal);
    }
    set
}

/// Points this process's stdout and stderr at `/dev/null`, so the caller's pipes close when
/// the program's own copies do.
fn let_go_of_output() -> nix::Result<()> {
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)))?;
    nix::unistd::dup2_stdout(&null)?;
    nix::unistd::dup2_stderr(&null)
}

/// PID 1 inside, with `--report`: [`init_run`], then how the run ended on the FIFO (opened
/// first, before the run's root hides it; closed on exec).
fn init(args: &Args, status: Option<std::fs::File>) -> u8 {
    // Without waiting: a FIFO nobody reads any more (the daemon that made it is gone) is no
    // report, and this process goes on to find that no run comes.
    let mut report = args.report.as_ref().and_then(|fifo| {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(fifo)
            .ok()
    });
    let mut signal = None;
    let mut came = false;
    let code = init_run(args, status, report.is_some(), &mut signal, &mut came);
    let holding = args.warm && came;
    if holding {
        // Whatever the run left in the sandbox ends with the program, before its end is
        // told (every process here but this one).
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-1), Signal::SIGKILL);
    }
    if let Some(report) = report.as_mut() {
        let ended = match signal {
            Some(signal) => [1, signal],
            None => [0, code],
        };
        let _ = report.write_all(&ended);
    }
    if holding {
        hold_until_let_go();
    }
    code
}

/// A warm helper's PID 1 after its run: holds the sandbox — its namespaces, whose teardown
/// is work for the kernel — until the caller closes the run pipe (or is gone), so that work
/// is done when the caller is done with the run, not while it hands on the run's end.
fn hold_until_let_go() {
    let mut rest = [0u8; 64];
    loop {
        match std::io::stdin().read(&mut rest) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// PID 1 inside: makes the rest of the sandbox, starts the program, reaps every process
/// until the program ends (the kernel then kills whatever is left in the namespace). With
/// `reporting`, it lets go of the run's output once the program is started; a fatal signal
/// of the program is put in `signal`.
fn init_run(
    args: &Args,
    mut status: Option<std::fs::File>,
    reporting: bool,
    signal_out: &mut Option<u8>,
    came: &mut bool,
) -> u8 {
    // The first process blocks the stop signals to outlive the program; the mask is inherited
    // through exec, and the program must start with none blocked (as PID 1 this process
    // ignores them all the same).
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let Some(root) = &args.root else {
        return refuse("no --root folder to make the run's file system in");
    };
    let system: Vec<PathBuf> = super::SYSTEM_READ_ONLY
        .iter()
        .filter(|p| **p != "/proc" && **p != "/dev")
        .map(PathBuf::from)
        .collect();
    let own = |run: &Args| -> Vec<PathBuf> {
        let mut own: Vec<PathBuf> = run.ro.iter().chain(&run.rw).cloned().collect();
        if let Some(NetArg::Gate(socket)) = &run.net {
            own.push(socket.clone());
        }
        own
    };
    // A warm helper shows the system folders and the run's private home and temporary
    // folder (its own, beside its root: every run it serves has them) now, the run's other
    // folders once it comes; a cold one shows them all at once.
    let private = private_folders(root);
    let visible: Vec<PathBuf> = if args.warm {
        system.into_iter().chain(private.iter().cloned()).collect()
    } else {
        system.into_iter().chain(own(args)).collect()
    };
    let cwd = std::env::current_dir().ok();
    let made = match kernel::NewRoot::begin(root, &visible) {
        Ok(made) => made,
        Err(why) => return refuse(why),
    };
    if args.net != Some(NetArg::Host)
        && let Err(why) = kernel::loopback_up()
    {
        return refuse(why);
    }
    // A warm helper makes the run's system rules ahead too, on the files its root shows.
    let mut rules = None;
    if args.warm {
        rules = match kernel::Rules::system_in(root, &private) {
            Ok(rules) => Some(rules),
            Err(why) => return refuse(why),
        };
    }
    let warm_run;
    let (run, shown_late, cwd) = if args.warm {
        // Everything that does not depend on the run is made: wait for it.
        warm_run = match read_run(args) {
            Ok(run) => run,
            Err(why) => return refuse(why),
        };
        *came = true;
        (&warm_run, own(&warm_run), warm_run.cwd.clone())
    } else {
        (args, Vec::new(), cwd)
    };
    if let Err(why) = made.enter(&shown_late, &run.hide, cwd.as_deref()) {
        return refuse(why);
    }
    let net = run.net.clone().unwrap_or(NetArg::Loopback);
    let listener = match &net {
        NetArg::Gate(socket) => match std::net::TcpListener::bind(("127.0.0.1", PROXY_PORT)) {
            Ok(listener) => Some((listener, socket.clone())),
            Err(e) => return refuse(format!("cannot open the run's proxy port: {e}")),
        },
        _ => None,
    };
    let restricted = match rules {
        Some(rules) => rules.restrict(&run.ro, &run.rw),
        None => kernel::restrict(&run.ro, &run.rw),
    };
    if let Err(why) = restricted {
        return refuse(why);
    }
    if let Some((listener, socket)) = listener
        && let Err(e) = bridge::serve(listener, socket)
    {
        return refuse(format!("cannot bridge the egress gate: {e}"));
    }
    if args.probe {
        println!("{PROBE_OK}");
        return 0;
    }
    let Some(program) = &run.program else {
        return refuse("no program after `--`");
    };
    let mut command = Command::new(program);
    command.args(&run.rest);
    if args.warm {
        // The warm helper's stdin was its run; the program's environment is the run's.
        command.stdin(std::process::Stdio::null()).env_clear();
        for pair in &run.env {
            let bytes = pair.as_encoded_bytes();
            let at = bytes.iter().position(|b| *b == b'=').unwrap_or(bytes.len());
            let (key, value) = bytes.split_at(at);
            command.env(
                std::ffi::OsStr::from_bytes(key),
                std::ffi::OsStr::from_bytes(value.get(1..).unwrap_or_default()),
            );
        }
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            cannot_execute(program, e);
            return EXIT_CANNOT_EXECUTE;
        }
    };
    let main = nix::unistd::Pid::from_raw(child.id() as i32);
    drop(child);
    if reporting {
        let _ = let_go_of_output();
    }
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == main => {
                return u8::try_from(code).unwrap_or(u8::MAX);
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == main => {
                if let Some(status) = status.as_mut() {
                    let _ = status.write_all(&[signal as u8]);
                }
                *signal_out = Some(signal as u8);
                return 128 + signal as u8;
            }
            Err(nix::errno::Errno::ECHILD) => return EXIT_CANNOT_EXECUTE,
            _ => {}
        }
    }
}

/// The run's private `home` and `tmp`, beside its `root` in the folder the daemon made.
fn private_folders(root: &std::path::Path) -> Vec<PathBuf> {
    let Some(scratch) = root.parent() else {
        return Vec::new();
    };
    vec![scratch.join("home"), scratch.join("tmp")]
}

/// The longest run a warm helper reads: the kernel's own limit on a program's arguments and
/// environment together is far below it.
const MAX_RUN_LEN: u32 = 16 << 20;

/// A warm helper's run, read from stdin (see the module doc): its arguments as a cold
/// helper's, with its environment and working folder. Refused when the input ends without a
/// program, or asks for anything this helper was not made for: another network, another
/// root, a published port, or a mode of its own.
fn read_run(warm: &Args) -> Result<Args, String> {
    let mut stdin = std::io::stdin().lock();
    let mut length = [0u8; 4];
    stdin.read_exact(&mut length).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            "no run came (the daemon that started this helper is gone)".to_owned()
        }
        _ => format!("cannot read the run: {e}"),
    })?;
    let length = u32::from_le_bytes(length);
    if length > MAX_RUN_LEN {
        return Err(format!(
            "the run is {length} bytes; a run is at most {MAX_RUN_LEN}"
        ));
    }
    let mut input = vec![0u8; length as usize];
    stdin
        .read_exact(&mut input)
        .map_err(|e| format!("cannot read the run: {e}"))?;
    if input.last() == Some(&0) {
        input.pop();
    }
    if input.is_empty() {
        return Err("the run is empty".into());
    }
    let mut words = input
        .split(|b| *b == 0)
        .map(|w| std::ffi::OsStr::from_bytes(w).to_os_string());
    let run = parse(&mut words)?;
    if run.warm || run.probe || run.init.is_some() || run.relay.is_some() || run.report.is_some() {
        return Err("a run cannot ask for a helper mode".into());
    }
    if run.publish.is_some() {
        return Err("a warm helper cannot publish a port".into());
    }
    if run
        .root
        .as_ref()
        .is_some_and(|root| Some(root) != warm.root.as_ref())
    {
        return Err("the run asks for another root".into());
    }
    let fits = matches!(
        (&warm.net, &run.net),
        (Some(NetArg::Host), Some(NetArg::Host))
            | (
                Some(NetArg::Loopback),
                Some(NetArg::Loopback | NetArg::Gate(_))
            )
    );
    if !fits {
        return Err(format!(
            "the run asks for the network {:?}; this helper was made for {:?}",
            run.net, warm.net
        ));
    }
    if run.program.is_none() {
        return Err("no program after `--`".into());
    }
    // What this helper shows already must be the run's own: its private folders writable.
    let root = warm.root.as_deref().unwrap_or(std::path::Path::new("/"));
    if let Some(missing) = private_folders(root).iter().find(|p| !run.rw.contains(p)) {
        return Err(format!(
            "the run does not take this helper's {} as its own",
            missing.display()
        ));
    }
    Ok(run)
}

/// `--probe`: what this kernel can enforce, one line each (see [`super::Support`]).
fn probe() -> ExitCode {
    let root = std::env::temp_dir().join(format!("outpost-probe-root-{}", std::process::id()));
    let namespaces = kernel::enter_namespaces(true).and_then(|()| {
        std::fs::create_dir_all(&root)
            .map_err(|e| format!("cannot make {}: {e}", root.display()))?;
        let out = Command::new("/proc/self/exe")
            .args([
                SUBCOMMAND, "--init", "-", "--probe", "--net", "loopback", "--root",
            ])
            .arg(&root)
            .current_dir("/")
            .output()
            .map_err(|e| format!("cannot start the sandbox's first process: {e}"))?;
        if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == PROBE_OK {
            Ok(())
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            Err(stderr
                .trim()
                .trim_start_matches(STDERR_PREFIX)
                .trim()
                .to_owned())
        }
    });
    let _ = std::fs::remove_dir(&root);
    match namespaces {
        Ok(()) => println!("namespaces: available"),
        Err(why) => println!("namespaces: unavailable: {why}"),
    }
    match kernel::restrict(&[], &[]) {
        Ok(restricted) => {
            println!(
                "scopes: {}",
                if restricted.scoped {
                    "available"
                } else {
                    "unavailable"
                }
            );
            println!("{PROBE_OK}");
            ExitCode::SUCCESS
        }
        Err(why) => not_confined(why),
    }
}

fn cannot_execute(program: &OsString, err: std::io::Error) -> ExitCode {
    eprintln!(
        "{STDERR_PREFIX} cannot execute {}: {err}",
        PathBuf::from(program).display()
    );
    ExitCode::from(EXIT_CANNOT_EXECUTE)
}

/// Reports `why` on stderr, marked as the helper's, and exits having run nothing.
fn not_confined(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("{STDERR_PREFIX} {why}");
    ExitCode::from(EXIT_NOT_CONFINED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse(&mut list.iter().map(OsString::from))
    }

    #[test]
    fn arguments_read_and_refuse() {
        let a = args(&[
            "--ro", "/a", "--rw", "/b", "--hide", "/b/.ssh", "--net", "gate=/s", "--", "sh", "-c",
            "x",
        ])
        .unwrap();
        assert_eq!(a.ro, [PathBuf::from("/a")]);
        assert_eq!(a.rw, [PathBuf::from("/b")]);
        assert_eq!(a.hide, [PathBuf::from("/b/.ssh")]);
        assert_eq!(a.net, Some(NetArg::Gate("/s".into())));
        assert_eq!(a.program, Some("sh".into()));
        assert_eq!(a.rest.len(), 2);
        assert!(args(&["--ro", "--", "sh"]).unwrap_err().contains("--ro"));
        assert!(args(&["--net", "wifi"]).unwrap_err().contains("wifi"));
        assert!(args(&["--init", "x"]).is_err());
        assert_eq!(args(&["--init", "-"]).unwrap().init, Some(None));
        assert!(args(&["--bogus"]).is_err());
    }
}
