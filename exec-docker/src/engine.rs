//! The connection to the Docker engine: where it is, the negotiated API version, and the
//! typed "unavailable" refusal when it cannot be reached.
//!
//! bollard's client is lazy (making one opens nothing), so reaching the engine means asking it
//! something: the version negotiation and `/_ping`. Both are bounded by 3 s so a hung engine
//! is reported as unavailable instead of blocking the caller.

use std::time::Duration;

use bollard::Docker;
use outpost_core::executor::{ExecError, Probe};
use outpost_core::wire::Environment;
use tokio::runtime::Runtime;

/// The engine's usual socket.
const DEFAULT_ADDRESS: &str = "unix:///var/run/docker.sock";

/// How long a probe waits for the engine before calling it unavailable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The detail of an engine that did not answer a probe.
const NO_ANSWER: &str = "no answer within 3 s";

/// How to fix an engine that does not answer.
const REMEDY: &str = "start the Docker engine (for example `systemctl start docker`) or point \
                      DOCKER_HOST at a running one";

/// How to fix a socket this user may not open.
const REMEDY_PERMISSION: &str = "give this user access to the engine's socket (the `docker` \
                                 group) or run the daemon as a user that has it";

/// Where the engine is: the configured address, else `DOCKER_HOST`, else the default socket.
pub(crate) fn engine_address(configured: Option<&str>) -> String {
    configured
        .map(str::to_owned)
        .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| DEFAULT_ADDRESS.to_owned())
}

/// Why the engine cannot be used, with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// What went wrong, naming the address.
    pub reason: String,
    /// How the machine's owner can fix it.
    pub remedy: &'static str,
}

impl Unreachable {
    pub(crate) fn new(address: &str, error: &(dyn std::error::Error + 'static)) -> Self {
        Self::described(address, error_chain(error))
    }

    fn described(address: &str, detail: String) -> Self {
        let remedy = if detail.contains("ermission denied") {
            REMEDY_PERMISSION
        } else {
            REMEDY
        };
        Self {
            reason: format!("the engine at {address} cannot be reached ({detail})"),
            remedy,
        }
    }

    /// As a probe result.
    pub fn probe(&self) -> Probe {
        Probe::Unavailable {
            reason: self.reason.clone(),
            remedy: self.remedy.into(),
        }
    }

    /// As a launch refusal.
    pub fn error(&self) -> ExecError {
        ExecError::Unavailable {
            environment: Environment::Docker,
            reason: self.reason.clone(),
            remedy: self.remedy.into(),
        }
    }
}

/// An error with its causes (`client error (Connect): Permission denied (os error 13)`): the
/// cause is what tells an owner what to fix.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let next = e.to_string();
        if !text.contains(&next) {
            text = format!("{text}: {next}");
        }
        cause = e.source();
    }
    text
}

/// A client that has negotiated its API version with a live engine.
#[derive(Clone)]
pub struct Connected {
    /// The bollard client, pinned to the API version negotiated with this engine.
    pub docker: Docker,
    /// `Docker Engine 20.10.24 (API 1.41) at unix:///var/run/docker.sock`.
    pub description: String,
}

/// Connects to the engine at `address` and negotiates the API version.
pub fn connect(runtime: &Runtime, address: &str) -> Result<Connected, Unreachable> {
    let docker = if address.starts_with("unix://") {
        Docker::connect_with_unix(address, 120, bollard::API_DEFAULT_VERSION)
    } else {
        Docker::connect_with_http(address, 120, bollard::API_DEFAULT_VERSION)
    }
    .map_err(|e| Unreachable::new(address, &e))?;
    runtime.block_on(async {
        let negotiate = tokio::time::timeout(PROBE_TIMEOUT, docker.negotiate_version());
        let docker = match negotiate.await {
            Ok(Ok(docker)) => docker,
            Ok(Err(e)) => return Err(Unreachable::new(address, &e)),
            Err(_) => return Err(Unreachable::described(address, NO_ANSWER.into())),
        };
        let version = match tokio::time::timeout(PROBE_TIMEOUT, docker.version()).await {
            Ok(Ok(version)) => version,
            Ok(Err(e)) => return Err(Unreachable::new(address, &e)),
            Err(_) => return Err(Unreachable::described(address, NO_ANSWER.into())),
        };
        let description = format!(
            "Docker Engine {} (API {}) at {address}",
            version.version.as_deref().unwrap_or("?"),
            docker.client_version(),
        );
        Ok(Connected {
            docker,
            description,
        })
    })
}

/// Asks a connected engine whether it still answers.
pub fn ping(runtime: &Runtime, connected: &Connected, address: &str) -> Result<(), Unreachable> {
    runtime.block_on(async {
        match tokio::time::timeout(PROBE_TIMEOUT, connected.docker.ping()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Unreachable::new(address, &e)),
            Err(_) => Err(Unreachable::described(address, NO_ANSWER.into())),
        }
    })
}

/// A failed request: a refusal when the engine answered, unavailable when the connection
/// failed, a plain failure otherwise (a slow or garbled answer).
pub(crate) fn engine_error(address: &str, doing: &str, e: bollard::errors::Error) -> ExecError {
    use bollard::errors::Error;
    match e {
        Error::DockerResponseServerError { message, .. } => {
            ExecError::Spawn(format!("{doing}: the engine refused: {message}"))
        }
        Error::RequestTimeoutError => ExecError::Failed(format!(
            "{doing}: the engine at {address} did not answer in time"
        )),
        e @ (Error::HyperLegacyError { .. }
        | Error::IOError { .. }
        | Error::SocketNotFoundError(_)) => Unreachable::new(address, &e).error(),
        other => ExecError::Failed(format!("{doing}: {other}")),
    }
}

/// Whether a failed request may still have reached the engine and taken effect (its answer
/// was lost), as opposed to a refusal the engine sent.
pub(crate) fn may_have_happened(e: &bollard::errors::Error) -> bool {
    !matches!(
        e,
        bollard::errors::Error::DockerResponseServerError { .. }
            | bollard::errors::Error::SocketNotFoundError(_)
    )
}
