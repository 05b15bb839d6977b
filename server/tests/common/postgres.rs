//! A throwaway PostgreSQL for the tests: Debian's binaries (`/usr/lib/postgresql/N/bin`), a
//! cluster made by `initdb` in a temporary folder, its server on a free loopback port, and a
//! database per name. As root (PostgreSQL refuses to run as root) the cluster belongs to the
//! `postgres` user the Debian package made.
//!
//! [`shared`] is one cluster for the whole test process: it is started from a thread that
//! lives as long as the process, with `setpriv --pdeathsig KILL`, so the server dies with the
//! tests whatever way they end. [`Postgres::start`] is a cluster of one's own, stopped when
//! dropped (for the tests that stop or cut off the database).
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// A PostgreSQL server the tests started.
pub struct Postgres {
    /// The cluster's folder (data, socket, log).
    pub dir: PathBuf,
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    /// The postmaster's process id.
    pub pid: u32,
    child: Option<Child>,
}

/// The folder of PostgreSQL's programs, the newest version installed.
pub fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's programs in /usr/lib/postgresql (Debian's postgresql package; ./test installs it)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").is_file())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("a PostgreSQL server in /usr/lib/postgresql/*/bin (./test installs postgresql)")
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// `program` run as the cluster's owner (`postgres` when we are root).
fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
            .arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Postgres {
    /// Makes a cluster in a new temporary folder and starts its server; returns once it
    /// accepts connections. With `die_with_parent`, the server is killed when the thread that
    /// started it ends.
    fn launch(die_with_parent: bool) -> Postgres {
        remove_stale_clusters();
        let bin = bin_dir();
        let dir =
            std::env::temp_dir().join(format!("outpost-pg-{}-{}", std::process::id(), free_port()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the cluster's folder");
        if is_root() {
            let ok = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status()
                .expect("chown")
                .success();
            assert!(ok, "the cluster's folder given to the postgres user");
        }
        let data = dir.join("data");
        let init = as_owner(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "outpost", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .output()
            .expect("initdb runs");
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = free_port();
        let (child, pid) = Self::run(&dir, port, die_with_parent);
        Postgres {
            dir,
            port,
            pid,
            child: Some(child),
        }
    }

    /// Starts the server of the cluster in `dir` on `port`; returns once it accepts
    /// connections.
    fn run(dir: &Path, port: u16, die_with_parent: bool) -> (Child, u32) {
        let bin = bin_dir();
        let data = dir.join("data");
        let mut command = if die_with_parent {
            let mut c = Command::new("setpriv");
            if is_root() {
                c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"]);
            }
            c.args(["--pdeathsig", "KILL"]).arg(bin.join("postgres"));
            c
        } else {
            as_owner(&bin.join("postgres"))
        };
        let mut child = command
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=300",
                "-c",
                "log_min_messages=warning",
                "-c",
                "log_min_error_statement=panic",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("postgres starts");
        // Ready when it says so (its log goes to stderr).
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        loop {
            match lines.next() {
                Some(Ok(line)) => {
                    let ready = line.contains("ready to accept connections");
                    seen.push(line);
                    if ready {
                        break;
                    }
                }
                _ => panic!("postgres ended before it was ready:\n{}", seen.join("\n")),
            }
        }
        // Keep reading its log so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        let pid = child.id();
        (child, pid)
    }

    /// Starts the server again over the same cluster and port after [`Postgres::kill`]; it
    /// recovers what was committed from its WAL.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart follows kill");
        let (child, pid) = Self::run(&self.dir, self.port, false);
        self.pid = pid;
        self.child = Some(child);
    }

    /// A cluster of one's own, stopped (immediately) when dropped.
    pub fn start() -> Postgres {
        Self::launch(false)
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://outpost@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates database `name` unless it exists; its URL.
    pub fn database(&self, name: &str) -> String {
        let exists = self.sql(
            "postgres",
            &format!("SELECT 1 FROM pg_database WHERE datname = '{name}'"),
        );
        if exists.trim() != "1" {
            self.sql("postgres", &format!("CREATE DATABASE \"{name}\""));
        }
        self.url(name)
    }

    /// Runs `sql` in database `db` with psql; what it printed (see [`psql`]).
    pub fn sql(&self, db: &str, sql: &str) -> String {
        psql(&self.url(db), sql)
    }

    /// Stops the server at once (as a crash would; it recovers from its WAL on the next start).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGQUIT: the postmaster's immediate shutdown, its backends with it.
            let _ = Command::new("kill")
                .args(["-QUIT", &self.pid.to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

impl Postgres {
    /// Serves TLS only on TCP from now on: the certificate and key (PEM) go into the cluster,
    /// `ssl = on`, and `pg_hba.conf` refuses a TCP connection without TLS. The server is
    /// started again with them (and is ready when this returns).
    #[allow(dead_code)]
    pub fn require_tls(&mut self, cert_pem: &str, key_pem: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let data = self.dir.join("data");
        for (name, text) in [
            ("server.crt", cert_pem),
            ("server.key", key_pem),
            (
                "pg_hba.conf",
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
            ),
        ] {
            let path = data.join(name);
            std::fs::write(&path, text).expect("a cluster file");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .expect("its mode");
            if is_root() {
                let ok = Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(&path)
                    .status()
                    .expect("chown")
                    .success();
                assert!(ok, "{name} given to the postgres user");
            }
        }
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("postgresql.conf");
        text.push_str("\nssl = on\n");
        std::fs::write(&conf, text).expect("postgresql.conf");
        self.kill();
        self.restart();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `sql` with psql in the database at `url`; what it printed: rows on lines, tuples only,
/// unaligned, columns separated by U+001F. Panics when psql or the database refuses.
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new(bin_dir().join("psql"))
        .args([
            "-d",
            url,
            "-v",
            "ON_ERROR_STOP=1",
            "-qAt",
            "-F",
            "\u{1f}",
            "-c",
            sql,
        ])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes the clusters' folders of test processes that are gone (a shared cluster's folder
/// outlives its process).
fn remove_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("outpost-pg-")
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The test process's cluster, started on first use.
pub fn shared() -> &'static Postgres {
    static SHARED: OnceLock<Postgres> = OnceLock::new();
    SHARED.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        // The thread that starts it never ends, so the server lives until the process does
        // (PR_SET_PDEATHSIG follows the thread that forked, not the process).
        std::thread::spawn(move || {
            let pg = Postgres::launch(true);
            tx.send(pg).expect("the test waits for its cluster");
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("the shared cluster starts")
    })
}

/// A database on the shared cluster named after `key` (the same key, the same database: a
/// server restarted over the same state folder finds its records).
pub fn database_for(key: &Path) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    shared().database(&format!("t{:016x}", hasher.finish()))
}

/// Whether the tests run over PostgreSQL: `OUTPOST_TEST_DATABASE=postgres`.
pub fn requested() -> bool {
    std::env::var("OUTPOST_TEST_DATABASE").as_deref() == Ok("postgres")
}

/// The database a test server over the state folder `state` keeps its records in when
/// [`requested`]: [`database_for`] it (a restart over the folder finds its records); `None`
/// for the SQLite file.
pub fn test_url(state: &Path) -> Option<String> {
    requested().then(|| database_for(state))
}
