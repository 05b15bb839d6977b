//! The features a daemon announces that can change while it runs: `fs` (the owner's policy
//! mounts a granted folder) with a `mount:MODE:PATH` for each folder a run sees,
//! `confinement:<rule>`, and `record-input` (the owner lets the server record terminal input).
//!
//! It owns when they are looked at and what changed; it never feeds the core (the driver's
//! tick announces what this returns).

use std::time::{Duration, Instant as StdInstant};

use crate::runner::Runner;
use outpost_core::api::MountView;
use outpost_core::terminal::cast::FEATURE_RECORD_INPUT;
use outpost_core::wire::{FEATURE_MOUNT_PREFIX, MAX_MOUNT_FEATURES};

/// The `fs` feature as it is now: announced while the owner's policy mounts a granted
/// folder, looked at on each grant and every [`FEATURE_LOOK`] (the policy file may change);
/// and `confinement:<rule>`, the owner's sandbox rule as the policy says it now.
pub(super) struct Features {
    base: Vec<String>,
    pub(super) granted: Vec<outpost_core::wire::FolderGrant>,
    fs: bool,
    /// The `mount:MODE:PATH` features: the folders a run sees now.
    mounts: Vec<String>,
    confinement: Option<String>,
    record_input: bool,
    /// When it looked last; `None`: look at the next tick (a grant came, the policy changed).
    looked: Option<StdInstant>,
}

/// How the owner's sandbox rule is announced (`confinement:required`, …).
const CONFINEMENT_FEATURE: &str = "confinement:";

/// How often the driver looks whether the `fs` feature changed while the policy file is
/// watched (a change of the file is looked at at once; this catches a granted folder that
/// appeared or went).
const FEATURE_LOOK: Duration = Duration::from_secs(30);

/// How often it looks when the policy file cannot be watched.
const FEATURE_LOOK_UNWATCHED: Duration = Duration::from_secs(1);

impl Features {
    pub(super) fn new(announced: &[String]) -> Self {
        Self {
            base: announced
                .iter()
                .filter(|f| {
                    *f != "fs"
                        && *f != FEATURE_RECORD_INPUT
                        && !f.starts_with(CONFINEMENT_FEATURE)
                        && !f.starts_with(FEATURE_MOUNT_PREFIX)
                })
                .cloned()
                .collect(),
            granted: Vec::new(),
            fs: announced.iter().any(|f| f == "fs"),
            mounts: announced
                .iter()
                .filter(|f| f.starts_with(FEATURE_MOUNT_PREFIX))
                .cloned()
                .collect(),
            record_input: announced.iter().any(|f| f == FEATURE_RECORD_INPUT),
            confinement: announced
                .iter()
                .find(|f| f.starts_with(CONFINEMENT_FEATURE))
                .cloned(),
            looked: Some(StdInstant::now()),
        }
    }

    /// When the next look is due: [`FEATURE_LOOK`] after the last while the policy file is
    /// `watched`, [`FEATURE_LOOK_UNWATCHED`] after it while not.
    /// `None`: at once.
    pub(super) fn next_look(&self, watched: bool) -> Option<StdInstant> {
        let every = if watched {
            FEATURE_LOOK
        } else {
            FEATURE_LOOK_UNWATCHED
        };
        self.looked.map(|at| at + every)
    }

    /// Looks at the driver's next tick (a grant came, the policy file changed).
    pub(super) fn look_now(&mut self) {
        self.looked = None;
    }

    /// The features to announce, when they changed since the last look.
    pub(super) fn look(&mut self, runner: &Runner, watched: bool) -> Option<Vec<String>> {
        let now = StdInstant::now();
        if self.next_look(watched).is_some_and(|at| now < at) {
            return None;
        }
        self.looked = Some(now);
        let mounts: Vec<String> = runner
            .visible_mounts(&self.granted)
            .into_iter()
            .take(MAX_MOUNT_FEATURES)
            .map(|m| {
                MountView {
                    path: m.path.as_str().to_owned(),
                    mode: m.mode,
                }
                .feature()
            })
            .collect();
        let fs = !mounts.is_empty();
        let confinement = Some(format!(
            "{CONFINEMENT_FEATURE}{}",
            runner.confinement().as_str()
        ));
        let record_input = runner.records_terminal_input();
        if fs == self.fs
            && mounts == self.mounts
            && confinement == self.confinement
            && record_input == self.record_input
        {
            return None;
        }
        (self.fs, self.mounts, self.confinement, self.record_input) =
            (fs, mounts, confinement, record_input);
        let mut features = self.base.clone();
        if fs {
            features.push("fs".into());
        }
        features.extend(self.mounts.iter().cloned());
        features.extend(self.confinement.clone());
        if record_input {
            features.push(FEATURE_RECORD_INPUT.into());
        }
        Some(features)
    }
}
