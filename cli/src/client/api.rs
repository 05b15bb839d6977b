//! The user side of the HTTP API (PROTOCOL §11.4): a bearer-token client over ureq, and where
//! the server and the token come from when the command line does not say.
//!
//! This module owns finding the server (`--server`, `OUTPOST_SERVER`, or the local server's
//! `join` file) and the token (`OUTPOST_TOKEN`, or the local server's `admin.token`). It never
//! prints; callers decide what a person reads.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use outpost_adapters::tls::Trust;
use outpost_core::api::ErrorAnswer;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// An error answer of the API: its status and the `{error:{code,message}}` body.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status (0 when the server could not be reached).
    pub status: u16,
    /// The server's stable code from the body, or the client's own (`server_unreachable`,
    /// `bad_answer`, `http_error`, …).
    pub code: String,
    /// What the server said.
    pub message: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.status == 0 {
            write!(f, "{} ({})", self.message, self.code)
        } else {
            write!(f, "{} ({}, HTTP {})", self.message, self.code, self.status)
        }
    }
}

impl std::error::Error for ApiError {}

/// The local server's state folder: `OUTPOST_STATE`, else `$XDG_DATA_HOME/outpost/server`,
/// else `~/.local/share/outpost/server`.
pub fn default_state_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("OUTPOST_STATE") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(data) = std::env::var_os("XDG_DATA_HOME").filter(|d| Path::new(d).is_absolute()) {
        return Ok(PathBuf::from(data).join("outpost/server"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| Path::new(h).is_absolute())
        .context("neither OUTPOST_STATE, XDG_DATA_HOME nor HOME is set: pass --state DIR")?;
    Ok(PathBuf::from(home).join(".local/share/outpost/server"))
}

/// The `--ca` of the command line, for every client this process makes.
static CA_FILE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

/// Sets the command line's `--ca` (once, before any client is made).
pub fn set_ca_file(path: Option<PathBuf>) {
    let _ = CA_FILE.set(path);
}

/// A client of one server, authenticated by one bearer token.
#[derive(Clone)]
pub struct Api {
    base: String,
    token: String,
    agent: ureq::Agent,
    ca_file: Option<PathBuf>,
    /// The certificates the local join pins, when this client talks to that server (at any
    /// of the URLs the join lists).
    pins: Vec<String>,
}

impl Api {
    /// A client of `base` (an `http(s)://host:port` URL) with `token`, trusting the public
    /// roots, the CA in `ca_file` and the certificates `pins` names (a join's `tlsSha256` and
    /// `tlsPins`).
    pub fn new(
        base: &str,
        token: &str,
        ca_file: Option<&Path>,
        pins: &[String],
    ) -> anyhow::Result<Self> {
        outpost_core::join::check_server_url(base).map_err(|e| anyhow::anyhow!("{e}"))?;
        let trust = match ca_file {
            Some(path) => Trust::with_ca_file(path).map_err(|e| anyhow::anyhow!("{e}"))?,
            None => Trust::public(),
        }
        .pinning_all(pins.iter().map(String::as_str));
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(330)))
            .build();
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            agent: outpost_adapters::https::agent(config, &trust),
            ca_file: ca_file.map(Path::to_path_buf),
            pins: pins.to_vec(),
        })
    }

    /// The client the command line asks for: the server from `server`, `OUTPOST_SERVER` or
    /// the local server's `join`; the token from `OUTPOST_TOKEN` or the local `admin.token`.
    pub fn from_env(server: Option<&str>) -> anyhow::Result<Self> {
        let state = default_state_dir().ok();
        // The local server's join: its URL when none is given, and the certificate it pins.
        let local = state
            .as_deref()
            .and_then(|dir| std::fs::read_to_string(dir.join("join")).ok())
            .and_then(|text| outpost_core::join::Join::parse(&text).ok());
        let given = server
            .map(str::to_owned)
            .or_else(|| std::env::var("OUTPOST_SERVER").ok());
        let server = match given {
            Some(url) => url,
            None => {
                let dir = state.as_deref().context("no server: pass --server URL")?;
                let join = std::fs::read_to_string(dir.join("join")).with_context(|| {
                    format!(
                        "no server given and no local server's join in {}: pass --server URL (or set OUTPOST_SERVER), or set OUTPOST_STATE=DIR for a server started with --state DIR",
                        dir.display()
                    )
                })?;
                outpost_core::join::Join::parse(&join)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("join").display()))?
                    .url
            }
        };
        // The local join's certificates, when the server asked for is one of its URLs (a
        // cluster's join lists every node).
        let pins = local
            .filter(|j| j.urls().iter().any(|u| u == server.trim_end_matches('/')))
            .map(|j| j.pins())
            .unwrap_or_default();
        let token = match std::env::var("OUTPOST_TOKEN") {
            Ok(token) => token,
            Err(_) => {
                let dir = state.as_deref().context("no token: set OUTPOST_TOKEN")?;
                let path = dir.join("admin.token");
                std::fs::read_to_string(&path)
                    .with_context(|| {
                        format!(
                            "no OUTPOST_TOKEN and no local admin token at {}: set OUTPOST_TOKEN (or OUTPOST_STATE=DIR for a server started with --state DIR)",
                            path.display()
                        )
                    })?
                    .trim()
                    .to_owned()
            }
        };
        let ca = CA_FILE
            .get()
            .cloned()
            .flatten()
            .or_else(|| std::env::var_os("OUTPOST_CA_FILE").map(PathBuf::from));
        Self::new(&server, &token, ca.as_deref(), &pins)
    }

    /// The server's base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// What this client trusts, for a connection it makes itself (a terminal's WebSocket).
    pub fn trust(&self) -> anyhow::Result<Trust> {
        let trust = match &self.ca_file {
            Some(path) => Trust::with_ca_file(path).map_err(|e| anyhow::anyhow!("{e}"))?,
            None => Trust::public(),
        };
        Ok(trust.pinning_all(self.pins.iter().map(String::as_str)))
    }

    /// `GET path`, its answer read as `T` (a type of [`outpost_core::api`], or `Value`).
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        typed(self.call_raw("GET", path, None, JSON)?)
    }

    /// `POST path` with a JSON body.
    pub fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ApiError> {
        self.send("POST", path, body)
    }

    /// `PUT path` with a JSON body.
    pub fn put<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ApiError> {
        self.send("PUT", path, body)
    }

    /// `PATCH path` with a JSON body.
    pub fn patch<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ApiError> {
        self.send("PATCH", path, body)
    }

    /// `DELETE path`.
    pub fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        typed(self.call_raw("DELETE", path, None, JSON)?)
    }

    /// `PUT path` with raw bytes (a bundle).
    pub fn put_bytes<T: DeserializeOwned>(&self, path: &str, bytes: &[u8]) -> Result<T, ApiError> {
        typed(self.call_raw("PUT", path, Some(bytes), "application/octet-stream")?)
    }

    /// `GET path`, its answer as text (a recording), at most `limit` bytes.
    pub fn get_text(&self, path: &str, limit: u64) -> Result<String, ApiError> {
        let url = format!("{}{path}", self.base);
        let response = self
            .agent
            .get(&url)
            .header("authorization", &format!("Bearer {}", self.token))
            .call()
            .map_err(|e| unreachable(&self.base, &e))?;
        let status = response.status().as_u16();
        let text = response
            .into_body()
            .with_config()
            .limit(limit)
            .read_to_string()
            .map_err(|e| ApiError {
                status,
                code: "http_error".into(),
                message: format!("reading the answer: {e}"),
            })?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        Err(error_of(status, &text))
    }

    /// `GET path` as a stream (Server-Sent Events): the body to read as it comes, with no
    /// deadline on the whole (the caller bounds each wait). `last_event_id` resumes it.
    pub fn open_stream(
        &self,
        path: &str,
        last_event_id: Option<&str>,
    ) -> Result<ureq::BodyReader<'static>, ApiError> {
        let url = format!("{}{path}", self.base);
        let mut request = self
            .agent
            .get(&url)
            .config()
            .timeout_global(None)
            .build()
            .header("authorization", &format!("Bearer {}", self.token))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.call().map_err(|e| unreachable(&self.base, &e))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response.into_body().into_reader());
        }
        let text = response
            .into_body()
            .with_config()
            .limit(1024 * 1024)
            .read_to_string()
            .unwrap_or_default();
        Err(error_of(status, &text))
    }

    fn send<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &B,
    ) -> Result<T, ApiError> {
        let text = serde_json::to_vec(body).map_err(|e| ApiError {
            status: 0,
            code: "bad_request".into(),
            message: format!("the request body does not serialise: {e}"),
        })?;
        typed(self.call_raw(method, path, Some(&text), JSON)?)
    }

    fn call_raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        content_type: &str,
    ) -> Result<Value, ApiError> {
        let url = format!("{}{path}", self.base);
        let auth = format!("Bearer {}", self.token);
        let unreachable = |e: ureq::Error| unreachable(&self.base, &e);
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("authorization", &auth).call(),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("authorization", &auth)
                .call(),
            (_, body) => {
                let request = match method {
                    "PUT" => self.agent.put(&url),
                    "PATCH" => self.agent.patch(&url),
                    _ => self.agent.post(&url),
                };
                request
                    .header("authorization", &auth)
                    .header("content-type", content_type)
                    .send(body.unwrap_or_default())
            }
        }
        .map_err(unreachable)?;
        let status = response.status().as_u16();
        let text = response
            .into_body()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_string()
            .map_err(unreachable)?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| ApiError {
                status,
                code: "bad_answer".into(),
                message: format!("the server's answer is not JSON: {e}"),
            })?
        };
        if (200..300).contains(&status) {
            return Ok(value);
        }
        Err(match serde_json::from_value::<ErrorAnswer>(value) {
            Ok(ErrorAnswer { error }) => ApiError {
                status,
                code: error.code,
                message: if error.message.is_empty() {
                    format!("HTTP {status}")
                } else {
                    in_cli_words(&error.message)
                },
            },
            Err(_) => ApiError {
                status,
                code: "http_error".into(),
                message: format!("HTTP {status}"),
            },
        })
    }
}

/// The server's words for a request's members, as this command line spells them: a person
/// who typed `--fallback chain` reads `--fallback chain`, not the API's `fallback: "chain"`.
/// The error an answer of `status` with body `text` says (its `{"error"}`, else the status).
fn error_of(status: u16, text: &str) -> ApiError {
    match serde_json::from_str::<ErrorAnswer>(text) {
        Ok(ErrorAnswer { error }) => ApiError {
            status,
            code: error.code,
            message: error.message,
        },
        Err(_) => ApiError {
            status,
            code: "http_error".into(),
            message: format!("HTTP {status}"),
        },
    }
}

pub fn in_cli_words(message: &str) -> String {
    [
        ("`fallback: \"chain\"`", "`--fallback chain`"),
        ("`whenOffline: queue`", "`--when-offline queue`"),
        ("`whenBusy: queue`", "`--when-busy queue`"),
        ("`queueMinutes`", "`--queue-minutes`"),
    ]
    .iter()
    .fold(message.to_owned(), |text, (api, cli)| {
        text.replace(api, cli)
    })
}

/// A request that got no answer: why, in a sentence (a certificate this client does not
/// trust says what to do instead of rustls's name for it).
fn unreachable(base: &str, e: &ureq::Error) -> ApiError {
    let text = e.to_string();
    let (code, why) = match outpost_adapters::tls::explain_certificate_error(&text) {
        Some(sentence) => ("server_certificate_untrusted", sentence),
        None => ("server_unreachable", text),
    };
    ApiError {
        status: 0,
        code: code.into(),
        message: format!("cannot reach the server at {base}: {why}"),
    }
}

/// The body requests carry.
const JSON: &str = "application/json";

/// A successful answer read as `T`: `bad_answer` when it does not have `T`'s shape (a server
/// of another version, or not an outpost server).
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError {
        status: 0,
        code: "bad_answer".into(),
        message: format!("the server's answer does not have the expected members: {e}"),
    })
}
