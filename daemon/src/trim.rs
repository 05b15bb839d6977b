//! Giving an idle daemon's code back: once the daemon has been connected and idle for
//! [`QUIET`], it drops the clean pages of its own binary and of the C libraries it was linked
//! with from its address space (`madvise(MADV_DONTNEED)`), so what it holds is what its
//! heartbeat uses, not every page its start touched (clap, the key, the executors' probes,
//! TLS set-up: about 19 MiB). While it stays idle it drops them again after each wake that
//! is followed by a sleep of at least [`LONG_SLEEP`] (the heartbeat's status, the server's
//! ping; a daemon that looks at an unwatched policy every second never drops again): a
//! heartbeat maps some 5 MiB of code again (the kernel maps code in windows of
//! 64 KiB and more around each page it faults in), and between heartbeats the daemon holds
//! only what its other threads ran after the drop (about 1 MiB).
//!
//! The pages stay in the page cache, shared with any other process that maps the same files;
//! code that runs again is mapped again by a minor fault, without a read from the disk. A
//! mapped page of code is one the kernel keeps in memory before others, so an idle daemon
//! that lets go of its code really leaves that memory to the machine under pressure.
//!
//! Only mappings of the loaded images (the program's own and its C library's, math library's
//! and loader's, each found around an address inside it, so a library that could be unloaded
//! is never one of them) that are not writable and hold no page of their own
//! (`Anonymous: 0 kB` and `Swap: 0 kB` in `/proc/self/smaps`: nothing was ever copied on
//! write, as the loader's relocations are) are dropped, so dropping can only ever bring back
//! the same bytes from the file (the kernel drops such pages itself under memory pressure,
//! so no process ever relied on holding them). `smaps` is read once per quiet spell (it
//! takes milliseconds with the wasm executor's pool); the drops after a heartbeat reuse what
//! it proved, each range checked in `/proc/self/pagemap` just before it is dropped. This
//! module owns when to drop and what; it never touches memory that holds data, a mapping
//! that could be unmapped, or a mapping it has not proved clean.

use std::time::{Duration, Instant};

/// How long the daemon is connected with nothing running before it first drops its code:
/// long enough that runs coming one after another do not pay the faults that map code again,
/// short enough that a daemon left alone soon holds only what it uses (a daemon with a run
/// every minute or so drops and maps a few MiB again each time).
pub(crate) const QUIET: Duration = Duration::from_secs(10);

/// How long the daemon must be about to sleep for a drop: a drop just before a wake due soon
/// would only map the same code again at once. An idle daemon's wakes (the heartbeat's status,
/// the server's ping, the feature look) come seconds apart, so it drops once or twice per
/// heartbeat.
pub(crate) const LONG_SLEEP: Duration = Duration::from_secs(1);

/// What [`Trim::due`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// The first drop of a quiet spell: prove which mappings are clean (`smaps`), then drop.
    Find,
    /// A later drop in the same spell: the mappings proved at its start, dropped again.
    Again,
}

/// When the daemon last did more than wait, and what it dropped since.
#[derive(Debug)]
pub(crate) struct Trim {
    /// Since when the daemon has been connected with nothing running (none: it is not).
    quiet_since: Option<Instant>,
    /// The mappings proved clean in this quiet spell and still so at its last drop (none:
    /// nothing dropped in it yet; empty: nothing to drop until the next spell).
    dropped: Option<Vec<Clean>>,
}

impl Trim {
    /// A daemon that has just started: every page its start touched is still mapped.
    pub(crate) fn new() -> Self {
        Self {
            quiet_since: None,
            dropped: None,
        }
    }

    /// Notes what the daemon is doing at `now` (`idle`: connected, and nothing runs or is
    /// checked) and how long it is about to sleep; returns whether to drop its code now, and
    /// how. Called on every wake the daemon has anyway, so it never wakes the daemon itself.
    pub(crate) fn due(&mut self, idle: bool, now: Instant, sleep: Duration) -> Option<Due> {
        if !idle {
            self.quiet_since = None;
            self.dropped = None;
            return None;
        }
        let since = *self.quiet_since.get_or_insert(now);
        if now.saturating_duration_since(since) < QUIET {
            return None;
        }
        match self.dropped {
            None => Some(Due::Find),
            Some(_) if sleep >= LONG_SLEEP => Some(Due::Again),
            Some(_) => None,
        }
    }

    /// Carries out what [`Trim::due`] returned: returns how many bytes of address space it
    /// dropped (what was resident in them is what the daemon gave back). A drop again checks
    /// each range the spell proved in `/proc/self/pagemap` just before dropping it, and leaves
    /// out for good any that holds a page of its own since ([`Pagemap::all_the_files`]), as
    /// it does a range the kernel refuses. A failure to read `smaps` or `pagemap` leaves
    /// nothing to drop until the next quiet spell.
    pub(crate) fn drop_code(&mut self, due: Due) -> std::io::Result<usize> {
        let proved = self.dropped.replace(Vec::new());
        let (ranges, pagemap) = match (due, proved) {
            (Due::Again, Some(proved)) => (proved, Some(Pagemap::open()?)),
            _ => (clean_code()?, None),
        };
        let mut kept = Vec::with_capacity(ranges.len());
        let mut bytes = 0;
        for range in ranges {
            if let Some(pagemap) = &pagemap
                && !pagemap.all_the_files(range)?
            {
                tracing::debug!(?range, "a mapping holds pages of its own now: it stays");
                continue;
            }
            match advise_dont_need(range) {
                Ok(()) => {
                    bytes += range.len;
                    kept.push(range);
                }
                Err(e) => tracing::debug!(?range, "a mapping's pages stay: {e}"),
            }
        }
        self.dropped = Some(kept);
        Ok(bytes)
    }
}

/// A range of the address space to drop: `len` bytes from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clean {
    start: usize,
    len: usize,
}

/// A file as `smaps` names it: its device (major, minor) and inode (0: no file).
type FileId = ((u32, u32), u64);

/// One file mapping as `smaps` describes it.
#[derive(Debug)]
struct Mapping {
    range: Clean,
    /// Readable, not writable, private (`r-?p`).
    read_only_private: bool,
    /// The file.
    file: FileId,
    /// Where in the file it starts, in bytes.
    offset: u64,
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

/// The mappings of the loaded images around `anchors` in `smaps` (`/proc/self/smaps`, read a
/// line at a time: with the wasm executor's pool it runs to megabytes) that can be dropped,
/// in address order. An image is the unbroken run of adjacent mappings of one file around an
/// anchor, an address inside code that stays loaded: a mapping of the same file made later
/// elsewhere (to read symbols, say) is not part of it, however it looks. Of each image, only
/// the mappings that are read-only, private and hold no page of their own (`Anonymous: 0 kB`
/// and `Swap: 0 kB`; a page written and swapped out counts only under `Swap`) are dropped; a
/// mapping whose lines are missing or unreadable is left alone. An anchor in no file mapping
/// finds nothing; two anchors in one image find it once.
pub(crate) fn clean_mappings(
    mut smaps: impl std::io::BufRead,
    anchors: &[usize],
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
        if let Some((range, perms, offset, file)) = mapping_header(&line) {
            reading_file = file.1 != 0;
            if reading_file {
                let perms = perms.as_bytes();
                files.push(Mapping {
                    range,
                    read_only_private: perms.len() == 4
                        && perms[0] == b'r'
                        && perms[1] == b'-'
                        && perms[3] == b'p',
                    file,
                    offset,
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
    let mut clean: Vec<Clean> = anchors
        .iter()
        .flat_map(|&anchor| image_around(&files, anchor))
        .filter(|m| m.is_clean())
        .map(|m| m.range)
        .collect();
    clean.sort_unstable_by_key(|c| c.start);
    clean.dedup();
    Ok(clean)
}

/// The image in `files` (in address order) that holds `anchor`: the run of adjacent mappings
/// of one file that the loader made for one object, from its first mapping (at offset 0 in
/// the file; a loader maps an object's segments in order, the gaps between them included)
/// up to the next adjacent mapping of the same file that starts at offset 0 again (another
/// mapping of the same file, made later). Empty where no file mapping holds `anchor`, or
/// where the run before it ends with no mapping at offset 0.
fn image_around(files: &[Mapping], anchor: usize) -> &[Mapping] {
    let Some(at) = files
        .iter()
        .position(|m| m.range.start <= anchor && anchor - m.range.start < m.range.len)
    else {
        return &[];
    };
    let file = files[at].file;
    let adjacent = |a: &Mapping, b: &Mapping| {
        a.file == file && b.file == file && a.range.start + a.range.len == b.range.start
    };
    let mut first = at;
    while files[first].offset != 0 {
        if first == 0 || !adjacent(&files[first - 1], &files[first]) {
            return &[];
        }
        first -= 1;
    }
    let mut last = at;
    while last + 1 < files.len()
        && adjacent(&files[last], &files[last + 1])
        && files[last + 1].offset != 0
    {
        last += 1;
    }
    &files[first..=last]
}

/// `   123 kB` as 123.
fn kilobytes(figure: &str) -> Option<u64> {
    figure.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// The range, permissions, file offset, device and inode of an smaps header line
/// (`55d4bc722000-55d4be783000 r-xp 00a6c000 fe:00 5491078  /path`), or `None` for any other
/// line.
fn mapping_header(line: &str) -> Option<(Clean, &str, u64, FileId)> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
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
        offset,
        (device, inode),
    ))
}

/// Proves which mappings of the loaded images can be dropped: the program's own (found
/// around this function), the C library's (around `getpid`), the math library's (around
/// `cbrt`) and the loader's (at its base, from the auxiliary vector). Each is linked into the
/// program from its start and never unloaded; where one is linked statically its anchor falls
/// in the program's own image. Linux only: elsewhere nothing is found.
fn clean_code() -> std::io::Result<Vec<Clean>> {
    #[cfg(target_os = "linux")]
    {
        let mut anchors = vec![
            clean_code as fn() -> std::io::Result<Vec<Clean>> as usize,
            nix::libc::getpid as unsafe extern "C" fn() -> nix::libc::pid_t as usize,
            c_math::cbrt as extern "C" fn(f64) -> f64 as usize,
        ];
        anchors.extend(loader_base());
        let smaps = std::io::BufReader::new(std::fs::File::open("/proc/self/smaps")?);
        clean_mappings(smaps, &anchors)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(Vec::new())
    }
}

/// The C math library, named only for an address inside it.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod c_math {
    // SAFETY: `cbrt` is C99's cube root, `double cbrt(double)`: it reads nothing but its
    // argument and is defined for every one. Only its address is taken here.
    unsafe extern "C" {
        /// The cube root; its address anchors the math library's image.
        pub(super) safe fn cbrt(x: f64) -> f64;
    }
}

/// Where the program's loader (`ld-linux`) is mapped: `AT_BASE` in the auxiliary vector
/// (none for a static program).
#[cfg(target_os = "linux")]
fn loader_base() -> Option<usize> {
    auxiliary(nix::libc::AT_BASE as usize)
}

/// The value of `key` in `/proc/self/auxv` (native words, key then value), none where it is
/// missing, 0, or the file cannot be read.
#[cfg(target_os = "linux")]
fn auxiliary(key: usize) -> Option<usize> {
    const WORD: usize = std::mem::size_of::<usize>();
    let auxv = std::fs::read("/proc/self/auxv").ok()?;
    auxv.chunks_exact(2 * WORD).find_map(|pair| {
        let (k, v) = pair.split_at(WORD);
        let v = usize::from_ne_bytes(v.try_into().ok()?);
        (usize::from_ne_bytes(k.try_into().ok()?) == key && v != 0).then_some(v)
    })
}

/// `/proc/self/pagemap`, which has an entry of 8 bytes for each page of the address space.
struct Pagemap {
    #[cfg(target_os = "linux")]
    file: std::fs::File,
    #[cfg(target_os = "linux")]
    page: usize,
}

impl Pagemap {
    /// Opens it, with the size of a page (`AT_PAGESZ` in the auxiliary vector, read once: a
    /// guess could make every entry read the wrong pages). Linux only: elsewhere nothing is the file's.
    fn open() -> std::io::Result<Self> {
        #[cfg(target_os = "linux")]
        {
            static PAGE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
            let page = PAGE
                .get_or_init(|| auxiliary(nix::libc::AT_PAGESZ as usize))
                .ok_or_else(|| std::io::Error::other("the page size is not in /proc/self/auxv"))?;
            let file = std::fs::File::open("/proc/self/pagemap")?;
            Ok(Self { file, page })
        }
        #[cfg(not(target_os = "linux"))]
        {
            Ok(Self {})
        }
    }

    /// Whether every page of `range` is still the file's: none in memory that is not a file
    /// page, none in swap. A range where the program wrote (a debugger's breakpoint, a probe)
    /// or where anonymous memory with pages in it was mapped since `smaps` proved it is not.
    /// (An address unmapped since reads as a page not in memory, and `madvise` then refuses
    /// the range; what cannot be seen here is a mapping made since that has no page in memory
    /// yet, whose drop loses nothing.)
    fn all_the_files(&self, range: Clean) -> std::io::Result<bool> {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::FileExt as _;
            // 512 entries at a time, on the stack: checking never grows the heap.
            let mut entries = [0u8; 8 * 512];
            let (mut at, end) = (
                range.start / self.page,
                (range.start + range.len) / self.page,
            );
            while at < end {
                let n = (end - at).min(512);
                self.file
                    .read_exact_at(&mut entries[..8 * n], (at * 8) as u64)?;
                if !entries[..8 * n].chunks_exact(8).all(file_page_or_none) {
                    return Ok(false);
                }
                at += n;
            }
            Ok(true)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = range;
            Ok(false)
        }
    }
}

/// Whether a `pagemap` entry (8 bytes, native order) is a file's page (bit 61: in memory, or
/// being migrated, which also sets bit 62) or a page neither in memory (bit 63) nor in swap
/// (bit 62).
fn file_page_or_none(entry: &[u8]) -> bool {
    let Ok(bytes) = entry.try_into() else {
        return false;
    };
    let entry = u64::from_ne_bytes(bytes);
    let (present, swapped, file) = (entry >> 63 & 1, entry >> 62 & 1, entry >> 61 & 1);
    file == 1 || (present == 0 && swapped == 0)
}

/// `madvise(MADV_DONTNEED)` over `clean`. Linux only: elsewhere nothing is dropped.
#[allow(unsafe_code)]
fn advise_dont_need(clean: Clean) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::mman::{MmapAdvise, madvise};
        let Some(start) = std::ptr::NonNull::new(clean.start as *mut std::ffi::c_void) else {
            return Ok(());
        };
        // SAFETY: `clean` is a whole private, read-only mapping of a loaded image that held
        // no page of its own, in memory or in swap, when `smaps` was read (`clean_mappings`),
        // and for a later drop still none when `pagemap` was read just before this call
        // (`Pagemap::all_the_files`). The program never writes to a read-only mapping, so
        // dropping its pages changes no byte it reads: the next access maps the same bytes
        // from the file again. It is found around an address inside the program's own code or
        // a library it was linked with from its start, which nothing unmaps. What a debugger
        // or a probe writes between that check and this call is lost (a breakpoint that no
        // longer fires), never the program's data.
        unsafe { madvise(start, clean.len, MmapAdvise::MADV_DONTNEED) }
            .map_err(std::io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = clean;
        Ok(())
    }
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
55d4be8e5000-55d4be8e9000 r--p 00010000 fe:00 777                        /lib/libc.so.6
Anonymous:             4 kB
Swap:                  0 kB
";

    #[test]
    fn only_clean_read_only_private_mappings_of_the_image_are_dropped() {
        let found = clean_mappings(SMAPS.as_bytes(), &[0x55d4bc800000]).unwrap();
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
        assert!(
            clean_mappings(SMAPS.as_bytes(), &[0x10])
                .unwrap()
                .is_empty()
        );
        assert!(
            clean_mappings(SMAPS.as_bytes(), &[0x55d4bbcb1000])
                .unwrap()
                .is_empty()
        );
        // Lines that are not smaps, or not UTF-8, leave nothing to drop.
        let garbage = b"garbage\n1-2 r-xp\nAnonymous: 0 kB\n\xff\xfe";
        assert!(clean_mappings(&garbage[..], &[1]).unwrap().is_empty());
    }

    #[test]
    fn each_anchor_adds_its_own_image_once() {
        let program = 0x55d4bc800000;
        let library = 0x55d4be8e6000;
        let both =
            clean_mappings(SMAPS.as_bytes(), &[library, program, program + 4096, 0x10]).unwrap();
        let program_only = clean_mappings(SMAPS.as_bytes(), &[program]).unwrap();
        assert_eq!(both.len(), program_only.len() + 1, "{both:?}");
        assert!(
            both.windows(2).all(|w| w[0].start < w[1].start),
            "in address order"
        );
        assert_eq!(
            both.last(),
            Some(&Clean {
                start: 0x55d4be8d5000,
                len: 0x10000
            }),
            "the library's clean code, not its mapping with a page of its own, and not the \
             program's mappings next to it"
        );
    }

    #[test]
    fn the_pages_go_after_the_quiet_time_then_again_before_each_long_sleep() {
        let t0 = Instant::now();
        let long = LONG_SLEEP;
        let short = LONG_SLEEP / 10;
        let mut trim = Trim::new();
        assert_eq!(trim.due(true, t0, long), None, "the quiet spell just began");
        assert_eq!(trim.due(true, t0 + QUIET / 2, long), None);
        assert_eq!(
            trim.due(true, t0 + QUIET, short),
            Some(Due::Find),
            "the first drop whatever the sleep: a daemon that looks at its policy every \
             second never sleeps long"
        );
        trim.dropped = Some(Vec::new());
        assert_eq!(trim.due(true, t0 + QUIET * 2, short), None);
        assert_eq!(
            trim.due(true, t0 + QUIET * 2, long),
            Some(Due::Again),
            "a heartbeat since: the same mappings, dropped again"
        );
        assert_eq!(
            trim.due(false, t0 + QUIET * 4, long),
            None,
            "a run: the spell ends"
        );
        assert!(
            trim.dropped.is_none(),
            "a new spell proves its mappings again"
        );
        assert_eq!(trim.due(true, t0 + QUIET * 5, long), None);
        assert_eq!(trim.due(true, t0 + QUIET * 6, long), Some(Due::Find));
    }

    #[test]
    fn a_mapping_of_the_same_file_next_to_an_image_is_not_part_of_it() {
        let smaps = "\
7f0000000000-7f0000010000 r--p 00000000 fe:00 777                        /lib/libc.so.6
Anonymous:             0 kB
Swap:                  0 kB
7f0000010000-7f0000020000 r--p 00000000 fe:00 777                        /lib/libc.so.6
Anonymous:             0 kB
Swap:                  0 kB
7f0000020000-7f0000030000 r-xp 00010000 fe:00 777                        /lib/libc.so.6
Anonymous:             0 kB
Swap:                  0 kB
7f0000030000-7f0000040000 r--p 00000000 fe:00 777                        /lib/libc.so.6
Anonymous:             0 kB
Swap:                  0 kB
7f0000050000-7f0000060000 r-xp 00010000 fe:00 888                        /lib/libm.so.6
Anonymous:             0 kB
Swap:                  0 kB
";
        assert_eq!(
            clean_mappings(smaps.as_bytes(), &[0x7f0000025000]).unwrap(),
            [
                Clean {
                    start: 0x7f0000010000,
                    len: 0x10000
                },
                Clean {
                    start: 0x7f0000020000,
                    len: 0x10000
                }
            ],
            "the image runs from its mapping at offset 0 to the next one at offset 0"
        );
        assert!(
            clean_mappings(smaps.as_bytes(), &[0x7f0000055000])
                .unwrap()
                .is_empty(),
            "an image whose first mapping is not there is not dropped"
        );
    }

    #[test]
    fn a_pagemap_entry_is_the_files_or_absent_or_the_range_stays() {
        let entry = |bits: u64| bits.to_ne_bytes();
        assert!(file_page_or_none(&entry(0)), "not in memory");
        assert!(
            file_page_or_none(&entry(1 << 63 | 1 << 61 | 42)),
            "a file's page"
        );
        assert!(
            !file_page_or_none(&entry(1 << 63 | 42)),
            "a page of its own"
        );
        assert!(!file_page_or_none(&entry(1 << 62)), "in swap");
        assert!(
            file_page_or_none(&entry(1 << 62 | 1 << 61)),
            "a file's page being migrated"
        );
        assert!(!file_page_or_none(&[0; 4]), "not an entry");
    }

    /// Tests that drop this test binary's pages, or measure them, one at a time.
    #[cfg(target_os = "linux")]
    static DROPPING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[cfg(target_os = "linux")]
    #[test]
    fn a_drop_again_keeps_only_ranges_still_the_files() {
        let _one = DROPPING.lock().unwrap_or_else(|e| e.into_inner());
        let code = clean_code().unwrap();
        assert!(!code.is_empty(), "this test binary has clean code");
        let pagemap = Pagemap::open().unwrap();
        for &range in &code {
            assert!(
                pagemap.all_the_files(range).unwrap(),
                "nothing wrote to {range:?}"
            );
        }
        // Memory this test wrote: its pages are its own, so the range is left out.
        let written = vec![7u8; 1 << 20];
        let start = (written.as_ptr() as usize).next_multiple_of(pagemap.page);
        let data = Clean {
            start,
            len: pagemap.page * 4,
        };
        assert!(!pagemap.all_the_files(data).unwrap());
        assert_eq!(written[pagemap.page * 2], 7);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_drop_again_reuses_what_the_spell_proved() {
        let _one = DROPPING.lock().unwrap_or_else(|e| e.into_inner());
        let mut trim = Trim::new();
        // Nothing proved: an `Again` proves first, as a `Find` does.
        trim.drop_code(Due::Again).unwrap();
        let proved = trim.dropped.clone().unwrap();
        assert!(!proved.is_empty(), "this test binary has clean code");
        trim.drop_code(Due::Again).unwrap();
        assert_eq!(trim.dropped, Some(proved));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dropping_leaves_the_program_running_and_its_code_unmapped() {
        let _one = DROPPING.lock().unwrap_or_else(|e| e.into_inner());
        // This test binary's own code: resident now (it is running), then dropped.
        let resident = || {
            let anchor = clean_code as fn() -> std::io::Result<Vec<Clean>> as usize;
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let image = smaps
                .lines()
                .filter_map(mapping_header)
                .find(|(range, ..)| range.start <= anchor && anchor < range.start + range.len)
                .map(|(_, _, _, file)| file)
                .expect("the test's own code is in a file mapping");
            let mut kb = 0u64;
            let mut ours = false;
            for line in smaps.lines() {
                if let Some((_, _, _, file)) = mapping_header(line) {
                    ours = file == image;
                } else if ours && let Some(n) = line.strip_prefix("Rss:") {
                    kb += kilobytes(n).unwrap();
                }
            }
            kb
        };
        let clean = clean_code().unwrap();
        let holds = |at: usize| clean.iter().any(|c| c.start <= at && at - c.start < c.len);
        let getpid = nix::libc::getpid as unsafe extern "C" fn() -> nix::libc::pid_t as usize;
        assert!(
            holds(getpid),
            "the C library's code is dropped too: {clean:?}"
        );
        assert!(holds(c_math::cbrt as extern "C" fn(f64) -> f64 as usize));
        let loader = loader_base().expect("a test binary is loaded by ld-linux");
        assert!(
            clean
                .iter()
                .any(|c| c.start >= loader && c.start - loader < 1 << 20),
            "and the loader's"
        );
        let before = resident();
        let dropped = Trim::new().drop_code(Due::Find).unwrap();
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
