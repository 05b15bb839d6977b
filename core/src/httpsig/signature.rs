//! Signature parameters, the signature base, signing and verifying (RFC 9421 §2.3, §2.5,
//! §3), and the profile outpost requires.

use ed25519_dalek::{Signature, VerifyingKey};
use sfv::{BareItem, Dictionary, InnerList, Integer, KeyRef, ListEntry, ListSerializer, Parser};

use super::components::{check_identifier, component_value};
use super::digest::check_content_digest;
use super::{HttpRequest, HttpSigError};
use crate::sign::Signer;

/// The label of outpost's request signatures.
pub const OUTPOST_LABEL: &str = "outpost";

/// The `alg` value for Ed25519.
pub const ALG_ED25519: &str = "ed25519";

/// The covered components and parameters of one signature.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignatureParams {
    /// Component identifiers, in the order they appear in the base.
    pub components: Vec<String>,
    /// `created`, seconds since the epoch.
    pub created: Option<u64>,
    /// `expires`, seconds since the epoch.
    pub expires: Option<u64>,
    /// `nonce`.
    pub nonce: Option<String>,
    /// `alg`.
    pub alg: Option<String>,
    /// `keyid`.
    pub keyid: Option<String>,
    /// `tag`.
    pub tag: Option<String>,
}

fn bad_param(name: &'static str, reason: impl Into<String>) -> HttpSigError {
    HttpSigError::InvalidParameter {
        name,
        reason: reason.into(),
    }
}

fn key(name: &'static str) -> &'static KeyRef {
    // Only called with the constant parameter names below, all valid keys.
    KeyRef::constant(name)
}

impl SignatureParams {
    /// Serializes the parameters as the inner list used in `Signature-Input` and in the
    /// `@signature-params` line; parameters in the order created, expires, nonce, alg,
    /// keyid, tag.
    pub fn serialize(&self) -> Result<String, HttpSigError> {
        let mut items = Vec::with_capacity(self.components.len());
        for c in &self.components {
            check_identifier(c)?;
            let s = sfv::String::from_string(c.clone())
                .map_err(|(e, _)| bad_param("components", e.to_string()))?;
            items.push(sfv::Item::new(s));
        }
        let mut params = sfv::Parameters::new();
        let int = |name: &'static str, v: u64| {
            Integer::try_from(v)
                .map(BareItem::Integer)
                .map_err(|_| bad_param(name, "out of range"))
        };
        let string = |name: &'static str, v: &str| {
            sfv::String::from_string(v.to_owned())
                .map(BareItem::String)
                .map_err(|_| bad_param(name, "not a printable ASCII string"))
        };
        if let Some(v) = self.created {
            params.insert(key("created").to_owned(), int("created", v)?);
        }
        if let Some(v) = self.expires {
            params.insert(key("expires").to_owned(), int("expires", v)?);
        }
        if let Some(v) = &self.nonce {
            params.insert(key("nonce").to_owned(), string("nonce", v)?);
        }
        if let Some(v) = &self.alg {
            params.insert(key("alg").to_owned(), string("alg", v)?);
        }
        if let Some(v) = &self.keyid {
            params.insert(key("keyid").to_owned(), string("keyid", v)?);
        }
        if let Some(v) = &self.tag {
            params.insert(key("tag").to_owned(), string("tag", v)?);
        }
        Ok(serialize_inner_list(&InnerList::with_params(items, params)))
    }

    /// Reads the parameters from a parsed `Signature-Input` member.
    fn from_inner_list(list: &InnerList) -> Result<Self, HttpSigError> {
        let mut out = SignatureParams::default();
        for item in &list.items {
            let BareItem::String(s) = &item.bare_item else {
                return Err(malformed("a component identifier is not a string"));
            };
            if !item.params.is_empty() {
                return Err(HttpSigError::UnsupportedComponent(format!(
                    "{};{}",
                    s.as_str(),
                    item.params
                        .keys()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(";")
                )));
            }
            check_identifier(s.as_str())?;
            if out.components.iter().any(|c| c == s.as_str()) {
                return Err(malformed("a component is covered twice"));
            }
            out.components.push(s.as_str().to_owned());
        }
        for (name, value) in &list.params {
            let as_time = |n: &'static str| -> Result<u64, HttpSigError> {
                value
                    .as_integer()
                    .and_then(|i| u64::try_from(i64::from(i)).ok())
                    .ok_or_else(|| bad_param(n, "not a non-negative integer"))
            };
            let as_string = |n: &'static str| -> Result<String, HttpSigError> {
                value
                    .as_string()
                    .map(|s| s.as_str().to_owned())
                    .ok_or_else(|| bad_param(n, "not a string"))
            };
            match name.as_str() {
                "created" => out.created = Some(as_time("created")?),
                "expires" => out.expires = Some(as_time("expires")?),
                "nonce" => out.nonce = Some(as_string("nonce")?),
                "alg" => out.alg = Some(as_string("alg")?),
                "keyid" => out.keyid = Some(as_string("keyid")?),
                "tag" => out.tag = Some(as_string("tag")?),
                // Other parameters are covered by the base as written, and otherwise ignored.
                _ => {}
            }
        }
        Ok(out)
    }
}

fn malformed(reason: &str) -> HttpSigError {
    HttpSigError::MalformedField {
        field: "signature-input",
        reason: reason.to_owned(),
    }
}

fn serialize_inner_list(list: &InnerList) -> String {
    let mut ser = ListSerializer::new();
    {
        let mut inner = ser.inner_list();
        inner.items(&list.items);
        inner.finish().parameters(&list.params);
    }
    ser.finish().unwrap_or_default()
}

/// The signature base (RFC 9421 §2.5) of `req` for `params`.
pub fn signature_base(req: &HttpRequest, params: &SignatureParams) -> Result<String, HttpSigError> {
    base_with_params_line(req, &params.components, &params.serialize()?)
}

fn base_with_params_line(
    req: &HttpRequest,
    components: &[String],
    params_line: &str,
) -> Result<String, HttpSigError> {
    let mut base = String::with_capacity(256);
    for name in components {
        let value = component_value(req, name)?;
        base.push('"');
        base.push_str(name);
        base.push_str("\": ");
        base.push_str(&value);
        base.push('\n');
    }
    base.push_str("\"@signature-params\": ");
    base.push_str(params_line);
    Ok(base)
}

/// Signs `req`, adding (replacing) its `Signature-Input` and `Signature` fields with one
/// signature under `label`. Returns the signature base that was signed.
pub fn sign_request(
    req: &mut HttpRequest,
    label: &str,
    params: &SignatureParams,
    signer: &dyn Signer,
) -> Result<String, HttpSigError> {
    KeyRef::from_str(label).map_err(|_| malformed("label is not a structured-field key"))?;
    let params_line = params.serialize()?;
    let base = base_with_params_line(req, &params.components, &params_line)?;
    let sig = signer.sign(base.as_bytes())?;
    let mut encoded = String::new();
    base64::Engine::encode_string(
        &base64::engine::general_purpose::STANDARD,
        sig,
        &mut encoded,
    );
    req.set_header("Signature-Input", format!("{label}={params_line}"));
    req.set_header("Signature", format!("{label}=:{encoded}:"));
    Ok(base)
}

/// What a verifier demands beyond a valid signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Components every signature must cover.
    pub required_components: Vec<String>,
    /// Whether a request with content must cover `content-digest`.
    pub digest_required_with_body: bool,
    /// Parameters every signature must carry.
    pub required_params: Vec<&'static str>,
    /// Whether `alg` must be present (it must always be `ed25519` when present).
    pub alg_required: bool,
    /// The longest allowed `expires - created`, in seconds.
    pub max_validity_secs: Option<u64>,
}

impl Profile {
    /// No requirements beyond RFC 9421 itself (used to check the RFC's own examples).
    pub fn rfc9421() -> Self {
        Self {
            required_components: Vec::new(),
            digest_required_with_body: false,
            required_params: vec!["keyid"],
            alg_required: false,
            max_validity_secs: None,
        }
    }

    /// The profile every daemon request must meet (see the module docs).
    pub fn outpost() -> Self {
        Self {
            required_components: ["@method", "@authority", "@path", "@query"]
                .map(String::from)
                .to_vec(),
            digest_required_with_body: true,
            required_params: vec!["created", "expires", "nonce", "keyid"],
            alg_required: true,
            max_validity_secs: Some(300),
        }
    }

    fn check(&self, req: &HttpRequest, p: &SignatureParams) -> Result<(), HttpSigError> {
        for c in &self.required_components {
            if !p.components.contains(c) {
                return Err(HttpSigError::ComponentNotCovered(c.clone()));
            }
        }
        if self.digest_required_with_body
            && !req.body.is_empty()
            && !p.components.iter().any(|c| c == "content-digest")
        {
            return Err(HttpSigError::ComponentNotCovered("content-digest".into()));
        }
        for name in &self.required_params {
            let present = match *name {
                "created" => p.created.is_some(),
                "expires" => p.expires.is_some(),
                "nonce" => p.nonce.is_some(),
                "keyid" => p.keyid.is_some(),
                "tag" => p.tag.is_some(),
                _ => true,
            };
            if !present {
                return Err(HttpSigError::MissingParameter(name));
            }
        }
        match p.alg.as_deref() {
            Some(ALG_ED25519) => {}
            Some(other) => return Err(bad_param("alg", format!("{other:?} is not ed25519"))),
            None if self.alg_required => return Err(HttpSigError::MissingParameter("alg")),
            None => {}
        }
        if let (Some(max), Some(created), Some(expires)) =
            (self.max_validity_secs, p.created, p.expires)
        {
            if expires <= created {
                return Err(bad_param("expires", "not after created"));
            }
            if expires - created > max {
                return Err(bad_param(
                    "expires",
                    format!("more than {max}s after created"),
                ));
            }
        }
        Ok(())
    }
}

/// A request whose signature verified under the profile. Freshness and the nonce are not
/// yet checked: pass it to [`crate::replay::ReplayGuard::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedRequest {
    /// The key that signed.
    pub keyid: String,
    /// The signature's parameters.
    pub params: SignatureParams,
    /// The exact signature base that verified.
    pub signature_base: String,
}

/// Verifies the signature labelled `label` on `req` under `profile`, with the key that
/// `lookup` returns for its `keyid`. Checks `Content-Digest` against the content when the
/// signature covers it.
pub fn verify_signature(
    req: &HttpRequest,
    label: &str,
    lookup: &dyn Fn(&str) -> Option<VerifyingKey>,
    profile: &Profile,
) -> Result<VerifiedRequest, HttpSigError> {
    let input_field = req
        .header("signature-input")
        .ok_or_else(|| HttpSigError::MissingSignature(label.to_owned()))?;
    let inputs: Dictionary = Parser::new(&input_field)
        .parse()
        .map_err(|e| malformed(&e.to_string()))?;
    let Some(entry) = inputs.get(label) else {
        return Err(HttpSigError::MissingSignature(label.to_owned()));
    };
    let ListEntry::InnerList(list) = entry else {
        return Err(malformed("the member is not an inner list"));
    };
    let params = SignatureParams::from_inner_list(list)?;
    profile.check(req, &params)?;

    let sig_field = req
        .header("signature")
        .ok_or_else(|| HttpSigError::MissingSignature(label.to_owned()))?;
    let sigs: Dictionary =
        Parser::new(&sig_field)
            .parse()
            .map_err(|e| HttpSigError::MalformedField {
                field: "signature",
                reason: e.to_string(),
            })?;
    let sig_bytes = match sigs.get(label) {
        Some(ListEntry::Item(item)) => match &item.bare_item {
            BareItem::ByteSequence(b) => b.clone(),
            _ => {
                return Err(HttpSigError::MalformedField {
                    field: "signature",
                    reason: "not a byte sequence".into(),
                });
            }
        },
        _ => return Err(HttpSigError::MissingSignature(label.to_owned())),
    };
    let sig_array: [u8; 64] =
        sig_bytes
            .as_slice()
            .try_into()
            .map_err(|_| HttpSigError::MalformedField {
                field: "signature",
                reason: format!("{} bytes, an Ed25519 signature has 64", sig_bytes.len()),
            })?;

    let keyid = params
        .keyid
        .clone()
        .ok_or(HttpSigError::MissingParameter("keyid"))?;
    let key = lookup(&keyid).ok_or_else(|| HttpSigError::UnknownKey(keyid.clone()))?;
    let base = base_with_params_line(req, &params.components, &serialize_inner_list(list))?;
    key.verify_strict(base.as_bytes(), &Signature::from_bytes(&sig_array))
        .map_err(|_| HttpSigError::BadSignature)?;

    if params.components.iter().any(|c| c == "content-digest") {
        let field = req
            .header("content-digest")
            .ok_or_else(|| HttpSigError::MissingComponent("content-digest".into()))?;
        check_content_digest(&field, &req.body)?;
    }
    Ok(VerifiedRequest {
        keyid,
        params,
        signature_base: base,
    })
}
