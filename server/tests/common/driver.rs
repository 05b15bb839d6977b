//! The core's `Daemon` driven by hand over the server's real WebSocket (as
//! `core/src/sim/pair.rs` wires it): the test is the executor. A run either finishes at once
//! with "hi" or, while [`Driver::hold`] is set, stays committed until [`Driver::finish`].

use std::time::{Duration, Instant as StdInstant};

use outpost_core::daemon::{self, Daemon, DaemonConfig};
use outpost_core::time::{Instant, Now, UnixTime};
use outpost_core::wire::{DaemonFrame, Environment, RunResult, RunStatus, Timing};
use tungstenite::Message;

use super::{Machine, Socket, TestServer, bearer, http, now_secs, open_socket};

/// A daemon machine and its socket, pumped by the test.
pub struct Driver {
    pub daemon: Daemon,
    origin: StdInstant,
    /// The socket, once connected.
    pub socket: Option<Socket>,
    /// Every run it was told to execute, in order.
    pub executed: Vec<String>,
    /// Hold runs instead of finishing them.
    pub hold: bool,
    /// Ask this server for connect tickets instead of the one the socket opens on (a load
    /// balancer that sends the two requests to different nodes).
    pub tickets_from: Option<std::net::SocketAddr>,
    /// Every wait the daemon registered (saved), by id, in order.
    pub waits: Vec<String>,
    /// Every request from afar the daemon was asked (`pause`, `logs`, …), in order; each is
    /// answered `done` at once.
    pub controls: Vec<String>,
}

impl Driver {
    /// A shell-only daemon, not yet connected (the first [`Driver::drain`] connects).
    pub fn new(server: &TestServer) -> Driver {
        Self::with_environments(server, vec![Environment::Shell])
    }

    /// A daemon with `environments`, not yet connected.
    pub fn with_environments(server: &TestServer, environments: Vec<Environment>) -> Driver {
        let config = DaemonConfig {
            environments,
            ..DaemonConfig::default()
        };
        Driver {
            daemon: Daemon::new(
                config,
                server.keys(),
                Now {
                    instant: Instant::from_origin(Duration::ZERO),
                    wall: UnixTime(now_secs()),
                },
            ),
            origin: StdInstant::now(),
            socket: None,
            executed: Vec::new(),
            hold: false,
            tickets_from: None,
            waits: Vec::new(),
            controls: Vec::new(),
        }
    }

    /// A shell-only daemon that announces `control` and answers every request from afar
    /// `done`, not yet connected.
    #[allow(dead_code)]
    pub fn answering_controls(server: &TestServer) -> Driver {
        let mut driver = Self::new(server);
        let config = DaemonConfig {
            environments: vec![Environment::Shell],
            features: vec![outpost_core::wire::FEATURE_CONTROL.to_owned()],
            ..DaemonConfig::default()
        };
        driver.daemon = Daemon::new(
            config,
            server.keys(),
            Now {
                instant: Instant::from_origin(Duration::ZERO),
                wall: UnixTime(now_secs()),
            },
        );
        driver
    }

    /// Connects and pumps until the server shows `name` online.
    pub fn online(&mut self, server: &TestServer, machine: &Machine, name: &str) {
        self.drain(server, machine);
        let admin = bearer(&server.admin());
        let deadline = StdInstant::now() + Duration::from_secs(30);
        loop {
            self.pump(server, machine);
            let path = format!("/v1/execution-contexts/{name}");
            let ctx = http(
                server.addr(),
                "GET",
                &path,
                &[("authorization", &admin)],
                b"",
            )
            .json();
            if ctx["online"] == true {
                return;
            }
            assert!(
                StdInstant::now() < deadline,
                "{name} never came online: {ctx}"
            );
        }
    }

    /// Sends `frame` as it is, whatever the daemon core would say.
    pub fn send_raw(&mut self, frame: &DaemonFrame) {
        let text = String::from_utf8(frame.to_json()).expect("JSON");
        self.socket
            .as_mut()
            .expect("connected")
            .send(Message::Text(text.into()))
            .expect("sent");
    }

    fn now(&self) -> Now {
        Now {
            instant: Instant::from_origin(self.origin.elapsed()),
            wall: UnixTime(now_secs()),
        }
    }

    fn input(&mut self, input: daemon::Input) {
        let now = self.now();
        self.daemon
            .handle_input(now, input)
            .expect("the daemon takes the input");
    }

    /// Drops the socket without a close, as a broken network would; the daemon hears it end.
    #[allow(dead_code)]
    pub fn lose_socket(&mut self) {
        self.socket = None;
        self.input(daemon::Input::Disconnected { code: None });
    }

    /// Ends a held run with "hi" and exit 0.
    pub fn finish(&mut self, run_id: &str) {
        let result = RunResult {
            status: RunStatus::Exited,
            exit_code: Some(0),
            signal: None,
            stdout: "hi\n".into(),
            stderr: String::new(),
            truncated: false,
            timing: Timing {
                setup_ms: 1,
                execute_ms: 2,
                ..Timing::default()
            },
            error: None,
            egress_denied: Vec::new(),
        };
        self.input(daemon::Input::RunFinished {
            run_id: run_id.into(),
            result,
        });
    }

    /// Carries out the daemon's outputs until it waits.
    pub fn drain(&mut self, server: &TestServer, machine: &Machine) {
        loop {
            match self.daemon.poll_output() {
                daemon::Output::Wait { .. } => return,
                daemon::Output::Transmit(bytes) => {
                    let text = String::from_utf8(bytes).expect("frames are UTF-8");
                    if let Some(socket) = self.socket.as_mut() {
                        socket.send(Message::Text(text.into())).expect("send");
                    }
                }
                daemon::Output::Close { .. } => self.socket = None,
                daemon::Output::Command(daemon::Command::Connect) => {
                    let (ticket, session_id) = match self.tickets_from {
                        Some(addr) => machine.ticket_at(addr),
                        None => machine.ticket(server),
                    };
                    let socket = open_socket(server.addr(), &ticket).expect("the socket opens");
                    socket
                        .get_ref()
                        .set_read_timeout(Some(Duration::from_millis(100)))
                        .expect("a read timeout");
                    self.socket = Some(socket);
                    self.input(daemon::Input::Connected { session_id });
                }
                daemon::Output::Command(daemon::Command::Execute(execute)) => {
                    self.executed.push(execute.run_id.to_string());
                    if !self.hold {
                        self.finish(&execute.run_id);
                    }
                }
                daemon::Output::SaveWait { row, .. } => {
                    let id = row.spec.wait_id.to_string();
                    if !self.waits.contains(&id) {
                        self.waits.push(id);
                    }
                }
                daemon::Output::Command(daemon::Command::Control {
                    control_id, action, ..
                }) => {
                    self.controls.push(action.clone());
                    let frame = DaemonFrame::ControlResult {
                        control_id,
                        action,
                        outcome: outpost_core::wire::ControlOutcome::Done,
                        code: String::new(),
                        message: "done by the test's daemon".to_owned(),
                        lines: Vec::new(),
                    };
                    self.input(daemon::Input::ControlAnswered(frame));
                }
                daemon::Output::Command(_)
                | daemon::Output::Persist(_)
                | daemon::Output::ForgetWait { .. }
                | daemon::Output::Event(_) => {}
            }
        }
    }

    /// Reads what arrived (at most one message) and feeds it, then the time.
    pub fn pump(&mut self, server: &TestServer, machine: &Machine) {
        if let Some(socket) = self.socket.as_mut() {
            match socket.read() {
                Ok(Message::Text(t)) => {
                    let bytes = t.as_bytes().to_vec();
                    self.input(daemon::Input::Frame(bytes));
                }
                Ok(Message::Close(frame)) => {
                    self.socket = None;
                    let code = frame.map(|f| u16::from(f.code));
                    self.input(daemon::Input::Disconnected { code });
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("the socket failed: {e}"),
            }
        }
        self.input(daemon::Input::Timeout);
        self.drain(server, machine);
    }

    /// Pumps until `done` says yes; fails the test after `patience`.
    pub fn pump_until(
        &mut self,
        server: &TestServer,
        machine: &Machine,
        what: &str,
        patience: Duration,
        mut done: impl FnMut(&Driver) -> bool,
    ) {
        let deadline = StdInstant::now() + patience;
        while !done(self) {
            self.pump(server, machine);
            assert!(StdInstant::now() < deadline, "timed out waiting for {what}");
        }
    }
}
