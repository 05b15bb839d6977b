//! Helpers the host tests share.
#![allow(dead_code)]

/// Whether process `pid` is still running (a zombie waiting for its reaper is not).
pub fn process_alive(pid: impl std::fmt::Display) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}
