//! The sandbox around a real script (outside its folders, the machine's files are not even
//! there: "No such file or directory"): a real Landlock sandbox, through the `outpost`
//! binary's hidden `confine` subcommand — the executor's own and `outpost run`'s.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use outpost_core::executor::{Executor, Launch, Outcome};
use outpost_core::grant::{CanonicalPath, CredentialDenylist, Mount};
use outpost_core::manifest::Manifest;
use outpost_core::wire::FolderMode;
use outpost_exec_shell::{ShellConfig, ShellExecutor};
use outpost_host::sandbox::SandboxConfig;

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-confine-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn mount(path: &Path, mode: FolderMode) -> Mount {
    Mount {
        path: CanonicalPath::new(path.to_string_lossy().into_owned()).unwrap(),
        mode,
        excluded: Vec::new(),
    }
}

/// A sandboxed launch of `manifest` in `dir` with `mounts`, held to `timeout`, reaching
/// `egress`.
fn sandboxed(
    run_id: &str,
    dir: PathBuf,
    manifest: Manifest,
    mounts: Vec<Mount>,
    timeout: Duration,
    egress: outpost_core::wire::Egress,
) -> Launch {
    Launch {
        run_id: run_id.into(),
        dir,
        entry_bytes: None,
        manifest,
        extra_args: Vec::new(),
        mounts,
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout,
        egress,
        confined: true,
        context: String::new(),
    }
}

fn executor() -> ShellExecutor {
    ShellExecutor::new(ShellConfig {
        sandbox: SandboxConfig {
            helper: Some(env!("CARGO_BIN_EXE_outpost").into()),
            support: None,
            warm: false,
        },
        ..ShellConfig::default()
    })
}

fn run(script: &str, mounts: Vec<Mount>, tag: &str) -> (Outcome, PathBuf) {
    run_on(
        &executor(),
        script,
        mounts,
        tag,
        outpost_core::wire::Egress::None,
    )
}

/// Runs `script` sandboxed on `executor` in a new capability folder named after `tag`, with
/// `mounts` and `egress` and a manifest variable `GREETING=hi`; its outcome and its folder.
fn run_on(
    executor: &ShellExecutor,
    script: &str,
    mounts: Vec<Mount>,
    tag: &str,
    egress: outpost_core::wire::Egress,
) -> (Outcome, PathBuf) {
    let dir = folder(tag);
    std::fs::write(dir.join("run.sh"), script).unwrap();
    let manifest = Manifest::parse(
        "name: boxed\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: true\nenv: {GREETING: hi}\n",
    )
    .unwrap();
    let mut handle = executor
        .launch(sandboxed(
            "boxed",
            dir.clone(),
            manifest,
            mounts,
            Duration::from_secs(20),
            egress,
        ))
        .unwrap();
    loop {
        if let Some(o) = handle.wait(Duration::from_secs(20)).unwrap() {
            return (o, dir);
        }
    }
}

/// A warm helper — made before its run came: namespaces, PID 1, the system part of the root
/// — holds the run as a cold one does: the same folders, variables, working folder and
/// stdin, nothing outside, and its private folder gone after the run. Each network kind's
/// first run starts its own helper and leaves a warm one ready when it is over; the second
/// is served by that one (its `HOME` is the warm helper's private folder).
#[test]
fn a_warm_helper_holds_its_run_as_a_cold_one_does() {
    use outpost_core::wire::Egress;
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_outpost"));
    let warm = ShellExecutor::new(ShellConfig {
        sandbox: SandboxConfig {
            helper: Some(helper.clone()),
            support: None,
            warm: true,
        },
        ..ShellConfig::default()
    });
    let outside = folder("warm-outside");
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    let rw = folder("warm-rw");
    let script = format!(
        "echo pid=$$ home=$HOME cwd=$(pwd) greeting=$GREETING\n\
         cat {outside}/secret.txt || echo read-refused\n\
         echo x > {rw}/w.txt && echo wrote\n\
         echo x > $HOME/h && echo home-writable\n\
         read line || echo stdin-empty\n         echo shadow=$(cat /etc/shadow 2>/dev/null | wc -c)\n",
        outside = outside.display(),
        rw = rw.display()
    );
    for egress in [Egress::All, Egress::None] {
        let tag = format!("warm-{egress:?}").to_lowercase();
        let (first, _) = run_on(
            &warm,
            &script,
            vec![mount(&rw, FolderMode::Rw)],
            &tag,
            egress.clone(),
        );
        let first = String::from_utf8_lossy(&first.stdout).into_owned();
        assert!(!first.contains("outpost-run-warm-"), "{first}");
        common::wait_for("a warm helper", || {
            outpost_host::sandbox::warm_helper_ready(&helper, &egress).then_some(())
        });
        let (o, dir) = run_on(
            &warm,
            &script,
            vec![mount(&rw, FolderMode::Rw)],
            &tag,
            egress.clone(),
        );
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(out.contains("pid=2 "), "{out} / {err}");
        assert!(out.contains("outpost-run-warm-"), "{out}");
        assert!(out.contains(&format!("cwd={} ", dir.display())), "{out}");
        assert!(out.contains("greeting=hi"), "{out}");
        assert!(
            out.contains("read-refused") && !out.contains("top secret"),
            "{out}"
        );
        assert!(
            out.contains("wrote") && out.contains("home-writable"),
            "{out} / {err}"
        );
        assert!(out.contains("stdin-empty"), "{out}");
        assert!(
            out.contains("shadow=0"),
            "the system's secrets are hidden: {out}"
        );
        let home = out
            .split_whitespace()
            .find_map(|w| w.strip_prefix("home="))
            .unwrap()
            .to_owned();
        assert!(
            !Path::new(&home).exists(),
            "the run's private folder {home} outlived it"
        );
        // How the run ended, as its PID 1 reports it: an exit code, or a fatal signal.
        for (script, code, signal) in [("exit 7\n", Some(7), None), ("kill -9 $$\n", None, Some(9))]
        {
            common::wait_for("a warm helper", || {
                outpost_host::sandbox::warm_helper_ready(&helper, &egress).then_some(())
            });
            let (o, _) = run_on(&warm, script, Vec::new(), &tag, egress.clone());
            assert_eq!((o.exit_code, o.signal), (code, signal), "{script}");
        }
    }
    outpost_host::sandbox::retire_warm_helpers();
}

#[test]
fn a_confined_script_cannot_read_outside_its_grants() {
    let outside = folder("outside");
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    let script = format!("cat {}/secret.txt\n", outside.display());
    let (o, _) = run(&script, Vec::new(), "read");
    assert_ne!(o.exit_code, Some(0), "the read must fail");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("top secret"));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("No such file or directory"),
        "{:?}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_confined_script_writes_where_rw_was_granted_and_only_there() {
    let rw = folder("rw");
    let ro = folder("ro");
    std::fs::write(ro.join("input.txt"), "readable").unwrap();
    let script = format!(
        "cat {ro}/input.txt > {rw}/copy.txt && echo wrote\necho nope > {ro}/new.txt || echo ro-refused\necho nope > run-output.txt || echo own-folder-refused\n",
        ro = ro.display(),
        rw = rw.display()
    );
    let (o, dir) = run(
        &script,
        vec![mount(&rw, FolderMode::Rw), mount(&ro, FolderMode::Ro)],
        "write",
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("wrote"),
        "{stdout} / {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(rw.join("copy.txt")).unwrap(),
        "readable"
    );
    assert!(stdout.contains("ro-refused"), "{stdout}");
    assert!(!ro.join("new.txt").exists());
    assert!(
        stdout.contains("own-folder-refused"),
        "the capability folder is read-only: {stdout}"
    );
    assert!(!dir.join("run-output.txt").exists());
}

/// A granted folder holding credential paths: inside the sandbox they are empty (a folder)
/// or read as nothing (a file); where the kernel has no namespaces to hide them with, the
/// run is refused rather than shown them.
#[test]
fn credentials_inside_a_mount_are_hidden_or_the_run_refused() {
    let home = folder("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::write(home.join(".netrc"), "machine x password hunter2").unwrap();
    std::fs::write(home.join("notes.txt"), "public notes").unwrap();
    let mut m = mount(&home, FolderMode::Ro);
    m.excluded = vec![
        CanonicalPath::new(format!("{}/.ssh", home.display())).unwrap(),
        CanonicalPath::new(format!("{}/.netrc", home.display())).unwrap(),
    ];
    let script = format!(
        "cat {h}/notes.txt; echo; ls -A {h}/.ssh | wc -l; cat {h}/.netrc | wc -c; cat {h}/.ssh/id_ed25519\n",
        h = home.display()
    );
    let (o, _) = run(&script, vec![m.clone()], "cred");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.starts_with("public notes\n0\n0\n"),
        "{stdout} / {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!stdout.contains("PRIVATE"), "{stdout}");
    let dir = folder("cred-refused");
    std::fs::write(dir.join("run.sh"), "touch ran\n").unwrap();
    let manifest =
        Manifest::parse("name: boxed\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n")
            .unwrap();
    let no_namespaces = ShellExecutor::new(ShellConfig {
        sandbox: SandboxConfig {
            helper: Some(env!("CARGO_BIN_EXE_outpost").into()),
            support: Some(outpost_host::sandbox::Support {
                namespaces: Err("injected: no user namespaces".into()),
                ..outpost_host::sandbox::Support::full()
            }),
            warm: false,
        },
        ..ShellConfig::default()
    });
    let err = no_namespaces
        .launch(sandboxed(
            "boxed",
            dir.clone(),
            manifest,
            vec![m],
            Duration::from_secs(5),
            outpost_core::wire::Egress::All,
        ))
        .err()
        .unwrap();
    assert_eq!(err.code(), "confinement_unavailable");
    assert!(err.to_string().contains(".ssh"), "{err}");
    assert!(!dir.join("ran").exists());
}

#[test]
fn outpost_run_confines_with_its_own_binary() {
    let outside = folder("run-outside");
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    let dir = folder("run-cap");
    std::fs::write(
        dir.join("manifest.yaml"),
        "name: boxed\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: true\n",
    )
    .unwrap();
    std::fs::write(dir.join("data.txt"), "own data").unwrap();
    std::fs::write(
        dir.join("run.sh"),
        format!(
            "echo mine: $(cat data.txt)\ncat {}/secret.txt\n",
            outside.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_outpost"))
        .arg("run")
        .arg(&dir)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["stdout"], "mine: own data\n", "{v}");
    let stderr = v["stderr"].as_str().unwrap();
    assert!(
        stderr.contains("secret.txt: No such file or directory"),
        "{stderr}"
    );
    assert_ne!(v["exitCode"], 0);
    assert_eq!(out.status.code(), v["exitCode"].as_i64().map(|c| c as i32));
}

/// `outpost run --fs DIR:ro` shows the sandboxed run that folder, read-only, and nothing else.
#[test]
fn outpost_run_shows_the_folders_fs_names() {
    let data = folder("run-fs-data");
    std::fs::write(data.join("note.txt"), "shown").unwrap();
    let dir = folder("run-fs-cap");
    std::fs::write(
        dir.join("manifest.yaml"),
        "name: shown\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("run.sh"),
        format!(
            "cat {d}/note.txt; echo; echo x > {d}/new.txt || echo read-only\n",
            d = data.display()
        ),
    )
    .unwrap();
    let run = |extra: &[String]| {
        let out = Command::new(env!("CARGO_BIN_EXE_outpost"))
            .arg("run")
            .arg(&dir)
            .args(extra)
            .arg("--json")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        v["stdout"].as_str().unwrap().to_owned()
    };
    assert_eq!(
        run(&["--fs".into(), format!("{}:ro", data.display())]),
        "shown\nread-only\n"
    );
    assert!(!data.join("new.txt").exists());
    assert_eq!(
        run(&[]),
        "\nread-only\n",
        "without --fs the folder is not there"
    );
    // `--no-confine`: the owner's own run sees and writes what the owner can.
    assert_eq!(run(&["--no-confine".into()]), "shown\n");
    assert!(data.join("new.txt").exists());
}

#[test]
fn a_binary_without_the_subcommand_is_not_taken_for_the_helper() {
    let dir = folder("not-a-helper");
    std::fs::write(dir.join("run.sh"), "touch ran\n").unwrap();
    let manifest = Manifest::parse(
        "name: boxed\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: true\n",
    )
    .unwrap();
    let truth = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a `true` binary");
    let executor = ShellExecutor::new(ShellConfig {
        sandbox: SandboxConfig {
            helper: Some(truth.into()),
            support: None,
            warm: false,
        },
        ..ShellConfig::default()
    });
    let err = executor
        .launch(sandboxed(
            "boxed",
            dir.clone(),
            manifest,
            Vec::new(),
            Duration::from_secs(5),
            outpost_core::wire::Egress::None,
        ))
        .err()
        .expect("refused");
    assert_eq!(err.code(), "confinement_unavailable");
    assert!(
        err.to_string()
            .contains("does not know the `confine` subcommand"),
        "{err}"
    );
    assert!(!dir.join("ran").exists());
}

#[test]
fn a_folder_flag_without_its_folder_is_the_helper_s_own_failure() {
    for args in [
        &["--probe", "--rw"][..],
        &["--ro"][..],
        &["--ro", "--", "/bin/true"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_outpost"))
            .arg("confine")
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        let flag = args.iter().find(|a| a.starts_with("--r")).unwrap();
        assert_eq!(
            stderr,
            format!("outpost confine: {flag} needs a folder\n"),
            "{args:?}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing was probed");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_outpost"))
        .args(["confine", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("outpost confine: cannot execute"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The daemon's binary replaced on disk (a package upgrade, a rebuild) while it runs: its
/// confined runs still start, through the file the daemon runs from, not the new one.
#[test]
fn a_daemon_whose_binary_was_replaced_still_confines_its_runs() {
    let dir = folder("replaced");
    let binary = dir.join("outpost");
    std::fs::copy(env!("CARGO_BIN_EXE_outpost"), &binary).unwrap();
    let server = common::Server::start(&dir.join("server"), 0);
    let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
    let mut daemon = Command::new(&binary)
        .args(["daemon", "--name", "box", "--host", "tokio", "--home"])
        .arg(dir.join("home"))
        .args(["--join", &server.join])
        .env("OUTPOST_KEYRING", "off")
        .env("OUTPOST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    server.wait_context("box", "the daemon to come online", |c| c["online"] == true);
    // Replaced: the old file is gone, a file that is no outpost stands in its place.
    std::fs::remove_file(&binary).unwrap();
    std::fs::write(&binary, "#!/bin/sh\nexit 0\n").unwrap();
    let outside = folder("replaced-outside");
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    let mut capability = common::shell_capability(
        "boxed",
        &format!("echo confined\ncat {}/secret.txt\n", outside.display()),
    );
    capability["manifest"] = serde_json::json!(
        "name: boxed\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nconfine: true\n"
    );
    let (status, e) = server.api(
        "POST",
        "/v1/executions",
        Some(
            serde_json::json!({"capability": capability, "context": "box", "wait": true,
                                "waitSecs": 60}),
        ),
    );
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    assert_eq!(status, 201, "{e}");
    assert_eq!(e["status"], "exited", "{e}\n{log}");
    assert_eq!(e["stdout"], "confined\n", "{e}\n{log}");
    assert!(
        e["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("No such file or directory"),
        "{e}"
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
}

/// A terminal is sandboxed as a shell run is: its program is PID 2 of its own namespace, sees
/// none of the host's processes, cannot read outside its grants, and its `HOME` is private.
#[test]
fn a_sandboxed_terminal_sees_only_itself() {
    use outpost_exec_pty::{PtyConfig, PtyExecutor};
    let outside = folder("pty-outside");
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    let dir = folder("pty");
    let manifest = Manifest::parse(&format!(
        "name: term\nenvironment: pty\nlifecycle: oneshot\nentry: sh\nargs: [\"-c\", \"echo pid=$$; ls /proc | grep -c '^[0-9]'; cat {}/secret.txt; echo home=$HOME\"]\n",
        outside.display()
    ))
    .unwrap();
    let executor = PtyExecutor::new(PtyConfig {
        sandbox: SandboxConfig {
            helper: Some(env!("CARGO_BIN_EXE_outpost").into()),
            support: None,
            warm: false,
        },
        ..PtyConfig::default()
    });
    let mut handle = executor
        .launch(sandboxed(
            "term",
            dir,
            manifest,
            Vec::new(),
            Duration::from_secs(20),
            outpost_core::wire::Egress::None,
        ))
        .unwrap();
    let o = loop {
        if let Some(o) = handle.wait(Duration::from_secs(20)).unwrap() {
            break o;
        }
    };
    let screen = String::from_utf8_lossy(&o.stdout).replace('\r', "");
    let lines: Vec<&str> = screen.lines().collect();
    assert_eq!(lines.first(), Some(&"pid=2"), "{screen}");
    // PID 1 (ours), the shell, `ls` and `grep`: nothing of the host.
    let seen: usize = lines[1].trim().parse().unwrap_or(usize::MAX);
    assert!(seen <= 4, "{screen}");
    assert!(
        screen.contains("secret.txt: No such file or directory"),
        "{screen}"
    );
    assert!(!screen.contains("top secret"), "{screen}");
    let home = lines.iter().find_map(|l| l.strip_prefix("home=")).unwrap();
    assert!(
        home.contains("outpost-run-term-") && home.ends_with("/home"),
        "{screen}"
    );
    assert!(
        Path::new(home).exists(),
        "the private home lives as long as the run"
    );
    drop(handle);
    assert!(
        !Path::new(home).exists(),
        "the private home is gone with the run"
    );
}

/// A sandboxed service's port (egress `none`: its own network namespace) is published on the
/// host's loopback and relayed inside, so the machine reaches it as it would an unsandboxed one.
#[test]
fn a_sandboxed_service_is_reached_on_its_port() {
    use std::io::{Read as _, Write as _};
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let dir = folder("service");
    std::fs::write(dir.join("index.html"), "served from the sandbox").unwrap();
    std::fs::write(
        dir.join("run.sh"),
        "exec /usr/bin/python3 -m http.server \"$PORT\" --bind 127.0.0.1\n",
    )
    .unwrap();
    let manifest = Manifest::parse(&format!(
        "name: web\nenvironment: shell\nlifecycle: persistent\nentry: run.sh\nport: {port}\n"
    ))
    .unwrap();
    let mut handle = executor()
        .launch(sandboxed(
            "web",
            dir,
            manifest,
            Vec::new(),
            Duration::from_secs(60),
            outpost_core::wire::Egress::None,
        ))
        .unwrap();
    // The service is starting: its port answers once python listens.
    let body = common::wait_for("the sandboxed service to answer on its port", || {
        let answer = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")?;
            let mut answer = String::new();
            s.read_to_string(&mut answer)?;
            Ok(answer)
        });
        answer.ok().filter(|a| a.contains("200 OK"))
    });
    assert!(body.ends_with("served from the sandbox"), "{body}");
    handle.cancel().unwrap();
}
