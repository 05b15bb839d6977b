//! What the core promises about its public types without running anything, as str0m keeps:
//! every role and every input and output can move to another thread and be shared behind a
//! lock (hosts drive them from any runtime), and an input or an output stays small, so a
//! queue of them costs what its payloads cost and no more. A change that breaks one of these
//! fails here, not in a host.

use std::mem::size_of;

use outpost_core::{daemon, server, session, terminal, wait};

fn send_and_sync<T: Send + Sync>() {}

#[test]
fn the_roles_and_their_inputs_and_outputs_are_send_and_sync() {
    send_and_sync::<daemon::Daemon>();
    send_and_sync::<daemon::Input>();
    send_and_sync::<daemon::Output>();
    send_and_sync::<session::Session>();
    send_and_sync::<session::Input>();
    send_and_sync::<session::Output>();
    send_and_sync::<server::Server>();
    send_and_sync::<server::Input>();
    send_and_sync::<server::Output>();
    send_and_sync::<terminal::Relay>();
    send_and_sync::<terminal::Input>();
    send_and_sync::<terminal::Output>();
    send_and_sync::<wait::Schedule>();
    send_and_sync::<wait::Input>();
    send_and_sync::<wait::Output>();
}

/// The largest an input or output may be, in bytes: big payloads (frames, records, run
/// requests) are boxed or held in a `Vec`, so a variant never carries one inline.
const MOST_BYTES: usize = 256;

#[test]
fn inputs_and_outputs_stay_small() {
    let sizes = [
        ("daemon::Input", size_of::<daemon::Input>()),
        ("daemon::Output", size_of::<daemon::Output>()),
        ("session::Input", size_of::<session::Input>()),
        ("session::Output", size_of::<session::Output>()),
        ("server::Input", size_of::<server::Input>()),
        ("server::Output", size_of::<server::Output>()),
        ("terminal::Input", size_of::<terminal::Input>()),
        ("terminal::Output", size_of::<terminal::Output>()),
        ("wait::Input", size_of::<wait::Input>()),
        ("wait::Output", size_of::<wait::Output>()),
    ];
    let over: Vec<String> = sizes
        .iter()
        .filter(|(_, n)| *n > MOST_BYTES)
        .map(|(name, n)| format!("{name} is {n} bytes"))
        .collect();
    assert!(
        over.is_empty(),
        "over {MOST_BYTES} bytes (box the large variant): {}\nall: {sizes:?}",
        over.join(", ")
    );
}
