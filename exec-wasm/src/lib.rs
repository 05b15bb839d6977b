//! # outpost-exec-wasm
//!
//! The WebAssembly executor: WASI preview1 command modules (`.wasm` or `.wat`) on wasmtime.
//!
//! A module sees only what its manifest declares: `args` (argv\[0\] is the module's file
//! name), `env`, `volumes` as preopened directories (`ro` or `rw`; host paths canonicalized
//! and checked against the grant and the credential denylist first), and stdout/stderr
//! captured under the same caps as every executor. No network, no inherited environment.
//!
//! Runs are bounded by a deadline (epoch interruption, the same `timeout_ms` as everywhere), a
//! memory limit (`memory_mb`, through store limits) and one instance per store. `proc_exit(n)`
//! is exit code `n`; a trap is exit code 134 with its message on stderr, as `wasmtime run`
//! reports it. A module importing anything but WASI preview1 is refused before it runs,
//! naming the import.
//!
//! Compiled modules are cached in memory and on disk (see [`ModuleCache`]); instantiation goes
//! through a cached `InstancePre` and the pooling allocator, so an ondemand call costs a new
//! store, a WASI context and an instantiation. A persistent module runs on its own thread
//! until it exits or is cancelled. The engine's epoch advances only while a module runs (see
//! `ticker`): an idle executor costs no wake-ups. Nor does a streamed run: a module's writes
//! wake its waiter (see [`RunHandle::notify_output`]), which otherwise sleeps until the run
//! ends.
//!
//! This crate owns the engine, the module cache and each run's store. It never gives a
//! module a host path the launch's mounts do not hold, never links an import beyond WASI
//! preview1, and never starts an async runtime (wasmtime-wasi's output streams only borrow
//! tokio's `AsyncWrite` trait).
#![deny(unsafe_code)]

mod cache;
mod pipe;
mod pool;
mod run;
mod ticker;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use outpost_core::executor::{ExecError, Executor, Launch, Probe, RunHandle};
use outpost_core::manifest::Lifecycle;
use outpost_core::wire::{Environment, FolderMode};
use sha2::{Digest, Sha256};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, PoolingAllocationConfig,
    Store, StoreLimits, StoreLimitsBuilder, UpdateDeadline,
};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

pub use cache::{CacheSource, ModuleCache};
pub use run::{TRAP_EXIT_CODE, WasmRun};

use pipe::CappedPipe;
use run::Finish;

/// How the wasm executor is set up.
#[derive(Debug, Clone)]
pub struct WasmConfig {
    /// The on-disk module cache (none: memory only).
    pub cache_dir: Option<PathBuf>,
    /// How often the epoch advances (the deadline's resolution).
    pub tick: Duration,
    /// Instances the pooling allocator keeps slots for.
    pub pool_size: u32,
}

impl Default for WasmConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            tick: Duration::from_millis(10),
            pool_size: 64,
        }
    }
}

/// What a store holds.
pub struct RunState {
    wasi: WasiP1Ctx,
    limits: StoreLimits,
}

/// Raised from the epoch callback when a run is cancelled or past its deadline.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
struct Interrupted;

/// An entry file's identity: device, inode, size, modification time.
type FileStamp = (u64, u64, u64, i64, i64);

/// What a resolved entry file gave: its identity when read, the module's key, its file name.
type KnownEntry = (FileStamp, [u8; 32], String);

struct Ready {
    pool: pool::RunPool,
    entries: Mutex<HashMap<PathBuf, KnownEntry>>,
    engine: Engine,
    linker: Linker<RunState>,
    cache: ModuleCache,
    pres: Mutex<HashMap<[u8; 32], InstancePre<RunState>>>,
    /// Advances the epoch while a store runs.
    ticker: ticker::EpochTicker,
}

/// Runs wasm capabilities. See the crate docs.
pub struct WasmExecutor {
    ready: Result<Ready, String>,
    description: String,
}

/// How much of a freed memory (and table) slot is zeroed with `memset` and kept resident
/// instead of handed back with `madvise`: a small module's whole memory, so an ondemand call
/// costs no system call and no TLB shootdown across cores when it ends. At most this much
/// per pool slot stays resident.
pub const KEEP_RESIDENT: usize = 256 << 10;

/// The engine configuration: epoch interruption and the pooling allocator, for synchronous
/// calls only (the pool keeps no fiber stacks, so an async call would fail for want of one).
pub fn engine_config(pool_size: u32) -> Config {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(pool_size)
        .total_memories(pool_size)
        .total_tables(pool_size)
        .max_memory_size(1 << 32)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        // No run uses wasmtime's async fibers (modules are called synchronously), so the pool
        // keeps no stacks for them. Its default, 1,000 stacks of 2 MiB each behind a guard
        // page, cost the daemon's start 1,000 `mprotect` calls and 2,000 memory mappings.
        .total_stacks(0);
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

impl WasmExecutor {
    /// A wasm executor. If the engine cannot be built here, [`Executor::probe`] says why.
    pub fn new(config: WasmConfig) -> Self {
        let built = (|| -> Result<Ready, String> {
            let engine =
                Engine::new(&engine_config(config.pool_size)).map_err(|e| e.to_string())?;
            let mut linker = Linker::new(&engine);
            wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut RunState| &mut s.wasi)
                .map_err(|e| e.to_string())?;
            let cache = ModuleCache::new(engine.clone(), config.cache_dir.clone())
                .map_err(|e| e.to_string())?;
            let ticker = ticker::EpochTicker::start(engine.clone(), config.tick)
                .map_err(|e| format!("cannot start the epoch thread: {e}"))?;
            Ok(Ready {
                pool: pool::RunPool::default(),
                entries: Mutex::new(HashMap::new()),
                engine,
                linker,
                cache,
                pres: Mutex::new(HashMap::new()),
                ticker,
            })
        })();
        let description = format!(
            "wasmtime 48 (cranelift, pooling allocator for {} instances, epoch every {} ms while a module runs, cache {})",
            config.pool_size,
            config.tick.as_millis(),
            config
                .cache_dir
                .as_ref()
                .map_or("in memory".to_owned(), |d| d.display().to_string())
        );
        Self {
            ready: built,
            description,
        }
    }

    /// The module cache (for inspection and benchmarks).
    pub fn cache(&self) -> Option<&ModuleCache> {
        self.ready.as_ref().ok().map(|r| &r.cache)
    }

    fn ready(&self) -> Result<&Ready, ExecError> {
        self.ready
            .as_ref()
            .map_err(|reason| ExecError::Unavailable {
                environment: Environment::Wasm,
                reason: format!("the wasmtime engine could not start: {reason}"),
                remedy: "check the machine's virtual memory limits (ulimit -v)".into(),
            })
    }
}

impl Executor for WasmExecutor {
    fn environment(&self) -> Environment {
        Environment::Wasm
    }

    fn probe(&self) -> Probe {
        match &self.ready {
            Ok(_) => Probe::Available {
                description: self.description.clone(),
            },
            Err(reason) => Probe::Unavailable {
                reason: format!("the wasmtime engine could not start: {reason}"),
                remedy: "check the machine's virtual memory limits (ulimit -v)".into(),
            },
        }
    }

    fn launch(&self, launch: Launch) -> Result<Box<dyn RunHandle>, ExecError> {
        Ok(Box::new(self.start(launch)?))
    }
}

impl WasmExecutor {
    /// Starts a run (also used directly by benchmarks).
    pub fn start(&self, launch: Launch) -> Result<WasmRun, ExecError> {
        let begun = Instant::now();
        let ready = self.ready()?;
        let manifest = &launch.manifest;
        if manifest.environment != Environment::Wasm {
            return Err(ExecError::InvalidCapability(format!(
                "a {} capability cannot run on the wasm executor",
                manifest.environment.as_str()
            )));
        }
        let (key, module_name) = self.module_key(ready, &launch)?;
        let pre = ready
            .pres
            .lock()
            .ok()
            .and_then(|p| p.get(&key).cloned())
            .ok_or_else(|| ExecError::Failed("the module vanished from the cache".into()))?;

        let cap = usize::try_from(manifest.limits.output_max_bytes).unwrap_or(usize::MAX);
        let (stdout, stderr) = (CappedPipe::new(cap), CappedPipe::new(cap));
        let mut wasi = WasiCtxBuilder::new();
        wasi.arg(&module_name)
            .args(&manifest.args)
            .args(&launch.extra_args)
            .stdout(stdout.clone())
            .stderr(stderr.clone());
        for (k, v) in &manifest.env {
            wasi.env(k, v);
        }
        for volume in &manifest.volumes {
            let host = outpost_host::resolve_volume(&launch, &volume.host, volume.mode)?;
            let perms = match volume.mode {
                FolderMode::Ro => FsPerms::ReadOnly,
                FolderMode::Rw => FsPerms::ReadWrite,
            };
            wasi.preopened_dir(&host, &volume.guest, perms)
                .map_err(|e| ExecError::PathRefused {
                    path: host.display().to_string(),
                    reason: e.to_string(),
                })?;
        }
        let memory = usize::try_from(manifest.limits.memory_mb.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX);
        let state = RunState {
            wasi: wasi.build_p1(),
            limits: StoreLimitsBuilder::new()
                .memory_size(memory)
                .instances(1)
                .build(),
        };
        let deadline =
            (manifest.lifecycle != Lifecycle::Persistent).then(|| begun + launch.timeout);
        let cancelled = Arc::new(AtomicBool::new(false));
        let (tx, heard) = mpsc::channel();
        let report = Arc::new(tx);
        let tell = Arc::downgrade(&report);
        let mut store = Store::new(&ready.engine, state);
        store.limiter(|s| &mut s.limits);
        let flag = cancelled.clone();
        store.epoch_deadline_callback(move |_| {
            if flag.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                Err(Interrupted.into())
            } else {
                Ok(UpdateDeadline::Continue(1))
            }
        });
        store.set_epoch_deadline(1);
        let setup = begun.elapsed();
        let started = Instant::now();
        // The epoch advances from now until the store is done with (run, or dropped unrun).
        let ticking = ready.ticker.hold();
        let mut job = move || {
            let _ticking = &ticking;
            run_start(&pre, &mut store)
        };
        let pending = if manifest.lifecycle == Lifecycle::Persistent {
            // A service keeps a thread of its own for its whole life.
            std::thread::spawn(move || {
                let _ = report.send(run::Heard::Finished(job()));
            });
            None
        } else {
            Some(run::Pending {
                job: Box::new(job),
                report,
                pool: ready.pool.clone(),
            })
        };
        Ok(WasmRun {
            run_id: launch.run_id.into_string(),
            module_name,
            cancelled,
            deadline,
            heard,
            tell,
            unheard: Arc::default(),
            pending,
            stdout,
            stderr,
            started,
            setup,
            outcome: None,
        })
    }

    /// The module's key and file name. The entry is resolved (symlinks followed, inside the
    /// folder), read and hashed once; later launches reuse that while the file's inode, size
    /// and modification time are unchanged and it is not a symlink.
    fn module_key(&self, ready: &Ready, launch: &Launch) -> Result<([u8; 32], String), ExecError> {
        use std::os::unix::fs::MetadataExt;
        if let Some(bytes) = &launch.entry_bytes {
            let module_name = Path::new(&launch.manifest.entry)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            check_module_name(&module_name)?;
            let key: [u8; 32] = Sha256::digest(bytes).into();
            self.instance_pre(ready, key, bytes)?;
            return Ok((key, module_name));
        }
        let joined = launch.dir.join(&launch.manifest.entry);
        let stamp = std::fs::symlink_metadata(&joined)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| (m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec()));
        if let Some(stamp) = stamp
            && let Some(known) = ready
                .entries
                .lock()
                .ok()
                .and_then(|e| e.get(&joined).cloned())
            && known.0 == stamp
        {
            return Ok((known.1, known.2));
        }
        let entry = outpost_host::resolve_entry(&launch.dir, &launch.manifest.entry)?;
        let module_name = entry
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        check_module_name(&module_name)?;
        let bytes = std::fs::read(&entry).map_err(|e| {
            ExecError::InvalidCapability(format!("reading {}: {e}", entry.display()))
        })?;
        let key: [u8; 32] = Sha256::digest(&bytes).into();
        self.instance_pre(ready, key, &bytes)?;
        if let (Some(stamp), Ok(mut entries)) = (stamp, ready.entries.lock()) {
            // One entry per path: a daemon's run folders are new paths every time, so the
            // table is bounded rather than left to grow with every run.
            if entries.len() >= KNOWN_ENTRIES_MAX {
                entries.clear();
            }
            entries.insert(joined, (stamp, key, module_name.clone()));
        }
        Ok((key, module_name))
    }

    fn instance_pre(
        &self,
        ready: &Ready,
        key: [u8; 32],
        bytes: &[u8],
    ) -> Result<InstancePre<RunState>, ExecError> {
        if let Some(pre) = ready.pres.lock().ok().and_then(|p| p.get(&key).cloned()) {
            return Ok(pre);
        }
        let (module, _) = ready.cache.get(bytes)?;
        if let Some(import) = module
            .imports()
            .find(|i| i.module() != "wasi_snapshot_preview1")
        {
            return Err(ExecError::InvalidCapability(format!(
                "the module imports `{}::{}`, which outpost does not provide (only WASI preview1)",
                import.module(),
                import.name()
            )));
        }
        let pre = ready.linker.instantiate_pre(&module).map_err(|e| {
            ExecError::InvalidCapability(format!("the module cannot be linked: {e}"))
        })?;
        if let Ok(mut p) = ready.pres.lock() {
            // Linked modules stay resident for reuse; a daemon that runs ever new modules
            // starts the table over rather than keep every one (the on-disk cache remains).
            if p.len() >= LINKED_MODULES_MAX {
                p.clear();
            }
            p.insert(key, pre.clone());
        }
        Ok(pre)
    }
}

/// How many entry paths [`WasmExecutor`] remembers the digest of before it forgets them all.
const KNOWN_ENTRIES_MAX: usize = 1024;

/// How many linked modules [`WasmExecutor`] keeps in memory before it forgets them all.
const LINKED_MODULES_MAX: usize = 256;

/// Refuses an entry that is not a module by its name.
fn check_module_name(module_name: &str) -> Result<(), ExecError> {
    if module_name.ends_with(".wasm") || module_name.ends_with(".wat") {
        Ok(())
    } else {
        Err(ExecError::InvalidCapability(format!(
            "entry {module_name:?} is not a .wasm or .wat module"
        )))
    }
}

/// Instantiates and runs `_start`.
fn run_start(pre: &InstancePre<RunState>, store: &mut Store<RunState>) -> Finish {
    let result = pre.instantiate(&mut *store).and_then(|instance| {
        let start = instance.get_typed_func::<(), ()>(&mut *store, "_start")?;
        start.call(&mut *store, ())
    });
    match result {
        Ok(()) => Finish::Returned,
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                Finish::Exit(exit.0)
            } else if e.downcast_ref::<Interrupted>().is_some() {
                Finish::Interrupted
            } else {
                Finish::Trap(format!("{e:?}"))
            }
        }
    }
}
