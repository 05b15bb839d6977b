//! Host commands with real processes: both switches, ownership, background jobs, kills and the
//! audit trail.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

mod common;

use common::process_alive;
use outpost_core::grant::{CanonicalPath, CredentialDenylist};
use outpost_host::{AuditEvent, CommandRequest, CommandsConfig, HostCommands, JobStatus};

fn commands() -> HostCommands {
    let inherited: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), "/home/ada".into()),
        ("OUTPOST_CONTEXT_KEY_PASSPHRASE".into(), "hunter2".into()),
        ("OUTPOST_TOKEN".into(), "secret".into()),
    ];
    let c = HostCommands::new(
        CommandsConfig::default(),
        CredentialDenylist::empty(),
        inherited,
    );
    c.set_local_opt_in(true);
    c.set_granted(true);
    c
}

fn request(requester: &str, argv: &[&str]) -> CommandRequest {
    CommandRequest {
        requester: requester.into(),
        run_id: "run-9".into(),
        command_id: "cmd_9".into(),
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        cwd: Some(std::env::temp_dir()),
        env: BTreeMap::new(),
        timeout: Duration::from_secs(10),
        sandbox: None,
    }
}

#[test]
fn both_switches_must_be_on() {
    let c = HostCommands::new(
        CommandsConfig::default(),
        CredentialDenylist::empty(),
        Vec::new(),
    );
    let req = request("ada", &["true"]);
    assert_eq!(c.run(&req).unwrap_err().code(), "commands_off");
    c.set_local_opt_in(true);
    assert_eq!(c.start(&req).unwrap_err().code(), "commands_off");
    c.set_granted(true);
    c.set_local_opt_in(false);
    assert_eq!(c.run(&req).unwrap_err().code(), "commands_off");
    c.set_local_opt_in(true);
    assert_eq!(c.run(&req).unwrap().exit_code, Some(0));
}

#[test]
fn foreground_runs_inherit_the_environment_minus_outpost_variables() {
    let c = commands();
    let mut req = request("ada", &["sh", "-c", "env; echo \"$1\"", "sh", "$HOME;`id`"]);
    req.env.insert("API_MODE".into(), "test".into());
    let o = c.run(&req).unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("HOME=/home/ada"), "{out}");
    assert!(out.contains("API_MODE=test"), "{out}");
    assert!(!out.contains("OUTPOST_"), "{out}");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(
        out.contains("$HOME;`id`"),
        "arguments are not interpolated: {out}"
    );
    let audit = c.drain_audit();
    assert!(
        matches!(&audit[0], AuditEvent::CommandStarted { env_keys, run_id, background: false, .. }
        if env_keys == &vec!["API_MODE".to_string()] && run_id == "run-9")
    );
    let started = format!("{:?}", audit[0]);
    assert!(
        !started.contains("test\""),
        "env values never reach the audit: {started}"
    );
    assert!(
        matches!(&audit[1], AuditEvent::CommandFinished { exit_code: Some(0), reason, background: false, .. }
        if reason == "exited")
    );
}

#[test]
fn background_jobs_belong_to_their_requester() {
    let c = commands();
    let id = c
        .start(&request("ada", &["sh", "-c", "echo begun; exec sleep 300"]))
        .unwrap();
    assert_eq!(c.poll("bob", id).unwrap_err().code(), "command_not_found");
    assert_eq!(c.kill("bob", id).unwrap_err().code(), "command_not_found");
    assert!(matches!(
        c.poll("ada", id).unwrap(),
        JobStatus::Running { .. }
    ));
    let pid = c.running_pids()[0];
    assert!(process_alive(pid));
    let outcome = c.kill("ada", id).unwrap();
    assert_eq!(outcome.signal, Some(15));
    assert!(!process_alive(pid));
    assert!(matches!(c.poll("ada", id).unwrap(), JobStatus::Finished(_)));
    let audit = c.drain_audit();
    assert!(
        matches!(audit.last().unwrap(), AuditEvent::CommandFinished { reason, background: true, .. } if reason == "killed")
    );
}

#[test]
fn switching_off_revoking_or_shutting_down_kills_every_job() {
    for (turn_off, reason) in [
        (
            Box::new(|c: &HostCommands| c.set_granted(false)) as Box<dyn Fn(&HostCommands)>,
            "commands_off",
        ),
        (
            Box::new(|c: &HostCommands| c.set_local_opt_in(false)),
            "commands_off",
        ),
        (Box::new(|c: &HostCommands| c.revoke()), "revoked"),
        (Box::new(|c: &HostCommands| c.shutdown()), "shutdown"),
    ] {
        let c = commands();
        c.start(&request("ada", &["sleep", "300"])).unwrap();
        c.start(&request("bob", &["sleep", "300"])).unwrap();
        let pids = c.running_pids();
        assert_eq!(pids.len(), 2);
        turn_off(&c);
        assert!(c.running_pids().is_empty());
        for pid in pids {
            assert!(!process_alive(pid), "{pid} survived {reason}");
        }
        let finished = c
            .drain_audit()
            .into_iter()
            .filter(|e| matches!(e, AuditEvent::CommandFinished { reason: r, .. } if r == reason))
            .count();
        assert_eq!(finished, 2, "{reason}");
    }
}

#[test]
fn switching_off_kills_a_foreground_run_too() {
    let c = std::sync::Arc::new(commands());
    let waiting = {
        let c = c.clone();
        std::thread::spawn(move || c.run(&request("ada", &["sleep", "300"])))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Some(pid) = c.running_pids().first() {
            break *pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started"
        );
        std::thread::yield_now();
    };
    c.set_local_opt_in(false);
    let outcome = waiting.join().unwrap().expect("the run reports its end");
    assert_eq!(outcome.signal, Some(9), "{outcome:?}");
    assert!(!process_alive(pid));
    assert!(c.drain_audit().iter().any(
        |e| matches!(e, AuditEvent::CommandFinished { reason, background: false, .. } if reason == "commands_off")
    ));
}

#[test]
fn the_audit_cuts_long_commands_and_denylisted_cwds_are_refused() {
    let c = commands();
    let long = "x".repeat(3000);
    c.run(&request("ada", &["echo", &long])).unwrap();
    match &c.drain_audit()[0] {
        AuditEvent::CommandStarted { command, .. } => assert_eq!(command.chars().count(), 1000),
        other => panic!("{other:?}"),
    }
    let secret = std::env::temp_dir().canonicalize().unwrap();
    let c = HostCommands::new(
        CommandsConfig::default(),
        CredentialDenylist::empty()
            .with_extra([CanonicalPath::new(secret.to_string_lossy().into_owned()).unwrap()]),
        Vec::new(),
    );
    c.set_local_opt_in(true);
    c.set_granted(true);
    let err = c.run(&request("ada", &["true"])).unwrap_err();
    assert_eq!(err.code(), "path_refused");
}

/// A background job's end is told, not looked for: the notifier `notify_job_end` set is called
/// when the job exits on its own, after which `reap` finds it finished at once.
#[test]
fn a_background_job_s_end_calls_the_job_end_notifier() {
    use std::sync::{Arc, mpsc};
    let c = commands();
    let (told, ends) = mpsc::channel();
    c.notify_job_end(Arc::new(move || {
        let _ = told.send(());
    }));
    let go = std::env::temp_dir().join(format!("outpost-job-end-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.02; done; echo done",
        go = go.display()
    );
    let id = c.start(&request("ada", &["sh", "-c", &script])).unwrap();
    assert!(
        ends.try_recv().is_err(),
        "no end is told while the job runs"
    );
    std::fs::write(&go, "").unwrap();
    ends.recv_timeout(Duration::from_secs(60))
        .expect("the job's end is told");
    c.reap();
    assert!(matches!(c.poll("ada", id).unwrap(), JobStatus::Finished(_)));
    assert_eq!(c.jobs_running(), 0);
    let _ = std::fs::remove_file(&go);
}
