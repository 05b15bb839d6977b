//! The job hop (`POST /v1/execution-contexts/commands/jobs/authorize`) over the real API, with
//! a daemon machine driven by hand holding its runs: a live run of the operator is answered
//! with its requester; the server's switch off, a shared run, another machine's key and a run
//! that ended are each refused with their code, checked in that order with the access of now;
//! and a job hop audits nothing.

mod common;

use std::time::Duration;

use common::driver::Driver;
use common::{Answer, Machine, TestServer, bearer, http, inline, temp_dir};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(30);

fn call(server: &TestServer, token: &str, method: &str, path: &str, body: Value) -> Answer {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    http(
        server.addr(),
        method,
        path,
        &[
            ("authorization", &bearer(token)),
            ("content-type", "application/json"),
        ],
        &bytes,
    )
}

/// A signed request of `machine`'s.
fn signed(server: &TestServer, machine: &Machine, path: &str, body: Value) -> Answer {
    machine.send_with(
        server.addr(),
        "POST",
        path,
        body.to_string().as_bytes(),
        &machine.nonce(),
        &[],
    )
}

/// The job hop for `run_id`, as `machine`.
fn job_hop(server: &TestServer, machine: &Machine, run_id: &str, op: &str) -> Answer {
    signed(
        server,
        machine,
        "/v1/execution-contexts/commands/jobs/authorize",
        json!({"runId": run_id, "op": op, "jobId": 1}),
    )
}

fn status_code(answer: &Answer) -> (u16, String) {
    (answer.status, answer.code())
}

/// Submits a run on `box` as `token` and pumps until the driver holds it; returns the
/// execution's id and the run's.
fn held_run(
    server: &TestServer,
    machine: &Machine,
    driver: &mut Driver,
    token: &str,
) -> (String, String) {
    let before = driver.executed.len();
    let answer = call(
        server,
        token,
        "POST",
        "/v1/executions",
        json!({"capability": inline("echo hi\n"), "context": "box"}),
    );
    assert!(
        answer.status == 201 || answer.status == 202,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    driver.pump_until(server, machine, "the run to start", PATIENCE, |d| {
        d.executed.len() > before
    });
    let exec_id = answer.json()["executionId"]
        .as_str()
        .expect("an execution id")
        .to_owned();
    (exec_id, driver.executed.last().expect("a run").clone())
}

#[test]
fn the_job_hop_answers_the_operator_s_live_run_and_refuses_everything_else_with_its_code() {
    let dir = temp_dir("job-hop");
    let server = TestServer::start(&dir);
    let admin = server.admin();
    let machine = Machine::new(51);
    let registered = machine.register(&server, "box");
    assert_eq!(registered.status, 201);
    let operator = registered.json()["operator"]
        .as_str()
        .expect("operator")
        .to_owned();
    let mut driver = Driver::new(&server);
    driver.hold = true;
    driver.drain(&server, &machine);
    driver.pump_until(&server, &machine, "box online", PATIENCE, |_| {
        call(
            &server,
            &admin,
            "GET",
            "/v1/execution-contexts/box",
            Value::Null,
        )
        .json()["online"]
            == true
    });
    let on = signed(
        &server,
        &machine,
        "/v1/execution-contexts/commands",
        json!({"enabled": true}),
    );
    assert_eq!(on.status, 200, "{}", String::from_utf8_lossy(&on.body));

    // The operator's live run: both ops are answered with the requester.
    let (execution, run) = held_run(&server, &machine, &mut driver, &admin);
    for op in ["poll", "kill"] {
        let yes = job_hop(&server, &machine, &run, op);
        assert_eq!(yes.status, 200, "{}", String::from_utf8_lossy(&yes.body));
        assert_eq!(yes.json(), json!({"requester": operator}));
    }
    // Another machine's key cannot speak for it; a run id nobody has is not live either.
    let other = Machine::new(52);
    assert_eq!(other.register(&server, "other").status, 201);
    assert_eq!(
        status_code(&job_hop(&server, &other, &run, "poll")),
        (409, "run_not_live".into())
    );
    assert_eq!(
        status_code(&job_hop(&server, &machine, "run_nope", "kill")),
        (409, "run_not_live".into())
    );

    // A member's shared run: neither hop answers it.
    let made = call(&server, &admin, "POST", "/v1/users", json!({"name": "bo"}));
    assert_eq!(made.status, 201);
    let bo = made.json()["token"].as_str().expect("token").to_owned();
    let shared = call(
        &server,
        &admin,
        "POST",
        "/v1/execution-contexts/box/share",
        json!({"allMembers": true}),
    );
    assert_eq!(shared.status, 200);
    let opted = call(
        &server,
        &bo,
        "POST",
        "/v1/execution-contexts/box/opt-in",
        Value::Null,
    );
    assert_eq!(opted.status, 200);
    let (_, bo_run) = held_run(&server, &machine, &mut driver, &bo);
    assert_eq!(
        status_code(&job_hop(&server, &machine, &bo_run, "poll")),
        (403, "commands_operator_only".into())
    );
    let command = signed(
        &server,
        &machine,
        "/v1/execution-contexts/commands/authorize",
        json!({"runId": bo_run, "command": "echo hi", "background": true}),
    );
    assert_eq!(
        status_code(&command),
        (403, "commands_operator_only".into())
    );

    // The server's switch off (a user's grant edit): the operator's run is refused too.
    let mut grant = call(
        &server,
        &admin,
        "GET",
        "/v1/execution-contexts/box",
        Value::Null,
    )
    .json()["grant"]
        .clone();
    grant["commands"]["enabled"] = json!(false);
    let off = call(
        &server,
        &admin,
        "PATCH",
        "/v1/execution-contexts/box/grant",
        grant,
    );
    assert_eq!(off.status, 200, "{}", String::from_utf8_lossy(&off.body));
    assert_eq!(
        status_code(&job_hop(&server, &machine, &run, "poll")),
        (403, "commands_off".into())
    );

    // Once the run has ended it is not live, whatever the switch says.
    let on = signed(
        &server,
        &machine,
        "/v1/execution-contexts/commands",
        json!({"enabled": true}),
    );
    assert_eq!(on.status, 200);
    driver.finish(&run);
    let path = format!("/v1/executions/{execution}");
    driver.pump_until(&server, &machine, "the run to end", PATIENCE, |_| {
        call(&server, &admin, "GET", &path, Value::Null).json()["status"] == "exited"
    });
    assert_eq!(
        status_code(&job_hop(&server, &machine, &run, "kill")),
        (409, "run_not_live".into())
    );

    // No hop above was a command: nothing was audited as started.
    let audit = call(&server, &admin, "GET", "/v1/audit?limit=500", Value::Null).json();
    assert!(!audit.to_string().contains("command_started"), "{audit}");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
