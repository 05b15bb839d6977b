use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::executor::{Outcome, OutputChunk};
use crate::grant::CredentialDenylist;
use crate::manifest::Manifest;

/// An executor that records launches and refuses or accepts as told; it runs nothing.
struct Recorder {
    environment: Environment,
    probe: Probe,
    launched: Mutex<Vec<String>>,
}

struct Nothing;

impl RunHandle for Nothing {
    fn run_id(&self) -> &str {
        "r"
    }
    fn wait(&mut self, _: Duration) -> Result<Option<Outcome>, ExecError> {
        Ok(None)
    }
    fn cancel(&mut self) -> Result<(), ExecError> {
        Ok(())
    }
    fn read_output(&mut self) -> Vec<OutputChunk> {
        Vec::new()
    }
}

impl Executor for Recorder {
    fn environment(&self) -> Environment {
        self.environment
    }
    fn probe(&self) -> Probe {
        self.probe.clone()
    }
    fn launch(&self, launch: Launch) -> Result<Box<dyn RunHandle>, ExecError> {
        self.launched.lock().unwrap().push(launch.manifest.name);
        Ok(Box::new(Nothing))
    }
}

fn launch(environment: &str) -> Launch {
    let image = if environment == "docker" {
        "docker_image: img\n"
    } else {
        ""
    };
    let manifest = Manifest::parse(&format!(
        "name: cap\nenvironment: {environment}\nlifecycle: oneshot\nentry: run\n{image}"
    ))
    .unwrap();
    Launch {
        run_id: "r1".into(),
        dir: PathBuf::from("/caps/cap"),
        entry_bytes: None,
        manifest,
        extra_args: Vec::new(),
        mounts: Vec::new(),
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout: Duration::from_secs(1),
        egress: crate::wire::Egress::None,
        confined: false,
        context: String::new(),
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(Box::new(Recorder {
        environment: Environment::Shell,
        probe: Probe::Available {
            description: "sh".into(),
        },
        launched: Mutex::new(Vec::new()),
    }));
    r.register(Box::new(Recorder {
        environment: Environment::Docker,
        probe: Probe::Unavailable {
            reason: "the engine at unix:///var/run/docker.sock cannot be reached".into(),
            remedy: "start the Docker engine".into(),
        },
        launched: Mutex::new(Vec::new()),
    }));
    r
}

#[test]
fn shell_can_never_be_promoted_to_the_project() {
    let mut lists = Allowlists::new();
    let shell = Permission::run_capability(Environment::Shell);
    assert!(lists.allow(shell.clone(), Scope::Project).is_err());
    assert!(!lists.permits(&shell));
    lists.allow(shell.clone(), Scope::Session).unwrap();
    assert!(lists.permits(&shell));
    let docker = Permission::run_capability(Environment::Docker);
    lists.allow(docker.clone(), Scope::Project).unwrap();
    assert!(lists.permits(&docker));
    assert!(
        lists
            .allow(Permission::run_capability(Environment::Pty), Scope::Project)
            .is_err()
    );
}

#[test]
fn routes_to_the_declared_environment_or_refuses() {
    let registry = registry();
    let mut lists = Allowlists::new();
    let refused = run_capability(&registry, &lists, launch("shell"))
        .err()
        .unwrap();
    assert_eq!(refused.code(), "not_permitted");
    lists
        .allow(
            Permission::run_capability(Environment::Shell),
            Scope::Session,
        )
        .unwrap();
    assert!(run_capability(&registry, &lists, launch("shell")).is_ok());

    lists
        .allow(
            Permission::run_capability(Environment::Docker),
            Scope::Project,
        )
        .unwrap();
    let refused = run_capability(&registry, &lists, launch("docker"))
        .err()
        .unwrap();
    assert_eq!(refused.code(), "environment_unavailable");
    assert!(
        refused
            .to_string()
            .starts_with("Docker is unavailable; the capability cannot be executed: the engine at"),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("start the Docker engine"),
        "{refused}"
    );

    lists
        .allow(
            Permission::run_capability(Environment::Wasm),
            Scope::Project,
        )
        .unwrap();
    let refused = run_capability(&registry, &lists, launch("wasm"))
        .err()
        .unwrap();
    assert_eq!(
        refused,
        RunRefused::NoExecutor {
            environment: Environment::Wasm
        }
    );
    assert_eq!(registry.available(), vec![Environment::Shell]);
}

#[test]
fn a_pty_run_needs_a_session_allowance_like_a_shell() {
    let mut registry = registry();
    registry.register(Box::new(Recorder {
        environment: Environment::Pty,
        probe: Probe::Available {
            description: "/dev/ptmx (portable-pty)".into(),
        },
        launched: Mutex::new(Vec::new()),
    }));
    let pty = Permission::run_capability(Environment::Pty);
    let mut lists = Allowlists::new();
    // Allowing the shell does not allow a terminal.
    lists
        .allow(
            Permission::run_capability(Environment::Shell),
            Scope::Session,
        )
        .unwrap();
    let refused = run_capability(&registry, &lists, launch("pty"))
        .err()
        .unwrap();
    assert_eq!(
        refused,
        RunRefused::NotPermitted {
            permission: pty.clone()
        }
    );
    let ceiling = lists.allow(pty.clone(), Scope::Project).unwrap_err();
    assert_eq!(ceiling.permission, pty);
    assert!(
        ceiling
            .to_string()
            .contains("only be allowed for the session")
    );
    let refused = run_capability(&registry, &lists, launch("pty"))
        .err()
        .unwrap();
    assert_eq!(
        refused.code(),
        "not_permitted",
        "a refused promotion allows nothing"
    );
    lists.allow(pty, Scope::Session).unwrap();
    let handle = run_capability(&registry, &lists, launch("pty")).unwrap();
    assert_eq!(handle.run_id(), "r");
    assert_eq!(
        registry.get(Environment::Pty).unwrap().environment(),
        Environment::Pty
    );
}

#[test]
fn an_unavailable_pty_is_refused_never_run_elsewhere() {
    let mut registry = registry();
    registry.register(Box::new(Recorder {
        environment: Environment::Pty,
        probe: Probe::Unavailable {
            reason: "cannot open /dev/ptmx".into(),
            remedy: "mount devpts".into(),
        },
        launched: Mutex::new(Vec::new()),
    }));
    let mut lists = Allowlists::new();
    lists
        .allow(Permission::run_capability(Environment::Pty), Scope::Session)
        .unwrap();
    lists
        .allow(
            Permission::run_capability(Environment::Shell),
            Scope::Session,
        )
        .unwrap();
    let refused = run_capability(&registry, &lists, launch("pty"))
        .err()
        .unwrap();
    assert_eq!(refused.code(), "environment_unavailable");
    assert!(
        refused.to_string().starts_with("The PTY is unavailable"),
        "{refused}"
    );
}
