//! Persistent containers in the running-service table: a real HTTP service on its port, a
//! crash marked `Failed`, and shutdown removing them all.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use outpost_host::{RunningServiceTable as ServiceTable, ServiceState};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Asks the service for `/` until it answers (bounded): the container starts listening a
/// moment after it starts, and there is no event for that but the answer itself.
fn get(port: u16) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut body = String::new();
            s.read_to_string(&mut body)?;
            Ok(body)
        });
        match answer {
            Ok(body) if !body.is_empty() => return body,
            // The poll's pace: the service is asked again.
            _ if Instant::now() < until => std::thread::sleep(Duration::from_millis(50)),
            other => panic!("the service never answered on {port}: {other:?}"),
        }
    }
}

fn service_manifest(name: &str, port: u16, www: &std::path::Path) -> String {
    format!(
        "name: {name}\nenvironment: docker\nlifecycle: persistent\ndocker_image: {TEST_IMAGE}\n\
         entry: sh\nargs: [\"-c\", \"exec httpd -f -p $PORT -h /www\"]\nport: {port}\n\
         volumes: [{{host: {}, guest: /www, mode: ro}}]\n",
        www.display()
    )
}

#[test]
fn a_persistent_service_answers_on_its_port_without_egress_and_is_stopped() {
    let (registry, allow) = permitted(executor());
    let dir = folder("svc");
    let www = folder("www");
    std::fs::write(www.join("index.html"), "hello from the container\n").unwrap();
    let port = free_port();
    let mut l = launch(&dir, "svc", &service_manifest("web", port, &www));
    l.mounts = vec![mount(&www, outpost_core::wire::FolderMode::Ro)];
    let run_id = l.run_id.clone();
    let table = ServiceTable::new();
    let info = table.start(&registry, &allow, l).unwrap();
    assert_eq!(info.port, Some(port));
    assert_eq!(info.state, ServiceState::Running);
    let container = info.id.clone().expect("the container id is recorded");
    assert_eq!(containers_of(&run_id), vec![container[..12].to_owned()]);

    let body = get(port);
    assert!(body.contains("hello from the container"), "{body}");
    // Published without giving the container any network.
    let inspect = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{.HostConfig.NetworkMode}} {{.HostConfig.RestartPolicy.Name}}",
            &container,
        ])
        .output()
        .unwrap();
    assert_eq!(text(&inspect.stdout).trim(), "none no");
    let interfaces = std::process::Command::new("docker")
        .args(["exec", &container, "ls", "/sys/class/net"])
        .output()
        .unwrap();
    assert_eq!(
        text(&interfaces.stdout),
        "lo\n",
        "the service got a network"
    );

    let stopped = table.stop("web").unwrap();
    assert_eq!(stopped.state, ServiceState::Stopped);
    assert!(
        containers_of(&run_id).is_empty(),
        "a stopped service left its container"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the port still answers after the stop"
    );
}

#[test]
fn a_service_granted_egress_is_reached_on_its_bridge_address() {
    let (registry, allow) = permitted(executor());
    let dir = folder("svc-bridge");
    let www = folder("www-bridge");
    std::fs::write(www.join("index.html"), "bridged\n").unwrap();
    let port = free_port();
    let manifest =
        service_manifest("bridged", port, &www) + "permissions: [\"connect:example.org:443\"]\n";
    let mut l = launch(&dir, "svc-bridge", &manifest);
    l.mounts = vec![mount(&www, outpost_core::wire::FolderMode::Ro)];
    l.egress = outpost_core::wire::Egress::All;
    let run_id = l.run_id.clone();
    let table = ServiceTable::new();
    table.start(&registry, &allow, l).unwrap();
    assert!(get(port).contains("bridged"));
    table.shutdown().unwrap();
    assert!(containers_of(&run_id).is_empty());
}

#[test]
fn a_crashed_service_is_marked_failed_and_not_restarted() {
    let (registry, allow) = permitted(executor());
    let dir = folder("crash");
    let manifest = shell_manifest("crasher", "echo going down; exit 7", "")
        .replace("lifecycle: oneshot", "lifecycle: persistent");
    let l = launch(&dir, "crash", &manifest);
    let run_id = l.run_id.clone();
    let table = ServiceTable::new();
    table.start(&registry, &allow, l).unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    let state = loop {
        let state = table.list().remove(0).state;
        if state != ServiceState::Running || Instant::now() > until {
            break state;
        }
        // The poll's pace: the table has no change signal, so its state is read again.
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        state,
        ServiceState::Failed {
            exit_code: Some(7),
            signal: None
        }
    );
    let output: Vec<u8> = table
        .read_output("crasher")
        .into_iter()
        .flat_map(|c| c.bytes)
        .collect();
    assert_eq!(text(&output), "going down\n");
    assert!(
        containers_of(&run_id).is_empty(),
        "a crashed service left its container"
    );
    // Not restarted: it stays failed.
    assert!(matches!(
        table.list().remove(0).state,
        ServiceState::Failed { .. }
    ));
}

#[test]
fn shutdown_stops_and_removes_every_service() {
    let (registry, allow) = permitted(executor());
    let table = ServiceTable::new();
    let mut runs = Vec::new();
    for name in ["one", "two"] {
        let dir = folder(name);
        let manifest = shell_manifest(name, "sleep 600", "")
            .replace("lifecycle: oneshot", "lifecycle: persistent");
        let l = launch(&dir, name, &manifest);
        runs.push(l.run_id.clone());
        table.start(&registry, &allow, l).unwrap();
    }
    assert!(runs.iter().all(|r| containers_of(r).len() == 1));
    let begun = Instant::now();
    table.shutdown().unwrap();
    assert!(runs.iter().all(|r| containers_of(r).is_empty()));
    assert!(
        table
            .list()
            .iter()
            .all(|s| s.state == ServiceState::Stopped)
    );
    assert!(
        begun.elapsed() < Duration::from_secs(15),
        "{:?}",
        begun.elapsed()
    );
}
