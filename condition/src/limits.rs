//! The numbers one check runs under, and who it runs for.
//!
//! Owns [`Limits`] (with the SPEC's defaults) and [`Identity`]. Plain data: nothing here
//! enforces anything; the engine does.

use std::time::Duration;

/// What one check may use. [`Limits::default`] gives the SPEC's numbers ("Condition waits":
/// 30 s deadline, 32 `ctx` calls, 4 at once, 128 KiB per call, fetch bodies of 64 KiB).
///
/// Every limit is enforced by the engine and cannot be caught by the program: a check that
/// breaks one fails with the matching [`CheckError`](crate::CheckError), whatever the program
/// does afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall time from the start of [`check`](crate::check) until it stops the program
    /// ([`CheckError::DeadlineExceeded`](crate::CheckError::DeadlineExceeded)). Measured on the
    /// engine's own monotonic clock, never shown to the program.
    pub deadline: Duration,
    /// `ctx` calls one check may make; the next one fails the check
    /// ([`CheckError::CallLimit`](crate::CheckError::CallLimit)). Refused calls count too.
    pub max_calls: u32,
    /// Host calls in flight at once; a call made while this many are running fails the check
    /// ([`CheckError::ConcurrencyLimit`](crate::CheckError::ConcurrencyLimit)).
    pub max_concurrent: u32,
    /// Bytes of one call's argument JSON and of one call's result JSON
    /// ([`CheckError::CallTooLarge`](crate::CheckError::CallTooLarge)).
    pub max_call_bytes: usize,
    /// Bytes of a fetched body; passed to the host in
    /// [`FetchRequest::max_body`](crate::FetchRequest::max_body), which enforces it.
    pub max_fetch_body: usize,
    /// Bytes the JavaScript heap may hold ([`CheckError::MemoryLimit`](crate::CheckError::MemoryLimit)).
    /// Also sets the longest array-like the generic Array builtins accept (`memory_bytes / 8`).
    /// `0` means unlimited: never for untrusted programs.
    pub memory_bytes: usize,
    /// Bytes of native stack the interpreter may use below the point where [`check`](crate::check)
    /// entered it ([`CheckError::StackOverflow`](crate::CheckError::StackOverflow)). The thread
    /// calling `check` needs this much plus some 256 KiB of its own stack. `0` means unlimited,
    /// and deep recursion then crashes the process: never use it.
    pub max_stack_bytes: usize,
    /// Bytes of the condition's source ([`CheckError::SourceTooLarge`](crate::CheckError::SourceTooLarge)).
    pub max_source_bytes: usize,
    /// Bytes of a match's `resumeText` and, separately, of its serialized `payload`
    /// ([`CheckError::BadReturn`](crate::CheckError::BadReturn)).
    pub max_payload_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(30),
            max_calls: 32,
            max_concurrent: 4,
            max_call_bytes: 128 * 1024,
            max_fetch_body: 64 * 1024,
            memory_bytes: 16 * 1024 * 1024,
            max_stack_bytes: 256 * 1024,
            max_source_bytes: 64 * 1024,
            max_payload_bytes: 64 * 1024,
        }
    }
}

/// Who a check runs for: shown to the program as `ctx.waitId`, `ctx.contextId` and
/// `ctx.requester`, and nothing else (the engine does not authorize with it; the host does).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// The wait being checked.
    pub wait_id: String,
    /// The execution context the wait was registered in.
    pub context_id: String,
    /// The principal that registered the wait; `ctx.read('runs')` shows this requester's runs.
    pub requester: String,
}
