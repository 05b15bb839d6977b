//! What a run on this machine can see, in plain words and as JSON: the owner's local policy
//! (folders, host commands, `confinement`) read together with what this machine's kernel can
//! enforce, for `outpost context policy`.
//!
//! This module only describes; the decision itself is `outpost_core::grant::must_confine`
//! and the sandbox is `outpost_host::sandbox`. It never changes the policy.

use outpost_core::grant::{ConfinementPolicy, LocalPolicy};
use outpost_host::sandbox::{Support, default_helper};
use serde_json::{Value, json};

/// What this machine's kernel can enforce (probed through this very binary).
pub fn kernel() -> Support {
    match default_helper() {
        Ok(helper) => Support::probe(&helper),
        Err(why) => Support {
            landlock: Err(why.clone()),
            namespaces: Err(why),
            scopes: false,
        },
    }
}

/// What a daemon announces of its sandbox (PROTOCOL §4.2): `sandbox:landlock`,
/// `sandbox:namespaces` and `sandbox:scopes` for each piece the kernel enforces, and
/// `confinement:<rule>` for the owner's rule. Logged once at start.
pub fn features(policy: &LocalPolicy, kernel: &Support) -> Vec<String> {
    let mut out = Vec::new();
    if kernel.landlock.is_ok() {
        out.push("sandbox:landlock".to_owned());
    }
    if kernel.namespaces.is_ok() {
        out.push("sandbox:namespaces".to_owned());
    }
    if kernel.scopes {
        out.push("sandbox:scopes".to_owned());
    }
    out.push(format!("confinement:{}", policy.confinement.as_str()));
    let missing: Vec<String> = [
        ("Landlock", &kernel.landlock),
        ("namespaces", &kernel.namespaces),
    ]
    .into_iter()
    .filter_map(|(name, r)| r.as_ref().err().map(|why| format!("{name}: {why}")))
    .collect();
    if missing.is_empty() {
        tracing::info!(
            confinement = policy.confinement.as_str(),
            scopes = kernel.scopes,
            "the sandbox is enforced in full here"
        );
    } else {
        tracing::warn!(
            confinement = policy.confinement.as_str(),
            "the sandbox is not complete here; runs that need a missing piece are refused (confinement_unavailable): {}",
            missing.join("; ")
        );
    }
    out
}

/// `kernel` as `--json` prints it: each piece `true`, or the reason it is missing.
pub fn kernel_json(kernel: &Support) -> Value {
    let piece = |r: &Result<(), String>| match r {
        Ok(()) => json!(true),
        Err(why) => json!(why),
    };
    json!({
        "landlock": piece(&kernel.landlock),
        "namespaces": piece(&kernel.namespaces),
        "scopes": kernel.scopes,
    })
}

/// Per run kind, whether it is sandboxed and what it can reach.
pub fn runs_json(policy: &LocalPolicy, kernel: &Support) -> Value {
    let opt_out = policy.confinement == ConfinementPolicy::OperatorMayOptOut;
    json!({
        "operator": {
            "sandboxed": if opt_out { "unless its manifest says confine: false" } else { "always" },
            "folders": policy.folders.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
            "hostCommands": policy.commands_enabled,
        },
        "shared": {"sandboxed": "always", "folders": [], "hostCommands": false},
        "refusedHere": refused_here(kernel),
    })
}

/// Which runs this kernel makes the daemon refuse (`confinement_unavailable`).
fn refused_here(kernel: &Support) -> Vec<&'static str> {
    match (&kernel.landlock, &kernel.namespaces) {
        (Err(_), _) => vec!["every sandboxed run"],
        (Ok(()), Err(_)) => {
            vec!["every sandboxed run (it needs namespaces for a file system of its own)"]
        }
        (Ok(()), Ok(())) => Vec::new(),
    }
}

/// The lines `outpost context policy` prints under the folders.
pub fn describe(policy: &LocalPolicy, kernel: &Support) -> Vec<String> {
    let mut out = vec![format!(
        "what a run on this machine can see (confinement: {}):",
        policy.confinement.as_str()
    )];
    let sandbox = "reads the system folders, its own capability folder and its granted folders; writes only a private home and temp folder (removed after the run) and the granted rw folders; sees and signals only its own processes; reaches the network its grant's egress allows (none: nothing, not even this machine's loopback services; an allowlist: those host:port pairs through the egress gate; all: anywhere)";
    match policy.confinement {
        ConfinementPolicy::Required => {
            out.push(format!("  the operator's runs: sandboxed — {sandbox}"));
        }
        ConfinementPolicy::OperatorMayOptOut => {
            out.push(format!("  the operator's runs: sandboxed — {sandbox}"));
            out.push(
                "    except one whose manifest says `confine: false`: it runs as you and sees what you see"
                    .into(),
            );
        }
    }
    out.push(
        "  shared members' runs, waits' checks and cloud runs: always sandboxed, with no folders and no host commands"
            .into(),
    );
    out.push(format!(
        "  host commands (the operator's runs only): {} — when on they run as you, unsandboxed, by design",
        if policy.commands_enabled { "on" } else { "off" }
    ));
    let yes_no = |r: &Result<(), String>| match r {
        Ok(()) => "yes".to_owned(),
        Err(why) => format!("no ({why})"),
    };
    out.push(format!(
        "this kernel enforces: Landlock {}; namespaces {}; signal scoping {}",
        yes_no(&kernel.landlock),
        yes_no(&kernel.namespaces),
        if kernel.scopes { "yes" } else { "no" }
    ));
    for refused in refused_here(kernel) {
        out.push(format!(
            "  refused here (confinement_unavailable): {refused}"
        ));
    }
    out
}
