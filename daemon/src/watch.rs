//! Tells the driver when the owner's policy file may have changed, through inotify on the
//! folder that holds it (an `outpost context policy` edit renames a new file over it, so the
//! file itself is not what to watch). The driver then reads the policy again at once instead
//! of looking at the file on a timer: an idle daemon has no wake-up for it.
//!
//! This module owns one thread per watch, which sleeps in `poll(2)` on the inotify
//! descriptor and a pipe whose other end the [`Watch`] holds; dropping the [`Watch`] ends it.
//! It never reads the policy (the runner's `PolicySource` does) and never decides what a
//! change means.

use std::ffi::OsString;
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::path::Path;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// A running watch; dropping it ends its thread.
pub(crate) struct Watch {
    _stop: UnixStream,
}

/// Calls `changed` whenever `file` is written, replaced, created or removed. `None` where
/// inotify cannot watch its folder (the caller then looks on a timer).
pub(crate) fn watch_file(file: &Path, changed: impl Fn() + Send + 'static) -> Option<Watch> {
    let folder = file.parent()?.to_path_buf();
    let name: OsString = file.file_name()?.to_os_string();
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).ok()?;
    inotify
        .add_watch(
            &folder,
            AddWatchFlags::IN_CLOSE_WRITE
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
    std::thread::Builder::new()
        .name("outpost-policy-watch".into())
        .spawn(move || {
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
                if ours {
                    changed();
                }
            }
        })
        .ok()?;
    Some(Watch { _stop: stop })
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
}
