//! A wait's registration and ending as frames: `wait.register` ↔ [`WaitSpec`], and
//! `wait.matched` / `wait.failed` ↔ [`Report`]. The one place both roles map them; it never
//! decides anything.

use super::{Ending, FailReason, Report, WaitSpec};
use crate::wire::{DaemonFrame, ServerFrame, WireError};

impl WaitSpec {
    /// The `wait.register` frame that carries this registration.
    pub fn into_frame(self) -> ServerFrame {
        ServerFrame::WaitRegister {
            wait_id: self.wait_id,
            requester: self.requester,
            source: self.source,
            interval_ms: self.interval_ms,
            expires_at_ms: self.expires_at_ms,
            operator: self.operator,
        }
    }

    /// The registration a `wait.register` carries; `None` for any other frame.
    pub fn from_frame(frame: ServerFrame) -> Option<Self> {
        match frame {
            ServerFrame::WaitRegister {
                wait_id,
                requester,
                source,
                interval_ms,
                expires_at_ms,
                operator,
            } => Some(WaitSpec {
                wait_id,
                requester,
                source,
                interval_ms,
                expires_at_ms,
                operator,
            }),
            _ => None,
        }
    }
}

impl Report {
    /// The frame that carries this ending: `wait.matched` or `wait.failed`.
    pub fn into_frame(self) -> DaemonFrame {
        let Report {
            wait_id,
            checks,
            last_error,
            ending,
        } = self;
        match ending {
            Ending::Matched {
                resume_text,
                payload,
                evidence,
                continuation_id,
                matched_at_ms,
            } => DaemonFrame::WaitMatched {
                wait_id,
                checks,
                resume_text,
                payload,
                evidence,
                continuation_id,
                matched_at_ms,
                last_error,
            },
            Ending::Failed { reason, at_ms } => DaemonFrame::WaitFailed {
                wait_id,
                checks,
                reason: reason.code().to_owned(),
                at_ms,
                last_error,
            },
        }
    }

    /// The ending a `wait.matched` / `wait.failed` carries; an unknown `reason`, or any other
    /// frame, is an invalid frame.
    pub fn from_frame(frame: DaemonFrame) -> Result<Self, WireError> {
        match frame {
            DaemonFrame::WaitMatched {
                wait_id,
                checks,
                resume_text,
                payload,
                evidence,
                continuation_id,
                matched_at_ms,
                last_error,
            } => Ok(Report {
                wait_id,
                checks,
                last_error,
                ending: Ending::Matched {
                    resume_text,
                    payload,
                    evidence,
                    continuation_id,
                    matched_at_ms,
                },
            }),
            DaemonFrame::WaitFailed {
                wait_id,
                checks,
                reason,
                at_ms,
                last_error,
            } => {
                let Some(reason) = FailReason::from_code(&reason) else {
                    return Err(WireError::InvalidFrame(format!(
                        "wait.failed reason `{reason}` is not check_errors, expired or cancelled"
                    )));
                };
                Ok(Report {
                    wait_id,
                    checks,
                    last_error,
                    ending: Ending::Failed { reason, at_ms },
                })
            }
            other => Err(WireError::InvalidFrame(format!(
                "{} is not a wait's ending",
                other.type_name()
            ))),
        }
    }
}
