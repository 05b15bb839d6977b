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
//! Only mappings of the program's loaded image (found around an address of its own code) that
//! are not writable and hold no page of their own (`Anonymous: 0 kB` and `Swap: 0 kB` in
//! `/proc/self/smaps`: nothing was ever copied on write, as the loader's relocations are)
//! are dropped, so dropping can only ever bring back the same bytes from the file. This
//! module owns when to drop and what; it never touches memory that holds data, another
//! file's pages, or a mapping it cannot prove clean.

use std::time::{Duration, Instant};

/// How long the daemon is connected with nothing running before it drops its start-up
/// pages: long enough that runs coming one after another do not pay the faults that map code
/// again, short enough that a daemon left alone soon holds only what it uses (a daemon with a
/// run every minute or so drops and maps a few MiB again each time).
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

/// One file mapping as `smaps` describes it.
#[derive(Debug)]
struct Mapping {
    range: Clean,
    /// Readable, not writable, private (`r-?p`).
    read_only_private: bool,
    /// The file: device (major, minor) and inode.
    file: ((u32, u32), u64),
    /// Its `Anonymous:` and `Swap:` figures in kB (none: the line is missing or unreadable).
    anonymous: Option<u64>,
    swap: Option<u64>,
}

impl Mapping {
    /// No page of its own, in memory or in swap: every byte is still the file's.
    fn is_clean(&self) -> bool {
        self.read_only_private && self.anonymous == Some(0) && self.swap == Some(0)
    }
}

/// The mappings of the program's loaded image in `smaps` (`/proc/self/smaps`, read a line at
/// a time: with the wasm executor's pool it runs to megabytes) that can be dropped. The image
/// is the unbroken run of adjacent mappings of one file around `anchor`, an address of the
/// program's own code: a mapping of the same file made later elsewhere (to read symbols, say)
/// is not part of it, however it looks. Of the image, only the mappings that are read-only,
/// private and hold no page of their own (`Anonymous: 0 kB` and `Swap: 0 kB`; a page written
/// and swapped out counts only under `Swap`) are dropped; a mapping whose lines are missing
/// or unreadable is left alone.
pub(crate) fn clean_mappings(
    mut smaps: impl std::io::BufRead,
    anchor: usize,
) -> std::io::Result<Vec<Clean>> {
    // Only mappings of files are kept (inode 0 is anonymous memory): a few dozen.
    let mut files: Vec<Mapping> = Vec::new();
    let mut reading_file = false;
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        if smaps.read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&bytes);
        if let Some((range, perms, device, inode)) = mapping_header(&line) {
            reading_file = inode != 0;
            if reading_file {
                let perms = perms.as_bytes();
                files.push(Mapping {
                    range,
                    read_only_private: perms.len() == 4
                        && perms[0] == b'r'
                        && perms[1] == b'-'
                        && perms[3] == b'p',
                    file: (device, inode),
                    anonymous: None,
                    swap: None,
                });
            }
        } else if reading_file && let Some(last) = files.last_mut() {
            if let Some(kb) = line.strip_prefix("Anonymous:") {
                last.anonymous = kilobytes(kb);
            } else if let Some(kb) = line.strip_prefix("Swap:") {
                last.swap = kilobytes(kb);
            }
        }
    }
    let Some(at) = files
        .iter()
        .position(|m| m.range.start <= anchor && anchor - m.range.start < m.range.len)
    else {
        return Ok(Vec::new());
    };
    let file = files[at].file;
    let adjacent = |a: &Mapping, b: &Mapping| {
        a.file == file && b.file == file && a.range.start + a.range.len == b.range.start
    };
    let mut first = at;
    while first > 0 && adjacent(&files[first - 1], &files[first]) {
        first -= 1;
    }
    let mut last = at;
    while last + 1 < files.len() && adjacent(&files[last], &files[last + 1]) {
        last += 1;
    }
    Ok(files[first..=last]
        .iter()
        .filter(|m| m.is_clean())
        .map(|m| m.range)
        .collect())
}

/// `   123 kB` as 123.
fn kilobytes(figure: &str) -> Option<u64> {
    figure.trim().strip_suffix("kB")?.trim().parse().ok()
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

/// Drops the clean pages of the program's own loaded image; returns how many bytes of
/// address space it dropped (what was resident in them is what the daemon gave back). A
/// mapping the kernel refuses is skipped and logged. Linux only: elsewhere nothing is
/// dropped.
pub(crate) fn drop_start_up_pages() -> std::io::Result<usize> {
    #[cfg(target_os = "linux")]
    {
        let anchor = drop_start_up_pages as fn() -> std::io::Result<usize> as usize;
        let smaps = std::io::BufReader::new(std::fs::File::open("/proc/self/smaps")?);
        let mut dropped = 0;
        for clean in clean_mappings(smaps, anchor)? {
            match advise_dont_need(clean) {
                Ok(()) => dropped += clean.len,
                Err(e) => tracing::debug!(?clean, "a mapping's pages stay: {e}"),
            }
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
    // SAFETY: `clean` is a whole private, read-only mapping of the program's loaded image
    // that holds no page of its own, in memory or in swap (`clean_mappings`): nothing in it
    // was ever written, so dropping its pages changes no byte any thread can read; the next
    // access maps the same bytes from the file again. It is found around the address of this
    // crate's own code, so it is the image the program runs from, which nothing unmaps.
    unsafe { madvise(start, clean.len, MmapAdvise::MADV_DONTNEED) }.map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
7efc00000000-7efc00100000 r--p 00000000 fe:00 5491078                    /bin/outpost
Anonymous:             0 kB
Swap:                  0 kB
55d4bbcb0000-55d4bbcb5000 rw-p 00000000 00:00 0
Anonymous:             0 kB
Swap:                  0 kB
55d4bbcb5000-55d4bc722000 r--p 00000000 fe:00 5491078                    /bin/outpost
Size:              10676 kB
Rss:                3436 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd mr mw me
55d4bc722000-55d4be783000 r-xp 00a6c000 fe:00 5491078                    /bin/outpost
Size:              33156 kB
Anonymous:             0 kB
Swap:                  0 kB
55d4be783000-55d4be899000 r--p 02acc000 fe:00 5491078                    /bin/outpost
Size:               1112 kB
Anonymous:          1104 kB
Swap:                  0 kB
55d4be899000-55d4be8a5000 r--p 02be1000 fe:00 5491078                    /bin/outpost
Anonymous:             0 kB
Swap:                  8 kB
55d4be8a5000-55d4be8b5000 r--p 02bf1000 fe:00 5491078                    /bin/outpost
Swap:                  0 kB
55d4be8b5000-55d4be8c5000 rw-p 02c01000 fe:00 5491078                    /bin/outpost
Anonymous:             0 kB
Swap:                  0 kB
55d4be8c5000-55d4be8d5000 r-xs 02c11000 fe:00 5491078                    /bin/outpost
Anonymous:             0 kB
Swap:                  0 kB
55d4be8d5000-55d4be8e5000 r-xp 00000000 fe:00 777                        /lib/libc.so.6
Anonymous:             0 kB
Swap:                  0 kB
";

    #[test]
    fn only_clean_read_only_private_mappings_of_the_image_are_dropped() {
        let found = clean_mappings(SMAPS.as_bytes(), 0x55d4bc800000).unwrap();
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
            "refused: the same file mapped apart from the image, relocated data (pages of \
             its own), written pages in swap, a missing Anonymous line, writable, shared, \
             another file"
        );
        // An anchor in no file mapping, or in anonymous memory, finds no image.
        assert!(clean_mappings(SMAPS.as_bytes(), 0x10).unwrap().is_empty());
        assert!(
            clean_mappings(SMAPS.as_bytes(), 0x55d4bbcb1000)
                .unwrap()
                .is_empty()
        );
        // Lines that are not smaps, or not UTF-8, leave nothing to drop.
        let garbage = b"garbage\n1-2 r-xp\nAnonymous: 0 kB\n\xff\xfe";
        assert!(clean_mappings(&garbage[..], 1).unwrap().is_empty());
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
            let anchor = drop_start_up_pages as fn() -> std::io::Result<usize> as usize;
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let image = smaps
                .lines()
                .filter_map(mapping_header)
                .find(|(range, ..)| range.start <= anchor && anchor < range.start + range.len)
                .map(|(_, _, device, inode)| (device, inode))
                .expect("the test's own code is in a file mapping");
            let mut kb = 0u64;
            let mut ours = false;
            for line in smaps.lines() {
                if let Some((_, _, device, inode)) = mapping_header(line) {
                    ours = (device, inode) == image;
                } else if ours && let Some(n) = line.strip_prefix("Rss:") {
                    kb += kilobytes(n).unwrap();
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
