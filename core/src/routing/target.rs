//! What an execute asks for: a context or the chain, whether to fall back, what it needs,
//! and what to do when the named machine is offline.
//!
//! This file owns the shape of that request and its validation. It never decides where the
//! run goes; that is [`super::plan`].

use serde::{Deserialize, Serialize};

/// Minutes a queued run waits for an offline context when the caller names no number.
pub const DEFAULT_QUEUE_MINUTES: u32 = 60;
/// The longest a run may wait for an offline context, in minutes (one day).
pub const MAX_QUEUE_MINUTES: u32 = 1440;

/// Something only a machine can give a run. Any requirement keeps the run off the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Requirement {
    /// Host folders.
    Fs,
    /// The machine's local network.
    Lan,
}

impl Requirement {
    /// The requirement as written in a request.
    pub fn as_str(self) -> &'static str {
        match self {
            Requirement::Fs => "fs",
            Requirement::Lan => "lan",
        }
    }

    /// The requirement a request spells `text` (`fs`, `lan`); none for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        [Requirement::Fs, Requirement::Lan]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

/// Whether a run that names a context may fall through to the caller's chain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// Only the named context (strict).
    #[default]
    None,
    /// The named context first, then the caller's chain.
    Chain,
}

/// What happens when the named context is offline (`whenOffline`), or online with every slot
/// taken (`whenBusy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "camelCase", try_from = "WhenOfflineWire")]
pub enum WhenOffline {
    /// Skip it (and fail if nothing else is left).
    #[default]
    Fail,
    /// Hold the run until it reconnects, at most `minutes`.
    Queue {
        /// 1 to [`MAX_QUEUE_MINUTES`].
        minutes: u32,
    },
}

impl WhenOffline {
    /// Queue for `minutes`, checked to be 1 to [`MAX_QUEUE_MINUTES`].
    pub fn queue(minutes: u32) -> Result<Self, TargetError> {
        if (1..=MAX_QUEUE_MINUTES).contains(&minutes) {
            Ok(WhenOffline::Queue { minutes })
        } else {
            Err(TargetError::QueueMinutesOutOfRange { minutes })
        }
    }

    /// Whether this is [`WhenOffline::Fail`].
    pub fn is_fail(&self) -> bool {
        *self == WhenOffline::Fail
    }

    /// Queue for [`DEFAULT_QUEUE_MINUTES`].
    pub fn queue_default() -> Self {
        WhenOffline::Queue {
            minutes: DEFAULT_QUEUE_MINUTES,
        }
    }
}

/// The wire form, checked on the way in.
#[derive(Deserialize)]
#[serde(tag = "mode", rename_all = "camelCase")]
enum WhenOfflineWire {
    Fail,
    Queue {
        #[serde(default = "default_queue_minutes")]
        minutes: u32,
    },
}

fn default_queue_minutes() -> u32 {
    DEFAULT_QUEUE_MINUTES
}

impl TryFrom<WhenOfflineWire> for WhenOffline {
    type Error = TargetError;

    fn try_from(wire: WhenOfflineWire) -> Result<Self, Self::Error> {
        match wire {
            WhenOfflineWire::Fail => Ok(WhenOffline::Fail),
            WhenOfflineWire::Queue { minutes } => WhenOffline::queue(minutes),
        }
    }
}

/// Why an execute's routing request is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The queue time is 0 or more than a day.
    #[error(
        "a run can wait 1 to {MAX_QUEUE_MINUTES} minutes for an offline context, not {minutes}"
    )]
    QueueMinutesOutOfRange {
        /// The minutes asked for.
        minutes: u32,
    },
}

impl TargetError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            TargetError::QueueMinutesOutOfRange { .. } => "queue_minutes_out_of_range",
        }
    }
}

/// Where an execute wants to run and what it needs there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteTarget {
    /// A context id (or `"cloud"`); `None` uses the caller's chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Whether a named context may fall through to the chain.
    #[serde(default)]
    pub fallback: Fallback,
    /// What only a machine can give; any entry keeps the run off the server.
    #[serde(default)]
    pub requires: Vec<Requirement>,
    /// What to do when the named context is offline.
    #[serde(default)]
    pub when_offline: WhenOffline,
    /// What to do when the named context is online with every slot taken: fail (and fall
    /// through, with `fallback`), or wait for a free slot, in order of arrival.
    #[serde(default, skip_serializing_if = "WhenOffline::is_fail")]
    pub when_busy: WhenOffline,
    /// Whether the run wants host commands.
    #[serde(default)]
    pub wants_commands: bool,
}

impl ExecuteTarget {
    /// A run that follows the caller's chain.
    pub fn chain() -> Self {
        Self::default()
    }

    /// A run on the context `id` only.
    pub fn named(id: impl Into<String>) -> Self {
        Self {
            context: Some(id.into()),
            ..Self::default()
        }
    }

    /// True when the run requires `requirement`.
    pub fn requires(&self, requirement: Requirement) -> bool {
        self.requires.contains(&requirement)
    }

    /// Checks what the types cannot (queue minutes built without [`WhenOffline::queue`]).
    pub fn validate(&self) -> Result<(), TargetError> {
        for mode in [self.when_offline, self.when_busy] {
            if let WhenOffline::Queue { minutes } = mode {
                WhenOffline::queue(minutes)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_minutes_are_bounded() {
        assert_eq!(WhenOffline::queue(1), Ok(WhenOffline::Queue { minutes: 1 }));
        assert_eq!(
            WhenOffline::queue(1440),
            Ok(WhenOffline::Queue { minutes: 1440 })
        );
        assert_eq!(
            WhenOffline::queue(0).unwrap_err().code(),
            "queue_minutes_out_of_range"
        );
        assert_eq!(
            WhenOffline::queue(1441).unwrap_err().code(),
            "queue_minutes_out_of_range"
        );
        assert_eq!(
            WhenOffline::queue_default(),
            WhenOffline::Queue { minutes: 60 }
        );
    }

    #[test]
    fn targets_read_from_camel_case_json() {
        let target: ExecuteTarget = serde_json::from_str(
            r#"{"context":"ec_1","fallback":"chain","requires":["fs","lan"],"whenOffline":{"mode":"queue"},"wantsCommands":true}"#,
        )
        .unwrap();
        assert_eq!(target.context.as_deref(), Some("ec_1"));
        assert_eq!(target.fallback, Fallback::Chain);
        assert!(target.requires(Requirement::Fs) && target.requires(Requirement::Lan));
        assert_eq!(target.when_offline, WhenOffline::Queue { minutes: 60 });
        assert!(target.wants_commands);
        assert_eq!(
            serde_json::from_str::<ExecuteTarget>("{}").unwrap(),
            ExecuteTarget::chain()
        );
    }

    #[test]
    fn out_of_range_queue_minutes_are_refused_on_the_wire_and_by_validate() {
        let bad = r#"{"whenOffline":{"mode":"queue","minutes":5000}}"#;
        assert!(serde_json::from_str::<ExecuteTarget>(bad).is_err());
        let built = ExecuteTarget {
            when_offline: WhenOffline::Queue { minutes: 0 },
            ..ExecuteTarget::named("ec_1")
        };
        assert_eq!(
            built.validate().unwrap_err().code(),
            "queue_minutes_out_of_range"
        );
        let json = serde_json::to_string(&WhenOffline::queue(30).unwrap()).unwrap();
        assert_eq!(json, r#"{"mode":"queue","minutes":30}"#);
    }
}
