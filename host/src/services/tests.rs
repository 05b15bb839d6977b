//! The table with an executor whose launches and stops wait on gates the test opens, so a
//! slow launch or stop is held exactly as long as the test needs, with no sleeps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outpost_core::executor::{
    Allowlists, Ending, ExecError, Executor, Launch, Outcome, OutputChunk, Probe, Registry,
    RunHandle, RunRefused, Scope,
};
use outpost_core::grant::CredentialDenylist;
use outpost_core::manifest::{Manifest, Permission};
use outpost_core::wire::{Egress, Environment};

use super::{RunningServiceTable, ServiceState, ShutdownError, StopError};

/// How long a test waits for the other side before it declares it blocked.
const BLOCKED: Duration = Duration::from_secs(10);

/// A point a launch or a stop reaches (`entered`) and then waits at until the test opens it.
struct Gate {
    entered: Sender<()>,
    open: Mutex<Receiver<()>>,
}

impl Gate {
    fn new() -> (Arc<Gate>, Receiver<()>, Sender<()>) {
        let (entered, entered_rx) = mpsc::channel();
        let (open_tx, open) = mpsc::channel();
        let gate = Gate {
            entered,
            open: Mutex::new(open),
        };
        (Arc::new(gate), entered_rx, open_tx)
    }

    fn pass(&self) {
        let _ = self.entered.send(());
        let _ = self.open.lock().unwrap().recv();
    }
}

/// Runs "services" that do nothing until cancelled. The run named `slow` waits at
/// `slow_stop` when cancelled; the launch of `slow-start` waits at `slow_launch`. `stuck`
/// never ends, even cancelled; cancelling `unstoppable` fails. `cancels` counts cancels.
#[derive(Default)]
struct GatedExecutor {
    launches: Arc<AtomicUsize>,
    cancels: Arc<AtomicUsize>,
    slow_launch: Option<Arc<Gate>>,
    slow_stop: Option<Arc<Gate>>,
}

struct GatedRun {
    name: String,
    cancelled: bool,
    cancels: Arc<AtomicUsize>,
    stop_gate: Option<Arc<Gate>>,
}

impl Executor for GatedExecutor {
    fn environment(&self) -> Environment {
        Environment::Wasm
    }

    fn probe(&self) -> Probe {
        Probe::Available {
            description: "gated".into(),
        }
    }

    fn launch(&self, launch: Launch) -> Result<Box<dyn RunHandle>, ExecError> {
        let name = launch.manifest.name.clone();
        if name == "slow-start"
            && let Some(gate) = &self.slow_launch
        {
            gate.pass();
        }
        if name == "broken" {
            return Err(ExecError::Spawn("it never starts".into()));
        }
        self.launches.fetch_add(1, Ordering::SeqCst);
        let stop_gate = if name == "slow" {
            self.slow_stop.clone()
        } else {
            None
        };
        Ok(Box::new(GatedRun {
            name,
            cancelled: false,
            cancels: self.cancels.clone(),
            stop_gate,
        }))
    }
}

impl RunHandle for GatedRun {
    fn run_id(&self) -> &str {
        &self.name
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<Outcome>, ExecError> {
        if self.name == "stuck" {
            // Blocks as a real wait would, and never sees the run end.
            std::thread::park_timeout(timeout);
            return Ok(None);
        }
        Ok(self.cancelled.then(|| Outcome {
            ending: Ending::Cancelled,
            exit_code: None,
            signal: Some(15),
            stdout: Vec::new(),
            stderr: Vec::new(),
            truncated: false,
            setup: Duration::ZERO,
            execute: Duration::ZERO,
            egress_denied: Vec::new(),
        }))
    }

    fn cancel(&mut self) -> Result<(), ExecError> {
        self.cancels.fetch_add(1, Ordering::SeqCst);
        if self.name == "unstoppable" {
            return Err(ExecError::Failed("the engine refused".into()));
        }
        if let Some(gate) = self.stop_gate.take() {
            gate.pass();
        }
        self.cancelled = true;
        Ok(())
    }

    fn read_output(&mut self) -> Vec<OutputChunk> {
        Vec::new()
    }

    fn service_id(&self) -> Option<String> {
        Some(format!("id-{}", self.name))
    }
}

fn launch(name: &str) -> Launch {
    let manifest = Manifest::parse(&format!(
        "name: {name}\nenvironment: wasm\nlifecycle: persistent\nentry: m.wat\n"
    ))
    .unwrap();
    Launch {
        run_id: format!("run-{name}").into(),
        dir: std::env::temp_dir(),
        entry_bytes: None,
        manifest,
        extra_args: Vec::new(),
        mounts: Vec::new(),
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout: Duration::from_secs(1),
        egress: Egress::None,
        confined: false,
        context: String::new(),
    }
}

fn allowed() -> Allowlists {
    let mut allow = Allowlists::new();
    allow
        .allow(
            Permission::run_capability(Environment::Wasm),
            Scope::Project,
        )
        .unwrap();
    allow
}

fn registry(executor: GatedExecutor) -> Registry {
    let mut registry = Registry::new();
    registry.register(Box::new(executor));
    registry
}

fn state(table: &RunningServiceTable, name: &str) -> Option<ServiceState> {
    table.get(name).map(|s| s.state)
}

#[test]
fn a_slow_stop_blocks_no_lookup_and_no_start() {
    let (gate, entered, open) = Gate::new();
    let registry = Arc::new(registry(GatedExecutor {
        slow_stop: Some(gate),
        ..GatedExecutor::default()
    }));
    let table = Arc::new(RunningServiceTable::new());
    let info = table.start(&registry, &allowed(), launch("slow")).unwrap();
    assert_eq!(info.state, ServiceState::Running);
    assert_eq!(info.id.as_deref(), Some("id-slow"));

    let stopper = {
        let table = table.clone();
        std::thread::spawn(move || table.stop("slow"))
    };
    entered
        .recv_timeout(BLOCKED)
        .expect("the stop reached its executor");

    // While that stop waits, another thread looks up, starts and stops freely.
    let (done, results) = mpsc::channel();
    {
        let (table, registry) = (table.clone(), registry.clone());
        std::thread::spawn(move || {
            let slow = state(&table, "slow");
            let listed = table.list().len();
            let output = table.read_output("slow");
            let started = table.start(&registry, &allowed(), launch("other"));
            let again = table.stop("slow").err().map(|e| e.to_string());
            let other = table.stop("other").map(|s| s.state);
            let _ = done.send((slow, listed, output, started.is_ok(), again, other));
        });
    }
    let (slow, listed, output, started, again, other) = results
        .recv_timeout(BLOCKED)
        .expect("a slow stop blocked the table");
    assert_eq!(slow, Some(ServiceState::Stopping));
    assert_eq!(listed, 1);
    assert!(output.is_empty());
    assert!(started, "a start of another service went through");
    assert_eq!(
        again.as_deref(),
        Some("invalid capability: service slow is stopping")
    );
    assert_eq!(other.unwrap(), ServiceState::Stopped);

    open.send(()).unwrap();
    let stopped = stopper.join().unwrap().unwrap();
    assert_eq!(stopped.state, ServiceState::Stopped);
    assert_eq!(state(&table, "slow"), Some(ServiceState::Stopped));
}

#[test]
fn a_slow_launch_blocks_no_lookup_and_holds_its_name() {
    let (gate, entered, open) = Gate::new();
    let registry = Arc::new(registry(GatedExecutor {
        slow_launch: Some(gate),
        ..GatedExecutor::default()
    }));
    let table = Arc::new(RunningServiceTable::new());
    let starter = {
        let (table, registry) = (table.clone(), registry.clone());
        std::thread::spawn(move || table.start(&registry, &allowed(), launch("slow-start")))
    };
    entered
        .recv_timeout(BLOCKED)
        .expect("the launch reached its executor");

    let (done, results) = mpsc::channel();
    {
        let (table, registry) = (table.clone(), registry.clone());
        std::thread::spawn(move || {
            let starting = state(&table, "slow-start");
            let twice = table
                .start(&registry, &allowed(), launch("slow-start"))
                .err()
                .map(|e| e.to_string());
            let other = table
                .start(&registry, &allowed(), launch("other"))
                .map(|s| s.state);
            let _ = done.send((starting, twice, other));
        });
    }
    let (starting, twice, other) = results
        .recv_timeout(BLOCKED)
        .expect("a slow launch blocked the table");
    assert_eq!(starting, Some(ServiceState::Starting));
    assert_eq!(
        twice.as_deref(),
        Some("invalid capability: service slow-start is starting")
    );
    assert_eq!(other.unwrap(), ServiceState::Running);

    open.send(()).unwrap();
    let info = starter.join().unwrap().unwrap();
    assert_eq!(info.state, ServiceState::Running);
    assert_eq!(info.id.as_deref(), Some("id-slow-start"));
}

#[test]
fn a_persistent_capability_without_its_permission_is_refused_before_anything_runs() {
    let executor = GatedExecutor::default();
    let launches = executor.launches.clone();
    let registry = registry(executor);
    let table = RunningServiceTable::new();
    let err = table
        .start(&registry, &Allowlists::new(), launch("quiet"))
        .unwrap_err();
    assert!(
        matches!(&err, RunRefused::NotPermitted { permission }
            if *permission == Permission::run_capability(Environment::Wasm)),
        "{err}"
    );
    assert_eq!(err.code(), "not_permitted");
    assert_eq!(launches.load(Ordering::SeqCst), 0, "nothing was launched");
    assert!(table.list().is_empty(), "the refused name holds no row");
}

#[test]
fn a_failed_launch_leaves_the_previous_row_and_frees_the_name() {
    let registry = registry(GatedExecutor::default());
    let table = RunningServiceTable::new();
    let err = table
        .start(&registry, &allowed(), launch("broken"))
        .unwrap_err();
    assert_eq!(err.code(), "spawn_failed");
    assert!(table.list().is_empty());

    table.start(&registry, &allowed(), launch("svc")).unwrap();
    table.stop("svc").unwrap();
    let mut again = launch("svc");
    again.manifest.lifecycle = outpost_core::manifest::Lifecycle::Oneshot;
    let err = table.start(&registry, &allowed(), again).unwrap_err();
    assert_eq!(err.code(), "invalid_capability");
    assert_eq!(state(&table, "svc"), Some(ServiceState::Stopped));
    assert_eq!(
        table
            .start(&registry, &allowed(), launch("svc"))
            .unwrap()
            .state,
        ServiceState::Running,
        "a stopped name can start again"
    );
}

#[test]
fn shutdown_reports_every_service_it_could_not_stop_and_stops_the_rest() {
    let registry = registry(GatedExecutor::default());
    let table = RunningServiceTable::new();
    for name in ["unstoppable", "svc"] {
        table.start(&registry, &allowed(), launch(name)).unwrap();
    }
    let err = table.shutdown().unwrap_err();
    let ShutdownError::NotStopped(failures) = &err else {
        panic!("{err}");
    };
    assert_eq!(failures.len(), 1, "{err}");
    assert_eq!(failures[0].0, "unstoppable");
    assert_eq!(failures[0].1.code(), "run_failed");
    assert_eq!(
        err.to_string(),
        "1 service(s) could not be stopped: unstoppable: run failed: the engine refused"
    );
    assert_eq!(state(&table, "svc"), Some(ServiceState::Stopped));
    assert_eq!(state(&table, "unstoppable"), Some(ServiceState::Running));
}

#[test]
fn a_launch_in_flight_when_shutdown_begins_stops_its_run_when_it_completes() {
    let (gate, entered, open) = Gate::new();
    let executor = GatedExecutor {
        slow_launch: Some(gate),
        ..GatedExecutor::default()
    };
    let cancels = executor.cancels.clone();
    let registry = Arc::new(registry(executor));
    let table = Arc::new(RunningServiceTable::new());
    let starter = {
        let (table, registry) = (table.clone(), registry.clone());
        std::thread::spawn(move || table.start(&registry, &allowed(), launch("slow-start")))
    };
    entered
        .recv_timeout(BLOCKED)
        .expect("the launch reached its executor");
    table.shutdown().unwrap();
    assert_eq!(cancels.load(Ordering::SeqCst), 0, "nothing ran yet");

    open.send(()).unwrap();
    let err = starter.join().unwrap().unwrap_err();
    assert_eq!(err.code(), "run_failed");
    assert!(err.to_string().contains("shutting down"), "{err}");
    assert_eq!(
        cancels.load(Ordering::SeqCst),
        1,
        "the late run was stopped"
    );
    assert_eq!(state(&table, "slow-start"), None, "the name is free");

    let late = table
        .start(&registry, &allowed(), launch("other"))
        .unwrap_err();
    assert_eq!(late.code(), "run_failed");
    assert!(table.list().is_empty(), "no start after shutdown");
}

#[test]
fn a_run_that_does_not_end_once_cancelled_is_reported_after_the_stop_bound() {
    let executor = GatedExecutor::default();
    let cancels = executor.cancels.clone();
    let registry = registry(executor);
    let table = RunningServiceTable::with_stop_bound(Duration::from_millis(50));
    table.start(&registry, &allowed(), launch("stuck")).unwrap();
    let err = table.stop("stuck").unwrap_err();
    assert!(
        matches!(&err, StopError::DidNotEnd { name, waited }
            if name == "stuck" && *waited >= Duration::from_millis(50)),
        "{err}"
    );
    assert_eq!(err.code(), "run_failed");
    assert_eq!(cancels.load(Ordering::SeqCst), 1);
    // Still listed as running, so a later stop tries again.
    assert_eq!(state(&table, "stuck"), Some(ServiceState::Running));
    assert!(matches!(
        table.stop("stuck").unwrap_err(),
        StopError::DidNotEnd { .. }
    ));
    assert_eq!(cancels.load(Ordering::SeqCst), 2);
}

#[test]
fn a_launch_that_cannot_be_recorded_is_stopped_not_left_untracked() {
    let (gate, entered, open) = Gate::new();
    let executor = GatedExecutor {
        slow_launch: Some(gate),
        ..GatedExecutor::default()
    };
    let (launches, cancels) = (executor.launches.clone(), executor.cancels.clone());
    let registry = Arc::new(registry(executor));
    let table = Arc::new(RunningServiceTable::new());
    let starter = {
        let (table, registry) = (table.clone(), registry.clone());
        std::thread::spawn(move || table.start(&registry, &allowed(), launch("slow-start")))
    };
    entered
        .recv_timeout(BLOCKED)
        .expect("the launch reached its executor");
    // Another thread panics holding the table's lock while the launch is in flight.
    let poisoner = {
        let table = table.clone();
        std::thread::spawn(move || {
            let _rows = table.rows.lock().unwrap();
            panic!("poisoning the service table lock");
        })
    };
    assert!(poisoner.join().is_err());

    open.send(()).unwrap();
    let err = starter.join().unwrap().unwrap_err();
    assert_eq!(err.code(), "run_failed");
    assert_eq!(launches.load(Ordering::SeqCst), 1, "the run did start");
    assert_eq!(cancels.load(Ordering::SeqCst), 1, "and was stopped");
    assert_eq!(table.shutdown().unwrap_err(), ShutdownError::Poisoned);
}
