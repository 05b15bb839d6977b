//! Producing signatures: the [`Signer`] trait and the per-session [`FrameSigner`].

use core::fmt;

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use super::{FRAME_DOMAIN, SIG_FIELD, sign_canonical};
use crate::json::{self, Value};
use crate::wire::ServerFrame;

/// A failure inside a signer (a remote signing service being down, say).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signer failed: {0}")]
pub struct SignerError(pub String);

/// Something that holds an Ed25519 private key and signs with it.
///
/// Implement it to keep server keys outside the process (an HSM, a KMS, a signing service).
pub trait Signer {
    /// The key id published in the key set.
    fn key_id(&self) -> &str;
    /// The Ed25519 signature of `message`.
    fn sign(&self, message: &[u8]) -> Result<[u8; 64], SignerError>;
}

/// A [`Signer`] holding its key in memory.
pub struct Ed25519Signer {
    kid: String,
    key: SigningKey,
}

impl Ed25519Signer {
    /// A signer for the key with this 32-byte seed.
    pub fn from_seed(kid: impl Into<String>, seed: [u8; 32]) -> Self {
        Self {
            kid: kid.into(),
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key the key set publishes for this signer's `kid`; frames it signs verify under
    /// it.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }
}

impl fmt::Debug for Ed25519Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ed25519Signer")
            .field("kid", &self.kid)
            .field(
                "public_key",
                &crate::b64::encode(self.key.verifying_key().as_bytes()),
            )
            .finish_non_exhaustive()
    }
}

impl Signer for Ed25519Signer {
    fn key_id(&self) -> &str {
        &self.kid
    }

    fn sign(&self, message: &[u8]) -> Result<[u8; 64], SignerError> {
        Ok(self.key.sign(message).to_bytes())
    }
}

/// Why a frame could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The [`Signer`] returned an error (a remote signing service down, say); nothing was sent.
    #[error(transparent)]
    Signer(#[from] SignerError),
    /// The frame does not fit the signed-JSON rules (a value too large, say).
    #[error("frame cannot be signed: {0}")]
    Unsignable(String),
    /// The session has used every sequence number.
    #[error("sequence numbers exhausted")]
    SequenceExhausted,
}

/// The server's side of one session: stamps `sid` and the next `seq` on each frame and
/// signs it.
#[derive(Debug, Clone)]
pub struct FrameSigner {
    session_id: String,
    next_seq: u64,
}

impl FrameSigner {
    /// A signer for a new session; its first frame has `seq` 1.
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            next_seq: 1,
        }
    }

    /// A signer that goes on with session `session_id` at `next_seq` (a server restoring a
    /// session's numbering; tests that sign a frame out of turn).
    pub fn resume_at(session_id: impl Into<String>, next_seq: u64) -> Self {
        Self {
            session_id: session_id.into(),
            next_seq,
        }
    }

    /// The session id stamped on every frame.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The `seq` the next frame will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Signs `frame` and returns the JSON text to send (canonical form, `sig` included).
    ///
    /// The sequence number advances only when signing succeeds.
    pub fn sign(&mut self, frame: &ServerFrame, signer: &dyn Signer) -> Result<Vec<u8>, SignError> {
        if self.next_seq > json::MAX_SAFE_INTEGER as u64 {
            return Err(SignError::SequenceExhausted);
        }
        let text = serde_json::to_vec(frame).map_err(|e| SignError::Unsignable(e.to_string()))?;
        let mut value =
            json::parse_strict(&text).map_err(|e| SignError::Unsignable(e.to_string()))?;
        if let Value::Object(members) = &mut value {
            members.push(("sid".into(), Value::String(self.session_id.clone())));
            members.push(("seq".into(), Value::Int(self.next_seq as i64)));
            members.push(("kid".into(), Value::String(signer.key_id().to_owned())));
        }
        if value.get(SIG_FIELD).is_some() || !matches!(value, Value::Object(_)) {
            return Err(SignError::Unsignable(
                "a frame is an object without `sig`".into(),
            ));
        }
        let signed = sign_canonical(FRAME_DOMAIN, &value, signer)?;
        self.next_seq += 1;
        Ok(signed)
    }
}
