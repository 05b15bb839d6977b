//! The daemon's own log file, `state/daemon.log`, kept by a daemon started in a terminal so
//! that `outpost daemon logs` has something to read (a systemd unit logs to the journal, and
//! launchd already sends the daemon's stderr to that file).
//!
//! Every log line goes to stderr as before and, once [`keep`] was called, to the file too
//! (without colours). The file is appended to across restarts and rotated at [`ROTATE_AT`]:
//! the full file becomes `daemon.log.1` (replacing the one before), so the log never holds
//! more than twice that. This module never decides what is logged; a file it cannot write
//! only loses the file's copy.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The size at which the log file is rotated.
pub const ROTATE_AT: u64 = 8 * 1024 * 1024;

struct Kept {
    path: PathBuf,
    file: File,
    len: u64,
}

static KEPT: OnceLock<Mutex<Kept>> = OnceLock::new();

/// Copies every later log line to `path` (created 0600, appended to).
pub fn keep(path: &Path) -> std::io::Result<()> {
    let file = open(path)?;
    let len = file.metadata()?.len();
    let _ = KEPT.set(Mutex::new(Kept {
        path: path.to_owned(),
        file,
        len,
    }));
    Ok(())
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Appends `line` (and a newline) to the kept file, if one is kept: for what the daemon says
/// on stderr outside the log (how it stopped).
pub fn line(line: &str) {
    let mut bytes = line.as_bytes().to_vec();
    bytes.push(b'\n');
    let _ = FileWriter.write_all(&bytes);
}

/// The log's second writer: the kept file, or nothing.
#[derive(Clone, Copy)]
pub struct FileWriter;

impl Write for FileWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(kept) = KEPT.get() else {
            return Ok(buf.len());
        };
        let mut kept = kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len >= ROTATE_AT {
            let older = kept.path.with_extension("log.1");
            if std::fs::rename(&kept.path, &older).is_ok()
                && let Ok(file) = open(&kept.path)
            {
                kept.file = file;
                kept.len = 0;
            }
        }
        kept.file.write_all(buf)?;
        kept.len += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for FileWriter {
    type Writer = FileWriter;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_rotates_when_full() {
        let dir = std::env::temp_dir().join(format!("outpost-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("daemon.log");
        keep(&path).unwrap();
        line("first");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "first\n");
        {
            let mut kept = KEPT.get().unwrap().lock().unwrap();
            kept.len = ROTATE_AT;
        }
        line("second");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second\n");
        assert_eq!(
            std::fs::read_to_string(dir.join("daemon.log.1")).unwrap(),
            "first\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
