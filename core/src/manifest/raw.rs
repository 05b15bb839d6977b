//! The manifest as YAML says it, with locations, and its validation into [`Manifest`].

use indexmap::IndexMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::TerminalSize;
use super::{
    Interpreter, Lifecycle, Limits, Manifest, ManifestError, Permission, Volume,
    check_image_command, check_relative_path,
};
use crate::wire::{Environment, FolderMode};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default = "one")]
    version: u32,
    environment: Spanned<Environment>,
    lifecycle: Spanned<Lifecycle>,
    entry: Spanned<String>,
    #[serde(default)]
    interpreter: Option<Spanned<Interpreter>>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: IndexMap<String, Spanned<String>>,
    #[serde(default)]
    permissions: Vec<Spanned<String>>,
    #[serde(default)]
    volumes: Vec<Spanned<RawVolume>>,
    #[serde(default)]
    docker_image: Option<Spanned<String>>,
    #[serde(default)]
    port: Option<Spanned<u16>>,
    #[serde(default)]
    confine: Option<Spanned<bool>>,
    #[serde(default)]
    terminal: Option<Spanned<RawTerminal>>,
    #[serde(default)]
    limits: Option<Spanned<RawLimits>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTerminal {
    cols: Option<u64>,
    rows: Option<u64>,
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVolume {
    host: String,
    guest: String,
    #[serde(default = "read_only")]
    mode: FolderMode,
}

fn read_only() -> FolderMode {
    FolderMode::Ro
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout_ms: Option<u64>,
    output_max_bytes: Option<u64>,
    memory_mb: Option<u64>,
    cpu_millicores: Option<u64>,
    pids_max: Option<u64>,
    idle_ms: Option<u64>,
}

fn err<T>(
    field: impl Into<String>,
    at: Option<&serde_saphyr::Location>,
    message: impl Into<String>,
) -> Result<T, ManifestError> {
    Err(ManifestError {
        field: field.into(),
        line: at.map(|l| l.line()),
        message: message.into(),
    })
}

/// The YAML reader's options: no anchor (`&name`) and no alias (`*name`), refused at the
/// first one the parser meets, before anything is recorded for replay; a manifest is short
/// enough to write out, and an alias is how a small text expands into a large value.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_aliases: 0,
            max_anchors: 0,
        },
    }
}

/// The refusal of an anchor or an alias, naming its line; `None` for any other error.
fn anchor_refusal(e: &serde_saphyr::Error) -> Option<ManifestError> {
    use serde_saphyr::budget::BudgetBreach;
    let serde_saphyr::Error::Budget { breach, .. } = e.without_snippet() else {
        return None;
    };
    let what = match breach {
        BudgetBreach::Aliases { .. } => "an alias (`*name`)",
        BudgetBreach::Anchors { .. } => "an anchor (`&name`)",
        _ => return None,
    };
    Some(ManifestError {
        field: String::new(),
        line: e.location().map(|l| l.line()),
        message: format!(
            "{what}: YAML anchors, aliases and merge keys are not allowed in a manifest; write the values out"
        ),
    })
}

pub(super) fn parse(text: &str) -> Result<Manifest, ManifestError> {
    let raw: RawManifest =
        serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|e| {
            if let Some(refusal) = anchor_refusal(&e) {
                return refusal;
            }
            let message = e.to_string();
            let first = message.lines().next().unwrap_or("invalid YAML").to_owned();
            let field = first
                .split('`')
                .nth(1)
                .filter(|_| first.contains("field `"))
                .unwrap_or("")
                .to_owned();
            ManifestError {
                field,
                line: e.location().map(|l| l.line()),
                message: first,
            }
        })?;

    let name = raw.name.value;
    let name_ok = name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !name_ok {
        return err(
            "name",
            Some(&raw.name.referenced),
            format!(
                "{name:?} must be 1-63 lowercase letters, digits or `-`, starting with a letter"
            ),
        );
    }
    let environment = raw.environment.value;
    let lifecycle = raw.lifecycle.value;
    let entry_check = if environment == Environment::Docker {
        check_image_command(&raw.entry.value)
    } else {
        check_relative_path(&raw.entry.value)
    };
    if let Err(why) = entry_check {
        return err(
            "entry",
            Some(&raw.entry.referenced),
            format!("{:?} {why}", raw.entry.value),
        );
    }

    let interpreter = match raw.interpreter {
        Some(i) if environment != Environment::Shell => {
            return err(
                "interpreter",
                Some(&i.referenced),
                "applies to shell capabilities only",
            );
        }
        Some(i) => i.value,
        None => Interpreter::default(),
    };
    for (key, value) in &raw.env {
        let at = Some(&value.referenced);
        let valid = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return err(
                format!("env.{key}"),
                at,
                "variable names are [A-Za-z_][A-Za-z0-9_]*",
            );
        }
        if key.starts_with("OUTPOST_") {
            return err(
                format!("env.{key}"),
                at,
                "OUTPOST_* variables are reserved for the daemon",
            );
        }
    }
    let env = raw.env.into_iter().map(|(k, v)| (k, v.value)).collect();
    let mut permissions = Vec::with_capacity(raw.permissions.len());
    for (i, p) in raw.permissions.iter().enumerate() {
        match Permission::parse(&p.value) {
            Ok(perm) => permissions.push(perm),
            Err(why) => return err(format!("permissions[{i}]"), Some(&p.referenced), why),
        }
    }

    let mut volumes = Vec::with_capacity(raw.volumes.len());
    for (i, v) in raw.volumes.into_iter().enumerate() {
        let at = Some(&v.referenced);
        if !matches!(environment, Environment::Wasm | Environment::Docker) {
            return err(
                format!("volumes[{i}]"),
                at,
                "volumes apply to wasm and docker capabilities only",
            );
        }
        let RawVolume { host, guest, mode } = v.value;
        if host.is_empty() || host.contains('\0') {
            return err(format!("volumes[{i}].host"), at, "must be a path");
        }
        if !guest.starts_with('/') || guest.contains('\0') || guest.split('/').any(|c| c == "..") {
            return err(
                format!("volumes[{i}].guest"),
                at,
                format!("{guest:?} must be absolute and without `..`"),
            );
        }
        volumes.push(Volume { host, guest, mode });
    }

    // `docker_image: ""` (as in the seed's template) means none.
    let docker_image = raw.docker_image.filter(|img| !img.value.is_empty());
    let docker_image: Option<String> = match docker_image {
        Some(img) if environment != Environment::Docker => {
            return err(
                "docker_image",
                Some(&img.referenced),
                "applies to docker capabilities only",
            );
        }
        Some(img) => {
            let valid = img
                .value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-/:@".contains(&b));
            if !valid {
                return err(
                    "docker_image",
                    Some(&img.referenced),
                    format!("{:?} is not an image reference", img.value),
                );
            }
            Some(img.value)
        }
        None if environment == Environment::Docker => {
            return err(
                "docker_image",
                Some(&raw.environment.referenced),
                "docker capabilities must name their image",
            );
        }
        None => None,
    };

    let port = match raw.port {
        Some(p) if environment == Environment::Pty => {
            return err(
                "port",
                Some(&p.referenced),
                "a pty capability is a terminal and listens on no port",
            );
        }
        Some(p) if lifecycle != Lifecycle::Persistent => {
            return err(
                "port",
                Some(&p.referenced),
                "applies to persistent services only",
            );
        }
        Some(p) if p.value == 0 => return err("port", Some(&p.referenced), "must be 1-65535"),
        Some(p) => Some(p.value),
        None => None,
    };
    let confine = match raw.confine {
        Some(c) if c.value && !matches!(environment, Environment::Shell | Environment::Pty) => {
            return err(
                "confine",
                Some(&c.referenced),
                "applies to shell and pty capabilities only",
            );
        }
        Some(c) => c.value,
        // Asking for nothing is asking to be sandboxed: only `confine: false` asks for less.
        None => true,
    };

    let terminal = match raw.terminal {
        Some(t) if environment != Environment::Pty => {
            return err(
                "terminal",
                Some(&t.referenced),
                "applies to pty capabilities only",
            );
        }
        Some(t) => {
            let mut size = TerminalSize::DEFAULT;
            for (field, value, side) in [
                ("cols", t.value.cols, &mut size.cols),
                ("rows", t.value.rows, &mut size.rows),
            ] {
                if let Some(v) = value {
                    match u16::try_from(v) {
                        Ok(v) if (1..=1000).contains(&v) => *side = v,
                        _ => {
                            return err(
                                format!("terminal.{field}"),
                                Some(&t.referenced),
                                format!("{v} is outside 1..=1000"),
                            );
                        }
                    }
                }
            }
            Some(size)
        }
        None if environment == Environment::Pty => Some(TerminalSize::DEFAULT),
        None => None,
    };

    let mut limits = Limits::DEFAULT;
    if let Some(l) = raw.limits {
        let at = Some(&l.referenced);
        let RawLimits {
            timeout_ms,
            output_max_bytes,
            memory_mb,
            cpu_millicores,
            pids_max,
            idle_ms,
        } = l.value;
        if idle_ms.is_some() && environment != Environment::Pty {
            return err("limits.idle_ms", at, "applies to pty capabilities only");
        }
        for (field, value, max) in [
            ("timeout_ms", timeout_ms, Limits::MAX.timeout_ms),
            (
                "output_max_bytes",
                output_max_bytes,
                Limits::MAX.output_max_bytes,
            ),
            ("memory_mb", memory_mb, Limits::MAX.memory_mb),
            ("cpu_millicores", cpu_millicores, Limits::MAX.cpu_millicores),
            ("pids_max", pids_max, Limits::MAX.pids_max),
            ("idle_ms", idle_ms, Limits::MAX.timeout_ms),
        ] {
            if let Some(v) = value
                && (v == 0 || v > max)
            {
                return err(
                    format!("limits.{field}"),
                    at,
                    format!("{v} is outside 1..={max}"),
                );
            }
        }
        limits = Limits {
            timeout_ms: timeout_ms.unwrap_or(limits.timeout_ms),
            output_max_bytes: output_max_bytes.unwrap_or(limits.output_max_bytes),
            memory_mb: memory_mb.unwrap_or(limits.memory_mb),
            cpu_millicores: cpu_millicores.unwrap_or(limits.cpu_millicores),
            pids_max: pids_max.unwrap_or(limits.pids_max),
            idle_ms: idle_ms.or(limits.idle_ms),
        };
    }

    Ok(Manifest {
        name,
        description: raw.description,
        version: raw.version,
        environment,
        lifecycle,
        entry: raw.entry.value,
        interpreter,
        args: raw.args,
        env,
        permissions,
        volumes,
        docker_image,
        port,
        confine,
        terminal,
        limits,
    })
}
