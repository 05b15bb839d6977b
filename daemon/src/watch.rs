//! Tells the driver when the owner's policy file may have changed, through inotify on the
//! folder that holds it (an `outpost context policy` edit renames a new file over it, so the
//! file itself is not what to watch). The driver then reads the policy again at once instead
//! of looking at the file on a timer: an idle daemon has no wake-up for it.
//!
//! This module owns one thread per watch, which sleeps in `poll(2)` on the inotify
//! descriptor and a pipe whose other end the [`Watch`] holds; dropping the [`Watch`] ends it.
//! A watch that cannot go on (its folder removed or moved, an error) says so
//! ([`Watch::is_alive`]), and the driver then looks on its short timer again. A policy file
//! that is a symlink is not watched at all: an edit of its target would go unseen.
//! It never reads the policy (the runner's `PolicySource` does) and never decides what a
//! change means.

use std::ffi::OsString;
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// A running watch; dropping it ends its thread.
pub(crate) struct Watch {
    _stop: UnixStream,
    alive: Arc<AtomicBool>,
}

impl Watch {
    /// Whether it still tells changes (its thread runs and its folder is still watched).
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}

/// Calls `changed` whenever `file` is written, replaced, created or removed. `None` where
/// inotify cannot watch its folder (the caller then looks on a timer).
pub(crate) fn watch_file(file: &Path, changed: impl Fn() + Send + 'static) -> Option<Watch> {
    if std::fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_symlink()) {
        tracing::info!(file = %file.display(), "the policy file is a symlink: looking at it every second instead of watching it");
        return None;
    }
    let folder = file.parent()?.to_path_buf();
    let name: OsString = file.file_name()?.to_os_string();
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).ok()?;
    inotify
        .add_watch(
            &folder,
            AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_MODIFY
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_MOVED_FROM
                | AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_ATTRIB
                | AddWatchFlags::IN_DELETE_SELF
                | AddWatchFlags::IN_MOVE_SELF,
        )
        .map_err(|e| tracing::warn!(folder = %folder.display(), "cannot watch the policy's folder ({e}); looking at it every few seconds instead"))
        .ok()?;
    let (stop, stopped) = UnixStream::pair().ok()?;
    let alive = Arc::new(AtomicBool::new(true));
    let still = alive.clone();
    std::thread::Builder::new()
        .name("outpost-policy-watch".into())
        .spawn(move || {
            // Whatever ends the loop, the driver is told it must look on its own again.
            let _dead = Dead(still);
            loop {
                let mut fds = [
                    PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
                    PollFd::new(stopped.as_fd(), PollFlags::POLLIN),
                ];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => return,
                }
                if fds[1].any().unwrap_or(true) {
                    return; // the Watch was dropped (its end of the pipe closed)
                }
                let Ok(events) = inotify.read_events() else {
                    continue;
                };
                let ours = events.iter().any(|e| {
                    e.name.as_deref().is_none_or(|n| n == name.as_os_str())
                        || e.mask.intersects(
                            AddWatchFlags::IN_DELETE_SELF
                                | AddWatchFlags::IN_MOVE_SELF
                                | AddWatchFlags::IN_Q_OVERFLOW,
                        )
                });
                let gone = events.iter().any(|e| {
                    e.mask.intersects(
                        AddWatchFlags::IN_IGNORED
                            | AddWatchFlags::IN_DELETE_SELF
                            | AddWatchFlags::IN_MOVE_SELF
                            | AddWatchFlags::IN_UNMOUNT,
                    )
                });
                if gone {
                    tracing::warn!("the policy's folder is no longer watched (removed or moved); looking at it every second instead");
                    changed();
                    return;
                }
                if ours {
                    changed();
                }
            }
        })
        .ok()?;
    Some(Watch { _stop: stop, alive })
}

/// Marks a watch dead when its thread ends, however it ends.
struct Dead(Arc<AtomicBool>);

impl Drop for Dead {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_replaced_file_is_told_and_its_neighbours_are_not() {
        let dir = std::env::temp_dir().join(format!("outpost-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("policy.json");
        let (tx, rx) = mpsc::channel();
        let watch = watch_file(&file, move || {
            let _ = tx.send(());
        })
        .expect("inotify watches a folder here");
        std::fs::write(dir.join("other.json"), b"{}").unwrap();
        assert!(
            matches!(
                rx.recv_timeout(Duration::from_millis(300)),
                Err(mpsc::RecvTimeoutError::Timeout)
            ),
            "another file of the folder is not the policy"
        );
        std::fs::write(dir.join("policy.json.tmp"), b"{}").unwrap();
        std::fs::rename(dir.join("policy.json.tmp"), &file).unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the rename over the file is told");
        while rx.try_recv().is_ok() {}
        std::fs::remove_file(&file).unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the removal is told");
        while rx.try_recv().is_ok() {}
        assert!(watch.is_alive());
        drop(watch);
        // The thread ended with the watch: the sender it held is gone.
        assert!(
            matches!(
                rx.recv_timeout(Duration::from_secs(10)),
                Err(mpsc::RecvTimeoutError::Disconnected)
            ),
            "dropping the watch ends its thread"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_removed_folder_ends_the_watch_and_says_so() {
        let dir = std::env::temp_dir().join(format!("outpost-watch-gone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (tx, rx) = mpsc::channel();
        let watch = watch_file(&dir.join("policy.json"), move || {
            let _ = tx.send(());
        })
        .expect("inotify watches a folder here");
        std::fs::remove_dir_all(&dir).unwrap();
        // Told once, then the thread ends (its sender with it).
        while rx.recv_timeout(Duration::from_secs(10)).is_ok() {}
        assert!(!watch.is_alive(), "the driver is told to look on its own");
    }

    #[test]
    fn a_symlinked_policy_file_is_not_watched() {
        let dir = std::env::temp_dir().join(format!("outpost-watch-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("real.json"), b"{}").unwrap();
        std::os::unix::fs::symlink(dir.join("real.json"), dir.join("policy.json")).unwrap();
        let watch = watch_file(&dir.join("policy.json"), || {});
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            watch.is_none(),
            "its target's edits would go unseen: the timer looks"
        );
    }
}
