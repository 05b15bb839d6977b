//! Giving an idle daemon's start-up code back: once the daemon has been connected and idle
//! for [`QUIET`], it drops its own binary's clean pages from its address space
//! (`madvise(MADV_DONTNEED)`), so what it holds is what its heartbeat uses, not every page
//! its start touched (clap, the key, the executors' probes, TLS set-up: about 19 MiB).
//!
//! The pages stay in the page cache, shared with any other `outpost` process; code that runs
//! again is mapped again by a minor fault, without a read from the disk. A mapped page of
//! code is one the kernel keeps in memory before others, so an idle daemon that lets go of
//! its start-up code really leaves that memory to the machine under pressure.
//!
//! Only mappings of the daemon's own executable file that are not writable and hold no page
//! of their own (`Anonymous: 0 kB` in `/proc/self/smaps`: nothing was ever copied on write,
//! as the loader's relocations are) are dropped, so dropping can only ever bring back the
//! same bytes from the file. This module owns when to drop and what; it never touches
//! memory that holds data, another file's pages, or a mapping it cannot prove clean.

use std::time::{Duration, Instant};

/// How long the daemon is connected with nothing running before it drops its start-up
/// pages: long enough that a busy daemon never pays the faults that map code again between
/// two runs, short enough that a daemon left alone soon holds only what it uses.
pub(crate) const QUIET: Duration = Duration::from_secs(10);

/// When the daemon last did more than wait, and whether it dropped its pages since.
#[derive(Debug)]
pub(crate) struct Trim {
    /// Since when the daemon has been connected with nothing running (none: it is not).
    quiet_since: Option<Instant>,
    /// Pages were dropped in this quiet spell already.
    done: bool,
}

impl Trim {
    /// A daemon that has just started: its start-up pages are all still mapped.
    pub(crate) fn new() -> Self {
        Self {
            quiet_since: None,
            done: false,
        }
    }

    /// Notes what the daemon is doing at `now` (`idle`: connected, and nothing runs or is
    /// checked); returns whether to drop the pages now. Called on every wake the daemon has
    /// anyway, so it never wakes the daemon itself.
    pub(crate) fn due(&mut self, idle: bool, now: Instant) -> bool {
        if !idle {
            self.quiet_since = None;
            self.done = false;
            return false;
        }
        let since = *self.quiet_since.get_or_insert(now);
        if self.done || now.saturating_duration_since(since) < QUIET {
            return false;
        }
        self.done = true;
        true
    }
}

/// A range of the address space to drop: `len` bytes from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clean {
    start: usize,
    len: usize,
}

/// The mappings of the file `(dev, inode)` in `smaps` (`/proc/self/smaps`, read a line at
/// a time: with the wasm executor's pool it runs to megabytes) that can be dropped:
/// read-only, private, with no page of their own. A mapping whose lines cannot be read is
/// left alone.
pub(crate) fn clean_mappings(
    mut smaps: impl std::io::BufRead,
    device: (u32, u32),
    inode: u64,
) -> std::io::Result<Vec<Clean>> {
    let mut found = Vec::new();
    // The mapping being read, if it is a candidate so far, and its `Anonymous` figure.
    let mut candidate: Option<Clean> = None;
    let mut anonymous: Option<u64> = None;
    let mut line = String::new();
    loop {
        line.clear();
        let end = smaps.read_line(&mut line)? == 0;
        let header = if end { None } else { mapping_header(&line) };
        if end || header.is_some() {
            if let Some(range) = candidate.take()
                && anonymous.take() == Some(0)
            {
                found.push(range);
            }
            anonymous = None;
        }
        if end {
            return Ok(found);
        }
        if let Some((range, perms, dev, ino)) = header {
            let perms = perms.as_bytes();
            let read_only_private =
                perms.len() == 4 && perms[0] == b'r' && perms[1] == b'-' && perms[3] == b'p';
            candidate = (read_only_private && dev == device && ino == inode).then_some(range);
        } else if let Some(kb) = line.strip_prefix("Anonymous:") {
            anonymous = kb
                .trim()
                .strip_suffix("kB")
                .and_then(|n| n.trim().parse().ok());
        }
    }
}

/// The range, permissions, device and inode of an smaps header line
/// (`55d4bc722000-55d4be783000 r-xp 00a6c000 fe:00 5491078  /path`), or `None` for any other
/// line.
fn mapping_header(line: &str) -> Option<(Clean, &str, (u32, u32), u64)> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    let _offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let device = (
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    let inode = fields.next()?.parse().ok()?;
    (end > start).then_some((
        Clean {
            start,
            len: end - start,
        },
        perms,
        device,
        inode,
    ))
}

/// Drops the clean pages of the daemon's own executable; returns how many bytes of address
/// space it dropped (what was resident in them is what the daemon gave back). Linux only:
/// elsewhere nothing is dropped.
pub(crate) fn drop_start_up_pages() -> std::io::Result<usize> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt as _;
        let exe = std::fs::metadata("/proc/self/exe")?;
        let dev = exe.dev();
        let device = (
            nix::sys::stat::major(dev) as u32,
            nix::sys::stat::minor(dev) as u32,
        );
        let smaps = std::io::BufReader::new(std::fs::File::open("/proc/self/smaps")?);
        let mut dropped = 0;
        for clean in clean_mappings(smaps, device, exe.ino())? {
            advise_dont_need(clean)?;
            dropped += clean.len;
        }
        Ok(dropped)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(0)
    }
}

/// `madvise(MADV_DONTNEED)` over `clean`.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn advise_dont_need(clean: Clean) -> std::io::Result<()> {
    use nix::sys::mman::{MmapAdvise, madvise};
    let Some(start) = std::ptr::NonNull::new(clean.start as *mut std::ffi::c_void) else {
        return Ok(());
    };
    // SAFETY: `clean` is a whole private, read-only mapping of the executable file that holds
    // no page of its own (`clean_mappings`): nothing in it was ever written, so dropping its
    // pages changes no byte any thread can read; the next access maps the same bytes from the
    // file again. The mapping cannot be unmapped meanwhile: it is the program's own image.
    unsafe { madvise(start, clean.len, MmapAdvise::MADV_DONTNEED) }.map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d4bbcb5000-55d4bc722000 r--p 00000000 fe:00 5491078                    /bin/outpost
Size:              10676 kB
Rss:                3436 kB
Anonymous:             0 kB
55d4bc722000-55d4be783000 r-xp 00a6c000 fe:00 5491078                    /bin/outpost
Size:              33156 kB
Anonymous:             0 kB
55d4be783000-55d4be899000 r--p 02acc000 fe:00 5491078                    /bin/outpost
Size:               1112 kB
Anonymous:          1112 kB
55d4be899000-55d4be8a5000 rw-p 02be1000 fe:00 5491078                    /bin/outpost
Anonymous:            48 kB
7f0000000000-7f0000100000 r-xp 00000000 fe:00 777                        /lib/libc.so.6
Anonymous:             0 kB
7f0000200000-7f0000300000 r-xp 00000000 fe:00 5491078                    /bin/outpost
Rss:                 100 kB
7f0000400000-7f0000500000 rwxp 00000000 fe:00 5491078                    /bin/outpost
Anonymous:             0 kB
7f0000600000-7f0000700000 r-xs 00000000 fe:00 5491078                    /bin/outpost
Anonymous:             0 kB
";

    #[test]
    fn only_clean_read_only_private_mappings_of_the_file_are_dropped() {
        let found = clean_mappings(SMAPS.as_bytes(), (0xfe, 0), 5491078).unwrap();
        assert_eq!(
            found,
            vec![
                Clean {
                    start: 0x55d4bbcb5000,
                    len: 0x55d4bc722000 - 0x55d4bbcb5000
                },
                Clean {
                    start: 0x55d4bc722000,
                    len: 0x55d4be783000 - 0x55d4bc722000
                },
            ],
            "refused: relocated data (pages of its own), writable, another file, a mapping \
             whose Anonymous line is missing, writable code, a shared mapping"
        );
        // Another device with the same inode number is another file.
        assert!(
            clean_mappings(SMAPS.as_bytes(), (0xfe, 1), 5491078)
                .unwrap()
                .is_empty()
        );
        // Lines that are not smaps leave nothing to drop.
        let garbage = "garbage\n1-2 r-xp\nAnonymous: 0 kB";
        assert!(
            clean_mappings(garbage.as_bytes(), (0, 0), 0)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn the_pages_go_once_per_quiet_spell_after_the_quiet_time() {
        let t0 = Instant::now();
        let mut trim = Trim::new();
        assert!(!trim.due(true, t0), "the quiet spell just began");
        assert!(!trim.due(true, t0 + QUIET / 2));
        assert!(trim.due(true, t0 + QUIET));
        assert!(!trim.due(true, t0 + QUIET * 3), "once per spell");
        assert!(!trim.due(false, t0 + QUIET * 4), "a run: the spell ends");
        assert!(!trim.due(true, t0 + QUIET * 5));
        assert!(trim.due(true, t0 + QUIET * 6), "a new spell, a new drop");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dropping_leaves_the_program_running_and_its_code_unmapped() {
        // This test binary's own code: resident now (it is running), then dropped.
        let resident = || {
            use std::os::unix::fs::MetadataExt as _;
            let exe = std::fs::metadata("/proc/self/exe").unwrap();
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut kb = 0u64;
            let mut ours = false;
            for line in smaps.lines() {
                if let Some((_, _, _, ino)) = mapping_header(line) {
                    ours = ino == exe.ino();
                } else if ours && let Some(n) = line.strip_prefix("Rss:") {
                    kb += n
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .unwrap();
                }
            }
            kb
        };
        let before = resident();
        let dropped = drop_start_up_pages().unwrap();
        let after = resident();
        assert!(dropped > 0, "the test binary has clean code to drop");
        assert!(
            after < before,
            "resident pages of the binary: {before} kB before, {after} kB after"
        );
        // The code runs on: parsing and sorting go through code that was just dropped.
        let mut v: Vec<u64> = "3 1 2".split(' ').map(|n| n.parse().unwrap()).collect();
        v.sort_unstable();
        assert_eq!(v, [1, 2, 3]);
    }
}
