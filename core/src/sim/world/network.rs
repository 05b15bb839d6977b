//! The simulated network between the server and the machines: latency, partitions and
//! suspends decide when (and whether) a frame arrives. It never changes a frame's bytes.

use super::*;

impl World {
    pub(super) fn latency(&mut self) -> Duration {
        Duration::from_millis(1 + self.rng.below(40))
    }

    pub(super) fn send(&mut self, conn: ConnId, to_server: bool, bytes: Vec<u8>) {
        let mut at = self.elapsed + self.latency();
        let mut copies = 1;
        if self.in_fault_phase() {
            let roll = self.rng.below(1000);
            if roll < 8 {
                // Lost in flight: the connection under it dies too.
                self.note(format!("drop on conn {conn}"));
                self.break_conn(conn);
                return;
            } else if roll < 18 {
                copies = 2;
            } else if roll < 48 {
                at += Duration::from_millis(200 + self.rng.below(2800));
            }
        }
        for _ in 0..copies {
            self.net_seq += 1;
            let key = (at, self.net_seq);
            self.net.insert(
                key,
                Msg {
                    conn,
                    to_server,
                    ping: false,
                    bytes: bytes.clone(),
                },
            );
            at += Duration::from_millis(self.rng.below(5));
        }
    }

    /// Each running node's host pings every connection it holds (below the protocol: no
    /// frame, no sequence number); each ping takes the network's latency.
    pub(super) fn ping_all(&mut self) {
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, (_, n))| self.node_running(*n))
            .map(|(c, _)| *c)
            .collect();
        for conn in conns {
            let at = self.elapsed + self.latency();
            self.send_to_daemon_at(at, conn, Vec::new(), true);
        }
    }

    /// Puts `bytes` (a ping when `ping`) on the network to the daemon of `conn`, arriving at
    /// `at`, past the faults [`World::send`] draws.
    pub(super) fn send_to_daemon_at(
        &mut self,
        at: Duration,
        conn: ConnId,
        bytes: Vec<u8>,
        ping: bool,
    ) {
        self.net_seq += 1;
        let msg = Msg {
            conn,
            to_server: false,
            ping,
            bytes,
        };
        self.net.insert((at, self.net_seq), msg);
    }

    pub(super) fn deliver(&mut self, msg: Msg) {
        let Some(&(i, n)) = self.conns.get(&msg.conn) else {
            return;
        };
        if msg.to_server {
            self.feed_node(
                n,
                server::Input::Frame {
                    conn: msg.conn,
                    bytes: msg.bytes,
                },
            );
            return;
        }
        let m = &mut self.machines[i];
        if m.conn != Some(msg.conn) {
            return;
        }
        if let Some(resume) = m.suspended_until {
            // A sleeping machine reads its socket when it wakes.
            self.net_seq += 1;
            self.net.insert((resume, self.net_seq), msg);
            return;
        }
        if msg.ping {
            self.feed_daemon(i, daemon::Input::ServerAlive);
        } else {
            self.feed_daemon(i, daemon::Input::Frame(msg.bytes));
        }
    }
}
