//! A caller's chain: the ordered contexts an execute tries when it names none.
//!
//! This file owns the chain's rules — at most [`Chain::MAX_CONTEXTS`] contexts, then the server
//! at most once and last, no context twice. It never looks at whether a context is online.

use serde::{Deserialize, Serialize};

use super::CLOUD_ID;

/// One entry of a chain. On the wire it is a string: a context id, or `"cloud"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ChainEntry {
    /// A context, by id.
    Context(String),
    /// The server's own executor.
    Cloud,
}

impl ChainEntry {
    /// The entry's id: the context id, or [`CLOUD_ID`].
    pub fn id(&self) -> &str {
        match self {
            ChainEntry::Context(id) => id,
            ChainEntry::Cloud => CLOUD_ID,
        }
    }
}

impl From<String> for ChainEntry {
    fn from(id: String) -> Self {
        if id == CLOUD_ID {
            ChainEntry::Cloud
        } else {
            ChainEntry::Context(id)
        }
    }
}

impl From<ChainEntry> for String {
    fn from(entry: ChainEntry) -> Self {
        match entry {
            ChainEntry::Context(id) => id,
            ChainEntry::Cloud => CLOUD_ID.to_owned(),
        }
    }
}

/// Why a chain was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// More than [`Chain::MAX_CONTEXTS`] contexts.
    #[error("a chain holds at most {max} contexts, not {len}", max = Chain::MAX_CONTEXTS)]
    TooLong {
        /// How many contexts the refused chain held, `cloud` not counted.
        len: usize,
    },
    /// `cloud` is not the last entry, or appears twice.
    #[error("`cloud` must be the last entry of a chain and appear once")]
    CloudNotLast,
    /// A context appears twice.
    #[error("context `{id}` appears more than once in the chain")]
    DuplicateEntry {
        /// The repeated context id.
        id: String,
    },
}

impl ChainError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ChainError::TooLong { .. } => "chain_too_long",
            ChainError::CloudNotLast => "cloud_not_last",
            ChainError::DuplicateEntry { .. } => "duplicate_chain_entry",
        }
    }
}

/// A checked chain. Without `cloud` it is strict: it never falls back to the server. An empty
/// chain means the caller has none, and runs go to the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<ChainEntry>", into = "Vec<ChainEntry>")]
pub struct Chain(Vec<ChainEntry>);

impl Chain {
    /// The most contexts a chain holds; `cloud` may follow them.
    pub const MAX_CONTEXTS: usize = 3;

    /// Checks `entries` against the chain rules.
    pub fn new(entries: Vec<ChainEntry>) -> Result<Self, ChainError> {
        let contexts = entries
            .iter()
            .filter(|e| !matches!(e, ChainEntry::Cloud))
            .count();
        if contexts > Self::MAX_CONTEXTS {
            return Err(ChainError::TooLong { len: contexts });
        }
        for (i, entry) in entries.iter().enumerate() {
            match entry {
                ChainEntry::Cloud if i + 1 != entries.len() => {
                    return Err(ChainError::CloudNotLast);
                }
                ChainEntry::Context(id) if entries[..i].contains(entry) => {
                    return Err(ChainError::DuplicateEntry { id: id.clone() });
                }
                _ => {}
            }
        }
        Ok(Self(entries))
    }

    /// The chain `[cloud]`.
    pub fn cloud_only() -> Self {
        Self(vec![ChainEntry::Cloud])
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[ChainEntry] {
        &self.0
    }

    /// True when the chain has entries and none is `cloud`.
    pub fn is_strict(&self) -> bool {
        !self.0.is_empty() && !self.0.contains(&ChainEntry::Cloud)
    }
}

impl TryFrom<Vec<ChainEntry>> for Chain {
    type Error = ChainError;

    fn try_from(entries: Vec<ChainEntry>) -> Result<Self, Self::Error> {
        Self::new(entries)
    }
}

impl From<Chain> for Vec<ChainEntry> {
    fn from(chain: Chain) -> Self {
        chain.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(id: &str) -> ChainEntry {
        ChainEntry::Context(id.into())
    }

    #[test]
    fn accepts_valid_chains() {
        assert!(Chain::new(vec![]).is_ok());
        assert!(Chain::new(vec![ctx("a"), ctx("b"), ChainEntry::Cloud]).is_ok());
        assert!(Chain::new(vec![ctx("a"), ctx("b"), ctx("c"), ChainEntry::Cloud]).is_ok());
        assert!(
            Chain::new(vec![ctx("a"), ctx("b"), ctx("c")])
                .unwrap()
                .is_strict()
        );
        assert!(!Chain::cloud_only().is_strict());
        assert!(!Chain::default().is_strict());
    }

    #[test]
    fn refuses_broken_chains_with_codes() {
        let code = |entries| Chain::new(entries).unwrap_err().code();
        assert_eq!(
            code(vec![
                ctx("a"),
                ctx("b"),
                ctx("c"),
                ctx("d"),
                ChainEntry::Cloud
            ]),
            "chain_too_long"
        );
        assert_eq!(code(vec![ChainEntry::Cloud, ctx("a")]), "cloud_not_last");
        assert_eq!(
            code(vec![ChainEntry::Cloud, ChainEntry::Cloud]),
            "cloud_not_last"
        );
        assert_eq!(code(vec![ctx("a"), ctx("a")]), "duplicate_chain_entry");
    }

    #[test]
    fn a_chain_is_a_list_of_strings_on_the_wire() {
        let chain: Chain = serde_json::from_str(r#"["ec_1","cloud"]"#).unwrap();
        assert_eq!(chain.entries(), &[ctx("ec_1"), ChainEntry::Cloud]);
        assert_eq!(
            serde_json::to_string(&chain).unwrap(),
            r#"["ec_1","cloud"]"#
        );
        assert!(serde_json::from_str::<Chain>(r#"["cloud","ec_1"]"#).is_err());
        let err = ChainError::TooLong { len: 4 };
        assert_eq!(err.to_string(), "a chain holds at most 3 contexts, not 4");
    }
}
