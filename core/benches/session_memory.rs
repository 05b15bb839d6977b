//! Memory held per idle connected daemon in the session machine.
//!
//! A counting global allocator measures the bytes live after 10,000 sessions have each
//! accepted a connection (ticket, signed `welcome`) and the daemon's `hello`, with every output
//! drained — the state a server holds for an idle, connected machine. The signer and the
//! harness's own bookkeeping are measured separately and left out.
//!
//! Run with `cargo bench -p outpost-core --bench session_memory`. Target: ≤ 16 KiB each.
#![allow(missing_docs, unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use outpost_core::keyset::test_root;
use outpost_core::session::{Input, Output, Session, SessionConfig};
use outpost_core::sim::now_at;
use outpost_core::wire::{CommandsGrant, DaemonFrame, Egress, Environment, Grant, GrantLimits};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter only
// records sizes and never touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same layout the caller gave us.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SESSIONS: usize = 10_000;

fn drain(s: &mut Session) {
    while !matches!(s.poll_output(), Output::Wait { .. }) {}
}

fn main() {
    let signer = Arc::new(test_root::frame_signer());
    let grant = Grant {
        fs: Vec::new(),
        egress: Egress::None,
        commands: CommandsGrant { enabled: false },
        limits: GrantLimits { max_concurrent: 2 },
        environments: None,
    };
    let hello = DaemonFrame::Hello {
        protocol: 1,
        features: vec!["host-operator-only".into()],
        max_concurrent: 2,
        held_runs: Vec::new(),
        pending_results: Vec::new(),
        environments: vec![Environment::Shell],
        paused: false,
    }
    .to_json();
    let now = now_at(Duration::from_secs(1));
    let mut sessions: Vec<Session> = Vec::with_capacity(SESSIONS);

    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..SESSIONS {
        let mut s = Session::new(
            SessionConfig::new(format!("ec_{i:06}")),
            grant.clone(),
            signer.clone(),
            now,
        );
        let mut random = [0u8; 48];
        random[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let ticket = s
            .issue_ticket(random)
            .expect("ticket")
            .ticket
            .expose_secret();
        s.handle_input(
            now,
            Input::Connect {
                conn: i as u64,
                ticket,
            },
        )
        .expect("connect");
        drain(&mut s);
        s.handle_input(
            now,
            Input::Frame {
                conn: i as u64,
                bytes: hello.clone(),
            },
        )
        .expect("hello");
        drain(&mut s);
        assert!(s.is_ready());
        sessions.push(s);
    }
    let after = LIVE.load(Ordering::Relaxed);
    let vec_itself = (SESSIONS * std::mem::size_of::<Session>()) as isize;
    let per_session = (after - before) as f64 / SESSIONS as f64;
    println!(
        "session_memory: {SESSIONS} idle connected sessions hold {:.0} bytes each ({:.2} KiB; {} of them the Session struct itself), target <= 16 KiB",
        per_session,
        per_session / 1024.0,
        vec_itself / SESSIONS as isize,
    );
    assert!(per_session <= 16.0 * 1024.0, "over the 16 KiB target");
    drop(sessions);
}
