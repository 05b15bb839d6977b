//! What the cli benches share: a temp folder per bench and a daemon run in the bench's own
//! process (`run_daemon` on a host of the kind asked for), stopped when dropped.
#![allow(dead_code)]

use std::path::PathBuf;
use std::thread::JoinHandle;

use outpost_adapters::daemon::{
    DaemonError, DaemonExit, DaemonOptions, HostKind, OwnedHost, ServerChoice, StopSignal,
    run_daemon,
};
use outpost_core::executor::Registry;
use outpost_core::grant::LocalPolicy;
use outpost_core::join::Join;
use outpost_host::{HOME_VAR, OwnerFolders};

/// A fresh, empty folder for this bench process, named after `tag`.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("outpost-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A daemon joined as `name`, running on its own thread until dropped.
pub struct Daemon {
    stop: StopSignal,
    thread: Option<JoinHandle<Result<DaemonExit, DaemonError>>>,
    _host: OwnedHost,
}

impl Daemon {
    /// Starts a daemon over `home` with `slots` slots and the executors of `registry`.
    pub fn start(
        kind: HostKind,
        home: PathBuf,
        name: &str,
        join: &Join,
        slots: u32,
        registry: Registry,
    ) -> Daemon {
        std::fs::create_dir_all(&home).unwrap();
        let folders =
            OwnerFolders::from_vars(|n| (n == HOME_VAR).then(|| home.clone().into_os_string()))
                .unwrap();
        let options = DaemonOptions {
            server: ServerChoice::Join(join.clone()),
            name: name.into(),
            folders,
            max_concurrent: slots,
            ca_file: None,
            local: LocalPolicy::default(),
            features: Vec::new(),
            seed: 1,
            passphrase: None,
            launcher: outpost_adapters::daemon::Launcher::Terminal,
        };
        let host = OwnedHost::new(kind).unwrap();
        let stop = StopSignal::new();
        let (h, s) = (host.host.clone(), stop.clone());
        let thread = Some(std::thread::spawn(move || {
            run_daemon(options, registry, h, s)
        }));
        Daemon {
            stop,
            thread,
            _host: host,
        }
    }
}

impl Drop for Daemon {
    /// Asks twice (stop at once, not a drain) and joins the daemon's thread.
    fn drop(&mut self) {
        self.stop.raise();
        self.stop.raise();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
