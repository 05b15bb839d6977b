//! The ids the protocol passes around, each a type of its own so a run id cannot be handed
//! where a context id is wanted: [`RunId`] (a run on a machine, `ex_…` for an execution's
//! runs), [`ExecutionId`] (an execution the API shows, `ex_…`), [`ContextId`] (a registered
//! machine, `ec_…`), [`WaitId`] (a condition wait, `wait_…`) and [`TerminalId`] (a terminal,
//! which is its run's id).
//!
//! On the wire and in records each is the plain JSON string it always was (`serde`
//! transparent); this module adds no check of their shape (the peer's ids are opaque) and
//! never allocates one itself.

use core::borrow::Borrow;
use core::fmt;
use core::ops::Deref;

use serde::{Deserialize, Serialize};

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[serde(transparent)]
        #[cfg_attr(feature = "schema", schemars(transparent))]
        pub struct $name(String);

        impl $name {
            /// The id whose text is `text`.
            pub fn new(text: impl Into<String>) -> Self {
                Self(text.into())
            }

            /// The id's text, as on the wire.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                Self(text)
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                Self(text.to_owned())
            }
        }

        impl From<&String> for $name {
            fn from(text: &String) -> Self {
                Self(text.clone())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

id!(
    /// A run on a machine: what `execute`, `result`, `cancel` and the `pty.*` frames name.
    RunId
);
id!(
    /// An execution as the API shows it (`ex_…`).
    ExecutionId
);
id!(
    /// A registered machine (`ec_…`).
    ContextId
);
id!(
    /// A condition wait (`wait_…`).
    WaitId
);

/// A terminal: the id of the run that holds it.
pub type TerminalId = RunId;

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn an_id_is_its_string_on_the_wire_and_is_found_by_its_text() {
        let id = RunId::new("ex_1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"ex_1\"");
        assert_eq!(serde_json::from_str::<RunId>("\"ex_1\"").unwrap(), id);
        let mut runs = HashMap::new();
        runs.insert(id.clone(), 7);
        assert_eq!(runs.get("ex_1"), Some(&7));
        assert_eq!(id, "ex_1");
        assert_eq!(*"ex_1", id);
        assert_eq!(id.len(), 4);
        assert_eq!(format!("{id}"), "ex_1");
    }
}
