//! `outpost serve`: the server, in the foreground until SIGINT or SIGTERM.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use outpost_core::join::Join;
use outpost_core::wire::Environment;
use outpost_server::{BlockingServer, RateLimits, ServeConfig, TlsFiles};

use crate::executors;

/// What `outpost serve` takes.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8440")]
    pub listen: SocketAddr,
    /// The state folder (default: OUTPOST_STATE, else $XDG_DATA_HOME/outpost/server).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// The environments the server's own executor runs (comma-separated: wasm, docker,
    /// shell). Shell gives runs the server's own machine: only with reason.
    #[arg(long, value_delimiter = ',', default_value = "wasm", value_parser = cloud_environment)]
    pub cloud: Vec<Environment>,
    /// The base URL other machines use (a name, or a proxy in front), carried by the join.
    /// Default: the address listened on; for 0.0.0.0 or ::, this machine's address on its
    /// default route (the server refuses to start when it has none, rather than print a
    /// join that points at loopback).
    #[arg(long)]
    pub public_url: Option<String>,
    /// In a cluster (--database postgres://…), the URL the other nodes reach this node itself
    /// at, when --public-url is a load balancer's in front of them all: they relay terminals
    /// and live output to the node a machine is connected to through it. Default: the address
    /// listened on (loopback for plain HTTP on 0.0.0.0: only nodes on this machine).
    #[arg(long, value_name = "URL")]
    pub node_url: Option<String>,
    /// Print one JSON line (url, join, rootKey, stateDir, cloud, database, publishedDaemon)
    /// instead of the text lines; with `migrate`, {"database","schemaVersion"}.
    #[arg(long)]
    pub json: bool,
    /// Publish this outpost binary as the daemon release (signed by the server's root key;
    /// its version is what `BINARY version --json` prints). Daemons of this server take it
    /// when it is newer than theirs.
    #[arg(long, value_name = "BINARY")]
    pub publish_daemon: Option<PathBuf>,
    /// Signed machine requests and connects allowed per source address, per second (a burst
    /// of three seconds' worth). Raise it for a fleet behind one NAT.
    #[arg(long, value_name = "N", default_value_t = RateLimits::DEFAULT_PER_ADDRESS, value_parser = positive_rate)]
    pub rate_per_address: f64,
    /// Signed machine requests and connects allowed per context, per second (a burst of four
    /// seconds' worth).
    #[arg(long, value_name = "N", default_value_t = RateLimits::DEFAULT_PER_CONTEXT, value_parser = positive_rate)]
    pub rate_per_context: f64,
    /// Close a terminal after this many seconds with no viewer (audited `idle`).
    #[arg(long, value_name = "SECS", default_value_t = ServeConfig::DEFAULT_TERMINAL_IDLE.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub terminal_idle_secs: u64,
    /// Seconds between daemons' heartbeats and the server's pings on each daemon connection; a
    /// connection silent for three is closed (by either side) and the daemon reconnects.
    #[arg(long, value_name = "SECS", default_value_t = ServeConfig::DEFAULT_HEARTBEAT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub heartbeat_secs: u64,
    /// Keep what operators type in terminal recordings too (off: output and sizes only;
    /// keystrokes may hold passwords). `GET /v1/terminals` shows it per terminal.
    #[arg(long)]
    pub record_terminal_input: bool,
    /// Delete a terminal recording this many days after its session ended.
    #[arg(long, value_name = "DAYS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=36500))]
    pub recording_retention_days: u64,
    /// Never let a machine's host commands be turned on (whatever an owner or a grant says):
    /// turning them on is refused `commands_disabled_on_server`.
    #[arg(long)]
    pub no_host_commands: bool,
    /// The xterm.js 3.x package folder the web UI's terminal is read from, at run time
    /// (default: Debian's node-xterm, /usr/share/nodejs/xterm).
    #[arg(long, value_name = "DIR")]
    pub xterm_dir: Option<PathBuf>,
    /// Keep the records in this PostgreSQL database (postgres://USER@HOST:PORT/DATABASE)
    /// instead of the SQLite file in the state folder; its schema is migrated at start. It
    /// must run with synchronous_commit on. Add ?sslmode=verify-full&sslrootcert=CA.pem for
    /// TLS (the certificate is always verified; prefer is refused). OUTPOST_DATABASE is read
    /// when this is absent.
    #[arg(long, value_name = "URL", env = "OUTPOST_DATABASE")]
    pub database: Option<String>,
    /// `migrate`: bring the database's schema up to date and exit, without serving.
    #[command(subcommand)]
    pub action: Option<ServeAction>,
}

/// What `outpost serve` does instead of serving.
#[derive(clap::Subcommand)]
pub enum ServeAction {
    /// Bring the database's schema up to date and exit (exit 0; 1 when the database refuses,
    /// is newer than this outpost, or cannot be reached).
    Migrate,
}

/// Reads a rate: a positive number of requests per second.
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 => Ok(n),
        _ => Err(format!(
            "{text:?} is not a rate: give requests per second, a number above 0"
        )),
    }
}

/// Reads one `--cloud` environment.
pub fn cloud_environment(name: &str) -> Result<Environment, String> {
    match name {
        "wasm" => Ok(Environment::Wasm),
        "docker" => Ok(Environment::Docker),
        "shell" => Ok(Environment::Shell),
        other => Err(format!(
            "{other:?} is not a cloud environment: use wasm, docker or shell"
        )),
    }
}

pub fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let state_dir = match args.state {
        Some(dir) => dir,
        None => crate::client::api::default_state_dir()?,
    };
    let database = outpost_server::Database::from_flag(args.database.as_deref())
        .map_err(|e| anyhow::anyhow!(e))?;
    if let Some(ServeAction::Migrate) = args.action {
        return migrate(&database, &state_dir, args.json);
    }
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        (None, None) => None,
        _ => anyhow::bail!("--tls-cert and --tls-key go together: pass both, or neither"),
    };
    let mut cloud = args.cloud;
    cloud.dedup();
    let registry = executors::registry(&cloud, Some(state_dir.join("cache/wasm")), true);
    let config = ServeConfig {
        listen: args.listen,
        state_dir: state_dir.clone(),
        tls,
        cloud: cloud.clone(),
        public_url: args.public_url,
        node_url: args.node_url,
        rate_limits: RateLimits::new(args.rate_per_address, args.rate_per_context),
        terminal_idle: std::time::Duration::from_secs(args.terminal_idle_secs),
        heartbeat: std::time::Duration::from_secs(args.heartbeat_secs),
        limits: outpost_server::Limits {
            record_terminal_input: args.record_terminal_input,
            host_commands: !args.no_host_commands,
            recording_retention: std::time::Duration::from_secs(
                args.recording_retention_days * 24 * 3600,
            ),
            ..Default::default()
        },
        xterm_dir: args.xterm_dir,
        database: database.clone(),
    };
    let server = BlockingServer::start(config, registry, 2).with_context(|| {
        format!(
            "starting the server with the state folder {}",
            state_dir.display()
        )
    })?;
    let published = match &args.publish_daemon {
        Some(binary) => Some(
            outpost_server::releases::publish_daemon(&state_dir, binary).map_err(|e| {
                anyhow::anyhow!("publishing {}: {e} [{}]", binary.display(), e.code())
            })?,
        ),
        None => None,
    };
    let running = server.running();
    let root = Join::parse(&running.join)
        .map(|j| outpost_core::b64::encode(j.root.public_key.as_bytes()))
        .unwrap_or_default();
    let mut out = crate::stdout::lock();
    if args.json {
        let value = serde_json::json!({
            "url": running.url,
            "join": running.join,
            "rootKey": root,
            "stateDir": running.state_dir,
            "cloud": cloud.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
            "database": database.location(&running.state_dir),
            "publishedDaemon": published.as_ref().map(|p| serde_json::json!({
                "version": p.version.to_string(), "sha512": p.sha512, "size": p.size,
            })),
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(out, "listening on {}", running.url)?;
        writeln!(out, "join: {}", running.join)?;
        writeln!(out, "root: {root}")?;
        if let Some(p) = &published {
            writeln!(
                out,
                "publishing daemon {} ({} bytes, sha512 {}…) to this server's daemons",
                p.version,
                p.size,
                &p.sha512[..16]
            )?;
        }
        writeln!(
            out,
            "state: {} (admin token in admin.token); Ctrl-C stops the server",
            running.state_dir.display()
        )?;
    }
    out.flush()?;
    drop(out);
    let stopped = server.wait();
    outpost_host::sandbox::retire_warm_helpers();
    if stopped == outpost_server::Stopped::StoreFailed {
        anyhow::bail!(
            "the database refused a record (see the log above), so the server stopped rather than go on without it; start it again once the database answers (a service manager does): it restores from the records"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `outpost serve migrate`: the schema brought up to date, then one line (or JSON) saying
/// which version it is at.
fn migrate(
    database: &outpost_server::Database,
    state_dir: &std::path::Path,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let version = outpost_server::migrate(database, state_dir)
        .with_context(|| format!("migrating {}", database.location(state_dir)))?;
    let mut out = crate::stdout::lock();
    if json {
        let value = serde_json::json!({ "database": database.location(state_dir), "schemaVersion": version });
        writeln!(out, "{value}")?;
    } else {
        writeln!(
            out,
            "{} is at schema version {version}",
            database.location(state_dir)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
