//! Arbitrary input sequences to a server session: raw bytes and well-formed daemon frames with
//! arbitrary fields, tickets good and bad, submits, cancels, grant changes, revokes, time
//! jumps. Nothing may panic; no run ends twice; in-flight runs never exceed the slots the
//! daemon announced; nothing is dispatched or committed after a revoke.
#![no_main]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use outpost_core::keyset::test_root;
use outpost_core::session::{Event, Input, Output, RunSpec, Session, SessionConfig};
use outpost_core::sim::now_at;
use outpost_core::wire::{
    CapabilitySource, CommandsGrant, DaemonFrame, Egress, Environment, Grant, GrantLimits,
    RunResult, RunStatus, Timing,
};

#[derive(Arbitrary, Debug)]
enum Step {
    Raw(Vec<u8>),
    GoodConnect {
        conn: u8,
    },
    BadConnect {
        conn: u8,
        ticket: String,
    },
    Hello {
        conn: u8,
        slots: u8,
        held: Vec<u8>,
        pending: Vec<u8>,
    },
    Accept {
        conn: u8,
        run: u8,
    },
    Reject {
        conn: u8,
        run: u8,
        busy: bool,
    },
    Result {
        conn: u8,
        run: u8,
        daemon_ms: u32,
    },
    Status {
        conn: u8,
        draining: bool,
    },
    Submit {
        run: u8,
    },
    Cancel {
        run: u8,
    },
    Grant {
        slots: u8,
    },
    Revoke,
    Disconnect {
        conn: u8,
    },
    Advance {
        millis: u32,
    },
}

fn grant(slots: u8) -> Grant {
    Grant {
        fs: Vec::new(),
        egress: Egress::None,
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits {
            max_concurrent: u32::from(slots % 10),
        },
        environments: None,
    }
}

fn spec(run: u8) -> RunSpec {
    RunSpec {
        run_id: format!("r{run}").into(),
        environment: Environment::Shell,
        capability: CapabilitySource::Inline {
            manifest: String::new(),
            files: Vec::new(),
        },
        timeout_ms: 1000,
        shared_run: false,
        requester: "ada".into(),
    }
}

fuzz_target!(|steps: Vec<Step>| {
    let mut elapsed = Duration::ZERO;
    let mut s = Session::new(
        SessionConfig::new("ec_fuzz"),
        grant(4),
        Arc::new(test_root::frame_signer()),
        now_at(elapsed),
    );
    let mut ended: BTreeSet<String> = BTreeSet::new();
    let mut submitted: BTreeSet<String> = BTreeSet::new();
    let mut revoked = false;
    let mut ticket_random = 0u8;
    for step in steps.into_iter().take(200) {
        let frame = |conn: u8, f: DaemonFrame| Input::Frame {
            conn: u64::from(conn % 4),
            bytes: f.to_json(),
        };
        let input = match step {
            Step::Raw(bytes) => Input::Frame { conn: 1, bytes },
            Step::GoodConnect { conn } => {
                ticket_random = ticket_random.wrapping_add(1);
                match s.issue_ticket([ticket_random; 48]) {
                    Ok(t) => Input::Connect {
                        conn: u64::from(conn % 4),
                        ticket: t.ticket.expose_secret(),
                    },
                    Err(_) => continue,
                }
            }
            Step::BadConnect { conn, ticket } => Input::Connect {
                conn: u64::from(conn % 4),
                ticket,
            },
            Step::Hello {
                conn,
                slots,
                held,
                pending,
            } => frame(
                conn,
                DaemonFrame::Hello {
                    protocol: 1,
                    features: Vec::new(),
                    max_concurrent: u32::from(slots),
                    held_runs: held.iter().map(|r| format!("r{}", r % 16).into()).collect(),
                    pending_results: pending
                        .iter()
                        .map(|r| format!("r{}", r % 16).into())
                        .collect(),
                    environments: vec![Environment::Shell],
                    paused: slots % 3 == 0,
                },
            ),
            Step::Accept { conn, run } => frame(
                conn,
                DaemonFrame::RunAccept {
                    run_id: format!("r{}", run % 16).into(),
                },
            ),
            Step::Reject { conn, run, busy } => frame(
                conn,
                DaemonFrame::RunReject {
                    run_id: format!("r{}", run % 16).into(),
                    code: if busy { "busy".into() } else { "other".into() },
                    message: String::new(),
                },
            ),
            Step::Result {
                conn,
                run,
                daemon_ms,
            } => frame(
                conn,
                DaemonFrame::RunResult {
                    run_id: format!("r{}", run % 16).into(),
                    result: RunResult {
                        status: RunStatus::Exited,
                        exit_code: Some(0),
                        signal: None,
                        stdout: String::new(),
                        stderr: String::new(),
                        truncated: false,
                        timing: Timing {
                            daemon_ms: u64::from(daemon_ms),
                            ..Timing::default()
                        },
                        error: None,
                        egress_denied: Vec::new(),
                    },
                },
            ),
            Step::Status { conn, draining } => frame(
                conn,
                DaemonFrame::Status {
                    slots_used: 0,
                    slots_total: 2,
                    draining,
                    paused: false,
                },
            ),
            Step::Submit { run } => {
                let spec = spec(run % 16);
                if !submitted.insert(spec.run_id.to_string()) {
                    continue; // Submitting an id twice is host misuse, refused with Err.
                }
                Input::Submit(spec)
            }
            Step::Cancel { run } => Input::Cancel {
                run_id: format!("r{}", run % 16).into(),
                reason: "requested".into(),
            },
            Step::Grant { slots } => Input::UpdateGrant(grant(slots)),
            Step::Revoke => {
                revoked = true;
                Input::Revoke
            }
            Step::Disconnect { conn } => Input::Disconnected {
                conn: u64::from(conn % 4),
            },
            Step::Advance { millis } => {
                elapsed += Duration::from_millis(u64::from(millis));
                Input::Timeout
            }
        };
        s.handle_input(now_at(elapsed), input)
            .expect("the harness never misuses the API");
        // A grant that lowers the slots leaves the runs already offered be; what may never
        // happen is a new offer past the slots.
        let mut offered = false;
        loop {
            match s.poll_output() {
                Output::Wait { .. } => break,
                Output::Event(Event::RunEnded { run_id, .. }) => {
                    assert!(ended.insert(run_id.to_string()), "{run_id} ended twice");
                }
                Output::Transmit { bytes, .. } => {
                    let text = String::from_utf8_lossy(&bytes);
                    let offer = text.contains("\"run.request\"");
                    assert!(
                        !revoked || (!offer && !text.contains("\"run.commit\"")),
                        "{text}"
                    );
                    offered |= offer;
                }
                _ => {}
            }
        }
        if s.is_ready() && offered {
            assert!(s.in_flight() <= s.max_concurrent() as usize);
        }
    }
});
