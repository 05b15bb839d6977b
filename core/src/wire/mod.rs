//! The wire: typed frames for both directions, the length-prefixed stream codec, and the
//! protocol's constants and codes (close codes, concurrency limits, violation and refusal
//! codes).
//!
//! This module owns the shape of every frame, the framing of a byte stream and every number
//! or code the roles share. It does not
//! sign or verify (that is [`crate::sign`]) and never decides what a frame means for a
//! session (that is the state machines').

mod binary;
mod bundle;
mod codec;
mod codes;
mod control;
mod frame;
mod label;
mod result;
mod types;

pub use binary::{MAX_PTY_OUTPUT_DATA, PTY_OUTPUT_TAG, PtyOutputFrame};
pub use bundle::{
    BUNDLE_TYPE, BUNDLE_VERSION, BundleDoc, BundleError, MAX_BUNDLE_BYTES, bundle_digest,
    decode_bundle, encode_bundle,
};
pub use codec::{DEFAULT_MAX_FRAME_LEN, FrameDecoder, LENGTH_PREFIX_LEN, encode_frame};
pub use codes::{
    DEFAULT_MAX_CONCURRENT, INLINE_CAPABILITY_LIMIT, MAX_CONCURRENT_LIMIT, Refusal, Violation,
    close_code,
};
pub use control::{
    ControlAction, ControlOutcome, DEFAULT_CONTROL_LINES, FEATURE_CONTROL, MAX_CONTROL_LINE_BYTES,
    MAX_CONTROL_LINES, bounded_line,
};
pub(crate) use frame::server_frame_from_value;
pub use frame::{
    DAEMON_FRAME_TYPES, DaemonFrame, FEATURE_RUN_OUTPUT, MAX_RUN_OUTPUT_TEXT, PTY_WINDOW,
    SERVER_FRAME_TYPES, ServerFrame,
};
pub use label::{MAX_FRAME_LABEL, frame_label};
pub use result::RunResult;
pub use types::{
    CapabilitySource, CheckError, CommandsGrant, Egress, Environment, ErrorBody,
    FEATURE_MOUNT_PREFIX, FolderGrant, FolderMode, Grant, GrantLimits, InlineFile,
    MAX_MOUNT_FEATURES, OutputStream, PROTOCOL_VERSION, RunStatus, Timing,
};

use crate::json::JsonError;

/// Why bytes were refused as a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The length prefix announces more than the limit.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// The length the prefix announced, in bytes.
        len: u64,
        /// The most bytes the reader takes in one frame.
        max: u64,
    },
    /// The length prefix announces an empty frame.
    #[error("empty frame")]
    EmptyFrame,
    /// The body is not acceptable JSON.
    #[error("{0}")]
    Json(#[from] JsonError),
    /// The object has no `type` member.
    #[error("frame has no `type`")]
    MissingFrameType,
    /// The `type` names no frame of this direction.
    #[error("unknown frame type {0:?}")]
    UnknownFrameType(String),
    /// A known frame with missing or mistyped fields.
    #[error("invalid frame: {0}")]
    InvalidFrame(String),
}

impl WireError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            WireError::FrameTooLarge { .. } => "frame_too_large",
            WireError::EmptyFrame => "empty_frame",
            WireError::Json(e) => e.code(),
            WireError::MissingFrameType => "missing_frame_type",
            WireError::UnknownFrameType(_) => "unknown_frame_type",
            WireError::InvalidFrame(_) => "invalid_frame",
        }
    }
}

#[cfg(test)]
mod tests;
