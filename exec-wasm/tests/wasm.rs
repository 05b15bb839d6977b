//! The wasm executor on real wasmtime with WAT modules written for each behaviour.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use outpost_core::executor::{
    Ending, ExecError, Executor, Launch, Outcome, OutputChunk, Probe, RunHandle, WaitWaker,
};
use outpost_core::grant::{CanonicalPath, CredentialDenylist, Mount};
use outpost_core::manifest::Manifest;
use outpost_core::wire::FolderMode;
use outpost_exec_wasm::{CacheSource, TRAP_EXIT_CODE, WasmConfig, WasmExecutor};

mod common;

use common::{ARGS_AND_ENV, HELLO};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "outpost-wasm-{}-{tag}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn capability(wat: &str, extra_manifest: &str) -> (PathBuf, Manifest) {
    let dir = folder("cap");
    std::fs::write(dir.join("module.wat"), wat).unwrap();
    let text = format!(
        "name: w\nenvironment: wasm\nlifecycle: ondemand\nentry: module.wat\n{extra_manifest}"
    );
    std::fs::write(dir.join("manifest.yaml"), &text).unwrap();
    (dir, Manifest::parse(&text).unwrap())
}

fn launch(dir: &Path, manifest: Manifest, mounts: Vec<Mount>) -> Launch {
    Launch {
        run_id: "w1".into(),
        dir: dir.to_path_buf(),
        entry_bytes: None,
        timeout: Duration::from_millis(manifest.limits.timeout_ms),
        egress: outpost_core::wire::Egress::None,
        confined: false,
        context: String::new(),
        manifest,
        extra_args: Vec::new(),
        mounts,
        denylist: CredentialDenylist::empty(),
        cwd: None,
    }
}

fn run_with(executor: &WasmExecutor, wat: &str, extra_manifest: &str) -> Outcome {
    let (dir, manifest) = capability(wat, extra_manifest);
    let mut handle = executor.launch(launch(&dir, manifest, Vec::new())).unwrap();
    loop {
        if let Some(o) = handle.wait(Duration::from_secs(30)).unwrap() {
            return o;
        }
    }
}

fn run(wat: &str, extra_manifest: &str) -> Outcome {
    run_with(
        &WasmExecutor::new(WasmConfig::default()),
        wat,
        extra_manifest,
    )
}

const EXIT_7: &str = r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (call $exit (i32.const 7))))"#;

const TRAP: &str = r#"(module (memory (export "memory") 1) (func (export "_start") unreachable))"#;

const SPIN: &str =
    r#"(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))"#;

const GROW: &str = r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (if (i32.eq (memory.grow (i32.const 32)) (i32.const -1)) (then (call $exit (i32.const 1))))
    (call $exit (i32.const 0))))"#;

const WRITE_FILE: &str = r#"(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "out.txt")
  (data (i32.const 200) "written")
  (func (export "_start")
    (local $err i32)
    (local.set $err (call $open (i32.const 3) (i32.const 0) (i32.const 100) (i32.const 7)
        (i32.const 1) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 16)))
    (if (local.get $err) (then (call $exit (i32.add (i32.const 100) (local.get $err)))))
    (i32.store (i32.const 0) (i32.const 200))
    (i32.store (i32.const 4) (i32.const 7))
    (drop (call $fd_write (i32.load (i32.const 16)) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $exit (i32.const 0))))"#;

/// A module the host kept in memory runs with no folder on disk at all, and the same bytes
/// from a folder are the same module; a bad entry name is refused either way.
#[test]
fn a_module_given_in_memory_runs_without_a_folder() {
    let executor = WasmExecutor::new(WasmConfig::default());
    let text = "name: w\nenvironment: wasm\nlifecycle: oneshot\nentry: module.wat\n";
    let in_memory = |entry_bytes: &[u8], text: &str| {
        let manifest = Manifest::parse(text).unwrap();
        let mut l = launch(Path::new("/nonexistent/outpost-run"), manifest, Vec::new());
        l.entry_bytes = Some(std::sync::Arc::from(entry_bytes));
        l
    };
    for _ in 0..2 {
        let mut handle = executor.launch(in_memory(HELLO.as_bytes(), text)).unwrap();
        let o = loop {
            if let Some(o) = handle.wait(Duration::from_secs(30)).unwrap() {
                break o;
            }
        };
        assert_eq!((o.ending, o.exit_code), (Ending::Exited, Some(0)));
        assert_eq!(o.stdout, b"hello\n");
    }
    assert_eq!(run_with(&executor, HELLO, "").stdout, b"hello\n");
    let named_badly = text.replace("module.wat", "module.txt");
    let refused = executor.launch(in_memory(HELLO.as_bytes(), &named_badly));
    assert!(refused.is_err(), "a .txt entry is not a module");
}

#[test]
fn probe_reports_the_engine() {
    match WasmExecutor::new(WasmConfig::default()).probe() {
        Probe::Available { description } => {
            assert!(description.contains("wasmtime"), "{description}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hello_writes_stdout_and_returns_zero() {
    let o = run(HELLO, "");
    assert_eq!((o.ending, o.exit_code), (Ending::Exited, Some(0)));
    assert_eq!(o.stdout, b"hello\n");
    assert!(o.stderr.is_empty());
}

#[test]
fn argv0_is_the_module_file_then_args_and_only_the_declared_env() {
    let o = run(
        ARGS_AND_ENV,
        "args: [one, 'two words']\nenv: {GREETING: hi}\n",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "module.wat\none\ntwo words\nGREETING=hi\n"
    );
}

#[test]
fn proc_exit_is_the_exit_code() {
    assert_eq!(run(EXIT_7, "").exit_code, Some(7));
}

#[test]
fn a_trap_is_exit_134_with_its_message() {
    let o = run(TRAP, "");
    assert_eq!(o.exit_code, Some(TRAP_EXIT_CODE));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.starts_with("Error: failed to run main module `module.wat`"),
        "{stderr}"
    );
    assert!(stderr.contains("unreachable"), "{stderr}");
}

#[test]
fn the_deadline_interrupts_a_spinning_module() {
    let o = run(SPIN, "limits: {timeout_ms: 200}\n");
    assert_eq!(o.ending, Ending::TimedOut);
}

#[test]
fn cancel_interrupts_a_spinning_module() {
    let executor = WasmExecutor::new(WasmConfig::default());
    let (dir, manifest) = capability(SPIN, "");
    let mut handle = executor.launch(launch(&dir, manifest, Vec::new())).unwrap();
    assert!(handle.wait(Duration::from_millis(50)).unwrap().is_none());
    handle.cancel().unwrap();
    let o = loop {
        if let Some(o) = handle.wait(Duration::from_secs(10)).unwrap() {
            break o;
        }
    };
    assert_eq!(o.ending, Ending::Cancelled);
}

#[test]
fn memory_is_limited_by_memory_mb() {
    assert_eq!(run(GROW, "limits: {memory_mb: 1}\n").exit_code, Some(1));
    assert_eq!(run(GROW, "").exit_code, Some(0));
}

#[test]
fn volumes_are_preopened_with_their_modes() {
    let executor = WasmExecutor::new(WasmConfig::default());
    for (mode, expect_written) in [(FolderMode::Rw, true), (FolderMode::Ro, false)] {
        let data = folder("data");
        let mode_name = if mode == FolderMode::Rw { "rw" } else { "ro" };
        let (dir, manifest) = capability(
            WRITE_FILE,
            &format!(
                "volumes: [{{host: {}, guest: /data, mode: {mode_name}}}]\n",
                data.display()
            ),
        );
        let grant = Mount {
            path: CanonicalPath::new(data.to_string_lossy().into_owned()).unwrap(),
            mode,
            excluded: Vec::new(),
        };
        let mut handle = executor
            .launch(launch(&dir, manifest, vec![grant]))
            .unwrap();
        let o = loop {
            if let Some(o) = handle.wait(Duration::from_secs(30)).unwrap() {
                break o;
            }
        };
        let written = std::fs::read_to_string(data.join("out.txt")).ok();
        if expect_written {
            assert_eq!(o.exit_code, Some(0));
            assert_eq!(written.as_deref(), Some("written"));
        } else {
            assert_ne!(
                o.exit_code,
                Some(0),
                "a read-only preopen refuses the write"
            );
            assert_eq!(written, None);
        }
    }
}

#[test]
fn a_volume_outside_the_grant_is_refused_before_it_opens() {
    let data = folder("ungranted");
    let (dir, manifest) = capability(
        HELLO,
        &format!(
            "volumes: [{{host: {}, guest: /data, mode: rw}}]\n",
            data.display()
        ),
    );
    let err = WasmExecutor::new(WasmConfig::default())
        .launch(launch(&dir, manifest, Vec::new()))
        .err()
        .unwrap();
    assert_eq!(err.code(), "path_refused");
}

#[test]
fn foreign_imports_are_refused_by_name() {
    let (dir, manifest) = capability(
        r#"(module (import "env" "launch_missiles" (func)) (memory (export "memory") 1) (func (export "_start")))"#,
        "",
    );
    let err = WasmExecutor::new(WasmConfig::default())
        .launch(launch(&dir, manifest, Vec::new()))
        .err()
        .unwrap();
    assert_eq!(err.code(), "invalid_capability");
    assert!(err.to_string().contains("env::launch_missiles"), "{err}");
}

#[test]
fn output_is_capped_like_every_executor() {
    let o = run(HELLO, "limits: {output_max_bytes: 3}\n");
    assert!(o.truncated);
    assert!(o.stdout.starts_with(b"hel"));
}

#[test]
fn the_disk_cache_is_reused_and_corruption_is_recompiled() {
    let cache = folder("cache");
    let config = WasmConfig {
        cache_dir: Some(cache.clone()),
        ..WasmConfig::default()
    };
    let bytes = HELLO.as_bytes();
    // Compile through a real run, then look at what landed on disk.
    let first = WasmExecutor::new(config.clone());
    assert_eq!(run_with(&first, HELLO, "").exit_code, Some(0));
    let files: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&cache).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(
        first.cache().unwrap().get(bytes).unwrap().1,
        CacheSource::Memory
    );

    // A new executor (a new process, as far as the cache knows) loads it from disk.
    let second = WasmExecutor::new(config.clone());
    assert_eq!(
        second.cache().unwrap().get(bytes).unwrap().1,
        CacheSource::Disk
    );

    // A flipped byte is caught by the checksum and recompiled; the run still works.
    let mut corrupt = std::fs::read(&files[0]).unwrap();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    std::fs::write(&files[0], corrupt).unwrap();
    let third = WasmExecutor::new(config.clone());
    match third.cache().unwrap().get(bytes).unwrap().1 {
        CacheSource::Recompiled { reason } => assert!(reason.contains("checksum"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(run_with(&third, HELLO, "").stdout, b"hello\n");

    // A foreign file under the module's name is refused, not loaded.
    std::fs::write(&files[0], b"\x7fELF not a module").unwrap();
    let fourth = WasmExecutor::new(config);
    assert!(matches!(
        fourth.cache().unwrap().get(bytes).unwrap().1,
        CacheSource::Recompiled { .. }
    ));
}

#[test]
fn persistent_modules_live_in_the_service_table_until_stopped_or_trapped() {
    use outpost_core::executor::{Allowlists, Registry, Scope};
    use outpost_core::manifest::Permission;
    use outpost_host::{RunningServiceTable, ServiceState};
    let mut registry = Registry::new();
    registry.register(Box::new(WasmExecutor::new(WasmConfig::default())));
    let mut allow = Allowlists::new();
    allow
        .allow(
            Permission::run_capability(outpost_core::wire::Environment::Wasm),
            Scope::Project,
        )
        .unwrap();
    let table = RunningServiceTable::new();
    let (dir, _) = capability(SPIN, "");
    let text = "name: spinner\nenvironment: wasm\nlifecycle: persistent\nentry: module.wat\n";
    let info = table
        .start(
            &registry,
            &allow,
            launch(&dir, Manifest::parse(text).unwrap(), Vec::new()),
        )
        .unwrap();
    assert_eq!(info.state, ServiceState::Running);
    assert_eq!(info.id, None, "a wasm service is a thread of the daemon");
    assert_eq!(table.stop("spinner").unwrap().state, ServiceState::Stopped);

    let (dir, _) = capability(TRAP, "");
    let text = "name: crasher\nenvironment: wasm\nlifecycle: persistent\nentry: module.wat\n";
    table
        .start(
            &registry,
            &allow,
            launch(&dir, Manifest::parse(text).unwrap(), Vec::new()),
        )
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let state = loop {
        let row = table
            .list()
            .into_iter()
            .find(|s| s.name == "crasher")
            .unwrap();
        if row.state != ServiceState::Running || std::time::Instant::now() > until {
            break row.state;
        }
        // The poll's pace: the table has no change signal, so its state is read again.
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        state,
        ServiceState::Failed {
            exit_code: Some(TRAP_EXIT_CODE),
            signal: None
        }
    );
}

/// Writes `hello\n` to stdout, then spins until it is interrupted.
const HELLO_THEN_SPIN: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (loop $l (br $l))))"#;

/// A notifier that reports each call, with the thread it came from, then calls `then`.
fn tap(then: Option<WaitWaker>) -> (WaitWaker, mpsc::Receiver<std::thread::ThreadId>) {
    let (told, calls) = mpsc::channel();
    let waker: WaitWaker = Arc::new(move || {
        let _ = told.send(std::thread::current().id());
        if let Some(then) = &then {
            then();
        }
    });
    (waker, calls)
}

#[test]
fn a_write_ends_a_wait_through_the_handle_s_wait_waker() {
    let executor = WasmExecutor::new(WasmConfig::default());
    // The deadline is far, so the run starts on the pool; and it is not an hour, so a write
    // that fails to wake the wait fails the test instead of hanging it.
    let (dir, manifest) = capability(HELLO_THEN_SPIN, "limits: {timeout_ms: 60000}\n");
    let mut handle = executor.launch(launch(&dir, manifest, Vec::new())).unwrap();
    let (notifier, calls) = tap(Some(handle.wait_waker().expect("a wasm run can be woken")));
    assert!(handle.notify_output(notifier));
    // The run starts at its first wait, so its write comes after the notifier was set.
    assert!(
        handle.wait(Duration::from_secs(3600)).unwrap().is_none(),
        "the write ended the wait while the module still spins"
    );
    assert!(calls.try_recv().is_ok(), "the pipe called the notifier");
    let chunks = handle.read_output();
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].bytes, b"hello\n");
    handle.cancel().unwrap();
    let o = loop {
        if let Some(o) = handle.wait(Duration::from_secs(30)).unwrap() {
            break o;
        }
    };
    assert_eq!(o.ending, Ending::Cancelled);
    assert_eq!(o.stdout, b"hello\n");
}

/// A run handle that records the waits it is asked for and passes everything on.
struct Watched {
    run: Box<dyn RunHandle>,
    waits: Vec<Duration>,
}

impl RunHandle for Watched {
    fn run_id(&self) -> &str {
        self.run.run_id()
    }
    fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError> {
        self.waits.push(timeout);
        self.run.wait(timeout)
    }
    fn cancel(&mut self) -> Result<(), ExecError> {
        self.run.cancel()
    }
    fn read_output(&mut self) -> Vec<OutputChunk> {
        self.run.read_output()
    }
    fn wait_waker(&self) -> Option<WaitWaker> {
        self.run.wait_waker()
    }
    fn canceller(&self) -> Option<WaitWaker> {
        self.run.canceller()
    }
    fn notify_output(&mut self, waker: WaitWaker) -> bool {
        self.run.notify_output(waker)
    }
}

#[test]
fn a_streamed_run_is_woken_by_its_output_not_looked_at_in_slices() {
    let executor = WasmExecutor::new(WasmConfig::default());
    let (dir, manifest) = capability(HELLO_THEN_SPIN, "limits: {timeout_ms: 60000}\n");
    let mut run = Watched {
        run: executor.launch(launch(&dir, manifest, Vec::new())).unwrap(),
        waits: Vec::new(),
    };
    let cancel = outpost_host::Cancel::new();
    let raiser = cancel.clone();
    let mut streamed = Vec::new();
    // Cancelled once the output is handed out: the module spins until then.
    let o = outpost_host::run_to_end_streaming(&mut run, &cancel, &mut |chunks| {
        for chunk in chunks {
            streamed.extend_from_slice(&chunk.bytes);
        }
        raiser.raise();
    })
    .unwrap();
    assert_eq!(
        o.ending,
        Ending::Cancelled,
        "the output was handed out before the deadline: {o:?}"
    );
    assert_eq!(streamed, b"hello\n");
    assert_eq!(o.stdout, b"hello\n");
    assert!(
        run.waits.iter().all(|w| *w > outpost_host::STREAM_SLICE),
        "every wait lasted until the output or the end woke it: {:?}",
        run.waits
    );
}

#[test]
fn a_short_run_still_runs_on_its_waiter_s_thread_with_a_notifier_set() {
    let executor = WasmExecutor::new(WasmConfig::default());
    // Compiled first, so the run's deadline is not spent compiling.
    assert_eq!(run_with(&executor, HELLO, "").stdout, b"hello\n");
    let (dir, manifest) = capability(HELLO, "limits: {timeout_ms: 200}\n");
    let mut handle = executor.launch(launch(&dir, manifest, Vec::new())).unwrap();
    let (notifier, calls) = tap(handle.wait_waker());
    assert!(handle.notify_output(notifier));
    // The wait covers the whole deadline: the module runs right here.
    let o = handle
        .wait(Duration::from_secs(30))
        .unwrap()
        .expect("a wait covering the deadline sees the end");
    assert_eq!((o.ending, o.exit_code), (Ending::Exited, Some(0)));
    assert_eq!(o.stdout, b"hello\n");
    assert_eq!(
        calls.try_recv().ok(),
        Some(std::thread::current().id()),
        "the write was made, and notified, on the waiter's own thread"
    );
}
