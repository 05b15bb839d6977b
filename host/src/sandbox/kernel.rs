//! The kernel calls a sandbox is made of: namespaces and their id maps, the mount changes
//! inside them, loopback up in a fresh network namespace, and Landlock.
//!
//! This file owns those calls and nothing else: it decides no rule (the helper's arguments
//! say what to allow) and it is only ever called by the helper process, never by a daemon.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

use super::{SYSTEM_READ_ONLY, WRITABLE_DEVICES};

/// The Landlock ABI whose file rights a sandboxed run is held to (kernel 5.19).
const REQUIRED_ABI: ABI = ABI::V3;

/// The ABI whose scopes (signals, abstract Unix sockets) are added where the kernel has them.
const SCOPE_ABI: ABI = ABI::V6;

/// What [`restrict`] achieved beyond the required file rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Restricted {
    /// Signals and abstract Unix sockets are scoped to the run's own domain (ABI 6).
    pub scoped: bool,
}

/// Restricts the calling thread (and what it starts): `read_only` readable, `read_write`
/// writable, the system folders readable, a few devices writable, nothing else; signals and
/// abstract Unix sockets scoped where the kernel can. Fails unless every file rule is
/// enforced.
pub(crate) fn restrict(
    read_only: &[PathBuf],
    read_write: &[PathBuf],
) -> Result<Restricted, String> {
    Rules::system()?.restrict(read_only, read_write)
}

/// A Landlock ruleset holding the rules every run has (the system folders readable, a few
/// devices writable), made before the run is known — a warm helper makes it ahead — and
/// enforced with the run's own rules by [`Rules::restrict`]. Its descriptor is closed on exec.
pub(crate) struct Rules {
    ruleset: landlock::RulesetCreated,
    scoped: bool,
}

impl Rules {
    /// The ruleset with the system's rules, once the run's root is `/`; the scopes where this
    /// kernel has them (ABI 6).
    pub(crate) fn system() -> Result<Rules, String> {
        Rules::system_in(Path::new("/"), &[])
    }

    /// [`Rules::system`] for a run whose root is `root` and not entered yet: each rule is
    /// made on the file the run will see (Landlock rules hold to files, not to names), so
    /// its `/proc` is the run's own; `writable` (the run's private folders, paths outside
    /// the root, as they are shown inside it) too.
    pub(crate) fn system_in(root: &Path, writable: &[PathBuf]) -> Result<Rules, String> {
        let abi = REQUIRED_ABI;
        let inside = |p: &&str| root.join(p.trim_start_matches('/'));
        let create = |scoped: bool| {
            let ruleset = Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(abi))?;
            let ruleset = if scoped {
                ruleset.scope(Scope::from_all(SCOPE_ABI))?
            } else {
                ruleset
            };
            ruleset.create()
        };
        let (created, scoped) = match create(true) {
            Ok(created) => (Ok(created), true),
            Err(_) => (create(false), false),
        };
        let read_only = existing(SYSTEM_READ_ONLY.iter().map(inside));
        let devices = existing(WRITABLE_DEVICES.iter().map(inside));
        let writable = existing(writable.iter().cloned());
        let ruleset = created
            .and_then(|r| r.add_rules(path_beneath_rules(read_only, AccessFs::from_read(abi))))
            .and_then(|r| r.add_rules(path_beneath_rules(writable, AccessFs::from_all(abi))))
            .and_then(|r| r.add_rules(path_beneath_rules(devices, AccessFs::from_file(abi))))
            .map_err(|e| format!("Landlock cannot be enforced: {e}"))?;
        Ok(Rules { ruleset, scoped })
    }

    /// Adds `read_only` readable and `read_write` writable and restricts the calling thread
    /// (and what it starts) to the whole ruleset.
    pub(crate) fn restrict(
        self,
        read_only: &[PathBuf],
        read_write: &[PathBuf],
    ) -> Result<Restricted, String> {
        let abi = REQUIRED_ABI;
        let read_only = existing(read_only.iter().cloned());
        let read_write = existing(read_write.iter().cloned());
        let status = Ok(self.ruleset)
            .and_then(|r| r.add_rules(path_beneath_rules(read_only, AccessFs::from_read(abi))))
            .and_then(|r| r.add_rules(path_beneath_rules(read_write, AccessFs::from_all(abi))))
            .and_then(|r| r.restrict_self())
            .map_err(|e: landlock::RulesetError| format!("Landlock cannot be enforced: {e}"))?;
        match status.ruleset {
            RulesetStatus::FullyEnforced => Ok(Restricted {
                scoped: self.scoped,
            }),
            other => Err(format!("Landlock is only {other:?} on this kernel")),
        }
    }
}

/// The paths of `paths` that exist.
fn existing(paths: impl Iterator<Item = PathBuf>) -> Vec<PathBuf> {
    paths.filter(|p| p.exists()).collect()
}

/// Moves the calling (single-threaded) process into new user, mount and PID namespaces —
/// and a new network namespace when `network` — as uid and gid 0 there, mapped to its own
/// ids outside. Its next child is PID 1 of the new PID namespace.
pub(crate) fn enter_namespaces(network: bool) -> Result<(), String> {
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    let mut flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID;
    if network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags).map_err(|e| {
        format!("the kernel refused new user, mount, PID and network namespaces ({e})")
    })?;
    match std::fs::write("/proc/self/setgroups", "deny") {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot write /proc/self/setgroups: {e}"));
        }
        _ => {}
    }
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1\n"))
        .map_err(|e| format!("cannot map the run's user id: {e}"))?;
    std::fs::write("/proc/self/gid_map", format!("0 {gid} 1\n"))
        .map_err(|e| format!("cannot map the run's group id: {e}"))?;
    Ok(())
}

/// The run's root while it is being made, inside the new namespaces, by PID 1: a tmpfs at
/// `root` holding only what was bound into it (each at its own path; a symlink among the
/// system folders copied as a symlink), `/dev`, and a `/proc` that shows the run's processes
/// only. Nothing else of the machine can even be named once it is entered: Landlock holds
/// what is visible to its modes, but it lets a Unix socket anywhere be connected to
/// (`/run/docker.sock`, a `tmux` server in `/tmp`), so what is not given must not be there.
///
/// It is made in two steps so a warm helper can do the first before its run is known:
/// [`NewRoot::begin`] (the mount namespace, the tmpfs, the system folders, `/proc`) and
/// [`NewRoot::enter`] (the run's own folders, the switch, the hidden paths).
pub(crate) struct NewRoot {
    root: PathBuf,
    /// What is shown so far; a path under one of these is shown already.
    bound: Vec<PathBuf>,
}

impl NewRoot {
    /// Takes a mount namespace of this process's own (so the helper's first process keeps
    /// the machine's root — pivot_root moves every process of a namespace that stands at the
    /// old root — and can remove what it made once the run is over), mounts the tmpfs on
    /// `root` (an empty folder), shows `visible`, `/dev` and the name server's
    /// configuration, hides the system's secrets they hold, and mounts the run's `/proc`.
    pub(crate) fn begin(root: &Path, visible: &[PathBuf]) -> Result<NewRoot, String> {
        let none: Option<&str> = None;
        unshare(CloneFlags::CLONE_NEWNS)
            .map_err(|e| failed("make the run's mount namespace", e))?;
        mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
            .map_err(|e| failed("make the run's mounts private", e))?;
        mount(
            Some("tmpfs"),
            root,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        )
        .map_err(|e| failed("make the run's root", e))?;
        let mut paths: Vec<PathBuf> = visible.to_vec();
        paths.push(PathBuf::from("/dev"));
        // The name server's configuration, where /etc/resolv.conf points outside /etc.
        if let Ok(resolv) = Path::new("/etc/resolv.conf").canonicalize() {
            paths.push(resolv);
        }
        let mut made = NewRoot {
            root: root.to_path_buf(),
            bound: Vec::new(),
        };
        made.show(paths)?;
        // The system's secrets in what is shown now are hidden now (a warm helper's run does
        // not wait for it); those under the run's own folders when they are shown.
        made.hide_shown(system_secrets())?;
        // Mounted before the machine's root is let go: a user namespace may mount a `/proc`
        // only while a whole one is in view.
        let proc = root.join("proc");
        std::fs::create_dir_all(&proc).map_err(|e| format!("cannot make /proc: {e}"))?;
        mount(Some("proc"), &proc, Some("proc"), quiet(), none)
            .map_err(|e| failed("mount the run's own /proc", e))?;
        made.bound.push(PathBuf::from("/proc"));
        Ok(made)
    }

    /// Shows `visible` too (hiding the system's secrets under it, as [`NewRoot::begin`] hid
    /// those it showed), makes the root this process's (and its children's) only one, hides
    /// each of `hide` (a credential path inside a granted folder) under an empty read-only
    /// folder or `/dev/null`, and enters `cwd` (the
    /// working folder, which must be inside what the run sees). A folder of `visible` that
    /// holds one shown already is refused: it would cover the run's `/proc` and system
    /// folders with the machine's.
    pub(crate) fn enter(
        mut self,
        visible: &[PathBuf],
        hide: &[PathBuf],
        cwd: Option<&Path>,
    ) -> Result<(), String> {
        if let Some(path) = visible
            .iter()
            .find(|p| self.bound.iter().any(|b| b.starts_with(p) && b != *p))
        {
            return Err(format!(
                "{} holds a folder the run's root shows already; it cannot be shown",
                path.display()
            ));
        }
        self.show(visible.to_vec())?;
        // A run's folder may hold a system secret (a granted `/etc/sudoers.d`): hidden again.
        self.hide_shown(system_secrets().filter(|s| visible.iter().any(|v| s.starts_with(v))))?;
        let root = &self.root;
        let old = root.join(".old");
        std::fs::create_dir_all(&old).map_err(|e| format!("cannot make {}: {e}", old.display()))?;
        nix::unistd::chdir(root.as_path()).map_err(|e| failed("enter the run's root", e))?;
        nix::unistd::pivot_root(".", ".old").map_err(|e| failed("switch to the run's root", e))?;
        nix::unistd::chdir("/").map_err(|e| failed("enter the run's root", e))?;
        nix::mount::umount2("/.old", nix::mount::MntFlags::MNT_DETACH)
            .map_err(|e| failed("leave the machine's root", e))?;
        let _ = std::fs::remove_dir("/.old");
        for path in hide {
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                continue;
            };
            hide_at(path, path, meta.is_dir())?;
        }
        if let Some(cwd) = cwd {
            nix::unistd::chdir(cwd).map_err(|e| {
                format!("the working folder {} is not the run's: {e}", cwd.display())
            })?;
        }
        Ok(())
    }

    /// Hides each of `paths` that the root shows (through a folder bound above it) at its
    /// place inside the root, before the root is entered.
    fn hide_shown(&self, paths: impl Iterator<Item = PathBuf>) -> Result<(), String> {
        for path in paths {
            if !self.bound.iter().any(|b| path.starts_with(b)) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let inside = self.root.join(path.strip_prefix("/").unwrap_or(&path));
            hide_at(&inside, &path, meta.is_dir())?;
        }
        Ok(())
    }

    /// Binds each of `paths` at its own path inside the root, unless shown already.
    fn show(&mut self, mut paths: Vec<PathBuf>) -> Result<(), String> {
        let none: Option<&str> = None;
        paths.sort();
        paths.dedup();
        for path in paths {
            // Already shown through a folder bound above it: never create anything there (it
            // would be created on the machine's own file system).
            if self.bound.iter().any(|b| path.starts_with(b)) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let inside = self.root.join(path.strip_prefix("/").unwrap_or(&path));
            if let Some(parent) = inside.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
            }
            if meta.file_type().is_symlink() {
                if let Ok(target) = std::fs::read_link(&path) {
                    let _ = std::os::unix::fs::symlink(target, &inside);
                }
                continue;
            }
            let made = if meta.is_dir() {
                std::fs::create_dir_all(&inside)
            } else {
                std::fs::File::create(&inside).map(drop)
            };
            made.map_err(|e| format!("cannot make {}: {e}", inside.display()))?;
            mount(
                Some(&path),
                &inside,
                none,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                none,
            )
            .map_err(|e| format!("cannot show {} to the run: {e}", path.display()))?;
            self.bound.push(path);
        }
        Ok(())
    }
}

/// Covers `at` (the run's view of `path`) with an empty read-only folder, or `/dev/null` for
/// a file.
fn hide_at(at: &Path, path: &Path, is_dir: bool) -> Result<(), String> {
    let none: Option<&str> = None;
    let done = if is_dir {
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            quiet() | MsFlags::MS_RDONLY,
            Some("size=4k,mode=0500"),
        )
    } else {
        mount(Some("/dev/null"), at, none, MsFlags::MS_BIND, none)
    };
    done.map_err(|e| format!("cannot hide {}: {e}", path.display()))
}

/// The flags of the mounts a run gets that hold nothing to execute or to escalate with.
fn quiet() -> MsFlags {
    MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC
}

fn failed(what: &str, e: nix::errno::Errno) -> String {
    format!("cannot {what}: {e}")
}

/// [`super::SYSTEM_SECRETS`] and the SSH host private keys on this machine.
fn system_secrets() -> impl Iterator<Item = PathBuf> {
    let host_keys = std::fs::read_dir("/etc/ssh")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ssh_host_") && n.ends_with("_key"))
        });
    super::SYSTEM_SECRETS
        .iter()
        .map(PathBuf::from)
        .chain(host_keys)
}

/// Brings the loopback interface of the (new) network namespace up, with one rtnetlink
/// request (`RTM_NEWLINK`, `IFF_UP`), and reads the kernel's acknowledgement.
pub(crate) fn loopback_up() -> Result<(), String> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockProtocol, SockType, socket};
    const RTM_NEWLINK: u16 = 16;
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_ACK: u16 = 4;
    const NLMSG_ERROR: u16 = 2;
    const IFF_UP: u32 = 1;
    let index = nix::net::if_::if_nametoindex("lo")
        .map_err(|e| format!("no loopback interface in the run's network namespace: {e}"))?;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(|e| format!("cannot open rtnetlink: {e}"))?;
    let mut request = Vec::with_capacity(32);
    request.extend_from_slice(&32u32.to_ne_bytes()); // nlmsg_len
    request.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
    request.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes()); // seq
    request.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel fills it in
    request.extend_from_slice(&[0, 0]); // ifi_family AF_UNSPEC, padding
    request.extend_from_slice(&0u16.to_ne_bytes()); // ifi_type
    request.extend_from_slice(&(index as i32).to_ne_bytes());
    request.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_flags
    request.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_change
    let mut socket = std::fs::File::from(fd);
    socket
        .write_all(&request)
        .map_err(|e| format!("cannot ask for loopback up: {e}"))?;
    let mut answer = [0u8; 256];
    let n = socket
        .read(&mut answer)
        .map_err(|e| format!("no answer to loopback up: {e}"))?;
    // nlmsghdr (16 bytes), then for NLMSG_ERROR an i32 error: 0 is the acknowledgement.
    let kind = answer.get(4..6).map(|b| u16::from_ne_bytes([b[0], b[1]]));
    let error = answer
        .get(16..20)
        .filter(|_| n >= 20)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    match (kind, error) {
        (Some(NLMSG_ERROR), Some(0)) => Ok(()),
        (Some(NLMSG_ERROR), Some(code)) => Err(format!(
            "the kernel refused loopback up: {}",
            nix::errno::Errno::from_raw(-code)
        )),
        _ => Err("an unexpected answer to loopback up".into()),
    }
}
