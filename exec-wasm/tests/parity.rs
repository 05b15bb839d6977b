//! `outpost run` on a wasm capability behaves like `wasmtime run --dir HOST::GUEST --env K=V
//! MODULE ARGS…`: the same exit code, stdout and stderr, files included. The reference is the
//! real `wasmtime` 48 CLI (`.ci/run` puts it in `~/.cargo/bin`; `WASMTIME` names another).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use outpost_core::executor::{Executor, Launch, Outcome};
use outpost_core::grant::{CanonicalPath, CredentialDenylist, Mount};
use outpost_core::manifest::Manifest;
use outpost_core::wire::FolderMode;
use outpost_exec_wasm::{WasmConfig, WasmExecutor};

mod common;

static NEXT: AtomicU32 = AtomicU32::new(0);

fn wasmtime() -> PathBuf {
    let candidates = [
        std::env::var_os("WASMTIME").map(PathBuf::from),
        std::env::var_os("CARGO_HOME").map(|h| PathBuf::from(h).join("bin/wasmtime")),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/wasmtime")),
    ];
    const GET_IT: &str = "run .ci/run's wasmtime step, or cargo install wasmtime-cli --version 48.0.8 --locked, or set WASMTIME";
    let cli = candidates
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("the wasmtime 48 CLI is needed for parity tests: {GET_IT}"));
    // Parity is with one version: another CLI's exit codes and messages may differ.
    let version = Command::new(&cli)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("running {} --version: {e}: {GET_IT}", cli.display()));
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.starts_with("wasmtime 48."),
        "{} is {}, not wasmtime 48: {GET_IT}",
        cli.display(),
        version.trim()
    );
    cli
}

fn folder(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "outpost-parity-{}-{tag}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

struct Case<'a> {
    wat: &'a str,
    args: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    /// (guest path, mode); each case gets fresh host folders seeded with `seed.txt`.
    dirs: &'a [(&'a str, FolderMode)],
}

fn outpost(case: &Case, dir: &Path, hosts: &[PathBuf]) -> Outcome {
    let mut text =
        "name: parity\nenvironment: wasm\nlifecycle: oneshot\nentry: module.wat\n".to_owned();
    text.push_str(&format!("args: {:?}\n", case.args));
    text.push_str("env: {");
    for (k, v) in case.env {
        text.push_str(&format!("{k}: {v:?}, "));
    }
    text.push_str("}\nvolumes: [");
    for ((guest, mode), host) in case.dirs.iter().zip(hosts) {
        let m = if *mode == FolderMode::Rw { "rw" } else { "ro" };
        text.push_str(&format!(
            "{{host: {}, guest: {guest}, mode: {m}}}, ",
            host.display()
        ));
    }
    text.push_str("]\n");
    let manifest = Manifest::parse(&text).unwrap();
    let mounts = case
        .dirs
        .iter()
        .zip(hosts)
        .map(|((_, mode), host)| Mount {
            path: CanonicalPath::new(host.to_string_lossy().into_owned()).unwrap(),
            mode: *mode,
            excluded: Vec::new(),
        })
        .collect();
    let mut handle = WasmExecutor::new(WasmConfig::default())
        .launch(Launch {
            run_id: "parity".into(),
            dir: dir.to_path_buf(),
            entry_bytes: None,
            manifest,
            extra_args: Vec::new(),
            mounts,
            denylist: CredentialDenylist::empty(),
            cwd: None,
            timeout: Duration::from_secs(30),
            egress: outpost_core::wire::Egress::None,
            confined: false,
            context: String::new(),
        })
        .unwrap();
    loop {
        if let Some(o) = handle.wait(Duration::from_secs(30)).unwrap() {
            return o;
        }
    }
}

fn reference(case: &Case, dir: &Path, hosts: &[PathBuf]) -> std::process::Output {
    let mut cmd = Command::new(wasmtime());
    cmd.arg("run").current_dir(dir);
    for ((guest, mode), host) in case.dirs.iter().zip(hosts) {
        // `wasmtime run --dir` has no read-only form: parity covers read-write folders only
        // (read-only ones are tested on their own in `wasm.rs`).
        assert_eq!(*mode, FolderMode::Rw);
        cmd.arg("--dir").arg(format!("{}::{guest}", host.display()));
    }
    for (k, v) in case.env {
        cmd.arg("--env").arg(format!("{k}={v}"));
    }
    cmd.arg("module.wat").args(case.args);
    cmd.output().unwrap()
}

fn hosts(case: &Case) -> Vec<PathBuf> {
    case.dirs
        .iter()
        .map(|_| {
            let h = folder("host");
            std::fs::write(h.join("seed.txt"), "seeded\n").unwrap();
            h
        })
        .collect()
}

fn check(case: Case) {
    let dir = folder("cap");
    std::fs::write(dir.join("module.wat"), case.wat).unwrap();
    let (ours_hosts, ref_hosts) = (hosts(&case), hosts(&case));
    let ours = outpost(&case, &dir, &ours_hosts);
    let theirs = reference(&case, &dir, &ref_hosts);
    assert_eq!(
        ours.exit_code,
        theirs.status.code(),
        "exit code; ours said {:?}, wasmtime said {:?}",
        String::from_utf8_lossy(&ours.stderr),
        String::from_utf8_lossy(&theirs.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs.stdout),
        "stdout"
    );
    if theirs.status.code() == Some(outpost_exec_wasm::TRAP_EXIT_CODE) {
        // Both name the module and the trap; backtrace formatting differs.
        let (o, t) = (
            String::from_utf8_lossy(&ours.stderr),
            String::from_utf8_lossy(&theirs.stderr),
        );
        assert!(
            o.starts_with("Error: failed to run main module `module.wat`")
                && t.starts_with("Error: failed to run main module `module.wat`"),
            "{o}\n---\n{t}"
        );
        assert!(
            o.contains("unreachable") && t.contains("unreachable"),
            "{o}\n---\n{t}"
        );
    } else {
        assert_eq!(
            String::from_utf8_lossy(&ours.stderr),
            String::from_utf8_lossy(&theirs.stderr),
            "stderr"
        );
    }
    // The files each left behind are the same.
    for (a, b) in ours_hosts.iter().zip(&ref_hosts) {
        let list = |d: &Path| {
            let mut v: Vec<(String, String)> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read_to_string(e.path()).unwrap_or_default(),
                    )
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(list(a), list(b), "files");
    }
}

const PRELUDE: &str = r#"
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $write (param $fd i32) (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8))))
"#;

#[test]
fn stdout_stderr_and_exit_codes() {
    let wat = format!(
        r#"(module {PRELUDE}
  (data (i32.const 100) "to stdout\n")
  (data (i32.const 200) "to stderr\n")
  (func (export "_start")
    (call $write (i32.const 1) (i32.const 100) (i32.const 10))
    (call $write (i32.const 2) (i32.const 200) (i32.const 10))
    (call $exit (i32.const 42))))"#
    );
    check(Case {
        wat: &wat,
        args: &[],
        env: &[],
        dirs: &[],
    });
}

#[test]
fn args_and_environment() {
    let wat = common::ARGS_AND_ENV;
    check(Case {
        wat,
        args: &["one", "two words", "--flag=x"],
        env: &[("GREETING", "hello world"), ("EMPTY", "")],
        dirs: &[],
    });
}

#[test]
fn traps() {
    check(Case {
        wat: r#"(module (memory (export "memory") 1) (func (export "_start") unreachable))"#,
        args: &[],
        env: &[],
        dirs: &[],
    });
}

/// Opens `name` in the first preopen with `oflags` and `rights`, writes `data`, reports errno
/// as the exit code on failure.
fn file_module(name: &str, oflags: u32, rights: u64, data: &str) -> String {
    format!(
        r#"(module {PRELUDE}
  (data (i32.const 100) "{name}")
  (data (i32.const 300) "{data}")
  (func (export "_start")
    (local $err i32)
    (local.set $err (call $open (i32.const 3) (i32.const 0) (i32.const 100) (i32.const {nl})
        (i32.const {oflags}) (i64.const {rights}) (i64.const 0) (i32.const 0) (i32.const 16)))
    (if (local.get $err) (then (call $exit (local.get $err))))
    (call $write (i32.load (i32.const 16)) (i32.const 300) (i32.const {dl}))
    (call $exit (i32.const 0))))"#,
        nl = name.len(),
        dl = data.len(),
    )
}

#[test]
fn files_in_preopened_directories() {
    // Create and write a new file (O_CREAT, fd_write right).
    let create = file_module("made.txt", 1, 64, "made here");
    check(Case {
        wat: &create,
        args: &[],
        env: &[],
        dirs: &[("/work", FolderMode::Rw)],
    });
    // Overwrite an existing file (O_TRUNC).
    let truncate = file_module("seed.txt", 8, 64, "replaced");
    check(Case {
        wat: &truncate,
        args: &[],
        env: &[],
        dirs: &[("/work", FolderMode::Rw)],
    });
    // O_EXCL on an existing file fails the same way.
    let exclusive = file_module("seed.txt", 5, 64, "x");
    check(Case {
        wat: &exclusive,
        args: &[],
        env: &[],
        dirs: &[("/work", FolderMode::Rw)],
    });
    // Escaping the preopen with `..` is refused the same way.
    let escape = file_module("../escape.txt", 1, 64, "nope");
    check(Case {
        wat: &escape,
        args: &[],
        env: &[],
        dirs: &[("/work", FolderMode::Rw)],
    });
    // Opening a missing file without O_CREAT.
    let missing = file_module("absent.txt", 0, 64, "x");
    check(Case {
        wat: &missing,
        args: &[],
        env: &[],
        dirs: &[("/", FolderMode::Rw)],
    });
}
