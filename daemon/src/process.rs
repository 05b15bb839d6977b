//! The daemon as an operating-system process, around [`crate::run_daemon`]: before it, an
//! older binary hands over to the newest proven update; after it, a daemon stopped for good
//! disables its service so the manager never starts it again, and a daemon that drained for
//! an update hands over to it. The CLI calls these two functions instead of reaching into the
//! update and service modules.
//!
//! This module owns those two moments of the process. It never runs the daemon, never
//! prints (it returns what the caller should say) and never decides whether an update is
//! due ([`crate::update`] does).

use outpost_host::OwnerFolders;

use crate::{DaemonError, DaemonExit, Launcher, service, update};

/// Before the daemon starts: an older binary runs the newest proven update instead (a
/// staged one on its trial), in place of this process. Returns only when this binary runs
/// on — with the sentence to print when the update was due but could not be started.
pub fn hand_over_at_start(folders: &OwnerFolders) -> Option<String> {
    match update::at_start(&folders.state) {
        update::AtStart::Run => None,
        update::AtStart::HandOver(binary) => {
            let e = update::hand_over(&binary);
            Some(format!(
                "cannot start the update {}: {e}; running this version",
                binary.display()
            ))
        }
    }
}

/// After the daemon stopped as `ended` says: a daemon stopped for good (replaced, revoked,
/// unregistered, or refused by its `stopped.json`) disables the service `launcher` started it
/// as; one that drained for an update runs it in place of this process. Returns only when
/// this process is to exit — with the sentence to print when the update could not be
/// started (then exit 1).
pub fn after_stop(
    ended: &Result<DaemonExit, DaemonError>,
    launcher: Launcher,
    folders: &OwnerFolders,
) -> Option<String> {
    let for_good = matches!(
        ended,
        Ok(DaemonExit::Replaced | DaemonExit::Revoked)
            | Err(DaemonError::Unregistered { .. } | DaemonError::StoppedForGood { .. })
    );
    if for_good {
        service::disable_after_stop(launcher, folders);
    }
    if matches!(ended, Ok(DaemonExit::Updated))
        && let update::AtStart::HandOver(binary) = update::at_start(&folders.state)
    {
        let e = update::hand_over(&binary);
        return Some(format!("cannot start the update {}: {e}", binary.display()));
    }
    None
}
