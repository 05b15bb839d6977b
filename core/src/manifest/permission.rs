//! The permission grammar: `<verb>:<target>`.
//!
//! | verb | target | example |
//! |---|---|---|
//! | `run_command` | a command name, `*` globs | `run_command:git` |
//! | `read_file` | a path or file-name pattern, `*` globs | `read_file:*.md` |
//! | `write_file` | a path or file-name pattern, `*` globs | `write_file:daily-report-*` |
//! | `connect` | `host[:port]`, `*.` prefixes | `connect:api.github.com:443` |
//! | `run_capability` | an environment | `run_capability:docker` |
//!
//! Targets are printable ASCII without spaces; `*` matches any run of characters.

use core::fmt;

use serde::{Serialize, Serializer};

use crate::wire::Environment;

/// What a permission lets a capability do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PermissionVerb {
    /// Run a host command.
    RunCommand,
    /// Read files.
    ReadFile,
    /// Write files.
    WriteFile,
    /// Open network connections.
    Connect,
    /// Run capabilities of an environment.
    RunCapability,
}

impl PermissionVerb {
    /// The verb as written.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionVerb::RunCommand => "run_command",
            PermissionVerb::ReadFile => "read_file",
            PermissionVerb::WriteFile => "write_file",
            PermissionVerb::Connect => "connect",
            PermissionVerb::RunCapability => "run_capability",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "run_command" => PermissionVerb::RunCommand,
            "read_file" => PermissionVerb::ReadFile,
            "write_file" => PermissionVerb::WriteFile,
            "connect" => PermissionVerb::Connect,
            "run_capability" => PermissionVerb::RunCapability,
            _ => return None,
        })
    }
}

/// One permission: a verb and a target pattern.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    /// What it allows.
    pub verb: PermissionVerb,
    /// On what (may hold `*`).
    pub target: String,
}

impl Permission {
    /// `run_capability:<environment>`.
    pub fn run_capability(environment: Environment) -> Self {
        Self {
            verb: PermissionVerb::RunCapability,
            target: environment.as_str().to_owned(),
        }
    }

    /// Parses `<verb>:<target>`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (verb, target) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?} is not `<verb>:<target>`"))?;
        let verb = PermissionVerb::parse(verb).ok_or_else(|| {
            format!(
                "unknown verb {verb:?}; known: run_command, read_file, write_file, connect, run_capability"
            )
        })?;
        if target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "target {target:?} must be printable ASCII without spaces"
            ));
        }
        if verb == PermissionVerb::RunCapability
            && !["shell", "wasm", "docker", "pty"].contains(&target)
        {
            return Err(format!(
                "run_capability takes an environment (shell, wasm, docker, pty), not {target:?}"
            ));
        }
        Ok(Self {
            verb,
            target: target.to_owned(),
        })
    }

    /// Whether this permission covers `verb` on `value` (`*` in the target matches any run of
    /// characters).
    pub fn allows(&self, verb: PermissionVerb, value: &str) -> bool {
        self.verb == verb && glob_match(self.target.as_bytes(), value.as_bytes())
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.verb.as_str(), self.target)
    }
}

impl Serialize for Permission {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `*`-only glob matching, iterative (no backtracking blow-up).
fn glob_match(pattern: &[u8], value: &[u8]) -> bool {
    let (mut p, mut v) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while v < value.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, v));
            p += 1;
        } else if p < pattern.len() && pattern[p] == value[v] {
            p += 1;
            v += 1;
        } else if let Some((sp, sv)) = star {
            p = sp + 1;
            v = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|b| *b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar_and_matching() {
        let p = Permission::parse("write_file:daily-report-*").unwrap();
        assert!(p.allows(PermissionVerb::WriteFile, "daily-report-2026-11-30.md"));
        assert!(!p.allows(PermissionVerb::WriteFile, "weekly-report.md"));
        assert!(!p.allows(PermissionVerb::ReadFile, "daily-report-1"));
        assert_eq!(p.to_string(), "write_file:daily-report-*");
        let git = Permission::parse("run_command:git").unwrap();
        assert!(git.allows(PermissionVerb::RunCommand, "git"));
        assert!(!git.allows(PermissionVerb::RunCommand, "gitk"));
        assert!(Permission::parse("run_command").is_err());
        assert!(Permission::parse("launch_missiles:now").is_err());
        assert!(Permission::parse("run_command:").is_err());
        assert!(Permission::parse("run_command:rm -rf").is_err());
        assert!(Permission::parse("run_capability:vm").is_err());
        assert_eq!(
            Permission::parse("run_capability:docker").unwrap(),
            Permission::run_capability(Environment::Docker)
        );
    }

    #[test]
    fn glob_is_linear_on_hostile_patterns() {
        let pattern = "*a".repeat(30);
        let value = "a".repeat(5000) + "b";
        assert!(!glob_match(pattern.as_bytes(), value.as_bytes()));
        assert!(glob_match(b"a*b*c", b"aXXbYYc"));
        assert!(glob_match(b"*", b""));
        assert!(!glob_match(b"a", b""));
    }
}
