//! The daemon's signed HTTP client for PROTOCOL §11's machine routes, over ureq (rustls).
//!
//! Every request is signed with the machine key (RFC 9421, label `outpost`: `@method`,
//! `@authority`, `@path`, `@query`, and `content-digest` with a `Content-Digest: sha-256=…`
//! field when there is a body; `created`, `expires` 60 s later, a random single-use `nonce`,
//! `keyid` = the machine key id, `alg="ed25519"`). Error answers (`{"error":{"code",
//! "message"}}`) become [`HttpError::Api`] with their code and status.
//!
//! The client is blocking: async hosts call it through `spawn_blocking`. This module owns the
//! request bytes and the reading of answers; it never retries and never follows a redirect
//! (a signature covers one target).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub use outpost_core::api::answers::{
    CommandAuthorized, CommandsSwitched, ConnectTicket, ErrorAnswer, JobAuthorized, Registered,
};
pub use outpost_core::api::requests::{
    CommandAuthorize, CommandsSwitch, JobAuthorize, JobOp, RegisterRequest,
};
use outpost_core::httpsig::{
    ALG_ED25519, DigestAlgorithm, HttpRequest, OUTPOST_LABEL, SignatureParams, content_digest,
    sign_request,
};
use outpost_core::join::machine_key_id;
use outpost_core::keyset::{KeySet, PinnedRoots};
use outpost_core::sign::Ed25519Signer;
use serde::Deserialize;

use crate::tls::{ServerUrl, Trust};

/// How long a signature stays valid after `created` (the profile allows up to 300 s).
pub const SIGNATURE_VALIDITY_SECS: u64 = 60;

/// The largest answer body read.
pub const MAX_ANSWER_LEN: u64 = 1 << 20;

/// How long one request may take, end to end.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The server answered with an error body.
    #[error("the server refused {route} ({status} {code}): {message}")]
    Api {
        /// The route (`POST /v1/execution-contexts`).
        route: String,
        /// The HTTP status.
        status: u16,
        /// The error's stable code.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The server could not be reached or the connection failed.
    #[error("cannot reach the server for {route}: {reason}")]
    Transport {
        /// The method and path being called (`POST /v1/execution-contexts/connect-ticket`).
        route: String,
        /// What failed.
        reason: String,
    },
    /// The answer is not what §11 says it is.
    #[error("the server's answer to {route} is not readable ({status}): {reason}")]
    BadAnswer {
        /// The method and path that was called (`GET /v1/execution-contexts/server-keys`).
        route: String,
        /// The HTTP status.
        status: u16,
        /// What was wrong.
        reason: String,
    },
    /// Signing failed.
    #[error("signing the request failed: {0}")]
    Sign(String),
    /// The key set did not verify against the pinned root.
    #[error("the server's key set is refused ({code}): {0}", code = .0.code())]
    KeySet(outpost_core::keyset::KeySetError),
}

impl HttpError {
    /// The stable code: the server's for [`HttpError::Api`], else this client's.
    pub fn code(&self) -> &str {
        match self {
            HttpError::Api { code, .. } => code,
            HttpError::Transport { .. } => "server_unreachable",
            HttpError::BadAnswer { .. } => "bad_answer",
            HttpError::Sign(_) => "signer_failed",
            HttpError::KeySet(e) => e.code(),
        }
    }

    /// Whether trying again later may succeed: the server was unreachable, asked the caller
    /// to slow down (429), or failed on its side (5xx). A refusal of the request itself (a bad
    /// token, an unknown key, a key set that does not verify) is not.
    pub fn is_transient(&self) -> bool {
        match self {
            HttpError::Transport { .. } => true,
            HttpError::Api { status, .. } | HttpError::BadAnswer { status, .. } => {
                *status == 429 || *status >= 500
            }
            HttpError::Sign(_) | HttpError::KeySet(_) => false,
        }
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            HttpError::Api { status, .. } | HttpError::BadAnswer { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The signed client of one machine for one server, reached at one URL or (a server of
/// several nodes) at the first of a list that answers.
///
/// A request that cannot reach the URL in use moves the client on to the next one of the
/// list (after the last, the first again) and fails as it would have: the caller's own retry
/// goes to the next URL. Each request is signed for the URL it is sent to.
pub struct SignedClient {
    agent: ureq::Agent,
    /// Never empty: the joined URL first, then the alternates in the join's order.
    servers: Vec<ServerUrl>,
    /// How many times the client moved on; the URL in use is `servers[moves % len]`. It only
    /// grows, so a failure reported late for a URL the client has since left and come back
    /// to (0 → 1 → 0) is told apart from one for the URL now in use.
    moves: AtomicUsize,
    signer: Ed25519Signer,
    key_id: String,
}

impl std::fmt::Debug for SignedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedClient")
            .field("server", &self.server().base)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// An answer: status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl SignedClient {
    /// A client for `server`, signing with the machine key `seed`, trusting what `trust`
    /// trusts (the WebSocket's configuration, [`crate::https`]).
    pub fn new(server: ServerUrl, seed: [u8; 32], trust: &Trust) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build();
        let agent = crate::https::agent(config, trust);
        let probe = Ed25519Signer::from_seed("machine", seed);
        let key_id = machine_key_id(&probe.verifying_key());
        Self {
            agent,
            servers: vec![server],
            moves: AtomicUsize::new(0),
            signer: Ed25519Signer::from_seed(key_id.clone(), seed),
            key_id,
        }
    }

    /// The machine key id (`mk_…`).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The machine's public key, base64url.
    pub fn public_key_b64(&self) -> String {
        outpost_core::b64::encode(self.signer.verifying_key().as_bytes())
    }

    /// This client, trying `alternates` in turn after the URL it was made for whenever the
    /// one in use cannot be reached (a join's other URLs, [`outpost_core::join::Join`]).
    pub fn with_alternates(mut self, alternates: Vec<ServerUrl>) -> Self {
        for other in alternates {
            if !self.servers.contains(&other) {
                self.servers.push(other);
            }
        }
        self
    }

    /// The server's URL this client signs its requests for now.
    pub fn server(&self) -> &ServerUrl {
        self.server_at(self.in_use())
    }

    /// Which URL is in use now, as a token: give it to [`SignedClient::server_at`] for the
    /// URL itself, and to [`SignedClient::move_on_from`] when a connection made to it fails.
    pub fn in_use(&self) -> usize {
        self.moves.load(Ordering::Relaxed)
    }

    /// The URL an [`SignedClient::in_use`] token names.
    pub fn server_at(&self, at: usize) -> &ServerUrl {
        &self.servers[at % self.servers.len()]
    }

    /// The URL `at` (an [`SignedClient::in_use`] token) could not be reached: the next
    /// requests go to the next URL of the list (after the last, the first), unless the client
    /// has moved on since `at` was taken. A client of one URL stays.
    pub fn move_on_from(&self, at: usize) {
        if self.servers.len() > 1
            && self
                .moves
                .compare_exchange(at, at.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::info!(
                unreachable = %self.server_at(at).base,
                next = %self.server_at(at.wrapping_add(1)).base,
                "cannot reach the server at one of its URLs: trying the next one the join listed"
            );
        }
    }

    /// Builds and signs a request for the URL in use (exposed so tests can check the exact
    /// bytes).
    pub fn sign(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        now: outpost_core::time::UnixTime,
    ) -> Result<HttpRequest, HttpError> {
        self.sign_for(self.server(), method, path, body, now)
    }

    fn sign_for(
        &self,
        server: &ServerUrl,
        method: &str,
        path: &str,
        body: &[u8],
        now: outpost_core::time::UnixTime,
    ) -> Result<HttpRequest, HttpError> {
        let mut req = HttpRequest {
            method: method.to_owned(),
            url: server.http_url(path),
            headers: Vec::new(),
            body: body.to_vec(),
        };
        let mut components: Vec<String> = ["@method", "@authority", "@path", "@query"]
            .map(String::from)
            .to_vec();
        if !body.is_empty() {
            req.set_header("content-type", "application/json");
            req.set_header(
                "content-digest",
                content_digest(body, &[DigestAlgorithm::Sha256]),
            );
            components.push("content-digest".into());
        }
        let mut nonce = [0u8; 18];
        getrandom::fill(&mut nonce).map_err(|e| HttpError::Sign(e.to_string()))?;
        let params = SignatureParams {
            components,
            created: Some(now.as_secs()),
            expires: Some(now.as_secs() + SIGNATURE_VALIDITY_SECS),
            nonce: Some(outpost_core::b64::encode(&nonce)),
            alg: Some(ALG_ED25519.to_owned()),
            keyid: Some(self.key_id.clone()),
            tag: None,
        };
        sign_request(&mut req, OUTPOST_LABEL, &params, &self.signer)
            .map_err(|e| HttpError::Sign(e.to_string()))?;
        Ok(req)
    }

    /// One request; the answer's body is read up to `limit` bytes.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        bearer: Option<&str>,
        signed: bool,
        limit: u64,
    ) -> Result<Answer, HttpError> {
        let route = format!("{method} {path}");
        let at = self.in_use();
        let server = self.server_at(at);
        let req = if signed {
            self.sign_for(server, method, path, body, crate::clock::wall_now())?
        } else {
            HttpRequest {
                method: method.to_owned(),
                url: server.http_url(path),
                headers: Vec::new(),
                body: body.to_vec(),
            }
        };
        let transport = |e: ureq::Error| {
            let text = e.to_string();
            HttpError::Transport {
                route: route.clone(),
                reason: crate::tls::explain_certificate_error(&text).unwrap_or(text),
            }
        };
        let mut builder = ureq::http::Request::builder().method(method).uri(&req.url);
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        if let Some(token) = bearer {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        let request = builder
            .body(req.body.clone())
            .map_err(|e| HttpError::Transport {
                route: route.clone(),
                reason: e.to_string(),
            })?;
        // A request that could not be made (no connection, TLS refused, no answer in time)
        // moves the client on; a body that breaks its limit says nothing about the node.
        let response = self.agent.run(request).map_err(|e| {
            self.move_on_from(at);
            transport(e)
        })?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(transport)?;
        if (200..300).contains(&status) {
            return Ok(Answer { status, body });
        }
        Err(api_error(route, status, &body))
    }

    fn json<T: for<'de> Deserialize<'de>>(route: &str, answer: Answer) -> Result<T, HttpError> {
        serde_json::from_slice(&answer.body).map_err(|e| HttpError::BadAnswer {
            route: route.to_owned(),
            status: answer.status,
            reason: e.to_string(),
        })
    }

    /// `POST /v1/execution-contexts`: registers this machine with the join's bearer token.
    /// Idempotent: a key already registered answers 200 with the same context.
    pub fn register(
        &self,
        token: &str,
        request: &RegisterRequest,
    ) -> Result<Registered, HttpError> {
        let path = "/v1/execution-contexts";
        let body = serde_json::to_vec(request).map_err(|e| HttpError::Sign(e.to_string()))?;
        let answer = self.call("POST", path, &body, Some(token), true, MAX_ANSWER_LEN)?;
        Self::json(&format!("POST {path}"), answer)
    }

    /// `POST /v1/execution-contexts/connect-ticket` (empty body): a single-use ticket.
    pub fn connect_ticket(&self) -> Result<ConnectTicket, HttpError> {
        let path = "/v1/execution-contexts/connect-ticket";
        let answer = self.call("POST", path, &[], None, true, MAX_ANSWER_LEN)?;
        Self::json(&format!("POST {path}"), answer)
    }

    /// `GET /v1/execution-contexts/server-keys`, verified against `roots`.
    pub fn server_keys(&self, roots: &PinnedRoots) -> Result<KeySet, HttpError> {
        let path = "/v1/execution-contexts/server-keys";
        let answer = self.call("GET", path, &[], None, false, MAX_ANSWER_LEN)?;
        KeySet::from_document(&answer.body, roots).map_err(HttpError::KeySet)
    }

    /// `GET /v1/execution-contexts/bundles/{sha256}` (signed): the bundle a run names by
    /// digest, at most [`MAX_BUNDLE_BYTES`](outpost_core::wire::MAX_BUNDLE_BYTES) (the
    /// caller checks the digest; the core does before anything runs).
    pub fn fetch_bundle(&self, sha256: &str) -> Result<Vec<u8>, HttpError> {
        let path = format!("/v1/execution-contexts/bundles/{sha256}");
        let answer = self.call(
            "GET",
            &path,
            &[],
            None,
            true,
            outpost_core::wire::MAX_BUNDLE_BYTES,
        )?;
        Ok(answer.body)
    }

    /// `GET /v1/execution-contexts/daemon-release` (signed): the release document the server
    /// publishes, as it was signed (the caller verifies it against the pinned root).
    pub fn daemon_release(&self) -> Result<Vec<u8>, HttpError> {
        let path = "/v1/execution-contexts/daemon-release";
        let answer = self.call(
            "GET",
            path,
            &[],
            None,
            true,
            outpost_core::release::MAX_DOCUMENT_BYTES as u64,
        )?;
        Ok(answer.body)
    }

    /// `GET /v1/execution-contexts/daemon-release/{sha512}` (signed): the binary a verified
    /// release names, at most `size` bytes (the caller checks its length and digest).
    pub fn daemon_binary(&self, sha512: &str, size: u64) -> Result<Vec<u8>, HttpError> {
        let path = format!("/v1/execution-contexts/daemon-release/{sha512}");
        let answer = self.call("GET", &path, &[], None, true, size)?;
        Ok(answer.body)
    }

    /// `POST /v1/execution-contexts/commands` (signed): turns this machine's host commands on
    /// or off on the server (only this route turns them on). Returns the grant's new version.
    pub fn set_commands(&self, enabled: bool) -> Result<u64, HttpError> {
        let path = "/v1/execution-contexts/commands";
        let body = serde_json::to_vec(&CommandsSwitch { enabled })
            .map_err(|e| HttpError::Sign(e.to_string()))?;
        let answer = self.call("POST", path, &body, None, true, MAX_ANSWER_LEN)?;
        Self::json::<CommandsSwitched>(&format!("POST {path}"), answer).map(|s| s.grant_version)
    }

    /// `POST /v1/execution-contexts/commands/authorize` (signed): the hop before every host
    /// command. The server answers only while `run_id` is live on this machine, commands are
    /// granted and its requester is the operator now; the answer is the command's id and the
    /// requester (who owns the job). `command` is cut to 1,000 characters; `env_keys` are
    /// names only, never values.
    pub fn authorize_command(
        &self,
        request: &CommandAuthorize,
    ) -> Result<CommandAuthorized, HttpError> {
        let path = "/v1/execution-contexts/commands/authorize";
        let body = serde_json::to_vec(request).map_err(|e| HttpError::Sign(e.to_string()))?;
        let answer = self.call("POST", path, &body, None, true, MAX_ANSWER_LEN)?;
        Self::json::<CommandAuthorized>(&format!("POST {path}"), answer)
    }

    /// `POST /v1/execution-contexts/commands/jobs/authorize` (signed): the hop before every
    /// `poll` and `kill` of a background job. The server answers only while `run_id` is live
    /// on this machine, commands are granted and its requester is the operator now; the answer
    /// names that requester, whose jobs alone the run may touch.
    pub fn authorize_job(&self, request: &JobAuthorize) -> Result<JobAuthorized, HttpError> {
        let path = "/v1/execution-contexts/commands/jobs/authorize";
        let body = serde_json::to_vec(request).map_err(|e| HttpError::Sign(e.to_string()))?;
        let answer = self.call("POST", path, &body, None, true, MAX_ANSWER_LEN)?;
        Self::json::<JobAuthorized>(&format!("POST {path}"), answer)
    }

    /// The WebSocket URL of a ticket (`…/connect?ticket=otk_…`; never log it) at the URL in
    /// use.
    pub fn connect_url(&self, ticket: &ConnectTicket) -> String {
        self.connect_url_at(self.in_use(), ticket)
    }

    /// [`SignedClient::connect_url`] at the URL an [`SignedClient::in_use`] token names.
    pub fn connect_url_at(&self, at: usize, ticket: &ConnectTicket) -> String {
        self.server_at(at).ws_url(&format!(
            "/v1/execution-contexts/connect?ticket={}",
            ticket.ticket
        ))
    }
}

fn api_error(route: String, status: u16, body: &[u8]) -> HttpError {
    match serde_json::from_slice::<ErrorAnswer>(body) {
        Ok(answer) => HttpError::Api {
            route,
            status,
            code: answer.error.code,
            message: answer.error.message,
        },
        Err(_) => HttpError::BadAnswer {
            route,
            status,
            reason: format!(
                "not an error body: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ),
        },
    }
}
