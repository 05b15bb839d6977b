//! The memory an engine maps, counted in a process of its own: engines made by other tests
//! at the same moment would blur the count.

use outpost_exec_wasm::engine_config;

/// The lines of this process's `/proc/self/maps`: one per memory mapping.
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps reads")
        .lines()
        .count()
}

#[test]
fn the_engine_maps_no_stacks_for_fibers_it_never_uses() {
    // Each stack the pool keeps for async fibers sits behind a guard page of its own: two
    // memory mappings a stack. wasmtime's default of 1,000 stacks added about 2,000 to the
    // process (and 1,000 `mprotect` calls to the daemon's start). The executor's modules,
    // which run on this configuration, are called synchronously (`tests/wasm.rs`).
    let before = mappings();
    let engine = wasmtime::Engine::new(&engine_config(64)).expect("the engine starts");
    let added = mappings().saturating_sub(before);
    assert!(added < 100, "the engine added {added} memory mappings");
    drop(engine);
}
