//! The environment a run starts with, the same for every executor that starts host processes
//! (shell, pty): this module owns which host variables pass; it never reads a secret itself.

use std::collections::BTreeMap;
use std::ffi::OsString;

/// Host variables a run inherits (when the host has them). Everything else is dropped.
pub const PASSTHROUGH_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "TMPDIR",
    "SHELL",
];

const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The run's environment: the passthrough variables from `host`, minus every `OUTPOST_*` one
/// and every name in `secrets`, plus the manifest's `env` (which may override them).
pub fn run_environment(
    host: impl Iterator<Item = (OsString, OsString)>,
    manifest_env: &[(String, String)],
    secrets: &[String],
) -> Vec<(OsString, OsString)> {
    let allowed = |name: &str| {
        PASSTHROUGH_VARS.contains(&name)
            && !name.starts_with("OUTPOST_")
            && !secrets.iter().any(|s| s == name)
    };
    let mut env: BTreeMap<OsString, OsString> = host
        .filter(|(k, _)| k.to_str().is_some_and(allowed))
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    for (k, v) in manifest_env {
        if !k.starts_with("OUTPOST_") {
            env.insert(k.into(), v.into());
        }
    }
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_harmless_variables_pass() {
        let host = [
            ("PATH", "/bin"),
            ("HOME", "/home/ada"),
            ("OUTPOST_TOKEN", "secret"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("LANG", "C.UTF-8"),
        ]
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let manifest = [("GREETING".to_owned(), "hi".to_owned())];
        let env = run_environment(host, &manifest, &["LANG".to_owned()]);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, vec!["GREETING", "HOME", "PATH"]);
    }

    #[test]
    fn path_has_a_default() {
        let env = run_environment(std::iter::empty(), &[], &[]);
        assert_eq!(env, vec![("PATH".into(), DEFAULT_PATH.into())]);
    }
}
