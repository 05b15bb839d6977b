//! Why a check did not produce a verdict.
//!
//! Owns [`CheckError`] and its stable codes. A check error is one of the "consecutive check
//! errors" of the SPEC (five fail the wait); none of them is a bug in the daemon.

use std::time::Duration;

/// Why one check failed. [`CheckError::code`] is stable; the messages are for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The source is longer than [`Limits::max_source_bytes`](crate::Limits).
    #[error("the condition's source is larger than {limit} bytes")]
    SourceTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The source does not parse as a JavaScript expression.
    #[error("the condition does not parse: {message}")]
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// The source is an expression but not a function (`async ({ ctx }) => …` is expected).
    #[error("the condition must be a function such as async ({{ ctx }}) => false, got {found}")]
    NotAFunction {
        /// What it evaluated to (`typeof`).
        found: String,
    },
    /// The program threw, or its promise rejected, and it did not catch that.
    #[error("the condition threw: {message}")]
    Threw {
        /// The error's message (or the thrown value as text), shortened to 1 KiB.
        message: String,
        /// The error's `.code` when it is a string, e.g. a `ctx` call's
        /// [`CallError::code`](crate::CallError).
        code: Option<String>,
    },
    /// The program did not finish within [`Limits::deadline`](crate::Limits).
    #[error("the check did not finish within {limit:?}")]
    DeadlineExceeded {
        /// The [`Limits::deadline`](crate::Limits) the check ran past.
        limit: Duration,
    },
    /// The daemon set the check's [`Cancel`](crate::Cancel).
    #[error("the check was cancelled")]
    Cancelled,
    /// The program made more than [`Limits::max_calls`](crate::Limits) `ctx` calls.
    #[error("the condition made more than {limit} ctx calls in one check")]
    CallLimit {
        /// The most `ctx` calls one check may make ([`Limits::max_calls`](crate::Limits)).
        limit: u32,
    },
    /// The program made a `ctx` call while [`Limits::max_concurrent`](crate::Limits) were in
    /// flight.
    #[error("the condition made a ctx call while {limit} were already running")]
    ConcurrencyLimit {
        /// The most `ctx` calls in flight at once ([`Limits::max_concurrent`](crate::Limits)).
        limit: u32,
    },
    /// A `ctx` call's argument or result JSON is larger than
    /// [`Limits::max_call_bytes`](crate::Limits).
    #[error("a ctx call's {what} is larger than {limit} bytes")]
    CallTooLarge {
        /// `"argument"` or `"result"`.
        what: &'static str,
        /// The limit in bytes.
        limit: usize,
    },
    /// The program ran out of its [`Limits::memory_bytes`](crate::Limits): an allocation failed
    /// and the program did not catch the error. QuickJS throws `null` when it cannot even
    /// allocate that error, so an uncaught `throw null` is reported as this too. A program
    /// that catches the error and goes on is not stopped (its memory stays capped).
    #[error("the condition used more than {limit} bytes of memory")]
    MemoryLimit {
        /// The limit in bytes.
        limit: usize,
    },
    /// The program recursed past [`Limits::max_stack_bytes`](crate::Limits).
    #[error("the condition recursed too deeply (stack limit {limit} bytes)")]
    StackOverflow {
        /// The limit in bytes.
        limit: usize,
    },
    /// The program's promise can never settle: it is pending and no `ctx` call is in flight.
    #[error("the condition's promise never settles (pending with no ctx call in flight)")]
    Stalled,
    /// The program returned something other than `false` or `{ resumeText, payload? }`.
    #[error("the condition must return false or {{ resumeText, payload? }}: {problem}")]
    BadReturn {
        /// What was wrong, naming what was expected.
        problem: String,
    },
    /// The engine itself failed (it could not start, or `now` is not a representable date).
    /// Not the program's fault.
    #[error("the condition engine failed: {message}")]
    Engine {
        /// What failed.
        message: String,
    },
}

impl CheckError {
    /// The stable snake_case code of this error, for the wait's record and the API.
    pub fn code(&self) -> &'static str {
        match self {
            CheckError::SourceTooLarge { .. } => "condition_too_large",
            CheckError::Syntax { .. } => "condition_syntax",
            CheckError::NotAFunction { .. } => "condition_not_a_function",
            CheckError::Threw { .. } => "condition_threw",
            CheckError::DeadlineExceeded { .. } => "check_deadline",
            CheckError::Cancelled => "check_cancelled",
            CheckError::CallLimit { .. } => "ctx_call_limit",
            CheckError::ConcurrencyLimit { .. } => "ctx_concurrency_limit",
            CheckError::CallTooLarge { .. } => "ctx_call_too_large",
            CheckError::MemoryLimit { .. } => "condition_memory",
            CheckError::StackOverflow { .. } => "condition_stack",
            CheckError::Stalled => "condition_stalled",
            CheckError::BadReturn { .. } => "bad_return",
            CheckError::Engine { .. } => "condition_engine",
        }
    }
}
