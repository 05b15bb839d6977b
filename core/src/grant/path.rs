//! Canonical host paths: absolute, `/`-separated, already resolved by the host's `realpath`.
//!
//! This file owns the shape of a path and component-wise containment. It never touches the
//! file system: resolving symlinks is the host's job, done before a path gets here.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a string was refused as a [`CanonicalPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path does not start with `/`.
    #[error("`{0}` is not an absolute path; pass the path the host's realpath returned")]
    NotAbsolute(String),
    /// The path has an empty component (`//` or a trailing `/`).
    #[error("`{0}` has an empty component (`//` or a trailing `/`); pass the realpath form")]
    EmptyComponent(String),
    /// The path has a `.` or `..` component.
    #[error("`{0}` has a `.` or `..` component; pass the realpath form")]
    DotComponent(String),
    /// The path contains a NUL byte.
    #[error("the path contains a NUL byte")]
    Nul,
}

impl PathError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            PathError::NotAbsolute(_) => "path_not_absolute",
            PathError::EmptyComponent(_) => "path_empty_component",
            PathError::DotComponent(_) => "path_dot_component",
            PathError::Nul => "path_nul_byte",
        }
    }
}

/// An absolute, canonical, `/`-separated host path such as `/home/ana/projects`.
///
/// The root is `/`. Every other component is non-empty and neither `.` nor `..`; there is
/// no trailing `/`. Comparison is byte-wise (case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CanonicalPath(String);

impl CanonicalPath {
    /// Checks `path` and wraps it.
    pub fn new(path: impl Into<String>) -> Result<Self, PathError> {
        let path = path.into();
        if path.contains('\0') {
            return Err(PathError::Nul);
        }
        let Some(rest) = path.strip_prefix('/') else {
            return Err(PathError::NotAbsolute(path));
        };
        if rest.is_empty() {
            return Ok(Self(path));
        }
        for component in rest.split('/') {
            match component {
                "" => return Err(PathError::EmptyComponent(path)),
                "." | ".." => return Err(PathError::DotComponent(path)),
                _ => {}
            }
        }
        Ok(Self(path))
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// True when `other` is this path or lies under it, component by component:
    /// `/home/a` contains `/home/a` and `/home/a/b`, not `/home/ab`.
    pub fn contains(&self, other: &CanonicalPath) -> bool {
        if self.is_root() {
            return true;
        }
        match other.0.strip_prefix(self.0.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }

    /// The path `relative` below this one, checked like [`CanonicalPath::new`]
    /// (`relative` is `/`-separated and has no leading `/`).
    pub fn join(&self, relative: &str) -> Result<CanonicalPath, PathError> {
        if self.is_root() {
            Self::new(format!("/{relative}"))
        } else {
            Self::new(format!("{}/{relative}", self.0))
        }
    }
}

impl fmt::Display for CanonicalPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for CanonicalPath {
    type Error = PathError;

    fn try_from(path: String) -> Result<Self, Self::Error> {
        Self::new(path)
    }
}

impl From<CanonicalPath> for String {
    fn from(path: CanonicalPath) -> Self {
        path.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::new(s).unwrap()
    }

    #[test]
    fn accepts_canonical_paths() {
        for ok in [
            "/",
            "/home",
            "/home/ana/projects",
            "/a b/c",
            "/.hidden/x..y",
        ] {
            assert_eq!(CanonicalPath::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_non_canonical_paths_with_a_code() {
        let code = |s: &str| CanonicalPath::new(s).unwrap_err().code();
        assert_eq!(code(""), "path_not_absolute");
        assert_eq!(code("home/a"), "path_not_absolute");
        assert_eq!(code("~/a"), "path_not_absolute");
        assert_eq!(code("//"), "path_empty_component");
        assert_eq!(code("/home//a"), "path_empty_component");
        assert_eq!(code("/home/a/"), "path_empty_component");
        assert_eq!(code("/home/./a"), "path_dot_component");
        assert_eq!(code("/home/a/.."), "path_dot_component");
        assert_eq!(code("/home/a\0b"), "path_nul_byte");
    }

    #[test]
    fn containment_is_component_wise() {
        assert!(p("/home/a").contains(&p("/home/a")));
        assert!(p("/home/a").contains(&p("/home/a/b")));
        assert!(p("/home/a").contains(&p("/home/a/b/c")));
        assert!(!p("/home/a").contains(&p("/home/ab")));
        assert!(!p("/home/a").contains(&p("/home")));
        assert!(!p("/home/a/b").contains(&p("/home/a")));
        assert!(p("/").contains(&p("/anything/at/all")));
        assert!(p("/").contains(&p("/")));
    }

    #[test]
    fn join_checks_the_result() {
        assert_eq!(p("/home/a").join(".ssh").unwrap(), p("/home/a/.ssh"));
        assert_eq!(p("/").join("etc").unwrap(), p("/etc"));
        assert_eq!(
            p("/h").join("../x").unwrap_err().code(),
            "path_dot_component"
        );
        assert_eq!(p("/h").join("").unwrap_err().code(), "path_empty_component");
    }

    #[test]
    fn serde_refuses_bad_paths() {
        let ok: CanonicalPath = serde_json::from_str("\"/srv/data\"").unwrap();
        assert_eq!(ok, p("/srv/data"));
        assert!(serde_json::from_str::<CanonicalPath>("\"srv/data\"").is_err());
        assert_eq!(serde_json::to_string(&ok).unwrap(), "\"/srv/data\"");
    }
}
