//! A container whose grant's egress is an allowlist: it reaches what the allowlist names
//! through the egress gate, and nothing else — not another port, not a direct connection —
//! with each refusal in the outcome for the audit; the holder of its network goes with it.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{containers_of, executor, finish, folder, launch, shell_manifest, text};
use outpost_core::executor::Executor as _;
use outpost_core::wire::Egress;

/// A TCP server on the host's loopback answering every connection with `answer` (HTTP/1.0),
/// counting them.
fn loopback_server(answer: &'static str) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                );
            });
        }
    });
    (port, count)
}

#[test]
fn an_allowlisted_container_reaches_only_what_it_names_through_the_gate() {
    let (allowed, allowed_hits) = loopback_server("allowed service");
    let (other, other_hits) = loopback_server("other service");
    let command = format!(
        "echo \"proxy=$HTTP_PROXY\"; \
         wget -q -O - http://127.0.0.1:{allowed}/; echo; \
         wget -q -O - http://127.0.0.1:{other}/ 2>&1; echo; \
         wget -Y off -q -T 3 -O - http://127.0.0.1:{allowed}/ 2>&1; echo; echo done"
    );
    let manifest = shell_manifest(
        "egress",
        &command,
        &format!("permissions: [\"connect:127.0.0.1:{allowed}\"]\n"),
    );
    let dir = folder("egress");
    let mut run = launch(&dir, "egress", &manifest);
    run.egress = Egress::Allowlist {
        hosts: vec![format!("127.0.0.1:{allowed}")],
    };
    run.context = "box".into();
    let run_id = run.run_id.clone();
    let executor = executor();
    let mut handle = executor
        .launch(run)
        .expect("an allowlist is held, not refused");
    let outcome = finish(handle.as_mut());
    let stdout = text(&outcome.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"proxy=http://127.0.0.1:3128"),
        "{stdout}"
    );
    assert_eq!(lines.get(1), Some(&"allowed service"), "{stdout}");
    assert!(
        lines.get(2).is_some_and(|l| l.contains("403")),
        "another port is refused by the gate: {stdout}"
    );
    assert!(
        lines.get(3).is_some_and(|l| !l.contains("allowed service")),
        "no way around the gate: {stdout}"
    );
    assert_eq!(lines.last(), Some(&"done"), "{stdout}");
    assert_eq!(allowed_hits.load(Ordering::SeqCst), 1);
    assert_eq!(other_hits.load(Ordering::SeqCst), 0);
    assert_eq!(outcome.egress_denied, [format!("127.0.0.1:{other}")]);
    drop(handle);
    assert!(
        containers_of(&run_id).is_empty(),
        "the run and its holder are gone"
    );
}
