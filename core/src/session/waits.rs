//! The session's side of condition waits: the host's registrations, cancels and
//! acknowledgements become signed `wait.*` frames, and the daemon's `wait.matched` and
//! `wait.failed` become [`Event::WaitEnded`].
//!
//! The session keeps nothing about waits: the host holds them durably and sends every active
//! one again after each [`Event::Ready`] (a daemon that knows the id changes nothing). A
//! `wait.*` order while no ready connection is up is dropped for that reason. This module
//! never decides whether a requester may wait on the machine.

use super::*;
use crate::ids::WaitId;
use crate::wait::{Report, WaitSpec};
use crate::wire::{DaemonFrame, ServerFrame};

/// What the host asks the machine about a wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitOrder {
    /// `wait.register`.
    Register(WaitSpec),
    /// `wait.cancel`.
    Cancel {
        /// The wait to end; the daemon answers `wait.failed` with reason `cancelled`.
        wait_id: WaitId,
    },
    /// `wait.ack`: the host recorded the wait's ending.
    Ack {
        /// The wait whose `wait.matched` or `wait.failed` the host stored; the daemon may forget
        /// it.
        wait_id: WaitId,
    },
}

impl Session {
    pub(super) fn on_wait_order(&mut self, order: WaitOrder) {
        if !self.is_ready() {
            return;
        }
        self.send(match order {
            WaitOrder::Register(spec) => spec.into_frame(),
            WaitOrder::Cancel { wait_id } => ServerFrame::WaitCancel { wait_id },
            WaitOrder::Ack { wait_id } => ServerFrame::WaitAck { wait_id },
        });
    }

    /// A `wait.matched` or `wait.failed` from a ready connection.
    pub(super) fn on_wait_ended(&mut self, conn: ConnId, frame: DaemonFrame) {
        match Report::from_frame(frame) {
            Ok(report) => self
                .outputs
                .push_back(Output::Event(Event::WaitEnded(Box::new(report)))),
            Err(bad) => self.violation(conn, bad.code(), bad.to_string()),
        }
    }
}
