//! Signed server frames.
//!
//! Every frame the server sends is signed with an Ed25519 frame key. The signed bytes are
//!
//! ```text
//! "outpost server frame v1" 0x00  ||  RFC 8785 canonical JSON of the frame without `sig`
//! ```
//!
//! and the frame carries its session id (`sid`), its per-session sequence number (`seq`,
//! 1, 2, 3, …) and its key id (`kid`) as ordinary members, so all three are inside the signed
//! bytes: a frame cannot be moved to another session, replayed, reordered or attributed to
//! another key. The signature travels in the frame's `sig` member, base64url without padding.
//!
//! The frame keys themselves come in a key set signed by a root key the daemon pins
//! ([`keyset`], also `crate::keyset`): the verifier checks frames against it.
//!
//! This module owns the signing input, the key sets and the per-session verification state;
//! it never decides what a verified frame means.

pub mod keyset;
mod signer;
mod verifier;

pub use signer::{Ed25519Signer, FrameSigner, SignError, Signer, SignerError};
pub use verifier::{FrameError, FrameVerifier, VerifiedFrame};

use crate::b64;
use crate::json::Value;

/// The domain-separation prefix of a signed server frame.
pub const FRAME_DOMAIN: &[u8] = b"outpost server frame v1\0";

/// The domain-separation prefix of a signed key-set document.
pub const KEY_SET_DOMAIN: &[u8] = b"outpost key set v1\0";

/// The member that carries a signature.
pub const SIG_FIELD: &str = "sig";

/// The exact bytes signed for `value` (which must not hold `sig`) under `domain`.
pub fn signing_input(domain: &[u8], value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(domain.len() + 256);
    out.extend_from_slice(domain);
    value.write_canonical(&mut out);
    out
}

/// Signs `value` under `domain` and returns its canonical form with the `sig` member added,
/// written once ([`Value::write_canonical_with`]): the bytes frames, key sets and releases
/// travel as.
///
/// `value` must be an object without a `sig` member; anything else is refused unsigned.
pub fn sign_canonical(
    domain: &[u8],
    value: &Value,
    signer: &dyn Signer,
) -> Result<Vec<u8>, SignerError> {
    value
        .write_canonical_with(domain, SIG_FIELD, |input| {
            signer.sign(input).map(|sig| b64::encode(&sig))
        })
        .unwrap_or_else(|| {
            Err(SignerError(
                "only an object without `sig` can be signed".into(),
            ))
        })
}

/// Signs `value` under `domain` and returns it with its `sig` member added.
///
/// `value` must be an object without a `sig` member.
pub fn sign_value(
    domain: &[u8],
    mut value: Value,
    signer: &dyn Signer,
) -> Result<Value, SignerError> {
    let input = signing_input(domain, &value);
    let sig = signer.sign(&input)?;
    if let Value::Object(members) = &mut value {
        members.push((SIG_FIELD.to_owned(), Value::String(b64::encode(&sig))));
    }
    Ok(value)
}
