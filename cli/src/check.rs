//! `outpost check --server URL [--json]`: an unattended end-to-end check of a real deployment.
//! With an admin's token it makes a throwaway machine and drives it through the system:
//!
//! - the server answers, and makes a one-use join token;
//! - a daemon started in a temporary folder (its home and every `XDG_*` folder there: never
//!   the user's own config or contexts; the OS keyring off) comes online;
//! - host commands are turned on, from the machine;
//! - a run asks for a foreground command; another starts a background job, polls it and
//!   kills it; the audit has their `command_started` and `command_finished` rows;
//! - a terminal is opened, its viewer joins, and it is closed;
//! - the context is revoked (its daemon stops for good) and deleted.
//!
//! Each step is printed with its time as it ends; the first failure stops the check, names the
//! step and exits 1. Whatever was made is removed on the way out — after a failure and on
//! Ctrl-C or SIGTERM too: an unused join token revoked, the context revoked (its daemon given
//! [`STOP_GRACE`] to stop its runs and host commands, then killed) and deleted, the folder
//! removed. The terminal's recording and the runs' records stay on the server, as every
//! deleted context's do. This module decides nothing about the server; it only asks it, as any client.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use outpost_adapters::tls::ServerUrl;
use serde::Serialize;
use serde_json::{Value, json};

use crate::client::api::Api;

/// How long a step that waits for the machine waits at most.
const PATIENCE: Duration = Duration::from_secs(60);

/// One step's outcome.
#[derive(Debug, Serialize)]
struct StepResult {
    step: &'static str,
    ok: bool,
    ms: u64,
    detail: String,
}

/// What `--json` prints at the end.
#[derive(Debug, Serialize)]
struct Report {
    ok: bool,
    server: String,
    context: String,
    steps: Vec<StepResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<&'static str>,
}

/// What the check made, to remove on the way out (once).
struct Made {
    api: Api,
    dir: PathBuf,
    /// The one-use join token, until a daemon used it.
    join_token: Option<String>,
    context: Option<String>,
    daemon: Option<Child>,
    done: bool,
}

/// How long a revoked daemon is given to stop its runs and host commands and exit before it
/// is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

impl Made {
    /// Revokes and deletes the context, kills the daemon, removes the folder.
    fn remove(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(id) = self.join_token.take() {
            let _ = self.api.delete::<Value>(&format!("/v1/join-tokens/{id}"));
        }
        if let Some(name) = &self.context {
            // Revoked, the daemon stops its runs and kills its host commands, then exits.
            let _ = self
                .api
                .post::<_, Value>(&format!("/v1/execution-contexts/{name}/revoke"), &json!({}));
        }
        if let Some(mut daemon) = self.daemon.take() {
            let deadline = Instant::now() + STOP_GRACE;
            while matches!(daemon.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
        if let Some(name) = self.context.take() {
            let _ = self
                .api
                .delete::<Value>(&format!("/v1/execution-contexts/{name}"));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The check in progress.
struct Check {
    api: Api,
    name: String,
    home: PathBuf,
    made: Arc<Mutex<Made>>,
    json: bool,
    steps: Vec<StepResult>,
}

/// `outpost check`.
pub fn check(server: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let api = Api::from_env(server)?;
    // A random throwaway name: two checks at once, on one machine or several, get two names.
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).context("drawing a name for the throwaway context")?;
    let name = format!("outpost-check-{:08x}", u32::from_be_bytes(random));
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    let made = Arc::new(Mutex::new(Made {
        api: api.clone(),
        dir: dir.clone(),
        join_token: None,
        context: None,
        daemon: None,
        done: false,
    }));
    on_interrupt(made.clone())?;
    let mut check = Check {
        api: api.clone(),
        name: name.clone(),
        home: dir.join("home"),
        made: made.clone(),
        json,
        steps: Vec::new(),
    };
    if !json {
        println!("outpost check of {} (context {name})", api.base());
    }
    let failed = check.run();
    made.lock().unwrap_or_else(|e| e.into_inner()).remove();
    if json {
        let report = Report {
            ok: failed.is_none(),
            server: api.base().to_owned(),
            context: name,
            steps: check.steps,
            failed,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if let Some(step) = failed {
        println!("outpost check FAILED at \"{step}\" (what it made was removed)");
    } else {
        println!("outpost check passed: every step, and what it made was removed");
    }
    Ok(if failed.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// On SIGINT, SIGTERM or SIGHUP: remove what was made, then exit 130.
fn on_interrupt(made: Arc<Mutex<Made>>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("watching for Ctrl-C")?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!("\noutpost check: interrupted; removing what it made");
            // The lock is held until the exit: the step the interrupt cut short must not get
            // to report its failure and exit 1 first.
            let mut made = made.lock().unwrap_or_else(|e| e.into_inner());
            made.remove();
            std::process::exit(130);
        }
    });
    Ok(())
}

impl Check {
    /// Runs every step in order; the first that fails, if one does.
    fn run(&mut self) -> Option<&'static str> {
        self.steps_in_order().err()
    }

    fn steps_in_order(&mut self) -> Result<(), &'static str> {
        self.step("server answers", Check::server_answers)?;
        let join = self.step("join token", Check::make_join)?;
        self.step("daemon online", |c| c.start_daemon(&join))?;
        self.step("host commands on", Check::commands_on)?;
        self.step("foreground command", Check::foreground_command)?;
        self.step("background job", Check::background_job)?;
        self.step("audit rows", Check::audit_rows)?;
        self.step("terminal", Check::terminal)?;
        self.step("revoke", Check::revoke)?;
        self.step("delete", Check::delete)?;
        Ok(())
    }

    /// Runs one step, prints how it went and keeps its result: what it made for the next
    /// steps, or its name when it failed.
    fn step<T: Default>(
        &mut self,
        step: &'static str,
        run: impl FnOnce(&mut Check) -> anyhow::Result<(String, T)>,
    ) -> Result<T, &'static str> {
        // A progress line where a person watches; a pipe gets only the results.
        if !self.json && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprint!("  {step} …\r");
        }
        let started = Instant::now();
        let outcome = run(self);
        let ms = started.elapsed().as_millis() as u64;
        let (ok, detail, made) = match outcome {
            Ok((detail, made)) => (true, detail, made),
            Err(e) => (false, format!("{e:#}"), T::default()),
        };
        if !self.json {
            let mark = if ok { "ok  " } else { "FAIL" };
            println!("{mark} {step:<20} {:>7.2} s  {detail}", ms as f64 / 1000.0);
            let _ = std::io::stdout().flush();
        }
        self.steps.push(StepResult {
            step,
            ok,
            ms,
            detail,
        });
        if ok { Ok(made) } else { Err(step) }
    }

    fn server_answers(&mut self) -> anyhow::Result<(String, ())> {
        let health: Value = self.api.get("/healthz")?;
        anyhow::ensure!(health["ok"] == true, "/healthz answered {health}");
        Ok((format!("{} answers", self.api.base()), ()))
    }

    fn make_join(&mut self) -> anyhow::Result<(String, String)> {
        let token: Value = self
            .api
            .post(
                "/v1/join-tokens",
                &json!({"ttlSecs": 600, "uses": 1, "namePrefix": "outpost-check-"}),
            )
            .context("making a one-use join token (outpost check needs an admin's token)")?;
        let join = token["join"]
            .as_str()
            .context("the join token came without its join")?
            .to_owned();
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join_token = token["id"].as_str().map(str::to_owned);
        Ok((
            format!("{} (one use, 10 min)", token["id"].as_str().unwrap_or("?")),
            join,
        ))
    }

    fn start_daemon(&mut self, join: &str) -> anyhow::Result<(String, ())> {
        let dir = self.home.parent().unwrap_or(Path::new(".")).to_path_buf();
        std::fs::create_dir_all(self.home.join("config"))?;
        // The check's runs ask for host commands through `outpost`, which the sandbox may not
        // show them: the owner of this throwaway machine lets its operator opt out.
        std::fs::write(
            self.home.join("config/policy.json"),
            r#"{"confinement": "operator-may-opt-out"}"#,
        )?;
        let log = std::fs::File::create(dir.join("daemon.log"))?;
        let daemon = self
            .outpost()
            .args(["daemon", "--name", &self.name, "--home"])
            .arg(&self.home)
            .env("OUTPOST_JOIN", join)
            .env("OUTPOST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting outpost daemon")?;
        {
            let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
            made.daemon = Some(daemon);
            made.context = Some(self.name.clone());
        }
        let path = format!("/v1/execution-contexts/{}", self.name);
        let context = self.wait("the daemon to come online", || {
            let context: Value = self.api.get(&path).ok()?;
            (context["online"] == true).then_some(context)
        })?;
        // Used: a one-use token registers nothing more, and is no longer the check's to revoke.
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join_token = None;
        let detail = format!(
            "{} online, daemon {}",
            context["id"].as_str().unwrap_or("?"),
            context["daemonVersion"].as_str().unwrap_or("?")
        );
        Ok((detail, ()))
    }

    fn commands_on(&mut self) -> anyhow::Result<(String, ())> {
        let out = self
            .outpost()
            .args(["context", "commands", "on", "--home"])
            .arg(&self.home)
            .output()
            .context("running outpost context commands on")?;
        anyhow::ensure!(
            out.status.success(),
            "outpost context commands on: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(("the owner's switch and the server's".into(), ()))
    }

    fn foreground_command(&mut self) -> anyhow::Result<(String, ())> {
        let script = format!(
            "{} command run -- echo outpost-check-foreground\necho \"rc=$?\"\n",
            quoted(&self.binary())
        );
        let run = self.execute("outpost-check-foreground", &script)?;
        let stdout = run["stdout"].as_str().unwrap_or("");
        anyhow::ensure!(
            stdout.contains("outpost-check-foreground") && stdout.contains("rc=0"),
            "the run printed {stdout:?}, stderr {:?}",
            run["stderr"].as_str().unwrap_or("")
        );
        let id = run["executionId"].as_str().unwrap_or("?");
        Ok((format!("{id} printed it"), ()))
    }

    fn background_job(&mut self) -> anyhow::Result<(String, ())> {
        let script = format!("B={}\n", quoted(&self.binary()))
            + r#"JOB=$("$B" command start -- sh -c 'echo outpost-check-job; exec sleep 300') || exit 3
i=0
until "$B" command poll "$JOB" 2>/dev/null | grep -q outpost-check-job; do
  i=$((i+1)); [ "$i" -gt 400 ] && exit 4; sleep 0.05
done
echo "polled=$JOB"
"$B" command kill "$JOB" 2>&1
echo "kill_rc=$?"
"#;
        let run = self.execute("outpost-check-job", &script)?;
        let stdout = run["stdout"].as_str().unwrap_or("");
        anyhow::ensure!(
            run["exitCode"] == 0 && stdout.contains("polled=") && stdout.contains("kill_rc=0"),
            "the run ended {} with {stdout:?}, stderr {:?}",
            run["status"],
            run["stderr"].as_str().unwrap_or("")
        );
        Ok(("started, polled, killed".into(), ()))
    }

    fn audit_rows(&mut self) -> anyhow::Result<(String, ())> {
        let log: Value = self.api.get("/v1/audit?limit=500")?;
        let ours = |kind: &str| {
            log["events"].as_array().map_or(0, |events| {
                events
                    .iter()
                    .filter(|e| e["kind"] == kind && e["contextName"] == self.name.as_str())
                    .count()
            })
        };
        let (started, finished) = (ours("command_started"), ours("command_finished"));
        anyhow::ensure!(
            started >= 2 && finished >= 2,
            "{started} command_started and {finished} command_finished rows for {} (2 each expected)",
            self.name
        );
        let detail = format!("{started} command_started, {finished} command_finished");
        Ok((detail, ()))
    }

    fn terminal(&mut self) -> anyhow::Result<(String, ())> {
        let opened: Value = self.api.post(
            &format!("/v1/execution-contexts/{}/terminals", self.name),
            &json!({"cols": 80, "rows": 24}),
        )?;
        let terminal = opened["terminalId"].as_str().context("no terminal id")?;
        let ticket = opened["ticket"].as_str().context("no ticket")?;
        let url = ServerUrl::parse(self.api.base()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let ws_url = url.ws_url(&format!("/v1/terminals/{terminal}/connect?ticket={ticket}"));
        let (tcp, stream) = crate::attach::connect(&url, &self.api.trust()?)?;
        let (mut socket, _) = tungstenite::client::client(ws_url.as_str(), stream)
            .map_err(|e| anyhow::anyhow!("opening the terminal's WebSocket: {e}"))?;
        // After the handshakes (TLS and WebSocket), which must not be cut short by it.
        tcp.set_read_timeout(Some(Duration::from_millis(200)))?;
        let deadline = Instant::now() + PATIENCE;
        until_message(&mut socket, deadline, "live", |kind| kind == "live")?;
        let close = serde_json::to_string(&outpost_core::terminal::ViewerControl::Close)?;
        socket
            .send(tungstenite::Message::Text(close.into()))
            .context("asking the terminal to close")?;
        until_message(&mut socket, deadline, "its end", |kind| {
            kind == "closed" || kind == "exit"
        })?;
        Ok((format!("{terminal} opened, joined and closed"), ()))
    }

    fn revoke(&mut self) -> anyhow::Result<(String, ())> {
        let _: Value = self.api.post(
            &format!("/v1/execution-contexts/{}/revoke", self.name),
            &json!({}),
        )?;
        let made = self.made.clone();
        let code = self.wait("the daemon to stop for good", || {
            let mut made = made.lock().unwrap_or_else(|e| e.into_inner());
            let daemon = made.daemon.as_mut()?;
            daemon.try_wait().ok().flatten()
        })?;
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .daemon
            .take();
        Ok((format!("the daemon exited ({code})"), ()))
    }

    fn delete(&mut self) -> anyhow::Result<(String, ())> {
        let _: Value = self
            .api
            .delete(&format!("/v1/execution-contexts/{}", self.name))?;
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .context
            .take();
        Ok((format!("{} deleted", self.name), ()))
    }

    /// Runs `script` on the check's context and waits for its end.
    fn execute(&mut self, name: &str, script: &str) -> anyhow::Result<Value> {
        let content = outpost_core::b64::encode(script.as_bytes());
        let manifest = format!(
            "name: {name}\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: false\nlimits:\n  timeout_ms: 60000\n"
        );
        let body = json!({
            "capability": {"kind": "inline", "manifest": manifest,
                "files": [{"path": "run.sh", "contentB64": content}]},
            "context": self.name,
            "wait": true,
            "waitSecs": 60,
        });
        let run: Value = self.api.post("/v1/executions", &body)?;
        let status = run["status"].as_str().unwrap_or("");
        if status == "pending" || status == "running" {
            bail!("the run did not end within 60 s ({status})");
        }
        Ok(run)
    }

    /// `outpost` (this binary) with the check's folders for every `XDG_*` and the keyring off.
    fn outpost(&self) -> Command {
        let dir = self.home.parent().unwrap_or(Path::new("."));
        let mut command = Command::new(self.binary());
        for (var, sub) in [
            ("XDG_CONFIG_HOME", "xdg/config"),
            ("XDG_DATA_HOME", "xdg/data"),
            ("XDG_STATE_HOME", "xdg/state"),
            ("XDG_CACHE_HOME", "xdg/cache"),
        ] {
            command.env(var, dir.join(sub));
        }
        command
            .env("OUTPOST_KEYRING", "off")
            .env_remove("OUTPOST_HOME");
        command
    }

    /// This binary's path (what the check's runs call `outpost command` through).
    fn binary(&self) -> String {
        std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "outpost".into())
    }

    /// Polls `check` every 100 ms for at most [`PATIENCE`].
    fn wait<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = check() {
                return Ok(found);
            }
            if Instant::now() >= deadline {
                bail!(
                    "timed out after {} s waiting for {what}",
                    PATIENCE.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Reads `socket` until a text message whose `type` `wanted` accepts, or the socket closes
/// (an end too); fails past `deadline`.
fn until_message<S: std::io::Read + std::io::Write>(
    socket: &mut tungstenite::WebSocket<S>,
    deadline: Instant,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    loop {
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        match socket.read() {
            Ok(tungstenite::Message::Text(text)) => {
                let message: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if wanted(message["type"].as_str().unwrap_or("")) {
                    return Ok(());
                }
            }
            Ok(tungstenite::Message::Close(_)) if what == "its end" => return Ok(()),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) if what == "its end" => return Ok(()),
            Err(e) => bail!("the terminal's socket ended before {what}: {e}"),
        }
    }
}

/// `text` single-quoted for `sh`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
