//! `outpost serve --database postgres://…` with the real binary and a PostgreSQL cluster of
//! the test's own: `migrate` brings a new database to the schema once however often it runs,
//! a URL that is not PostgreSQL's or a database that does not answer is refused with what to
//! do, a server over PostgreSQL keeps its executions across a kill -9, and a database that
//! crashes under a running server stops it (exit 1) rather than let it go on without its
//! records; started again, it restores from them and runs nothing twice.

mod common;
#[path = "../../adapters/tests/common/refusing_port.rs"]
mod refusing_port;

use std::path::Path;
use std::process::Command;

use common::postgres::Postgres;
use common::{Daemon, Server, shell_capability, temp_dir};

/// A server over `url` with the state folder `dir/server`, on `port` (0: a free one).
fn serve(dir: &Path, url: &str, port: u16) -> Server {
    let args = [
        std::ffi::OsStr::new("--database"),
        std::ffi::OsStr::new(url),
    ];
    Server::start_with(&dir.join("server"), port, &args)
}

/// A daemon `box` of `server` (home `dir/home`), online.
fn daemon(dir: &Path, server: &Server) -> Daemon {
    let daemon = Daemon::start(&dir.join("home"), "box", Some(&server.join), "tokio");
    server.wait_context("box", "the daemon to come online", |c| c["online"] == true);
    daemon
}

/// The run's marker lines, after `ran` says what should be there.
fn assert_ran(marker: &Path, ran: &[&str], why: &str) {
    let text = std::fs::read_to_string(marker).expect("the marker");
    assert_eq!(text.lines().collect::<Vec<_>>(), ran, "{why}");
}

#[test]
fn migrate_brings_a_new_database_to_the_schema_once_however_often_it_runs() {
    let pg = Postgres::start();
    let url = pg.database("fresh");
    let state = temp_dir("pg-migrate");
    // The flag the first time, OUTPOST_DATABASE the second (it keeps a password out of the
    // process list).
    for by_env in [false, true] {
        let mut command = Command::new(common::binary());
        command.args(["serve", "--state"]).arg(&state);
        if by_env {
            command.env("OUTPOST_DATABASE", &url);
        } else {
            command.args(["--database", &url]);
        }
        let out = command
            .args(["--json", "migrate"])
            .output()
            .expect("outpost runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        assert_eq!(answer["schemaVersion"], 24, "{answer}");
        assert_eq!(
            answer["database"],
            format!("postgres://outpost@127.0.0.1:{}/fresh", pg.port)
        );
    }
    let versions = pg.sql(
        "fresh",
        "SELECT string_agg(CAST(version AS TEXT), ',' ORDER BY version) FROM schema_version",
    );
    assert_eq!(
        versions.trim(),
        "10,11,12,13,14,15,16,17,18,19,20,21,22,23,24",
        "the baseline and each migration after it, once"
    );
    assert!(
        !state.join("outpost.db").exists(),
        "no SQLite file beside a PostgreSQL database"
    );
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn a_database_that_is_not_postgres_or_does_not_answer_is_refused_with_what_to_do() {
    let state = temp_dir("pg-refused");
    let run = |database: &str| {
        let out = Command::new(common::binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--state"])
            .arg(&state)
            .args(["--database", database])
            .output()
            .expect("outpost runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run("mysql://ana:secret@db/outpost");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is not a PostgreSQL URL"), "{err}");
    assert!(err.contains("postgres://USER@HOST:PORT/DATABASE"), "{err}");
    assert!(!err.contains("secret"), "the password is not shown: {err}");
    let (_held, port) = refusing_port::refusing_port();
    let (code, err) = run(&format!("postgres://outpost:hunter2@127.0.0.1:{port}/none"));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("connecting to PostgreSQL"), "{err}");
    assert!(!err.contains("hunter2"), "the password is not shown: {err}");
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn a_server_over_postgres_killed_and_restarted_keeps_its_executions_and_runs_each_once() {
    let pg = Postgres::start();
    let url = pg.database("outpost");
    let dir = temp_dir("pg-restart");
    let server = serve(&dir, &url, 0);
    let mut daemon = daemon(&dir, &server);
    let marker = dir.join("ran");
    let script = |word: &str| format!("echo {word} >> {}\n", marker.display());
    let first = server.submit(&shell_capability("mark", &script("first")), "box");
    server.wait_status(&first, "exited");
    let mut server = server;
    let port = server.port;
    server.kill();
    let server = serve(&dir, &url, port);
    assert_eq!(
        server.wait_status(&first, "exited")["status"],
        "exited",
        "the execution is read back from PostgreSQL"
    );
    server.wait_context("box", "the daemon to come back", |c| c["online"] == true);
    let second = server.submit(&shell_capability("mark", &script("second")), "box");
    server.wait_status(&second, "exited");
    assert_ran(&marker, &["first", "second"], "each execution ran once");
    daemon.kill();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_database_crash_stops_the_server_which_restarts_from_the_records_and_runs_nothing_twice() {
    let mut pg = Postgres::start();
    let url = pg.database("outpost");
    let dir = temp_dir("pg-crash");
    let server = serve(&dir, &url, 0);
    let mut daemon = daemon(&dir, &server);
    let marker = dir.join("ran");
    let go = dir.join("go");
    let held = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done\necho first >> {marker}\n",
        go = go.display(),
        marker = marker.display()
    );
    let first = server.submit(&shell_capability("held", &held), "box");
    server.wait_status(&first, "running");

    // The database crashes. A request that needs it is refused, typed; the server stays up.
    pg.kill();
    let (status, answer) = server.api("GET", &format!("/v1/executions/{first}"), None);
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "database_unavailable");
    // The run ends: its result is a record the server cannot write, so it stops (exit 1)
    // rather than acknowledge what it did not keep; the result waits in the daemon's outbox.
    std::fs::write(&go, b"").expect("go");
    let mut server = server;
    let code = server.child.wait().expect("the server ends").code();
    assert_eq!(
        code,
        Some(1),
        "the server stops rather than go on without its records"
    );

    // The database and the server start again (as a service manager would).
    pg.restart();
    let server = serve(&dir, &url, server.port);
    let ended = server.wait_status(&first, "exited");
    assert_eq!(ended["exitCode"], 0, "{ended}");
    server.wait_context("box", "the daemon to come back", |c| c["online"] == true);
    let script = format!("echo second >> {}\n", marker.display());
    let second = server.submit(&shell_capability("mark", &script), "box");
    server.wait_status(&second, "exited");
    assert_ran(
        &marker,
        &["first", "second"],
        "each ran once: the held run was not started again, its result was kept",
    );
    daemon.kill();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
