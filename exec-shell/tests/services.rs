//! Persistent shell services in the running-service table, with real processes and a real
//! HTTP service.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;

use common::process_alive;
use outpost_core::executor::{Allowlists, ExecError, Launch, Registry, RunRefused, Scope};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::{Manifest, Permission};
use outpost_core::wire::Environment;
use outpost_exec_shell::ShellExecutor;
use outpost_host::{RunningServiceTable as ServiceTable, ServiceState};

/// The shell executor, the only one these services need.
fn shell() -> Registry {
    let mut registry = Registry::new();
    registry.register(Box::new(ShellExecutor::default()));
    registry
}

/// `run_capability:shell`, allowed for the session as its trust ceiling demands.
fn allowed() -> Allowlists {
    let mut allow = Allowlists::new();
    allow
        .allow(
            Permission::run_capability(Environment::Shell),
            Scope::Session,
        )
        .unwrap();
    allow
}

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-svc-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn launch(dir: &Path, manifest: &str) -> Launch {
    Launch {
        run_id: "svc".into(),
        dir: dir.to_path_buf(),
        entry_bytes: None,
        manifest: Manifest::parse(manifest).unwrap(),
        extra_args: Vec::new(),
        mounts: Vec::new(),
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout: Duration::from_secs(5),
        egress: outpost_core::wire::Egress::None,
        confined: false,
        context: String::new(),
    }
}

/// Output only arrives by polling the table; bounded, it waits for the service's own word.
fn wait_for_output(table: &ServiceTable, name: &str, needle: &str) -> String {
    let mut seen = String::new();
    let until = Instant::now() + Duration::from_secs(20);
    while !seen.contains(needle) {
        assert!(
            Instant::now() < until,
            "{name} never printed {needle:?}; got {seen:?}"
        );
        for chunk in table.read_output(name) {
            seen.push_str(&String::from_utf8_lossy(&chunk.bytes));
        }
        // The poll's pace: the table's output is read again.
        std::thread::sleep(Duration::from_millis(10));
    }
    seen
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_health_check_example_answers_on_its_port_and_stops() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/health-check");
    let dir = folder("health");
    std::fs::copy(example.join("serve.sh"), dir.join("serve.sh")).unwrap();
    let port = free_port();
    let manifest = std::fs::read_to_string(example.join("manifest.yaml"))
        .unwrap()
        .replace("port: 8787", &format!("port: {port}"));
    let table = ServiceTable::new();
    let info = table
        .start(&shell(), &allowed(), launch(&dir, &manifest))
        .unwrap();
    assert_eq!(info.port, Some(port));
    assert_eq!(info.state, ServiceState::Running);
    wait_for_output(&table, "health-check", "listening");

    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
    assert!(reply.ends_with("{\"status\": \"ok\"}"), "{reply}");

    let second = table.start(&shell(), &allowed(), launch(&dir, &manifest));
    assert!(
        matches!(
            second,
            Err(RunRefused::Launch(ExecError::InvalidCapability(_)))
        ),
        "one instance per name"
    );

    let stopped = table.stop("health-check").unwrap();
    assert_eq!(stopped.state, ServiceState::Stopped);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens any more"
    );
    let pid = info.id.clone().expect("a shell service has a pid");
    assert!(!process_alive(&pid), "the service process {pid} is gone");
}

#[test]
fn a_crashed_service_is_marked_failed_and_not_restarted() {
    let dir = folder("crash");
    std::fs::write(dir.join("run.sh"), "echo up\nexit 3\n").unwrap();
    let table = ServiceTable::new();
    let manifest = "name: crasher\nenvironment: shell\nlifecycle: persistent\nentry: run.sh\n";
    let first = table
        .start(&shell(), &allowed(), launch(&dir, manifest))
        .unwrap();
    wait_for_output(&table, "crasher", "up");
    let until = Instant::now() + Duration::from_secs(20);
    let failed = loop {
        let row = table
            .list()
            .into_iter()
            .find(|s| s.name == "crasher")
            .unwrap();
        if row.state != ServiceState::Running {
            break row;
        }
        assert!(Instant::now() < until, "the crash was never noticed");
        // The poll's pace: the table has no change signal, so its state is read again.
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        failed.state,
        ServiceState::Failed {
            exit_code: Some(3),
            signal: None
        }
    );
    assert_eq!(failed.id, first.id, "never restarted");
    assert_eq!(table.list().len(), 1);
}

#[test]
fn shutdown_stops_every_service() {
    let dir = folder("many");
    std::fs::write(dir.join("run.sh"), "echo up\nexec sleep 300\n").unwrap();
    let table = ServiceTable::new();
    for name in ["one", "two"] {
        let manifest =
            format!("name: {name}\nenvironment: shell\nlifecycle: persistent\nentry: run.sh\n");
        table
            .start(&shell(), &allowed(), launch(&dir, &manifest))
            .unwrap();
        wait_for_output(&table, name, "up");
    }
    table.shutdown().unwrap();
    let states: Vec<ServiceState> = table.list().into_iter().map(|s| s.state).collect();
    assert_eq!(states, vec![ServiceState::Stopped, ServiceState::Stopped]);
}

#[test]
fn only_persistent_capabilities_enter_the_table() {
    let dir = folder("oneshot");
    std::fs::write(dir.join("run.sh"), "true\n").unwrap();
    let table = ServiceTable::new();
    let err = table
        .start(
            &shell(),
            &allowed(),
            launch(
                &dir,
                "name: once\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n",
            ),
        )
        .unwrap_err();
    assert_eq!(err.code(), "invalid_capability");
}

#[test]
fn a_persistent_service_without_its_permission_is_refused_before_anything_runs() {
    let dir = folder("unpermitted");
    std::fs::write(dir.join("run.sh"), "touch ran\necho up\nexec sleep 300\n").unwrap();
    let table = ServiceTable::new();
    let manifest = "name: quiet\nenvironment: shell\nlifecycle: persistent\nentry: run.sh\n";
    let err = table
        .start(&shell(), &Allowlists::new(), launch(&dir, manifest))
        .unwrap_err();
    assert_eq!(err.code(), "not_permitted");
    assert!(err.to_string().contains("run_capability:shell"), "{err}");
    assert!(table.list().is_empty());
    assert!(!dir.join("ran").exists(), "the refused service ran");
    // With the permission, the same capability starts and its script runs.
    table
        .start(&shell(), &allowed(), launch(&dir, manifest))
        .unwrap();
    wait_for_output(&table, "quiet", "up");
    assert!(dir.join("ran").exists());
    table.stop("quiet").unwrap();
}
