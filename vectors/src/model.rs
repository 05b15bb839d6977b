//! The shape of every vector file, shared by the generator and the checker.
//!
//! Byte strings that must be exact are given in lowercase hex (`*_hex`). JSON that must be
//! read exactly as sent is embedded verbatim (`frame`, `document`, `input`) — where it can be
//! embedded at all — next to its exact bytes in hex.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A vector file: `{"kind": ..., "description": ..., "cases": [...]}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct VectorFile<C> {
    /// Which file this is.
    pub kind: String,
    /// What the cases test and how to run them.
    pub description: String,
    /// The cases.
    pub cases: Vec<C>,
}

/// An Ed25519 frame key with its validity window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyEntry {
    /// The key id.
    pub kid: String,
    /// The public key.
    pub public_key_hex: String,
    /// The private key seed (test keys only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub secret_key_hex: Option<String>,
    /// Valid from (seconds since the epoch).
    pub not_before: u64,
    /// Valid until just before (seconds since the epoch).
    pub not_after: u64,
}

/// A case of `signed-frames.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SignedFrameCase {
    /// The case's name.
    pub name: String,
    /// Whether the frame must be accepted.
    pub valid: bool,
    /// The error code a refusal must carry.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// The frame keys the verifier trusts.
    pub keys: Vec<KeyEntry>,
    /// The key that signed the frame (the first trusted key unless the case says otherwise).
    pub public_key_hex: String,
    /// The private key seed of the signing key.
    pub secret_key_hex: String,
    /// The session the verifier belongs to.
    pub session_id: String,
    /// The last sequence number the verifier accepted before this frame (0: none).
    pub previous_seq: u64,
    /// Wall time of verification, seconds since the epoch.
    pub now: u64,
    /// The frame exactly as sent (absent only where the bytes are not embeddable).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub frame: Option<Box<RawValue>>,
    /// The frame's exact bytes.
    pub frame_hex: String,
    /// For valid cases: the exact signed bytes (domain prefix + canonical JSON without `sig`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signing_input_hex: Option<String>,
}

/// A root key as pinned by a daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootEntry {
    /// The root id.
    pub id: String,
    /// The public key.
    pub public_key_hex: String,
}

/// A key lookup after reading a set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lookup {
    /// The kid a frame names.
    pub kid: String,
    /// Wall time of the lookup.
    pub now: u64,
}

/// A case of `key-sets.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct KeySetCase {
    /// The case's name.
    pub name: String,
    /// Whether reading the set and every lookup must succeed.
    pub valid: bool,
    /// The error code of the refusal (of the document, or of the lookup).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// Roots pinned by the daemon.
    pub pinned_roots: Vec<RootEntry>,
    /// Whether the daemon's test-root switch is on.
    pub trust_test_root: bool,
    /// The server host the set was fetched from (the test root needs a loopback host).
    pub server_host: String,
    /// The private key seed of the root that signed the document (test keys only).
    pub signing_root_secret_key_hex: String,
    /// The document exactly as served.
    pub document: Box<RawValue>,
    /// The document's exact bytes.
    pub document_hex: String,
    /// Key lookups to make after reading the set.
    pub lookups: Vec<Lookup>,
    /// For valid cases: the keys the set yields.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub expected_keys: Option<Vec<KeyEntry>>,
}

/// An HTTP request as the vectors give it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestEntry {
    /// The method.
    pub method: String,
    /// The absolute target URI.
    pub url: String,
    /// Header fields in order, as `[name, value]`.
    pub headers: Vec<(String, String)>,
    /// The content as UTF-8.
    pub body: String,
}

/// A nonce already used before the case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeenNonce {
    /// The key id that used it.
    pub keyid: String,
    /// The nonce.
    pub nonce: String,
    /// When it was used.
    pub created: u64,
}

/// A case of `http-signatures.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct HttpSignatureCase {
    /// The case's name.
    pub name: String,
    /// Whether the request must be accepted.
    pub valid: bool,
    /// The error code a refusal must carry.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// `rfc9421` (signature only) or `outpost` (the daemon-request profile, with freshness
    /// and nonce checks).
    pub profile: String,
    /// The signature's label.
    pub label: String,
    /// The signer's key id.
    pub keyid: String,
    /// The signer's public key.
    pub public_key_hex: String,
    /// The signer's private key seed.
    pub secret_key_hex: String,
    /// Wall time of verification.
    pub now: u64,
    /// Nonces used before this request (the `outpost` profile only).
    pub seen_nonces: Vec<SeenNonce>,
    /// The request, signature fields included.
    pub request: RequestEntry,
    /// For valid cases: the exact signature base.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signature_base: Option<String>,
}

/// A case of `content-digest.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ContentDigestCase {
    /// The case's name.
    pub name: String,
    /// Whether `header` must be accepted for `body`.
    pub valid: bool,
    /// The error code a refusal must carry.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// The content as UTF-8.
    pub body: String,
    /// The `Content-Digest` field value.
    pub header: String,
}

/// A case of `canonical-json.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct CanonicalJsonCase {
    /// The case's name.
    pub name: String,
    /// Whether the strict reader must accept the input.
    pub valid: bool,
    /// The error code a refusal must carry.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// The input verbatim (absent where the bytes are not embeddable in a JSON file).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input: Option<Box<RawValue>>,
    /// The input's exact bytes.
    pub input_hex: String,
    /// For valid cases: the exact canonical bytes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub canonical_hex: Option<String>,
}

/// A case of `terminal.json`: bytes a terminal's server reads — a daemon's binary `pty.output`
/// (`form: "pty_output"`) or a viewer's text message (`form: "viewer_control"`).
#[derive(Debug, Serialize, Deserialize)]
pub struct TerminalCase {
    /// The case's name.
    pub name: String,
    /// `pty_output` or `viewer_control`.
    pub form: String,
    /// Whether the reader must accept the bytes.
    pub valid: bool,
    /// The error code a refusal must carry.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// A viewer's text verbatim (where a JSON file can hold it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input: Option<Box<RawValue>>,
    /// The exact bytes read.
    pub input_hex: String,
    /// A valid `pty_output`: the terminal.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pty_id: Option<String>,
    /// A valid `pty_output`: its data, exactly.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub data_hex: Option<String>,
    /// A valid `viewer_control` resize: columns.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cols: Option<u16>,
    /// A valid `viewer_control` resize: rows.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rows: Option<u16>,
    /// A valid `viewer_control` close: true.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub close: Option<bool>,
}

/// A case of `daemon-runs.json`: a daemon driven through `steps` from a key set and a session,
/// each step's input answered as `expect` says.
#[derive(Debug, Serialize, Deserialize)]
pub struct DaemonRunsCase {
    /// The case's name.
    pub name: String,
    /// Always true: each step carries its own expectation.
    pub valid: bool,
    /// Never set (each step carries its own expectation).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// The roots the daemon pins.
    pub pinned_roots: Vec<RootEntry>,
    /// The key set the daemon holds when it starts.
    pub key_set_hex: String,
    /// The session id of the connection (from the ticket).
    pub session_id: String,
    /// Wall time of every step, seconds since the epoch.
    pub now: u64,
    /// The inputs, in order.
    pub steps: Vec<DaemonStep>,
}

/// One input to the daemon of a [`DaemonRunsCase`] and what it must answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct DaemonStep {
    /// `key_set` (a fetched key-set document, `hex`), `frame` (a server frame, `hex`) or
    /// `run_finished` (the executor finished `run_id`, exit 0).
    pub input: String,
    /// The document's or frame's exact bytes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hex: Option<String>,
    /// The frame, verbatim, for reading.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub frame: Option<Box<RawValue>>,
    /// For `run_finished`: the run.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub run_id: Option<String>,
    /// `taken` / `kept` (a key set: the daemon's set is the offered one / stays as it was);
    /// the `type` of the first frame the daemon sends (`hello`, `run.accept`, `run.result`),
    /// `run.reject:CODE` for a refusal; `execute` (a run is handed to an executor);
    /// `close:CODE:REASON` (the daemon closes the connection); `nothing`.
    pub expect: String,
}
