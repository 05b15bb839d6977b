//! `outpost demo`: the whole path on one machine. A server on a free loopback port with a
//! temporary state folder, a daemon joined to it, and four runs — a shell capability on the
//! machine, a wasm capability, a container where a Docker engine answers (said plainly where
//! not), and a busy machine whose chain falls back to `cloud` — then a table, a clean
//! shutdown, and the temporary folders removed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outpost_core::api::requests::{ChainRequest, ExecuteRequest};
use outpost_core::api::{ChainShown, Context, Execution};
use outpost_core::grant::LocalPolicy;
use outpost_core::join::Join;
use outpost_core::routing::RanOnKind;
use outpost_core::server::ExecutionStatus;
use outpost_core::wire::Environment;
use outpost_daemon::{DaemonOptions, HostKind, OwnedHost, ServerChoice, StopSignal, run_daemon};
use outpost_host::{HOME_VAR, OwnerFolders};
use outpost_server::{BlockingServer, ServeConfig};
use serde_json::{Value, json};

use crate::client::api::Api;
use crate::executors;

/// The daemon's name in the demo.
const MACHINE: &str = "demo-box";
/// The image the container step makes from the static busybox (nothing is pulled).
const IMAGE: &str = "outpost-demo/busybox:latest";
/// Where Debian's `busybox-static` puts the static busybox.
const BUSYBOX: &str = "/bin/busybox";

/// A WASI module that prints one line.
const HELLO_WAT: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "hello from a wasm module\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 100))
    (i32.store (i32.const 4) (i32.const 25))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
"#;

/// One row of the table.
struct Row {
    capability: &'static str,
    environment: Environment,
    /// The execution as the server answered, or why the step was skipped.
    outcome: Result<Execution, String>,
    total: Duration,
}

/// Prints one progress line.
fn step(json: bool, n: usize, text: &str) {
    if !json {
        eprintln!("[{n}/6] {text}");
    }
}

/// A capability folder with `files`.
fn capability(root: &Path, name: &str, files: &[(&str, &str)]) -> anyhow::Result<PathBuf> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    for (path, text) in files {
        std::fs::write(dir.join(path), text)?;
    }
    Ok(dir)
}

/// A request to run the folder `dir` inline, on `context` or the caller's chain.
fn request(dir: &Path, context: Option<&str>) -> anyhow::Result<ExecuteRequest> {
    let (source, _) = outpost_host::pack_capability(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut request = ExecuteRequest::new(source);
    request.context = context.map(str::to_owned);
    Ok(request)
}

/// Runs `dir` on `context` (the chain when none) and waits for its end.
fn execute(api: &Api, dir: &Path, context: Option<&str>) -> anyhow::Result<(Execution, Duration)> {
    let mut body = request(dir, context)?;
    body.wait = Some(true);
    body.wait_secs = Some(120);
    let started = Instant::now();
    let execution = api.post("/v1/executions", &body)?;
    Ok((execution, started.elapsed()))
}

/// Makes the container step's image from the static busybox, or says why it cannot run.
fn container_ready() -> Result<(), String> {
    let docker = outpost_exec_docker::DockerExecutor::new(Default::default())
        .map_err(|e| format!("no Docker client: {e}"))?;
    let client = docker
        .client()
        .map_err(|e| format!("no Docker engine answers ({e})"))?;
    if !Path::new(BUSYBOX).exists() {
        return Err(format!(
            "no static busybox at {BUSYBOX} to make a local image from (apt-get install busybox-static)"
        ));
    }
    docker
        .block_on(outpost_exec_docker::ensure_busybox_image(
            &client,
            IMAGE,
            Path::new(BUSYBOX),
        ))
        .map(|_| ())
        .map_err(|e| format!("the image {IMAGE} cannot be made: {e}"))
}

pub fn demo(json: bool, keep: bool) -> anyhow::Result<ExitCode> {
    let root = std::env::temp_dir().join(format!("outpost-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let result = run_demo(&root, json);
    // The sandbox helpers kept warm for the next run, and their folders.
    outpost_host::sandbox::retire_warm_helpers();
    if keep {
        eprintln!("outpost: the demo's folders stay in {}", root.display());
    } else {
        let removed = std::fs::remove_dir_all(&root).is_ok() || !root.exists();
        if !json {
            eprintln!(
                "outpost: {} the demo's folders ({}); the image {IMAGE} stays in the Docker engine for the next run (docker rmi {IMAGE} removes it)",
                if removed {
                    "removed"
                } else {
                    "could not remove"
                },
                root.display()
            );
        }
    }
    result
}

fn run_demo(root: &Path, json: bool) -> anyhow::Result<ExitCode> {
    step(json, 1, "starting a server on a free loopback port");
    let state = root.join("server");
    let cloud = [Environment::Wasm];
    let server = BlockingServer::start(
        ServeConfig {
            listen: "127.0.0.1:0".parse()?,
            state_dir: state.clone(),
            tls: None,
            cloud: cloud.to_vec(),
            public_url: None,
            node_url: None,
            rate_limits: Default::default(),
            terminal_idle: ServeConfig::DEFAULT_TERMINAL_IDLE,
            heartbeat: ServeConfig::DEFAULT_HEARTBEAT,
            limits: Default::default(),
            xterm_dir: None,
            database: outpost_server::Database::Sqlite,
        },
        executors::registry(&cloud, Some(state.join("cache/wasm")), true),
        2,
    )?;
    let running = server.running();
    let api = Api::new(&running.url, &running.admin_token, None, &[])?;
    if !json {
        eprintln!("      listening on {}", running.url);
    }

    step(
        json,
        2,
        &format!("joining a daemon named {MACHINE} (one run at a time)"),
    );
    let home = root.join("home");
    std::fs::create_dir_all(&home)?;
    let folders = OwnerFolders::from_vars(|name| {
        if name == HOME_VAR {
            Some(home.clone().into_os_string())
        } else {
            std::env::var_os(name)
        }
    })
    .map_err(|e| anyhow::anyhow!("the daemon's folders: {e}"))?;
    let options = DaemonOptions {
        server: ServerChoice::Join(Join::parse(&running.join)?),
        name: MACHINE.into(),
        folders: folders.clone(),
        max_concurrent: 1,
        ca_file: None,
        local: LocalPolicy::default(),
        features: Vec::new(),
        seed: 0,
        passphrase: None,
        launcher: outpost_daemon::Launcher::Terminal,
    };
    let registry = executors::registry(
        &executors::DAEMON_ENVIRONMENTS,
        Some(folders.wasm_cache()),
        true,
    );
    let host = OwnedHost::new(HostKind::Tokio)?;
    let stop = StopSignal::new();
    let daemon = {
        let (host, stop) = (host.host.clone(), stop.clone());
        std::thread::spawn(move || run_daemon(options, registry, host, stop))
    };
    let started = Instant::now();
    loop {
        match api.get::<Context>(&format!("/v1/execution-contexts/{MACHINE}")) {
            Ok(ctx) if ctx.online => break,
            _ if daemon.is_finished() => {
                let outcome = daemon
                    .join()
                    .map_err(|_| anyhow::anyhow!("the daemon panicked"))?;
                anyhow::bail!("the daemon stopped before it came online: {outcome:?}");
            }
            _ if started.elapsed() > Duration::from_secs(30) => {
                anyhow::bail!("the daemon did not come online within 30 s")
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }

    let caps = root.join("capabilities");
    let mut rows = Vec::new();

    step(json, 3, &format!("a shell capability on {MACHINE}"));
    let dir = capability(
        &caps,
        "hello-shell",
        &[
            (
                "manifest.yaml",
                "name: hello-shell\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
            ),
            ("run.sh", "echo \"hello from $(uname -n), pid $$\"\n"),
        ],
    )?;
    let (execution, total) = execute(&api, &dir, Some(MACHINE))?;
    rows.push(Row {
        capability: "hello-shell",
        environment: Environment::Shell,
        outcome: Ok(execution),
        total,
    });

    step(json, 4, &format!("a wasm capability on {MACHINE}"));
    let dir = capability(
        &caps,
        "hello-wasm",
        &[
            (
                "manifest.yaml",
                "name: hello-wasm\nenvironment: wasm\nlifecycle: oneshot\nentry: module.wat\n",
            ),
            ("module.wat", HELLO_WAT),
        ],
    )?;
    let (execution, total) = execute(&api, &dir, Some(MACHINE))?;
    rows.push(Row {
        capability: "hello-wasm",
        environment: Environment::Wasm,
        outcome: Ok(execution),
        total,
    });

    step(json, 5, &format!("a container on {MACHINE}"));
    let outcome = match container_ready() {
        Ok(()) => {
            let manifest = format!(
                "name: hello-container\nenvironment: docker\nlifecycle: oneshot\ndocker_image: {IMAGE}\nentry: sh\nargs: [\"-c\", \"echo hello from a container\"]\n"
            );
            let dir = capability(&caps, "hello-container", &[("manifest.yaml", &manifest)])?;
            let (execution, total) = execute(&api, &dir, Some(MACHINE))?;
            rows.push(Row {
                capability: "hello-container",
                environment: Environment::Docker,
                outcome: Ok(execution),
                total,
            });
            None
        }
        Err(reason) => Some(reason),
    };
    if let Some(reason) = outcome {
        if !json {
            eprintln!("      skipped: {reason}");
        }
        rows.push(Row {
            capability: "hello-container",
            environment: Environment::Docker,
            outcome: Err(reason),
            total: Duration::ZERO,
        });
    }

    step(
        json,
        6,
        &format!("{MACHINE} busy: its chain {MACHINE},cloud falls back to cloud"),
    );
    let chain = vec![MACHINE.to_owned(), "cloud".to_owned()];
    let _: ChainShown = api.put("/v1/chain", &ChainRequest { chain })?;
    let blocker = capability(
        &caps,
        "busy",
        &[
            (
                "manifest.yaml",
                "name: busy\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
            ),
            // Busy until the demo cancels it: a sandboxed run sees none of the demo's folders,
            // so it is told to end by a cancel, not a file.
            ("run.sh", "while true; do sleep 0.05; done\n"),
        ],
    )?;
    let held: Execution = api.post("/v1/executions", &request(&blocker, Some(MACHINE))?)?;
    let held_id = held.execution_id;
    let started = Instant::now();
    while api
        .get::<Context>(&format!("/v1/execution-contexts/{MACHINE}"))?
        .slots_used
        != 1
    {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "{MACHINE} never became busy"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = caps.join("hello-wasm");
    let (execution, total) = execute(&api, &dir, None)?;
    rows.push(Row {
        capability: "hello-wasm (chain)",
        environment: Environment::Wasm,
        outcome: Ok(execution),
        total,
    });
    let _: Result<Execution, _> = api.post(
        &format!("/v1/executions/{held_id}/cancel"),
        &serde_json::json!({}),
    );
    let _ = api.get::<Execution>(&format!("/v1/executions/{held_id}?waitSecs=30"));

    stop.raise();
    let stopped = daemon
        .join()
        .map_err(|_| anyhow::anyhow!("the daemon panicked"))?;
    server.shutdown();
    drop(host);

    let ok = match print(&rows, json) {
        // Nobody reads the table: end quietly, the folders still removed by the caller.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(crate::stdout::is_broken_pipe) =>
        {
            return Ok(ExitCode::from(crate::stdout::BROKEN_PIPE));
        }
        printed => printed?,
    };
    if let Err(e) = stopped {
        anyhow::bail!("the daemon stopped with an error: {e}");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints the table (or JSON); whether every run that was not skipped exited 0.
fn print(rows: &[Row], json: bool) -> anyhow::Result<bool> {
    let ok = rows.iter().all(|r| match &r.outcome {
        Ok(e) => e.status == ExecutionStatus::Exited && e.exit_code == Some(0),
        Err(_) => true,
    });
    let mut out = std::io::stdout().lock();
    if json {
        let steps: Vec<Value> = rows
            .iter()
            .map(|r| match &r.outcome {
                Ok(e) => json!({
                    "capability": r.capability,
                    "environment": r.environment.as_str(),
                    "status": e.status,
                    "exitCode": e.exit_code,
                    "stdout": e.stdout,
                    "ranOn": e.ran_on,
                    "ranOnText": e.ran_on_text,
                    "timing": e.timing,
                    "totalMs": r.total.as_millis() as u64,
                }),
                Err(reason) => json!({
                    "capability": r.capability,
                    "environment": r.environment.as_str(),
                    "status": "skipped",
                    "reason": reason,
                }),
            })
            .collect();
        writeln!(out, "{}", json!({"ok": ok, "steps": steps}))?;
        return Ok(ok);
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<20} {:<8} {:<26} {:<9} {:>9} {:>9}  OUTPUT",
        "CAPABILITY", "ENV", "RAN ON", "STATUS", "EXECUTE", "TOTAL"
    )?;
    for r in rows {
        match &r.outcome {
            Ok(e) => {
                let ran_on = match &e.ran_on {
                    Some(r) if r.kind == RanOnKind::Cloud && r.fell_back_to_cloud => {
                        "cloud (fell back)".to_owned()
                    }
                    Some(r) if r.kind == RanOnKind::Cloud => "cloud".to_owned(),
                    Some(r) => format!("{} (your machine)", r.name),
                    None => "? (your machine)".to_owned(),
                };
                writeln!(
                    out,
                    "{:<20} {:<8} {:<26} {:<9} {:>6} ms {:>6} ms  {}",
                    r.capability,
                    r.environment.as_str(),
                    ran_on,
                    e.status.as_str(),
                    e.timing.as_ref().map_or(0, |t| t.execute_ms),
                    r.total.as_millis(),
                    e.stdout.as_deref().unwrap_or("").trim_end(),
                )?;
            }
            Err(reason) => writeln!(
                out,
                "{:<20} {:<8} {:<26} {:<9} {:>9} {:>9}  {reason}",
                r.capability,
                r.environment.as_str(),
                "-",
                "skipped",
                "-",
                "-"
            )?,
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "{}",
        if ok {
            "Every run went where the routing said and exited 0. The server and the daemon stopped cleanly."
        } else {
            "Some run did not exit 0: see the table."
        }
    )?;
    Ok(ok)
}
