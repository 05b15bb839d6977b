//! What a condition may ask of the machine, and the trait the daemon implements to answer.
//!
//! Owns the typed requests ([`ReadRequest`], [`FetchRequest`], [`ExecRequest`]), their
//! answers, [`CallError`] and the [`Host`] trait. The engine validates every request before a
//! host sees it; this module must never do I/O itself.

use crate::Cancel;

/// The daemon's side of a check: answers the validated `ctx` calls.
///
/// Each call runs on its own thread, at most [`Limits::max_concurrent`](crate::Limits) at once.
/// Every method gets the check's [`Cancel`]: once it is set (the check was cancelled, hit its
/// deadline or finished while the call was still running) the method must return promptly,
/// with any [`CallError`]; [`check`](crate::check) joins the call's thread before it returns,
/// so a method that never returns keeps `check` from returning. A panic in a method rejects
/// the call with [`CallError::HOST_PANICKED`].
///
/// Authorization is the host's: the engine only checks the shape of a request.
pub trait Host: Send + Sync + 'static {
    /// `ctx.read(resource, params)`: outpost's own observations of this machine, scoped to the
    /// wait's requester ([`ReadRequest`] says what each resource covers).
    fn read(&self, req: ReadRequest, cancel: &Cancel) -> Result<Observation, CallError>;

    /// `ctx.fetch(url, options)`: one HTTP request. The URL, method and headers were checked
    /// already (see [`FetchRequest`]); the host must NOT follow redirects (a 3xx is returned as
    /// it came) and must stop reading the body at [`FetchRequest::max_body`] bytes (failing the
    /// call or truncating, as the daemon documents). The body reaches the program as a string:
    /// decode it as UTF-8, lossily.
    fn fetch(&self, req: FetchRequest, cancel: &Cancel) -> Result<FetchResponse, CallError>;

    /// `ctx.exec({command, args, cwd})`: runs `command` directly with `args` as its argument
    /// vector, never through a shell (no interpolation, globbing or expansion). Whether host
    /// commands may run at all (host-command trust: both switches, operator only) is the host's
    /// decision: refuse with a [`CallError`] when they may not.
    fn exec(&self, req: ExecRequest, cancel: &Cancel) -> Result<ExecOutput, CallError>;
}

/// A validated `ctx.read`. Unknown resources and unknown or mistyped params never get here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadRequest {
    /// `read('runs')`: the requester's runs on this machine.
    Runs,
    /// `read('services')`: the services running on this machine.
    Services,
    /// `read('files', {path, read?})`: one path, which the host must resolve inside the run's
    /// mounts (and refuse otherwise).
    Files {
        /// The path asked for, as given (non-empty, no NUL byte).
        path: String,
        /// `true` asks for the file's content (a small read), not only its metadata.
        read: bool,
    },
    /// `read('events', {since?, limit?})`: the wait's events, oldest first.
    Events {
        /// Only events whose sequence number is greater than this.
        since: Option<u64>,
        /// At most this many events, 1 to 100 (default 100).
        limit: u32,
    },
}

/// What `ctx.read` resolves to: `{ value, observedAt }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The observation itself, any JSON.
    pub value: serde_json::Value,
    /// When the host observed it, in milliseconds since the Unix epoch (`observedAt`).
    pub observed_at_unix_ms: u64,
}

/// The two methods a fetch may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchMethod {
    /// `GET` (the default).
    Get,
    /// `HEAD`.
    Head,
}

impl FetchMethod {
    /// The method as it goes on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            FetchMethod::Get => "GET",
            FetchMethod::Head => "HEAD",
        }
    }
}

/// A validated `ctx.fetch`: an `http` or `https` URL without credentials, GET or HEAD, and only
/// the `accept` and `accept-language` headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The URL, parsed and re-serialized (WHATWG), fragment removed.
    pub url: String,
    /// GET or HEAD.
    pub method: FetchMethod,
    /// Header names in lowercase (`accept`, `accept-language`), values without line breaks.
    pub headers: Vec<(String, String)>,
    /// The most body bytes the host may read ([`Limits::max_fetch_body`](crate::Limits)).
    pub max_body: usize,
}

/// What `ctx.fetch` resolves to: `{ status, headers, body }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// The HTTP status, redirects included (they are not followed).
    pub status: u16,
    /// Response headers; names are lowercased for the program and repeated names joined with
    /// `", "`.
    pub headers: Vec<(String, String)>,
    /// The body, at most [`FetchRequest::max_body`] bytes of it.
    pub body: String,
}

/// A validated `ctx.exec`: a program and its argument vector, never a shell line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// The program to run (non-empty, no NUL byte); looked up as the host decides.
    pub command: String,
    /// Its arguments, passed verbatim (no NUL byte).
    pub args: Vec<String>,
    /// The working directory, if the program gave one (no NUL byte).
    pub cwd: Option<String>,
}

/// What `ctx.exec` resolves to: `{ exitCode, stdout, stderr }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit code; `None` (`null` in JavaScript) when a signal ended the process.
    pub exit_code: Option<i32>,
    /// Standard output, decoded as the host sees fit.
    pub stdout: String,
    /// Standard error, decoded as the host sees fit.
    pub stderr: String,
}

/// Why a `ctx` call was refused or failed. The program sees a rejected promise with an `Error`
/// whose `.code` is [`code`](Self::code) and `.message` is [`message`](Self::message); it may
/// catch it. Uncaught, it fails the check with [`CheckError::Threw`](crate::CheckError::Threw).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CallError {
    /// A stable snake_case code: one of the constants below or the host's own.
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
}

impl CallError {
    /// `ctx.read` of a resource that does not exist.
    pub const UNKNOWN_RESOURCE: &'static str = "unknown_resource";
    /// A call whose arguments have the wrong shape.
    pub const INVALID_PARAMS: &'static str = "invalid_params";
    /// A fetch that breaks one of the fetch rules (scheme, credentials, method, headers).
    pub const FETCH_REFUSED: &'static str = "fetch_refused";
    /// The host panicked while answering.
    pub const HOST_PANICKED: &'static str = "host_panicked";

    /// A call error with this code and message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        CallError {
            code: code.into(),
            message: message.into(),
        }
    }
}
