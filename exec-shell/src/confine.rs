//! The sandbox a shell run starts in: [`outpost_host::sandbox`], named here too because the
//! `outpost` binary dispatches its hidden `confine` subcommand through this crate.
//!
//! This module owns nothing of its own; the pty executor uses the same sandbox through the
//! host crate, never through this one.

pub use outpost_host::sandbox::{
    EXIT_CANNOT_EXECUTE, EXIT_NOT_CONFINED, PROBE_OK, STDERR_PREFIX, SUBCOMMAND, SYSTEM_READ_ONLY,
    WRITABLE_DEVICES, helper_main,
};
