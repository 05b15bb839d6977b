//! The daemon's side of a session: verifies each signed server frame, in order.

use std::sync::OnceLock;

use curve25519_dalek::constants::EIGHT_TORSION;
use ed25519_dalek::{Signature, VerifyingKey};

use super::{FRAME_DOMAIN, SIG_FIELD, signing_input};
use crate::b64::{self, Base64Error};
use crate::json::{self, JsonError, Value};
use crate::keyset::{KeyError, KeySet};
use crate::time::UnixTime;
use crate::wire::{ServerFrame, WireError, server_frame_from_value};

/// A server frame whose signature, key, session and sequence all checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedFrame {
    /// Its sequence number.
    pub seq: u64,
    /// The frame key that signed it.
    pub kid: String,
    /// The frame's body, read into its type once the envelope (`sid`, `seq`, `kid`, `sig`) checked
    /// out.
    pub frame: ServerFrame,
}

/// Why a server frame was refused. The verifier's state is unchanged by a refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not strict JSON (duplicate key, float, depth, …).
    #[error(transparent)]
    Json(#[from] JsonError),
    /// An envelope member (`sid`, `seq`, `kid`, `sig`) is missing or mistyped.
    #[error("frame member `{field}` is missing or invalid: {reason}")]
    Envelope {
        /// Which envelope member: `sid`, `seq`, `kid` or `sig`.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// `sig` is not 64 bytes of canonical base64url.
    #[error("`sig` is not a canonical signature: {0}")]
    SignatureEncoding(Base64Error),
    /// The key named by `kid` cannot be used.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The signature does not verify under the named key.
    #[error("signature does not verify")]
    BadSignature,
    /// Signed for another session.
    #[error("frame is for session {got:?}, not {expected:?}")]
    SessionMismatch {
        /// This session.
        expected: String,
        /// The frame's.
        got: String,
    },
    /// The sequence number was already used.
    #[error("sequence {seq} replayed")]
    SequenceReplayed {
        /// The frame's sequence number.
        seq: u64,
    },
    /// The sequence number is lower than one already accepted.
    #[error("sequence {seq} arrived after {last}")]
    SequenceOutOfOrder {
        /// The frame's sequence number.
        seq: u64,
        /// The highest sequence number accepted so far on this session.
        last: u64,
    },
    /// Authentic, but not a frame this version understands.
    #[error(transparent)]
    Wire(#[from] WireError),
}

impl FrameError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            FrameError::Json(e) => e.code(),
            FrameError::Envelope { .. } => "invalid_envelope",
            FrameError::SignatureEncoding(_) => "bad_signature_encoding",
            FrameError::Key(e) => e.code(),
            FrameError::BadSignature => "bad_signature",
            FrameError::SessionMismatch { .. } => "session_mismatch",
            FrameError::SequenceReplayed { .. } => "sequence_replayed",
            FrameError::SequenceOutOfOrder { .. } => "sequence_out_of_order",
            FrameError::Wire(e) => e.code(),
        }
    }
}

/// Verifies the signed frames of one session, in order.
#[derive(Debug, Clone)]
pub struct FrameVerifier {
    keys: KeySet,
    session_id: String,
    last_seq: u64,
}

/// A frame parsed and its signing input built, signature not yet checked.
struct Prepared {
    value: Value,
    input: Vec<u8>,
    signature: Signature,
    key: VerifyingKey,
    kid: String,
    sid: String,
    seq: u64,
}

impl FrameVerifier {
    /// A verifier for the session `session_id` (learned with the connect ticket), trusting
    /// the frame keys of `keys`. The first frame must have `seq` 1 or more.
    pub fn new(keys: KeySet, session_id: impl Into<String>) -> Self {
        Self {
            keys,
            session_id: session_id.into(),
            last_seq: 0,
        }
    }

    /// Continues a session whose frames up to `last_seq` were already accepted (a host that
    /// persisted its verifier's position, or a test starting mid-session).
    pub fn with_last_seq(mut self, last_seq: u64) -> Self {
        self.last_seq = last_seq;
        self
    }

    /// The last accepted sequence number (0 before the first frame).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The session this verifier belongs to.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The trusted frame keys.
    pub fn keys(&self) -> &KeySet {
        &self.keys
    }

    /// Replaces the trusted keys (after fetching a newer key set).
    pub fn set_keys(&mut self, keys: KeySet) {
        self.keys = keys;
    }

    /// Verifies one frame at wall time `now` and, if it is good, advances the sequence.
    pub fn verify(&mut self, bytes: &[u8], now: UnixTime) -> Result<VerifiedFrame, FrameError> {
        let p = self.prepare(bytes, now)?;
        p.key
            .verify_strict(&p.input, &p.signature)
            .map_err(|_| FrameError::BadSignature)?;
        self.accept(p)
    }

    /// Verifies a queue of frames with one batch signature check, then applies the session
    /// and sequence rules in order. Returns one result per frame, as [`FrameVerifier::verify`]
    /// would have, frame by frame.
    ///
    /// If the batch fails, each signature is checked alone to find the bad ones. Batch
    /// verification accepts what `verify_strict` accepts: keys are refused if weak when the key
    /// set is read, and a signature whose `R` is non-canonical or of small order is refused
    /// before batching.
    pub fn verify_batch(
        &mut self,
        frames: &[&[u8]],
        now: UnixTime,
    ) -> Vec<Result<VerifiedFrame, FrameError>> {
        let mut prepared: Vec<Result<Prepared, FrameError>> = frames
            .iter()
            .map(|bytes| {
                let p = self.prepare(bytes, now)?;
                if !r_is_strict(&p.signature) {
                    return Err(FrameError::BadSignature);
                }
                Ok(p)
            })
            .collect();
        let ready: Vec<&Prepared> = prepared.iter().filter_map(|p| p.as_ref().ok()).collect();
        let batch_ok = {
            let messages: Vec<&[u8]> = ready.iter().map(|p| p.input.as_slice()).collect();
            let signatures: Vec<Signature> = ready.iter().map(|p| p.signature).collect();
            let keys: Vec<VerifyingKey> = ready.iter().map(|p| p.key).collect();
            ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok()
        };
        if !batch_ok {
            for slot in prepared.iter_mut() {
                if let Ok(p) = slot
                    && p.key.verify_strict(&p.input, &p.signature).is_err()
                {
                    *slot = Err(FrameError::BadSignature);
                }
            }
        }
        prepared
            .into_iter()
            .map(|p| p.and_then(|p| self.accept(p)))
            .collect()
    }

    /// Parses the frame, reads its envelope and builds the signing input.
    fn prepare(&self, bytes: &[u8], now: UnixTime) -> Result<Prepared, FrameError> {
        let mut value = json::parse_strict(bytes)?;
        if !matches!(value, Value::Object(_)) {
            return Err(FrameError::Envelope {
                field: "type",
                reason: "frame is not an object",
            });
        }
        let sig_text = match value.remove(SIG_FIELD) {
            Some(Value::String(s)) => s,
            _ => {
                return Err(FrameError::Envelope {
                    field: "sig",
                    reason: "missing or not a string",
                });
            }
        };
        let signature = Signature::from_bytes(
            &b64::decode_array::<64>(&sig_text).map_err(FrameError::SignatureEncoding)?,
        );
        let kid = envelope_str(&value, "kid")?.to_owned();
        let sid = envelope_str(&value, "sid")?.to_owned();
        let seq = match value.get("seq").and_then(Value::as_i64) {
            Some(s) if s >= 1 => s as u64,
            _ => {
                return Err(FrameError::Envelope {
                    field: "seq",
                    reason: "missing or not a positive integer",
                });
            }
        };
        let key = *self.keys.key_for(&kid, now)?;
        let input = signing_input(FRAME_DOMAIN, &value);
        Ok(Prepared {
            value,
            input,
            signature,
            key,
            kid,
            sid,
            seq,
        })
    }

    /// Applies the session and sequence rules to an authentic frame and reads its body.
    fn accept(&mut self, p: Prepared) -> Result<VerifiedFrame, FrameError> {
        if p.sid != self.session_id {
            return Err(FrameError::SessionMismatch {
                expected: self.session_id.clone(),
                got: p.sid,
            });
        }
        if p.seq == self.last_seq {
            return Err(FrameError::SequenceReplayed { seq: p.seq });
        }
        if p.seq < self.last_seq {
            return Err(FrameError::SequenceOutOfOrder {
                seq: p.seq,
                last: self.last_seq,
            });
        }
        let frame = server_frame_from_value(&p.value)?;
        self.last_seq = p.seq;
        Ok(VerifiedFrame {
            seq: p.seq,
            kid: p.kid,
            frame,
        })
    }
}

fn envelope_str<'a>(value: &'a Value, field: &'static str) -> Result<&'a str, FrameError> {
    value
        .get(field)
        .and_then(Value::as_str)
        .ok_or(FrameError::Envelope {
            field,
            reason: "missing or not a string",
        })
}

/// The y-coordinates (sign bit cleared) of the eight points of small order.
fn small_order_ys() -> &'static [[u8; 32]; 8] {
    static YS: OnceLock<[[u8; 32]; 8]> = OnceLock::new();
    YS.get_or_init(|| {
        let mut out = [[0u8; 32]; 8];
        for (slot, point) in out.iter_mut().zip(EIGHT_TORSION.iter()) {
            *slot = point.compress().to_bytes();
            slot[31] &= 0x7f;
        }
        out
    })
}

/// What `verify_strict` demands of `R` beyond the batch equation: a canonical encoding of a
/// point that is not of small order.
fn r_is_strict(signature: &Signature) -> bool {
    let mut y = signature.r_bytes().to_owned();
    y[31] &= 0x7f;
    // y must be below p = 2^255 - 19.
    let non_canonical = y[31] == 0x7f && y[1..31].iter().all(|b| *b == 0xff) && y[0] >= 0xed;
    if non_canonical {
        return false;
    }
    // Both points with x = 0 (where a set sign bit would be non-canonical) are of small
    // order, so comparing y alone covers them.
    !small_order_ys().contains(&y)
}

#[cfg(test)]
mod tests;
