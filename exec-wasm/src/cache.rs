//! Compiled modules, cached in memory and on disk.
//!
//! On disk a module lives in a directory the daemon owns (mode 0700) as
//! `<sha256 of the module>-<engine fingerprint>.cwasm`: a magic line, the SHA-256 of the
//! serialized module, then the bytes wasmtime serialized. The checksum is verified before
//! wasmtime sees the bytes; a corrupted or foreign file is recompiled and rewritten, never
//! loaded blindly.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use outpost_core::executor::ExecError;
use sha2::{Digest, Sha256};
use wasmtime::{Engine, Module};

const MAGIC: &[u8] = b"outpost-cwasm-1\n";

/// Where a module came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheSource {
    /// Already compiled in this process.
    Memory,
    /// Loaded from the disk cache.
    Disk,
    /// Compiled now (and written to the disk cache).
    Compiled,
    /// The disk copy was bad; compiled again.
    Recompiled {
        /// What was wrong with the disk copy.
        reason: String,
    },
}

/// Compiled modules keyed by the SHA-256 of their wasm: in memory, and on disk per engine
/// fingerprint when given a folder; a corrupted or foreign file is compiled again.
pub struct ModuleCache {
    engine: Engine,
    dir: Option<PathBuf>,
    fingerprint: u64,
    memory: Mutex<HashMap<[u8; 32], Module>>,
}

impl ModuleCache {
    /// A cache for `engine`, on disk in `dir` (created with mode 0700) when given.
    pub fn new(engine: Engine, dir: Option<PathBuf>) -> Result<Self, ExecError> {
        if let Some(dir) = &dir {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .and_then(|_| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
                .map_err(|e| ExecError::Failed(format!("module cache {}: {e}", dir.display())))?;
        }
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            engine,
            dir,
            fingerprint: hasher.finish(),
            memory: Mutex::new(HashMap::new()),
        })
    }

    /// The compiled module for `bytes` (`.wasm` or `.wat`), and where it came from.
    pub fn get(&self, bytes: &[u8]) -> Result<(Module, CacheSource), ExecError> {
        let engine = &self.engine;
        let key: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(m) = self.memory.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok((m, CacheSource::Memory));
        }
        let path = self.dir.as_ref().map(|d| self.path(d, &key));
        let mut source = CacheSource::Compiled;
        let mut module = None;
        if let Some(path) = path.as_ref().filter(|p| p.exists()) {
            match load(engine, path) {
                Ok(m) => {
                    module = Some(m);
                    source = CacheSource::Disk;
                }
                Err(reason) => source = CacheSource::Recompiled { reason },
            }
        }
        let module = match module {
            Some(m) => m,
            None => {
                let m = Module::new(engine, bytes).map_err(|e| {
                    ExecError::InvalidCapability(format!("the module does not compile: {e}"))
                })?;
                if let Some(path) = &path {
                    // A cache that cannot be written only costs speed.
                    let _ = store(&m, path);
                }
                m
            }
        };
        if let Ok(mut memory) = self.memory.lock() {
            memory.insert(key, module.clone());
        }
        Ok((module, source))
    }

    /// The disk file for a module.
    pub fn path(&self, dir: &Path, key: &[u8; 32]) -> PathBuf {
        let hex = hex::encode(key);
        dir.join(format!("{hex}-{:016x}.cwasm", self.fingerprint))
    }
}

fn store(module: &Module, path: &Path) -> std::io::Result<()> {
    let serialized = module
        .serialize()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(MAGIC)?;
    f.write_all(&Sha256::digest(&serialized))?;
    f.write_all(&serialized)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[allow(unsafe_code)]
fn load(engine: &Engine, path: &Path) -> Result<Module, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("unreadable: {e}"))?;
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or("not an outpost cache file")?;
    if rest.len() < 32 {
        return Err("truncated".into());
    }
    let (sum, serialized) = rest.split_at(32);
    if Sha256::digest(serialized).as_slice() != sum {
        return Err("checksum mismatch".into());
    }
    // SAFETY: `Module::deserialize` trusts its input to be a module that wasmtime serialized.
    // These bytes are exactly what `store` wrote: the file sits in a directory only the
    // daemon's user can enter (mode 0700), and its SHA-256 matched the one written beside it,
    // so corruption and partial writes are caught above; wasmtime itself checks the engine
    // and version header. Anyone who could forge the file and its checksum already runs code
    // as this user.
    unsafe { Module::deserialize(engine, serialized) }
        .map_err(|e| format!("refused by wasmtime: {e}"))
}
