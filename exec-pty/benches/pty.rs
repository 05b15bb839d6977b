//! The PTY read loop's throughput: 100 MB written by a program on a raw-mode terminal, read
//! through the executor's `TerminalOutput` against the same bytes read straight from a
//! portable-pty master with no executor, in the same run. The relay's throughput is later
//! compared against these two.

use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use outpost_core::executor::{Executor, Launch, RunHandle};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::Manifest;
use outpost_exec_pty::PtyExecutor;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};

const BYTES: u64 = 100_000_000;
/// Raw mode first, so the terminal translates nothing; then the bytes.
const WRITER: &str = "stty raw -echo; exec head -c 100000000 /dev/zero";
const BUF: usize = 64 * 1024;

/// Total time and iterations per variant (raw, executor; then the same interleaved), for the
/// figures printed at the end.
static TOTALS: Mutex<[(Duration, u64); 4]> = Mutex::new([(Duration::ZERO, 0); 4]);
/// Back-to-back runs of both variants for the ratio.
const PAIRS: usize = 8;

fn record(variant: usize, took: Duration, iters: u64) {
    let mut totals = TOTALS.lock().unwrap();
    totals[variant].0 += took;
    totals[variant].1 += iters;
}

fn raw_once() {
    let pair = native_pty_system()
        .openpty(PtySize::default())
        .expect("a pty");
    let mut command = CommandBuilder::new("/bin/sh");
    command.args(["-c", WRITER]);
    let mut child = pair.slave.spawn_command(command).expect("spawn");
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().expect("reader");
    let mut buf = vec![0u8; BUF];
    let mut total = 0u64;
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    child.wait().expect("wait");
    assert_eq!(total, BYTES);
}

fn launch(dir: &std::path::Path) -> Launch {
    let manifest = Manifest::parse(&format!(
        "name: bench\nenvironment: pty\nlifecycle: oneshot\nentry: sh\nargs: [-c, {WRITER:?}]\n\
         env: {{PATH: /usr/bin:/bin}}\nlimits: {{timeout_ms: 600000}}\n"
    ))
    .unwrap();
    Launch {
        run_id: "bench".into(),
        dir: dir.to_path_buf(),
        entry_bytes: None,
        manifest,
        extra_args: Vec::new(),
        mounts: Vec::new(),
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout: Duration::from_secs(600),
        egress: outpost_core::wire::Egress::None,
        confined: false,
        context: String::new(),
    }
}

fn executor_once(executor: &PtyExecutor, dir: &std::path::Path) {
    let mut run: Box<dyn RunHandle> = executor.launch(launch(dir)).expect("launch");
    let mut terminal = run.take_terminal().expect("terminal");
    let mut buf = vec![0u8; BUF];
    let mut total = 0u64;
    loop {
        match terminal.output.read_output(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    while run.wait(Duration::from_secs(5)).expect("wait").is_none() {}
    assert_eq!(total, BYTES);
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("outpost-pty-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.yaml"), "").unwrap();
    let executor = PtyExecutor::default();
    let mut group = c.benchmark_group("pty_100mb");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(15))
        .throughput(Throughput::Bytes(BYTES));
    group.bench_function("raw_portable_pty_master", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                raw_once();
            }
            let took = start.elapsed();
            record(0, took, iters);
            took
        })
    });
    group.bench_function("executor_terminal_output", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                executor_once(&executor, &dir);
            }
            let took = start.elapsed();
            record(1, took, iters);
            took
        })
    });
    group.finish();
    // The machine's load drifts between the two groups above; pairs run back to back, in
    // alternating order, give the ratio.
    for pair in 0..PAIRS {
        for variant in [pair % 2, 1 - pair % 2] {
            let start = Instant::now();
            if variant == 0 {
                raw_once();
            } else {
                executor_once(&executor, &dir);
            }
            record(variant + 2, start.elapsed(), 1);
        }
    }
    let totals = *TOTALS.lock().unwrap();
    let rate = |(took, iters): (Duration, u64)| (BYTES * iters) as f64 / took.as_secs_f64() / 1e6;
    let (raw, exec) = (rate(totals[0]), rate(totals[1]));
    println!("pty_100mb (criterion groups): raw master {raw:.0} MB/s, executor {exec:.0} MB/s");
    let (raw, exec) = (rate(totals[2]), rate(totals[3]));
    println!(
        "pty_100mb ({PAIRS} interleaved pairs): raw master {raw:.0} MB/s, executor {exec:.0} MB/s, \
         executor/raw = {:.3}",
        exec / raw
    );
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
