//! The `ctx` calls against real parts: a real HTTP server on loopback, real files, real
//! host-command switches, and the real engine running each condition.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::sync::Arc;

use outpost_condition::{Cancel, Host as _, Identity, Limits, Verdict};
use outpost_core::grant::{CanonicalPath, LocalFolder, LocalPolicy};
use outpost_core::wire::{CommandsGrant, Egress, FolderGrant, FolderMode, GrantLimits};

use super::*;

fn grant(egress: Egress, fs: Vec<FolderGrant>, commands: bool) -> Grant {
    Grant {
        fs,
        egress,
        commands: CommandsGrant { enabled: commands },
        limits: GrantLimits { max_concurrent: 2 },
        environments: None,
    }
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-ctx-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// A shared context whose owner allows `folders` and, when `commands`, host commands.
fn shared(tag: &str, grant: Grant, folders: &[&Path], commands: bool) -> CtxShared {
    let local = LocalPolicy {
        daemon_control: None,
        record_terminal_input: false,
        folders: folders
            .iter()
            .map(|p| LocalFolder {
                path: CanonicalPath::new(p.to_str().unwrap()).unwrap(),
                mode: FolderMode::Rw,
            })
            .collect(),
        commands_enabled: commands,
        auto_update: None,
        confinement: Default::default(),
    };
    let policy = Arc::new(PolicySource::new(scratch(tag).join("policy.json"), local));
    let host_commands = Arc::new(HostCommands::new(
        outpost_host::CommandsConfig::default(),
        CredentialDenylist::default(),
        std::env::vars_os().collect(),
    ));
    host_commands.set_local_opt_in(commands);
    host_commands.set_granted(grant.commands.enabled);
    let seen = Arc::new(Seen::default());
    seen.set_grant(&grant);
    CtxShared {
        seen,
        policy,
        denylist: CredentialDenylist::default(),
        commands: host_commands,
        agent: CtxShared::fetch_agent(),
        // This crate's tests have no `outpost` binary to start the sandbox through: the
        // sandboxed `exec` is proved by the CLI's tests.
        exec_sandbox: None,
    }
}

fn ctx(shared: &CtxShared, operator: bool) -> Arc<Ctx> {
    Arc::new(Ctx::new(
        shared.clone(),
        "wait_t".into(),
        "ada".into(),
        operator,
        1,
    ))
}

/// A canned answer: status, headers, body.
type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);

/// Answers each connection on loopback with `response(path)`.
fn http_server(response: fn(&str) -> Answer) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line.split(' ').nth(1).unwrap_or("/").to_owned();
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) <= 2 {
                    break;
                }
            }
            let (status, headers, body) = response(&path);
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    port
}

fn routes(path: &str) -> Answer {
    match path {
        "/health" => (200, vec![], b"ok".to_vec()),
        "/moved" => (302, vec![("location", "/health".into())], Vec::new()),
        "/big" => (200, vec![], vec![b'x'; 64 * 1024 + 1]),
        _ => (404, vec![], Vec::new()),
    }
}

fn run(source: &str, ctx: Arc<Ctx>) -> Result<Verdict, outpost_condition::CheckError> {
    let identity = Identity {
        wait_id: "wait_t".into(),
        context_id: "ec_t".into(),
        requester: "ada".into(),
    };
    outpost_condition::check(
        source,
        &identity,
        1_767_225_600_000,
        ctx,
        &Limits::default(),
        &Cancel::new(),
    )
}

fn fetch(ctx: &Ctx, url: String) -> Result<FetchResponse, CallError> {
    ctx.fetch(
        FetchRequest {
            url,
            method: FetchMethod::Get,
            headers: Vec::new(),
            max_body: 64 * 1024,
        },
        &Cancel::new(),
    )
}

#[test]
fn a_condition_fetching_an_allowed_health_check_matches_and_keeps_the_call_as_evidence() {
    let port = http_server(routes);
    let allow = Egress::Allowlist {
        hosts: vec![format!("127.0.0.1:{port}")],
    };
    let shared = shared("health", grant(allow, vec![], false), &[], false);
    let ctx = ctx(&shared, false);
    let source = format!(
        "async ({{ ctx }}) => {{
            const r = await ctx.fetch('http://127.0.0.1:{port}/health');
            return r.status === 200 ? {{ resumeText: 'up', payload: {{ body: r.body }} }} : false;
        }}"
    );
    let verdict = run(&source, ctx.clone()).unwrap();
    assert_eq!(
        verdict,
        Verdict::Matched {
            resume_text: "up".into(),
            payload: Some(json!({"body": "ok"})),
        }
    );
    let evidence: Value = serde_json::from_str(&ctx.evidence()).unwrap();
    assert_eq!(evidence[0]["ok"]["status"], 200, "{evidence}");
}

#[test]
fn a_redirect_is_answered_as_it_came_and_never_followed() {
    let port = http_server(routes);
    let shared = shared("redirect", grant(Egress::All, vec![], false), &[], false);
    let answer = fetch(
        &ctx(&shared, false),
        format!("http://127.0.0.1:{port}/moved"),
    )
    .unwrap();
    assert_eq!(answer.status, 302);
    assert!(
        answer
            .headers
            .iter()
            .any(|(n, v)| n == "location" && v == "/health")
    );
    assert_eq!(answer.body, "", "the redirect's target was not fetched");
}

#[test]
fn a_body_over_64_kib_fails_the_check_naming_the_limit_even_when_the_program_catches_it() {
    let port = http_server(routes);
    let shared = shared("big", grant(Egress::All, vec![], false), &[], false);
    let ctx = ctx(&shared, false);
    let source = format!(
        "async ({{ ctx }}) => {{
            try {{ await ctx.fetch('http://127.0.0.1:{port}/big'); }} catch (e) {{ return {{ resumeText: 'caught' }}; }}
            return false;
        }}"
    );
    let verdict = run(&source, ctx.clone());
    assert!(
        verdict.is_ok(),
        "the program caught the rejection: {verdict:?}"
    );
    let breach = ctx.breach().expect("the breach is kept");
    assert_eq!(breach.code, FETCH_BODY_LIMIT);
    assert!(breach.message.contains("65536"), "{}", breach.message);
}

#[test]
fn egress_is_the_grant_s_none_refuses_and_an_allowlist_refuses_what_it_does_not_name() {
    let port = http_server(routes);
    let url = format!("http://127.0.0.1:{port}/health");
    let none = shared(
        "egress-none",
        grant(Egress::None, vec![], false),
        &[],
        false,
    );
    let refused = fetch(&ctx(&none, true), url.clone()).unwrap_err();
    assert_eq!(refused.code, "egress_denied");
    let other = Egress::Allowlist {
        hosts: vec!["example.org".into()],
    };
    let other = shared("egress-list", grant(other, vec![], false), &[], false);
    let refused = fetch(&ctx(&other, true), url).unwrap_err();
    assert_eq!(refused.code, "egress_denied");
    assert!(
        refused.message.contains(&format!("127.0.0.1:{port}")),
        "{}",
        refused.message
    );
}

#[test]
fn files_are_read_only_inside_the_mounts_and_only_for_the_operator() {
    let root = scratch("files");
    let inside = root.join("shared");
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::write(inside.join("ready.txt"), "yes\n").unwrap();
    std::fs::write(root.join("secret.txt"), "no\n").unwrap();
    let fs = vec![FolderGrant {
        path: inside.display().to_string(),
        mode: FolderMode::Ro,
    }];
    let shared = shared(
        "files-policy",
        grant(Egress::None, fs, false),
        &[&inside],
        false,
    );
    let read = |operator: bool, path: &Path, content: bool| {
        ctx(&shared, operator).read(
            ReadRequest::Files {
                path: path.display().to_string(),
                read: content,
            },
            &Cancel::new(),
        )
    };
    let file = read(true, &inside.join("ready.txt"), true).unwrap().value;
    assert_eq!(file["content"], "yes\n");
    assert_eq!(file["kind"], "file");
    let missing = read(true, &inside.join("later.txt"), false).unwrap().value;
    assert_eq!(missing["exists"], false);
    let outside = read(true, &root.join("secret.txt"), true).unwrap_err();
    assert_eq!(outside.code, "path_not_granted");
    let escape = read(true, &inside.join("../secret.txt"), true).unwrap_err();
    assert_eq!(
        escape.code, "path_not_granted",
        "`..` resolves before the check"
    );
    let shared_user = read(false, &inside.join("ready.txt"), true).unwrap_err();
    assert_eq!(shared_user.code, "files_operator_only");
}

#[test]
fn exec_runs_only_under_host_command_trust_and_without_a_shell() {
    let req = ExecRequest {
        command: "/bin/echo".into(),
        args: vec!["$HOME".into(), "a b".into()],
        cwd: None,
    };
    let off = shared("exec-off", grant(Egress::None, vec![], true), &[], false);
    let refused = ctx(&off, true)
        .exec(req.clone(), &Cancel::new())
        .unwrap_err();
    assert_eq!(refused.code, "commands_off", "the owner's switch is off");
    let on = shared("exec-on", grant(Egress::None, vec![], true), &[], true);
    let refused = ctx(&on, false)
        .exec(req.clone(), &Cancel::new())
        .unwrap_err();
    assert_eq!(refused.code, "commands_operator_only");
    let out = ctx(&on, true).exec(req, &Cancel::new()).unwrap();
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, "$HOME a b\n", "no interpolation");
}

#[test]
fn a_cancel_stops_a_running_exec_and_kills_its_process() {
    let on = shared("exec-cancel", grant(Egress::None, vec![], true), &[], true);
    let ctx = ctx(&on, true);
    let cancel = Cancel::new();
    let stopper = {
        let cancel = cancel.clone();
        let commands = on.commands.clone();
        std::thread::spawn(move || {
            // Once the command runs, stop the check.
            while commands.jobs_running() == 0 {
                std::thread::yield_now();
            }
            cancel.cancel();
        })
    };
    let req = ExecRequest {
        command: "/bin/sleep".into(),
        args: vec!["30".into()],
        cwd: None,
    };
    let started = std::time::Instant::now();
    let refused = ctx.exec(req, &cancel).unwrap_err();
    stopper.join().unwrap();
    assert_eq!(refused.code, "cancelled");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(on.commands.jobs_running(), 0, "the sleep was killed");
}

#[test]
fn runs_show_only_the_requester_s_and_services_their_state() {
    let shared = shared("runs", grant(Egress::None, vec![], false), &[], false);
    let manifest = |lifecycle: &str| {
        outpost_core::daemon::Capability::Inline(CapabilitySource::Inline {
            manifest: format!(
                "name: health-check\nenvironment: shell\nlifecycle: {lifecycle}\nentry: run.sh\n"
            ),
            files: Vec::new(),
        })
    };
    let execute = |run_id: &str, requester: &str, lifecycle: &str| Execute {
        run_id: run_id.into(),
        environment: outpost_core::wire::Environment::Shell,
        capability: manifest(lifecycle),
        grant: grant(Egress::None, vec![], false),
        deadline: outpost_core::time::Instant::from_origin(Duration::from_secs(60)),
        shared_run: false,
        requester: requester.into(),
    };
    // The core's outputs are all the mirror is fed.
    let started = |e| Output::Command(Command::Execute(Box::new(e)));
    shared
        .seen
        .observe(&started(execute("r1", "ada", "oneshot")));
    shared
        .seen
        .observe(&started(execute("r2", "bob", "oneshot")));
    shared
        .seen
        .observe(&started(execute("svc", "bob", "persistent")));
    let ctx = ctx(&shared, false);
    let runs = ctx.read(ReadRequest::Runs, &Cancel::new()).unwrap().value;
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["runId"], "r1");
    let services = ctx
        .read(ReadRequest::Services, &Cancel::new())
        .unwrap()
        .value;
    assert_eq!(services[0]["name"], "health-check");
    assert_eq!(services[0]["state"], "running");
    shared.seen.observe_input(&Input::RunFinished {
        run_id: "svc".into(),
        result: RunResult::failed(outpost_core::wire::ErrorBody {
            code: "x".into(),
            message: "y".into(),
        }),
    });
    let services = ctx
        .read(ReadRequest::Services, &Cancel::new())
        .unwrap()
        .value;
    assert_eq!(services[0]["state"], "failed");
}

/// The command that starts check `check` of `wait_id`, as the core outputs it.
fn check_wait(wait_id: &str, check: u64) -> Output {
    Output::Command(Command::CheckWait {
        wait_id: wait_id.into(),
        check,
        requester: "ada".into(),
        operator: false,
        source: "async () => false".into(),
    })
}

/// The input that ends check `check` of `wait_id` with `outcome`, as the driver feeds it.
fn wait_checked(wait_id: &str, check: u64, outcome: CheckOutcome) -> Input {
    Input::WaitChecked {
        wait_id: wait_id.into(),
        check,
        outcome,
    }
}

/// A shared context with nothing granted and nothing allowed by the owner.
fn no_grant(tag: &str) -> CtxShared {
    shared(tag, grant(Egress::None, vec![], false), &[], false)
}

/// What `read('events')` gives wait `wait_t` (up to 1,000), and the events' numbers.
fn read_events(shared: &CtxShared) -> (Value, Vec<u64>) {
    let events = ctx(shared, false)
        .read(
            ReadRequest::Events {
                since: None,
                limit: 1_000,
            },
            &Cancel::new(),
        )
        .unwrap()
        .value;
    let seqs = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    (events, seqs)
}

#[test]
fn a_restarted_daemon_s_events_read_as_before_and_numbering_goes_on() {
    // A wait's history is the core's checks, as the mirror is shown them.
    let before = shared("events-a", grant(Egress::None, vec![], false), &[], false);
    before.seen.observe(&check_wait("wait_t", 1));
    before
        .seen
        .observe_input(&wait_checked("wait_t", 1, CheckOutcome::NotYet));
    before.seen.observe(&check_wait("wait_other", 1));
    let stored = before.seen.take_unsaved();
    assert_eq!(
        stored.added.len(),
        3,
        "every event is handed to the store once"
    );
    assert!(stored.dropped.is_empty());
    assert!(before.seen.take_unsaved().added.is_empty());
    // A new process: what its store held is its history.
    let after = shared("events-b", grant(Egress::None, vec![], false), &[], false);
    after.seen.restore_events(stored.added);
    after.seen.observe(&check_wait("wait_t", 2));
    let failed = CheckOutcome::Failed(outpost_core::wait::CheckError {
        code: "condition_threw".into(),
        message: "boom".into(),
        at_ms: 0,
    });
    after.seen.observe_input(&wait_checked("wait_t", 2, failed));
    let (events, seqs) = read_events(&after);
    assert_eq!(
        seqs,
        [1, 2, 4, 5],
        "only this wait's, numbered on from the store's"
    );
    assert_eq!(events[0]["kind"], "check_started");
    assert_eq!(events[0]["detail"], json!({ "check": 1 }));
    assert_eq!(events[1]["kind"], "check_ended");
    assert_eq!(
        events[1]["detail"],
        json!({ "check": 1, "outcome": "not_yet" })
    );
    assert_eq!(events[2]["kind"], "check_started");
    assert_eq!(
        events[3]["detail"],
        json!({
            "check": 2,
            "outcome": "failed",
            "error": { "code": "condition_threw", "message": "boom" },
        })
    );
    // A forgotten wait's unsaved events never reach the store.
    after.seen.observe(&Output::ForgetWait {
        wait_id: "wait_t".into(),
    });
    let unsaved = after.seen.take_unsaved();
    assert!(unsaved.added.is_empty() && unsaved.dropped.is_empty());
}

#[test]
fn events_past_a_waits_limit_are_named_for_the_store_to_delete_oldest_first() {
    let seen = no_grant("events-drop").seen;
    // A store that held more than the limit (a build that kept more): the oldest go.
    let stored: Vec<WaitEventRow> = (1..=EVENTS_KEPT as u64 + 2)
        .map(|seq| WaitEventRow {
            seq,
            wait_id: "wait_t".into(),
            at_ms: seq,
            kind: "check_started".into(),
            detail: format!(r#"{{"check":{seq}}}"#),
        })
        .collect();
    seen.restore_events(stored);
    assert_eq!(seen.take_unsaved().dropped, [1, 2]);
    // Each new event past the limit names the oldest one held, another wait's untouched.
    seen.observe(&check_wait("wait_other", 1));
    for check in 1..=3 {
        seen.observe(&check_wait("wait_t", check));
    }
    let unsaved = seen.take_unsaved();
    let added: Vec<u64> = unsaved.added.iter().map(|e| e.seq).collect();
    assert_eq!(added, [103, 104, 105, 106]);
    assert_eq!(unsaved.dropped, [3, 4, 5]);
    assert!(seen.take_unsaved().dropped.is_empty(), "named once");
}

#[test]
fn a_waits_stored_history_is_its_last_hundred_whatever_the_batches() {
    let shared = no_grant("events-store");
    let dir = scratch("events-store");
    let (mut store, _) = crate::store::DaemonStore::open(&dir.join("daemon.db")).unwrap();
    let mut check = 0;
    // Batches of 30 checks (60 events, none dropped), then 1, then 90 (180 events in one
    // batch, some added and dropped in the same commit).
    for batch in [30, 1, 90] {
        for _ in 0..batch {
            check += 1;
            shared.seen.observe(&check_wait("wait_t", check));
            let not_yet = wait_checked("wait_t", check, CheckOutcome::NotYet);
            shared.seen.observe_input(&not_yet);
        }
        shared.seen.observe(&check_wait("wait_other", check));
        let unsaved = shared.seen.take_unsaved();
        let writes: Vec<_> = unsaved.writes().collect();
        store.write_waits(&writes).unwrap();
    }
    let stored = |wait: &str| -> Vec<u64> {
        let rows = store.wait_events().unwrap();
        rows.iter()
            .filter(|e| e.wait_id == wait)
            .map(|e| e.seq)
            .collect()
    };
    let (_, held) = read_events(&shared);
    assert_eq!(held.len(), EVENTS_KEPT);
    assert_eq!(
        stored("wait_t"),
        held,
        "the store holds what conditions read"
    );
    assert_eq!(
        stored("wait_other").len(),
        3,
        "another wait's history untouched"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
